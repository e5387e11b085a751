"""Context policies: what of an episode's history the model is fed when it writes its next turn.

The history is a chat conversation: ``[system, task, assistant_1, observation_1, ..., observation_n]``
(``observation`` messages have role ``tool`` or ``user``). A policy turns it into the messages of the
next prompt and a JSON *record* of what it did; :func:`rebuild` applies a record to the same history and
gives the same messages back, so the exact prompt of every turn can be rebuilt from a trajectory.

- ``full``: everything; :class:`ContextOverflow` when a token counter and a limit are given and the
  history is over it.
- ``window``: the system prompt and the task always; the last ``keep_last`` to ``2*keep_last - 1`` turns
  in full; older tool outputs cut to head and tail with a marker saying how much was cut. The window moves
  in steps of ``keep_last`` turns, so between moves each prompt extends the one before (prefix caches
  and training sequences stay long).
- ``summary``: as ``window``, but the older turns are replaced by a summary the model writes through
  ``prompt`` (changeable), followed by the list of the actions taken in them.
The agent's own past actions are never dropped silently: ``window`` keeps them whole; ``summary`` lists
each one (tool name and arguments, cut to ``action_chars``) under the summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from repogym.agents.errors import ContextOverflow
from repogym.envs.core.errors import ConfigError
from repogym.envs.core.registry import Registry

Message = dict[str, Any]
Summarize = Callable[[list[Message]], str]
"""Asks the model for a summary: gets the messages ending with the summary prompt, returns its text."""
HEAD = 2  # system prompt and task
DEFAULT_SUMMARY_PROMPT = (
    "Summarise the work so far for yourself, to continue from it: what you learned about the code and the "
    "bug (files, functions, line numbers), what you changed, what you ran and what it showed, and what is "
    "left to do. Be specific and brief; do not call any tool.")


@dataclass
class ContextView:
    """The messages to feed, and the record of how they were made from the history."""

    messages: list[Message]
    record: dict[str, Any]


class ContextPolicy(Protocol):
    """Builds the prompt of each turn from the whole history."""

    name: str

    def reset(self) -> None:
        """Forget the last episode (its summaries)."""

    def view(self, history: list[Message], summarize: Summarize | None = None) -> ContextView:
        """The messages of the next prompt and the record of what was done."""


def turns_of(history: list[Message]) -> int:
    """Completed turns (an action answered by an observation) in ``history``."""
    return max(0, (len(history) - HEAD) // 2)


def window_start(turns: int, keep_last: int) -> int:
    """How many of ``turns`` fall out of a window of ``keep_last`` that moves ``keep_last`` turns at a time."""
    return max(0, (turns - keep_last) // keep_last * keep_last) if turns >= 2 * keep_last else 0


def elide(text: str, head: int, tail: int, turn: int) -> str:
    """``text`` cut to its first ``head`` and last ``tail`` characters, with a marker saying how much went."""
    if len(text) <= head + tail + 80:
        return text
    cut = len(text) - head - tail
    return (f"{text[:head]}\n[... {cut} characters of the output of turn {turn} elided by the context window ...]\n"
            f"{text[len(text) - tail:] if tail else ''}")


def describe_action(message: Message, limit: int) -> str:
    """One line naming an assistant turn's tool call (or its text), cut to ``limit`` characters."""
    calls = message.get("tool_calls") or []
    if calls:
        fn = calls[0].get("function") or {}
        text = f"{fn.get('name')} {fn.get('arguments') or '{}'}"
    else:
        text = str(message.get("content") or "")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass
class FullPolicy:
    """Everything, every turn."""

    max_tokens: int | None = None
    """The model's context; with ``count_tokens``, a longer prompt raises :class:`ContextOverflow`."""
    count_tokens: Callable[[list[Message]], int] | None = None
    name: str = "full"

    def reset(self) -> None:
        pass

    def view(self, history: list[Message], summarize: Summarize | None = None) -> ContextView:
        if self.max_tokens and self.count_tokens is not None:
            tokens = self.count_tokens(history)
            if tokens > self.max_tokens:
                raise ContextOverflow(tokens, self.max_tokens)
        return ContextView(list(history), {"policy": "full", "turns": turns_of(history)})


@dataclass
class WindowPolicy:
    """Old tool outputs cut to head and tail (see the module docstring)."""

    keep_last: int = 8
    head_chars: int = 400
    tail_chars: int = 400
    name: str = "window"

    def __post_init__(self):
        if self.keep_last < 1 or self.head_chars < 0 or self.tail_chars < 0:
            raise ConfigError(f"window needs keep_last >= 1 and head/tail_chars >= 0, got {self.keep_last}, "
                              f"{self.head_chars}, {self.tail_chars}")

    def reset(self) -> None:
        pass

    def view(self, history: list[Message], summarize: Summarize | None = None) -> ContextView:
        record = {"policy": "window", "turns": turns_of(history), "elided_turns": window_start(turns_of(history), self.keep_last),
                  "head_chars": self.head_chars, "tail_chars": self.tail_chars}
        return ContextView(rebuild(history, record), record)


@dataclass
class SummaryPolicy:
    """Old turns replaced by the model's own summary and the list of its actions."""

    keep_last: int = 8
    prompt: str = DEFAULT_SUMMARY_PROMPT
    action_chars: int = 160
    name: str = "summary"
    _summaries: dict[int, str] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.keep_last < 1:
            raise ConfigError(f"summary needs keep_last >= 1, got {self.keep_last}")

    def reset(self) -> None:
        self._summaries = {}

    def view(self, history: list[Message], summarize: Summarize | None = None) -> ContextView:
        turns = turns_of(history)
        upto = window_start(turns, self.keep_last)
        record: dict[str, Any] = {"policy": "summary", "turns": turns, "summarised_turns": upto,
                                  "action_chars": self.action_chars}
        if upto:
            if upto not in self._summaries:
                if summarize is None:
                    raise ConfigError("the summary context policy needs the agent to pass a summarize function")
                # Incremental: the summary so far (if any) and the turns since, then the prompt.
                earlier = max((u for u in self._summaries if u < upto), default=0)
                seed = rebuild(history[:HEAD + 2 * earlier], self._record(earlier)) if earlier else history[:HEAD]
                request = seed + history[HEAD + 2 * earlier:HEAD + 2 * upto] + [{"role": "user", "content": self.prompt}]
                self._summaries[upto] = summarize(request).strip()
            record["summary"] = self._summaries[upto]
        return ContextView(rebuild(history, record), record)

    def _record(self, upto: int) -> dict[str, Any]:
        return {"policy": "summary", "summarised_turns": upto, "summary": self._summaries[upto],
                "action_chars": self.action_chars}


def rebuild(history: list[Message], record: dict[str, Any]) -> list[Message]:
    """The messages ``record`` says were fed, made again from ``history`` (the inverse of nothing: a replay).

    A record of a policy :data:`REBUILDERS` does not know raises :class:`ConfigError` listing the ones it does.
    """
    return REBUILDERS.resolve(record.get("policy"))(history, record)


def _rebuild_full(history: list[Message], record: dict[str, Any]) -> list[Message]:
    return list(history)


def _rebuild_window(history: list[Message], record: dict[str, Any]) -> list[Message]:
    out = list(history[:HEAD])
    for i, message in enumerate(history[HEAD:]):
        turn = i // 2 + 1
        if i % 2 == 1 and turn <= record["elided_turns"]:
            message = {**message, "content": elide(str(message.get("content") or ""), record["head_chars"],
                                                   record["tail_chars"], turn)}
        out.append(message)
    return out


def _rebuild_summary(history: list[Message], record: dict[str, Any]) -> list[Message]:
    upto = record["summarised_turns"]
    if not upto:
        return list(history)
    actions = "\n".join(f"{t + 1}. {describe_action(history[HEAD + 2 * t], record['action_chars'])}"
                        for t in range(upto))
    note = {"role": "user", "content": f"[Turns 1-{upto} are summarised to save context. Your summary:]\n"
                                       f"{record['summary']}\n\n[Your actions in those turns:]\n{actions}"}
    return list(history[:HEAD]) + [note] + list(history[HEAD + 2 * upto:])


REBUILDERS: Registry[Callable[[list[Message], dict[str, Any]], list[Message]]] = Registry(
    "context record policy", {"full": _rebuild_full, "window": _rebuild_window, "summary": _rebuild_summary})
"""A context record's ``policy`` -> how to make its messages again from the history."""


POLICIES: Registry[Callable[..., ContextPolicy]] = Registry(
    "context policy", {"full": FullPolicy, "window": WindowPolicy, "summary": SummaryPolicy})


def make_context_policy(spec: str | dict[str, Any] | ContextPolicy | None) -> ContextPolicy:
    """A policy from a name (``"window"``), ``{"name": "window", "keep_last": 4}``, or a policy itself."""
    if spec is None:
        return FullPolicy()
    if not isinstance(spec, (str, dict)):
        return spec
    options = dict(spec) if isinstance(spec, dict) else {"name": spec}
    name = options.pop("name", None)
    policy = POLICIES.resolve(name)
    try:
        return policy(**options)
    except TypeError as exc:
        raise ConfigError(f"context policy {name!r}: {exc}") from None


def answer(action: Message, observation: str) -> Message:
    """The message that carries ``observation`` back: a ``tool`` message for a tool call, else ``user``."""
    calls = action.get("tool_calls") or []
    if calls:
        return {"role": "tool", "tool_call_id": calls[0].get("id"), "content": observation}
    return {"role": "user", "content": observation}


def history_from_trajectory(header: dict[str, Any], steps: list[dict[str, Any]], system_prompt: str) -> list[Message]:
    """The conversation an agent kept, rebuilt from a trajectory whose steps record ``agent.message``."""
    history: list[Message] = [{"role": "system", "content": system_prompt},
                              {"role": "user", "content": header["observation"]}]
    for step in steps:
        message = (step.get("agent") or {}).get("message")
        if message is None:
            raise ConfigError("this trajectory's steps record no agent message; it cannot be replayed")
        history += [message, answer(message, step["observation"])]
    return history


__all__ = ["ContextOverflow", "ContextPolicy", "ContextView", "FullPolicy", "WindowPolicy", "SummaryPolicy",
           "DEFAULT_SUMMARY_PROMPT", "POLICIES", "REBUILDERS", "make_context_policy", "rebuild", "elide", "answer",
           "history_from_trajectory"]
