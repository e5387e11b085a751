"""One episode's trajectory, shown to people: text for a terminal, or a standalone HTML page.

Guaranteed:
- every trajectory format in :data:`repogym.agents.trajectory.READABLE_FORMATS` reads; an unfinished episode
  (no end line) renders with status ``unfinished`` (:data:`repogym.agents.trajectory.UNFINISHED`);
- a missing or unreadable file is a :class:`repogym.envs.core.errors.ConfigError` naming the file and why;
- in HTML, every text from the trajectory (actions, tool output, test ids, the diff) is escaped: agent
  output is untrusted. The page needs no network: inline CSS, no scripts;
- text is cut to ``MAX_LINES`` lines per block unless ``full``, with a marker saying how many were cut.
  ANSI colours appear only when the caller asks (the CLI asks when stdout is a terminal).

Not guaranteed: the "final diff" is only what the trajectory holds (a ``diff`` field of the end line or of
its eval record, else the output of the last ``diff`` tool call); nothing is recomputed.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repogym.agents.trajectory import UNFINISHED, read_trajectory
from repogym.envs.actions import parse_action
from repogym.envs.core.errors import ConfigError
from repogym.envs.core.status import Status
from repogym.envs.tools.base import ToolError

MAX_LINES = 40
"""Lines kept per observation or argument block (head and tail) unless ``full``."""
_TAIL_LINES = 10


@dataclass
class StepView:
    """One tool call and what came back."""

    turn: int
    tool: str | None
    """None when the action did not parse as a tool call (then ``raw`` holds it)."""
    arguments: dict[str, Any]
    raw: str | None
    observation: str
    reward: float | None
    error: str | None
    """The error kind of an error observation (``parse_error``, ``bad_arguments``, ...)."""


@dataclass
class EpisodeView:
    """What a trajectory file says about one episode, ready to render."""

    path: str
    task_id: str
    agent: str
    seed: Any
    format: str
    steps: list[StepView]
    status: Status | str
    """A :class:`Status`, or ``unfinished`` (no end line)."""
    reward: float | None
    components: dict[str, float] = field(default_factory=dict)
    tests: dict[str, str] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    """``FAIL_TO_PASS`` / ``PASS_TO_PASS`` -> {"passed", "total"}."""
    error: dict[str, Any] | None = None
    """The eval record's ``{"where", "message"}`` (patch failures, infrastructure errors)."""
    diff: str | None = None
    diff_source: str = ""


def load_episode(path: str | Path) -> EpisodeView:
    """Read a trajectory file into an :class:`EpisodeView`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"expected a trajectory file, got {str(path)!r}: no such file")
    try:
        traj = read_trajectory(path)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"cannot read trajectory {str(path)!r}: {exc}") from None
    end = traj.end or {}
    record = end.get("eval") or {}
    steps = [_step_view(s) for s in traj.steps]
    components = next((s["info"]["reward_components"] for s in reversed(traj.steps)
                       if "reward_components" in (s.get("info") or {})), {})
    diff, source = _final_diff(traj.steps, end)
    return EpisodeView(
        path=str(path), task_id=str(traj.header.get("task_id", "?")), agent=str(traj.header.get("agent", "?")),
        seed=traj.header.get("seed"), format=str(traj.header.get("format")), steps=steps, status=traj.status,
        reward=end.get("reward"), components=components, tests=record.get("tests") or {},
        counts={name: record[key] for name, key in (("FAIL_TO_PASS", "fail_to_pass"), ("PASS_TO_PASS", "pass_to_pass"))
                if record.get(key)},
        error=record.get("error") or end.get("error"), diff=diff, diff_source=source)


def _step_view(step: dict[str, Any]) -> StepView:
    action = step.get("action")
    try:
        call = parse_action(action)
        tool, arguments, raw = call.name, call.arguments, None
    except ToolError:
        tool, arguments = None, {}
        raw = action if isinstance(action, str) else json.dumps(action, default=str)
    info = step.get("info") or {}
    return StepView(turn=int(step.get("turn", 0)), tool=tool, arguments=arguments, raw=raw,
                    observation=str(step.get("observation", "")), reward=step.get("reward"), error=info.get("error"))


def _final_diff(steps: list[dict[str, Any]], end: dict[str, Any]) -> tuple[str | None, str]:
    for where, record in (("end", end), ("eval record", end.get("eval") or {})):
        if isinstance(record.get("diff"), str):
            return record["diff"], f"the {where}"
    for step in reversed(steps):
        info = step.get("info") or {}
        if info.get("tool") == "diff" and not info.get("error"):
            return str(step.get("observation", "")), f"the diff tool at turn {step.get('turn')}"
    return None, ""


# -- shared helpers ---------------------------------------------------------------------------------------
def cut_lines(text: str, full: bool = False, limit: int = MAX_LINES) -> tuple[list[str], int]:
    """(lines to show, number cut): the head and the tail of ``text`` when it passes ``limit`` lines."""
    lines = text.splitlines() or [""]
    if full or len(lines) <= limit:
        return lines, 0
    head = limit - _TAIL_LINES
    return lines[:head] + lines[-_TAIL_LINES:], len(lines) - limit


def cut_marker(cut: int) -> str:
    return f"[... {cut} lines cut; --full shows all ...]"


def format_number(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _argument_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _sorted_tests(tests: dict[str, str]) -> list[tuple[str, str]]:
    """Tests that did not pass first, then the rest, each group by name."""
    return sorted(tests.items(), key=lambda kv: (kv[1] == "passed", kv[0]))


# -- terminal ---------------------------------------------------------------------------------------------
_ANSI = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


class _Paint:
    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, text: str, *styles: str) -> str:
        if not self.enabled or not styles:
            return text
        return "\033[" + ";".join(_ANSI[s] for s in styles) + "m" + text + "\033[0m"


def render_text(view: EpisodeView, *, full: bool = False, color: bool = False) -> str:
    """The episode as terminal text (ANSI colours when ``color``)."""
    paint = _Paint(color)
    out = [paint(f"episode {view.task_id}", "bold"),
           f"agent {view.agent}   seed {format_number(view.seed)}   format {view.format}   file {view.path}", ""]
    for step in view.steps:
        out += _step_text(step, full, paint)
    out += _end_text(view, full, paint)
    return "\n".join(out) + "\n"


def _block(text: str, full: bool, paint: _Paint, indent: str = "    ") -> list[str]:
    lines, cut = cut_lines(text, full)
    out = [indent + line for line in lines]
    if cut:
        out.insert(len(lines) - _TAIL_LINES, indent + paint(cut_marker(cut), "yellow"))
    return out


def _step_text(step: StepView, full: bool, paint: _Paint) -> list[str]:
    title = step.tool if step.tool else "unparsed action"
    out = [paint(f"── turn {step.turn} · {title} ", "bold", "cyan") + paint("─" * 40, "dim")]
    if step.raw is not None:
        out += _block(step.raw, full, paint)
    for name, value in step.arguments.items():
        text = _argument_text(value)
        if "\n" in text:
            out.append(f"  {name}:")
            out += _block(text, full, paint)
        else:
            out.append(f"  {name}: {text}")
    out.append(paint("  observation:", "dim"))
    out += _block(step.observation, full, paint)
    tail = f"  reward {format_number(step.reward)}"
    if step.error:
        tail += "   " + paint(f"error: {step.error}", "red")
    return out + [tail, ""]


def _end_text(view: EpisodeView, full: bool, paint: _Paint) -> list[str]:
    colour = "green" if view.status == Status.RESOLVED else "red"
    out = [paint("── end ", "bold", "cyan") + paint("─" * 40, "dim"),
           f"status {paint(view.status, 'bold', colour)}   reward {format_number(view.reward)}"]
    if view.status == UNFINISHED:
        out.append("  the episode did not finish (no end line: the writer stopped mid-episode)")
    if view.components:
        out.append("reward components: " + ", ".join(f"{k}={format_number(v)}" for k, v in view.components.items()))
    if view.error:
        out.append(paint(f"error [{view.error.get('where', '?')}]: {view.error.get('message', '')}", "red"))
    if view.counts:
        out.append("   ".join(f"{name} {c.get('passed', 0)}/{c.get('total', 0)}" for name, c in view.counts.items()))
    if view.tests:
        shown = _sorted_tests(view.tests) if full else [(t, o) for t, o in _sorted_tests(view.tests) if o != "passed"]
        out.append(f"tests ({len(view.tests)}):")
        if shown:
            out += _block("\n".join(f"{outcome:<8} {test}" for test, outcome in shown), full, paint, indent="  ")
        if len(shown) < len(view.tests):
            out.append(f"  and {len(view.tests) - len(shown)} passed (--full lists them)")
    if view.diff is not None:
        out.append(f"final diff (from {view.diff_source}):")
        out += _block(view.diff, full, paint, indent="  ")
    return out


# -- HTML -------------------------------------------------------------------------------------------------
PAGE_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.5em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
#leaderboard td:not(:first-child) { white-space: nowrap; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: 0.6em; overflow: auto; white-space: pre-wrap;
      max-height: 40em; }
.step { border-left: 4px solid #5a8; padding-left: 0.8em; margin: 1em 0; }
.step.error { border-left-color: #c44; }
.cut { color: #a60; font-style: italic; }
.resolved { color: #080; font-weight: bold; } .failed { color: #b00; font-weight: bold; }
.note { color: #666; font-style: italic; }
.legend span { display: inline-block; margin-right: 1.2em; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.3em; vertical-align: middle; }
"""


def html_page(title: str, body: str) -> str:
    """A standalone page: ``title`` is escaped here, ``body`` must already be safe HTML."""
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{PAGE_CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


def _pre(text: str, full: bool, css: str = "") -> str:
    lines, cut = cut_lines(text, full)
    parts = [html.escape(line) for line in lines]
    if cut:
        parts.insert(len(lines) - _TAIL_LINES, f'<span class="cut">{html.escape(cut_marker(cut))}</span>')
    return f'<pre class="{css}">' + "\n".join(parts) + "</pre>"


def render_html(view: EpisodeView, *, full: bool = False, back_link: str | None = None) -> str:
    """The episode as a standalone HTML page (``back_link``: a relative URL shown at the top)."""
    e = html.escape
    body = [f'<p><a href="{e(back_link)}">&larr; leaderboard</a></p>' if back_link else "",
            f"<h1>Episode {e(view.task_id)}</h1>",
            f"<p>agent <b>{e(view.agent)}</b> &middot; seed {e(format_number(view.seed))} &middot; "
            f"{e(view.format)} &middot; <code>{e(view.path)}</code></p>"]
    body += [_step_html(step, full) for step in view.steps]
    body.append(_end_html(view, full))
    return html_page(f"{view.agent} · {view.task_id}", "\n".join(body))


def _step_html(step: StepView, full: bool) -> str:
    e = html.escape
    title = e(step.tool) if step.tool else "unparsed action"
    parts = [f'<section class="step{" error" if step.error else ""}" id="turn-{step.turn}">',
             f"<h2>Turn {step.turn} &middot; {title}</h2>"]
    if step.raw is not None:
        parts.append(_pre(step.raw, full, "action"))
    for name, value in step.arguments.items():
        parts.append(f"<div>{e(name)}:</div>" + _pre(_argument_text(value), full, "argument"))
    parts.append("<div>observation:</div>" + _pre(step.observation, full, "observation"))
    error = f' &middot; <span class="failed">error: {e(step.error)}</span>' if step.error else ""
    parts.append(f"<p>reward {e(format_number(step.reward))}{error}</p></section>")
    return "\n".join(parts)


def _end_html(view: EpisodeView, full: bool) -> str:
    e = html.escape
    css = "resolved" if view.status == Status.RESOLVED else "failed"  # CSS classes, not statuses
    parts = ['<section id="end"><h2>End</h2>',
             f'<p>status <span class="{css}">{e(view.status)}</span> &middot; '
             f"reward {e(format_number(view.reward))}</p>"]
    if view.components:
        rows = "".join(f"<tr><td>{e(k)}</td><td>{e(format_number(v))}</td></tr>" for k, v in view.components.items())
        parts.append(f"<table><thead><tr><th>component</th><th>value</th></tr></thead><tbody>{rows}</tbody></table>")
    if view.error:
        parts.append(f'<p class="failed">error [{e(str(view.error.get("where", "?")))}]: '
                     f'{e(str(view.error.get("message", "")))}</p>')
    if view.counts:
        parts.append("<p>" + " &middot; ".join(f"{e(name)} {c.get('passed', 0)}/{c.get('total', 0)}"
                                              for name, c in view.counts.items()) + "</p>")
    if view.tests:
        rows = "".join(f'<tr><td class="{"resolved" if outcome == "passed" else "failed"}">{e(outcome)}</td>'
                       f"<td>{e(test)}</td></tr>" for test, outcome in _sorted_tests(view.tests))
        parts.append(f"<details><summary>{len(view.tests)} tests</summary><table id=\"tests\"><thead><tr>"
                     f"<th>outcome</th><th>test</th></tr></thead><tbody>{rows}</tbody></table></details>")
    if view.diff is not None:
        parts.append(f'<h2>Final diff</h2><p class="note">from {e(view.diff_source)}</p>'
                     + _pre(view.diff, full, "diff"))
    return "\n".join(parts) + "</section>"


__all__ = ["EpisodeView", "MAX_LINES", "StepView", "html_page", "load_episode", "render_html", "render_text"]
