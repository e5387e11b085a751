"""An agent backed by an OpenAI-compatible chat completions server (vLLM, SGLang, llama.cpp, OpenAI).

Uses only the standard library (``urllib``), so no client package is needed. Each turn POSTs the whole
conversation to ``{base_url}/chat/completions`` with the environment's tools and returns the first tool
call of the answer as action text ``{"name": ..., "arguments": {...}}``.

Guaranteed: the conversation kept is exactly what the environment saw (one assistant message per step,
answered by a ``tool`` message linked by ``tool_call_id``, or by a ``user`` message after a plain-text
answer); token usage is summed per episode. Failures of the server (connection refused, timeouts, HTTP
429 and 5xx) are retried with exponential backoff and then raised as :class:`repogym.envs.core.errors.InfraError`
with ``where="llm"``; any other HTTP error is raised at once (:class:`repogym.agents.errors.LLMHTTPError`).
A prompt over the model's context (HTTP 400 "maximum context length", as vLLM and OpenAI answer) is the
policy's limit, not infrastructure: it raises :class:`repogym.agents.errors.ContextOverflow`, which ends the
episode as ``context_overflow`` (reward 0, trained or masked as the trainer's config says). When only the
answer would not fit (the prompt does), the request is sent once more asking for what still fits.
:meth:`LLMAgent.check_server` (``GET {base_url}/models``, a few seconds at most) tells before the first episode
whether a server answers at all: a benchmark calls it so that no server means one clear error, not an infra error
per episode.
Not guaranteed: that the model's output is a valid tool call; a bad one goes to the environment, which
answers it with an error observation (the agent's mistake is data, not a crash).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable

from repogym.agents import check_options
from repogym.agents.context import answer, make_context_policy
from repogym.agents.errors import ContextOverflow, LLMHTTPError, LLMServerUnreachable, TransientLLMError
from repogym.envs.core.errors import ConfigError, InfraError
from repogym.envs.tools import select_tools

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful software engineer fixing an issue in a code repository through tools. "
    "Each turn, make exactly one tool call; its output comes back to you as the next message. "
    "Never make several tool calls in one turn. Look at the code, make a minimal fix, run the tests, "
    "and call submit when you are done."
)
MAX_BACKOFF_S = 30.0
DEFAULT_BASE_URL = "http://localhost:8000/v1"
"""Where the agent looks for its server without a ``base_url`` option or ``$REPOGYM_LLM_BASE_URL``."""
SERVER_CHECK_TIMEOUT_S = 5.0
"""Most seconds :meth:`LLMAgent.check_server` waits for ``GET /models`` (less when ``timeout_s`` is less)."""
_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _env(name: str, default: str) -> Callable[[], str]:
    # Read when the config is made, not at import, so a changed environment variable is seen.
    return lambda: os.environ.get(name) or default


@dataclass
class LLMConfig:
    """Settings of :class:`LLMAgent`."""

    base_url: str = field(default_factory=_env("REPOGYM_LLM_BASE_URL", DEFAULT_BASE_URL))
    """Root of the OpenAI-compatible API, up to and including ``/v1`` (env ``REPOGYM_LLM_BASE_URL``)."""
    model: str = field(default_factory=_env("REPOGYM_LLM_MODEL", "default"))
    """Model name sent with every request (env ``REPOGYM_LLM_MODEL``)."""
    api_key: str = field(default_factory=_env("OPENAI_API_KEY", "EMPTY"), repr=False)
    """Bearer token (env ``OPENAI_API_KEY``); local servers accept any value."""
    temperature: float = 0.0
    """Sampling temperature; 0 for reproducible evaluation."""
    max_tokens: int = 1024
    """Most tokens the model may write per turn."""
    timeout_s: float = 120.0
    """Seconds to wait for one HTTP response before retrying."""
    max_retries: int = 4
    """Retries after the first attempt on connection errors, timeouts, HTTP 429 and 5xx."""
    backoff_s: float = 1.0
    """Sleep before retry ``n`` (from 0) is ``backoff_s * 2**n`` seconds, at most 30."""
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    """The first message of every conversation."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Merged into every request body last (so it wins), e.g. vLLM's ``top_k`` or ``repetition_penalty``."""
    context: Any = "full"
    """Context policy (:mod:`repogym.agents.context`): ``full``, ``window``, ``summary``, or ``{"name": ..., options}``."""
    tools: list[str] | None = None
    """Tools sent with each request (None: every tool the env offers), as the hf agent's ``tools``: a small model
    given two tools instead of ten has a shorter prompt and fewer wrong names to pick."""

    def __post_init__(self):
        if not isinstance(self.base_url, str) or not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must be an http(s) URL, got {self.base_url!r}")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.timeout_s <= 0:
            raise ConfigError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_s < 0:
            raise ConfigError(f"backoff_s must be >= 0, got {self.backoff_s}")
        if not isinstance(self.extra_body, dict):
            raise ConfigError(f"extra_body must be a dict, got {type(self.extra_body).__name__}")

    @property
    def url(self) -> str:
        """The chat completions endpoint."""
        return self.base_url.rstrip("/") + "/chat/completions"


def _zero_usage() -> dict[str, int]:
    return {**{k: 0 for k in _USAGE_KEYS}, "requests": 0, "retries": 0}


class LLMAgent:
    """Asks a chat completions server for one tool call per turn (see the module docstring).

    ``overrides`` replace fields of ``config`` (``LLMAgent(model="qwen", temperature=0.7)``); ``sleep``
    is what waits between retries (tests pass a recorder).
    """

    def __init__(self, config: LLMConfig | None = None, *, sleep: Callable[[float], Any] = time.sleep,
                 **overrides: Any):
        check_options("LLMAgent", overrides, [f.name for f in fields(LLMConfig)])
        config = config or LLMConfig()
        self.config = replace(config, **overrides) if overrides else config
        self.sleep = sleep
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict] | None = None
        self.usage = _zero_usage()
        self.context = make_context_policy(self.config.context)
        self._view: dict[str, Any] = {}
        self._last: dict[str, Any] = {"usage": {k: 0 for k in _USAGE_KEYS}, "latency_s": 0.0, "retries": 0}
        # What the next observation answers: a tool call id, "text" (a plain answer), or None (nothing yet).
        self._awaiting: str | None = None
        self._started = False

    # -- the Agent protocol ---------------------------------------------------------------------------
    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Start a conversation: the system prompt, then the problem statement as the user's message."""
        self.tools = select_tools(info.get("tools") or [], self.config.tools) or None
        self.messages = [{"role": "system", "content": self.config.system_prompt},
                         {"role": "user", "content": observation}]
        self.usage = _zero_usage()
        self.context.reset()
        self._last = {"usage": {k: 0 for k in _USAGE_KEYS}, "latency_s": 0.0, "retries": 0}
        self._awaiting = None
        self._started = True

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The model's next tool call as action text (or its plain text when it made none)."""
        if not self._started:
            raise RuntimeError("LLMAgent.act before reset(): call reset(observation, info) first")
        # The first act sees reset's observation again; it is already the user message.
        if self._awaiting is not None:
            self.messages.append(answer(self.messages[-1], observation))
        view = self.context.view(self.messages, summarize=self._summarize)
        self._view = view.record
        message = self._complete(view.messages)
        return self._record(message)

    def _summarize(self, messages: list[dict[str, Any]]) -> str:
        """The model's summary for the ``summary`` context policy (a request without tools)."""
        reply = self._complete(messages, tools=False)
        return reply.get("content") if isinstance(reply.get("content"), str) else ""

    def turn_record(self) -> dict[str, Any]:
        """Usage, latency (seconds, retries and backoff included) and retries of the last request."""
        return {"usage": dict(self._last["usage"]), "latency_s": self._last["latency_s"],
                "retries": self._last["retries"], "context": self._view,
                "message": self.messages[-1] if self.messages and self.messages[-1]["role"] == "assistant" else None}

    def check_server(self) -> list[str]:
        """Ask the server for its models (``GET {base_url}/models``, one try of at most a few seconds) before the
        first episode; the model ids it lists (empty when its answer has none).

        Raises :class:`LLMServerUnreachable` (naming the URL and how to start a server) when nothing answers or a
        gateway says the server behind it is down (HTTP 502-504), and :class:`LLMHTTPError` when the server refuses
        the API key (HTTP 401, 403). Any other answer means a server is there: a server without the route is
        left to the first request to judge.
        """
        url = self.config.base_url.rstrip("/") + "/models"
        request = urllib.request.Request(url, method="GET",
                                         headers={"Authorization": f"Bearer {self.config.api_key}"})
        try:
            with urllib.request.urlopen(request, timeout=min(self.config.timeout_s, SERVER_CHECK_TIMEOUT_S)) as reply:
                raw = reply.read()
        except urllib.error.HTTPError as exc:
            body = _read_error_body(exc)
            if exc.code in (401, 403):
                raise LLMHTTPError(url, exc.code, body) from None
            if exc.code in (502, 503, 504):
                raise LLMServerUnreachable(self.config.base_url, f"GET {url} returned HTTP {exc.code}") from None
            return []
        except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise LLMServerUnreachable(self.config.base_url, f"GET {url}: {type(exc).__name__}: {reason}") from None
        try:
            listing = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return []  # an answer all the same: the first chat request judges the server
        data = listing.get("data") if isinstance(listing, dict) else None
        return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)] if isinstance(
            data, list) else []

    # -- the conversation ------------------------------------------------------------------------------
    def _record(self, message: dict[str, Any]) -> str:
        content = message.get("content")
        calls = message.get("tool_calls") or []
        if not calls:
            text = content if isinstance(content, str) else ""
            self.messages.append({"role": "assistant", "content": text})
            self._awaiting = "text"
            return text
        call = dict(calls[0])
        function = call.get("function") or {}
        name = function.get("name") or ""
        raw = function.get("arguments")
        # Some servers omit the id; the tool message must still name the call it answers.
        call_id = call.get("id") or f"call_{len(self.messages)}"
        # Only the first call runs, so only it stays in the history: every tool call there needs an answer.
        self.messages.append({"role": "assistant", "content": content,
                              "tool_calls": [{"id": call_id, "type": "function",
                                              "function": {"name": name, "arguments": raw if raw is not None
                                                           else "{}"}}]})
        self._awaiting = call_id
        return json.dumps({"name": name, "arguments": _arguments(raw)})

    # -- HTTP ------------------------------------------------------------------------------------------
    def _body(self, messages: list[dict[str, Any]], tools: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.config.model, "messages": messages,
                                "temperature": self.config.temperature, "max_tokens": self.config.max_tokens}
        if self.tools and tools:  # tool_choice without tools is a 400 on OpenAI's API
            body["tools"] = self.tools
            body["tool_choice"] = "auto"
        body.update(self.config.extra_body)
        return body

    def _complete(self, messages: list[dict[str, Any]], tools: bool = True) -> dict[str, Any]:
        """POST ``messages``, retrying server-side failures; the first choice's message."""
        body = self._body(messages, tools)
        try:
            return self._send(body)
        except LLMHTTPError as exc:
            overflow = context_overflow(exc)
            if overflow is None:
                raise
            prompt_tokens, limit = overflow
            if prompt_tokens is None or prompt_tokens >= limit:
                raise ContextOverflow(prompt_tokens if prompt_tokens is not None else limit, limit) from None
            # The prompt fits and only max_tokens does not: ask for what is left (once; a second refusal is final).
            try:
                return self._send({**body, "max_tokens": limit - prompt_tokens})
            except LLMHTTPError as again:
                if context_overflow(again) is None:
                    raise
                raise ContextOverflow(prompt_tokens, limit) from None

    def _send(self, body: dict[str, Any]) -> dict[str, Any]:
        url = self.config.url
        data = json.dumps(body).encode()
        start = time.monotonic()
        last_error = ""
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                self.usage["retries"] += 1
                self.sleep(min(self.config.backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S))
            try:
                response = self._post(url, data)
                break
            except TransientLLMError as exc:
                last_error = exc.message
        else:
            raise InfraError("llm", f"POST {url} failed after {self.config.max_retries + 1} attempts; "
                                    f"last error: {last_error}")
        usage = response.get("usage") or {}
        last_usage = {k: int(usage.get(k) or 0) for k in _USAGE_KEYS}
        for key, value in last_usage.items():
            self.usage[key] += value
        self.usage["requests"] += 1
        self._last = {"usage": last_usage, "latency_s": round(time.monotonic() - start, 4), "retries": attempt}
        try:
            return response["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise InfraError("llm", f"POST {url} answered without choices[0].message: "
                                    f"{json.dumps(response)[:500]}") from None

    def _post(self, url: str, data: bytes) -> dict[str, Any]:
        request = urllib.request.Request(url, data=data, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": f"Bearer {self.config.api_key}"})
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            body = _read_error_body(exc)
            if exc.code == 429 or exc.code >= 500:
                raise TransientLLMError(f"HTTP {exc.code}: {body[:300]}") from None
            raise LLMHTTPError(url, exc.code, body) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TransientLLMError(f"{type(exc).__name__}: {reason}") from None
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            # A cut-off or garbled body is a server glitch, as a dropped connection is.
            raise TransientLLMError(f"invalid JSON in the response ({exc}): {raw[:200]!r}") from None


# "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens (2000 in the messages,
# 100 in the completion)" (vLLM, OpenAI); newer vLLM: "... is 2048 tokens and your request has 1500 input tokens".
_CONTEXT_LIMIT = re.compile(r"maximum context length is (\d+)", re.IGNORECASE)
_PROMPT_TOKENS = re.compile(r"(\d+) (?:input tokens|(?:tokens? )?in the messages|prompt tokens)|"
                            r"(?:your (?:prompt|request|messages?) (?:has|contains?|resulted in)) (\d+)", re.IGNORECASE)
_OVERFLOW_WORDS = re.compile(r"maximum context length|context length exceeded|context_length_exceeded|"
                             r"prompt is too long|exceeds? the model's context", re.IGNORECASE)


def context_overflow(error: LLMHTTPError) -> tuple[int | None, int] | None:
    """``(prompt_tokens or None, context_limit)`` when ``error`` is a server's "over the context" refusal, else None.

    The limit is 0 when the server did not say it (an OpenAI-style ``context_length_exceeded`` code alone).
    """
    if error.status not in (400, 413) or not _OVERFLOW_WORDS.search(error.body):
        return None
    limit = _CONTEXT_LIMIT.search(error.body)
    prompt = _PROMPT_TOKENS.search(error.body)
    prompt_tokens = int(next(g for g in prompt.groups() if g)) if prompt else None
    return prompt_tokens, int(limit.group(1)) if limit else 0


def _arguments(raw: Any) -> Any:
    """Tool call arguments as an object when they are JSON, else the raw text (the env reports it)."""
    if raw is None:
        return {}
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        return raw


def _read_error_body(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read().decode("utf-8", "replace")
    except Exception:  # the server's body (a dropped connection, bad bytes) is only for the message: it must not hide the status
        return ""


__all__ = ["DEFAULT_BASE_URL", "DEFAULT_SYSTEM_PROMPT", "LLMAgent", "LLMConfig", "LLMHTTPError"]
