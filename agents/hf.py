"""A local transformers causal LM as an agent, tracking the exact tokens it was fed and generated.

The conversation is kept as token ids, not re-rendered text: each turn the model is fed the ids so far,
its completion is appended as generated tokens (loss mask 1), then the tool output wrapped by the chat
template (loss mask 0). What the model saw is therefore exactly what the trajectory records, which is
what the trainer needs (a completion is trained in the context it was sampled in).

The chat template decides the wrapping. :class:`ChatFormat` reads it off the tokenizer once by rendering
a conversation with marker strings, so any template that renders turns by appending (Qwen, Llama,
the tiny model's own) works without code for each model.
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field, fields, replace
from typing import Any

from repogym.agents import check_options
from repogym.agents.chat_templates import tool_template
from repogym.agents.context import answer, make_context_policy
from repogym.agents.errors import ContextOverflow
from repogym.agents.models import resolve_model
from repogym.agents.policy import Completion, Engine, SamplingParams
from repogym.envs.actions import parse_action
from repogym.envs.core.errors import ConfigError
from repogym.envs.tools import select_tools
from repogym.envs.tools.base import ToolError

DEFAULT_SYSTEM_PROMPT = ("You are a software engineer fixing an issue in a repository. Each turn, call exactly "
                         "one tool inside <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.")
_A, _T = "\x00ASSISTANT\x00", "\x00TOOL\x00"


class HFEngine:
    """transformers ``generate`` on a local model (CPU or one GPU); one prompt at a time, seeded per request."""

    def __init__(self, model, device: str | None = None):
        import torch

        self.model = model.eval()
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device)
        self.version = 0
        # Seeding uses torch's global RNG: one request at a time keeps a seeded request reproducible.
        self._lock = threading.Lock()

    @classmethod
    def from_pretrained(cls, path: str, dtype: str = "auto", device: str | None = None) -> "HFEngine":
        """An engine for a model folder (``config.json`` + weights) or a model name of
        :mod:`repogym.agents.models`; nothing comes from a model hub. ``auto`` is fp32 on a CPU: bf16 there is
        2-3x slower without bf16 units, and fp32 keeps sampling logprobs those the learner computes."""
        import torch
        from transformers import AutoModelForCausalLM

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if dtype == "auto" and device == "cpu":
            dtype = "float32"
        model = AutoModelForCausalLM.from_pretrained(resolve_model(path), dtype=dtype, local_files_only=True)
        return cls(model, device)

    @property
    def max_model_len(self) -> int | None:
        """The model's context (its config's ``max_position_embeddings``; None when it names none)."""
        return getattr(self.model.config, "max_position_embeddings", None)  # a transformers config: third-party

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        return [self._one(p, params) for p in prompts]

    def _one(self, prompt: list[int], params: SamplingParams) -> Completion:
        import torch

        limit = self.max_model_len
        max_new = params.max_new_tokens if not limit else min(params.max_new_tokens, limit - len(prompt))
        if max_new <= 0:
            return Completion([], [], "length", self.version)
        sample = params.temperature > 0
        kwargs: dict[str, Any] = {"do_sample": sample, "max_new_tokens": max_new, "output_logits": True,
                                  "return_dict_in_generate": True,
                                  "eos_token_id": list(params.stop_token_ids) or None,
                                  "pad_token_id": self.model.config.pad_token_id}
        if sample:
            kwargs.update(temperature=params.temperature, top_k=0, top_p=params.top_p)
        ids = torch.tensor([prompt], device=self.device)
        with self._lock, torch.no_grad():
            if params.seed is not None:
                torch.manual_seed(params.seed)
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
            version = self.version  # the weights that made these tokens: a push waits for the lock
        new = out.sequences[0, len(prompt):].tolist()
        logits = torch.stack(out.logits[:len(new)], 0)[:, 0].float()
        if sample:
            logits = logits / params.temperature
        logprobs = torch.log_softmax(logits, -1).gather(-1, torch.tensor(new, device=logits.device)[:, None])
        stopped = bool(new) and new[-1] in set(params.stop_token_ids)
        return Completion(new, logprobs[:, 0].tolist(), "stop" if stopped else "length", version)

    def update_weights(self, state_dict: dict[str, Any], version: int) -> None:
        with self._lock:
            self.model.load_state_dict(state_dict)
            self.version = version

    def get_version(self) -> int:
        return self.version


def _version_of(completion: Completion, engine) -> int:
    """The policy version that generated ``completion``: its own record, else (an engine that does not keep one)
    the engine's version now, which a weight push since generation may already have moved."""
    return int(completion.version if completion.version is not None else engine.version)


class ChatFormat:
    """The chat template's wrapping of turns, as strings, read off a tokenizer once."""

    def __init__(self, tokenizer, system_prompt: str = DEFAULT_SYSTEM_PROMPT, tools: list[dict] | None = None,
                 few_shot: bool = True):
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError("the tokenizer has no chat_template; the hf agent needs one to wrap turns")
        self.tokenizer, self.system_prompt, self.tools, self.few_shot = tokenizer, system_prompt, tools, few_shot
        # A template that ignores tools (SmolLM2's own) is replaced by its family's, which renders them.
        self.template = tool_template(tokenizer) if tools else tokenizer.chat_template
        base = [{"role": "system", "content": system_prompt}, {"role": "user", "content": "U"},
                {"role": "assistant", "content": _A}]
        text = self._render(base + [{"role": "tool", "content": _T}], generation_prompt=True)
        if _A not in text or _T not in text:
            raise ConfigError("the chat template does not render assistant and tool turns verbatim")
        self.after_assistant = text[text.index(_A) + len(_A):text.index(_T)]
        self.after_tool = text[text.index(_T) + len(_T):]
        stop = tokenizer.eos_token_id
        self.stop_token_ids = [stop] if stop is not None else []

    def _render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=self.tools, tokenize=False,
                                                  add_generation_prompt=generation_prompt,
                                                  chat_template=self.template, few_shot=self.few_shot)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def first_prompt(self, observation: str) -> list[int]:
        """The ids of system prompt + task + the assistant generation prompt."""
        return self.encode(self._render([{"role": "system", "content": self.system_prompt},
                                         {"role": "user", "content": observation}], generation_prompt=True))

    def content(self, completion_ids: list[int]) -> str:
        """The assistant message text of a completion (without its stop token)."""
        ids = completion_ids
        if ids and ids[-1] in self.stop_token_ids:
            ids = ids[:-1]
        return self.decode(ids)

    def next_prompt(self, completion: Completion, observation: str) -> list[int]:
        """The ids fed after ``completion``: the end of the assistant turn, the tool output, a new turn."""
        close = self.after_assistant
        if completion.finish_reason == "stop" and completion.ids:
            stop_text = self.decode(completion.ids[-1:])
            if close.startswith(stop_text):
                close = close[len(stop_text):]
        return self.encode(close + observation + self.after_tool)

    def action_ids(self, action: str) -> list[int]:
        """A recorded action (any accepted form) as the ids this agent would generate for it, stop token included."""
        try:
            call = parse_action(action)
            text = "<tool_call>" + json.dumps({"name": call.name, "arguments": call.arguments}) + "</tool_call>"
        except ToolError:
            text = action if isinstance(action, str) else json.dumps(action)
        return self.encode(text) + self.stop_token_ids


@dataclass
class TokenTrace:
    """The token record of one turn: what was fed since the last turn (or, when the context policy rebuilt the
    prompt, the whole prompt: ``new_context``), what was generated."""

    prompt: list[int]
    completion: list[int]
    logprobs: list[float]
    finish_reason: str
    version: int
    new_context: bool = False

    def to_dict(self) -> dict[str, Any]:
        record = {"prompt": self.prompt, "completion": self.completion, "logprobs": self.logprobs,
                  "finish_reason": self.finish_reason, "version": self.version}
        if self.new_context:
            record["new_context"] = True
        return record


@dataclass
class HFAgentConfig:
    """How the hf agent prompts and samples."""

    temperature: float = 1.0
    max_new_tokens: int = 512
    top_p: float = 1.0
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    tools: list[str] | None = None
    """Tool schemas put in the prompt (None = every tool the env offers; [] = none)."""
    seed: int | None = None
    """Base seed: turn t of an episode reset with seed s samples with seed base + 1000*s + t."""
    context: Any = "full"
    """Context policy (:mod:`repogym.agents.context`): ``full``, ``window``, ``summary``, or ``{"name": ..., options}``."""
    max_context_tokens: int | None = None
    """The model's context (None: its ``max_position_embeddings``); ``full`` raises past it."""
    few_shot: bool = True
    """Render the chat template's example turns, a request and its call per tool on offer, between the system
    prompt and the task (templates of :mod:`repogym.agents.chat_templates`; others ignore it)."""


@dataclass
class HFAgent:
    """An agent whose every turn is one sampled completion of ``engine`` under ``tokenizer``'s chat template."""

    engine: Engine
    tokenizer: Any
    config: HFAgentConfig = field(default_factory=HFAgentConfig)

    def __post_init__(self):
        self.format: ChatFormat | None = None
        self.context = make_context_policy(self.config.context)
        self.ids: list[int] = []
        """The ids of the current context: the last prompt and its completion."""
        self.history: list[dict[str, Any]] = []
        """The whole conversation; assistant messages also hold their exact generated ``ids``."""
        self.traces: list[TokenTrace] = []
        self._view: dict[str, Any] = {}
        self._pieces: dict[tuple, list[int]] = {}  # encoded answers, by (finish reason, last id, text)
        self._episode_seed = 0

    @classmethod
    def from_pretrained(cls, path: str, **config: Any) -> "HFAgent":
        """An hf agent for a local model folder (weights and tokenizer with a chat template) or a model name of
        :mod:`repogym.agents.models` (fetched on first use)."""
        from transformers import AutoTokenizer

        check_options("agent 'hf'", config, ["path", *(f.name for f in fields(HFAgentConfig))])
        path = resolve_model(path)
        return cls(HFEngine.from_pretrained(path), AutoTokenizer.from_pretrained(path, local_files_only=True),
                   HFAgentConfig(**config))

    def fork(self, seed: int | None = None) -> "HFAgent":
        """This agent at this point of its episode, to go on apart from it: the same engine and tokenizer (shared,
        never copied), its own copy of the conversation, token record and context policy state, so its next turn
        is fed exactly the prompt this agent's next turn would be.

        ``seed`` is the fork's episode seed: its turn t then samples with seed ``base + 1000 * seed + t`` (an
        unseeded agent's fork samples with base 0), so forks given different seeds sample apart. None keeps this
        agent's seeding (a seeded fork then repeats this agent's next completions)."""
        config = self.config if seed is None or self.config.seed is not None else replace(self.config, seed=0)
        twin = HFAgent(self.engine, self.tokenizer, config)
        twin.format = self.format  # fixed at reset: shared
        twin.context = copy.copy(self.context)
        for name, value in vars(self.context).items():  # its own summaries, not its tokenizer or counters
            if isinstance(value, (dict, list)):
                setattr(twin.context, name, copy.copy(value))
        twin.ids, twin.traces = list(self.ids), list(self.traces)  # traces are never changed once made
        twin.history = [dict(m, ids=list(m["ids"])) if "ids" in m else dict(m) for m in self.history]
        twin._view, twin._pieces = copy.deepcopy(self._view), dict(self._pieces)
        twin._episode_seed = self._episode_seed if seed is None else int(seed)
        return twin

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        tools = select_tools(info.get("tools") or [], self.config.tools)
        self.format = ChatFormat(self.tokenizer, self.config.system_prompt, tools or None, self.config.few_shot)
        self.context.reset()
        self.ids, self.traces, self._pieces = [], [], {}
        self.history = [{"role": "system", "content": self.config.system_prompt},
                        {"role": "user", "content": observation}]
        self._episode_seed = int(info.get("seed") or 0)

    @property
    def mask(self) -> list[int]:
        """Loss mask of :attr:`ids` (1 on generated tokens)."""
        out: list[int] = []
        for trace in self._current_traces():
            out += [0] * len(trace.prompt) + [1] * len(trace.completion)
        return out

    def _current_traces(self) -> list[TokenTrace]:
        start = max((i for i, t in enumerate(self.traces) if t.new_context), default=0)
        return self.traces[start:]

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if len(self.history) > 2 and self.history[-1]["role"] == "assistant":  # the observation answers it
            self.history.append(answer(self.history[-1], observation))
        view = self.context.view(self.history, summarize=self._summarize)
        self._view = view.record
        prompt = self.render(view.messages)
        limit = self._context_limit()
        if limit and len(prompt) >= limit and self.context.name == "full":
            raise ContextOverflow(len(prompt), limit)
        extends = self.traces and prompt[:len(self.ids)] == self.ids
        fed = prompt[len(self.ids):] if extends else prompt
        completion = self.engine.generate([prompt], self._sampling(len(self.traces)))[0]
        self.ids = prompt + completion.ids
        self.traces.append(TokenTrace(fed, completion.ids, completion.logprobs, completion.finish_reason,
                                      _version_of(completion, self.engine), new_context=bool(self.traces) and not extends))
        text = self.format.content(completion.ids)
        self.history.append({"role": "assistant", "content": text, "ids": completion.ids,
                             "finish_reason": completion.finish_reason})
        return text

    def render(self, messages: list[dict[str, Any]]) -> list[int]:
        """The ids of a prompt: the first turn as the template renders it (messages before the first action
        folded into the task), then each action's exact generated ids and the encoded answer to it (messages
        between two actions, a summary request say, folded into one answer)."""
        i, lead = 1, []
        while i < len(messages) and messages[i]["role"] != "assistant":
            lead.append(str(messages[i]["content"]))
            i += 1
        ids = self.format.first_prompt("\n\n".join(lead))
        while i < len(messages):
            action, i, answers = messages[i], i + 1, []
            while i < len(messages) and messages[i]["role"] != "assistant":
                answers.append(str(messages[i]["content"]))
                i += 1
            ids += action["ids"]
            if answers:
                ids += self._answer_ids(action, "\n\n".join(answers))
        return ids

    def _answer_ids(self, action: dict[str, Any], text: str) -> list[int]:
        key = (action.get("finish_reason"), tuple(action["ids"][-1:]), text)
        if key not in self._pieces:
            done = Completion(action["ids"], [], action.get("finish_reason", "stop"))
            self._pieces[key] = self.format.next_prompt(done, text)
        return self._pieces[key]

    def _summarize(self, messages: list[dict[str, Any]]) -> str:
        """The model's summary for the ``summary`` context policy (not trained on: it is context, not an action)."""
        return self.format.content(self.engine.generate([self.render(messages)], self._sampling(500 + len(self.traces)))[0].ids)

    def _sampling(self, offset: int) -> SamplingParams:
        """Sampling settings; the seed (when seeded) is base + 1000 * episode seed + ``offset``."""
        c = self.config
        seed = None if c.seed is None else c.seed + 1000 * self._episode_seed + offset
        return SamplingParams(c.temperature, c.max_new_tokens, c.top_p, self.format.stop_token_ids, seed)

    def _context_limit(self) -> int | None:
        if self.config.max_context_tokens:
            return self.config.max_context_tokens
        return self.engine.max_model_len

    def turn_record(self) -> dict[str, Any] | None:
        """The last turn's tokens and what the context policy did, for the trajectory."""
        if not self.traces:
            return None
        message = {k: v for k, v in self.history[-1].items() if k != "ids"}
        return {"tokens": self.traces[-1].to_dict(), "context": self._view, "message": message}
