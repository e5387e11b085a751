"""The leaderboard: a ranked Markdown table and one static HTML page with plots, from a results database.

Guaranteed:
- one row per summary of :func:`repogym.bench.metrics.summarize` (agent, suite, checkpoint), in its order (the
  ranking, best first), the agent's name in the first column (a checkpoint column appears when any row
  has one); the Markdown table and the HTML table hold the same cell texts;
- rates (resolved, pass@k, per difficulty, ...) are the metrics' own: over episodes without
  infrastructure errors. Infrastructure errors are shown apart, as a count and a rate;
- best-of-n trials (``repogym bench --best-of N``) are a table of their own (:func:`best_of_n_table`), one row per
  agent, suite, checkpoint and n, with the same agent's pass@1 beside it; they never enter the ranked table;
- the HTML page needs no network: inline CSS, plots as inline SVG drawn here, no scripts, no fonts;
- every text from the database or a trajectory is escaped (``html.escape``; ``|`` in Markdown cells);
- each episode gets its own page (``OUT_episodes/<n>.html`` next to ``OUT.html``, linked relatively),
  rendered by :mod:`repogym.bench.viewer`; an episode whose trajectory is missing or unreadable is listed with a
  note instead of a link. A relative trajectory path is looked up from the working directory, then from
  the database's folder.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Sequence

from repogym.bench.db import EpisodeRow, ResultsDB
from repogym.bench.metrics import BestOfNSummary, Summary, summarize, summarize_best_of_n
from repogym.bench.viewer import html_page, load_episode, render_html
from repogym.envs.core.errors import ConfigError

LEARNING_CURVES = ("rollout/success_rate", "eval/success_rate", "eval_heldout/success_rate")
"""The training metrics plotted, one chart each (an evaluation's 95% Wilson interval as a band, when logged)."""
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


# -- training runs ----------------------------------------------------------------------------------------
def import_run(db: ResultsDB, run_dir: str | Path, name: str | None = None) -> tuple[str, int]:
    """Store ``RUN_DIR/metrics.jsonl`` as training run ``name`` (default: the folder name); (name, values)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise ConfigError(f"expected a training run folder holding metrics.jsonl, got {str(run_dir)!r}")
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break  # a torn last line: the run was killed mid-write
            raise ConfigError(f"{path}:{number}: not a JSON line") from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise ConfigError(f"{path}:{number}: expected an object with an integer \"step\", got {line[:80]!r}")
        records.append(record)
    name = name or Path(run_dir).resolve().name
    return name, db.add_training_metrics(name, records)


# -- the table --------------------------------------------------------------------------------------------
def percent(rate: float | None) -> str:
    if rate is None or (isinstance(rate, float) and math.isnan(rate)):
        return "n/a"
    return f"{100 * rate:.1f}%"


def _resolved_cell(s: Summary) -> str:
    if s.resolved_rate is None or math.isnan(s.resolved_rate):
        return "n/a"
    return f"{percent(s.resolved_rate)} [{100 * s.ci_low:.1f}, {100 * s.ci_high:.1f}]"


def _number(value: float | None, digits: int) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:.{digits}f}"


def pass_ks(summaries: Sequence[Summary]) -> list[int]:
    """The k values of pass@k present in any summary."""
    return sorted({k for s in summaries for k in s.pass_at_k})


def table(summaries: Sequence[Summary]) -> tuple[list[str], list[list[str]]]:
    """(column names, one row of cell texts per summary, in rank order)."""
    ks = pass_ks(summaries)
    show_checkpoint = any(s.checkpoint for s in summaries)
    header = (["agent", "suite"] + ["checkpoint"] * show_checkpoint + ["resolved [95% CI]"] + [f"pass@{k}" for k in ks]
              + ["mean turns", "mean tokens", "format adherence", "self-correction", "long-horizon",
                 "infra errors", "episodes"])
    rows = []
    for s in summaries:
        rows.append([s.agent, s.suite] + [s.checkpoint] * show_checkpoint + [_resolved_cell(s)]
                    + [percent(s.pass_at_k.get(k)) for k in ks]
                    + [_number(s.mean_turns, 1), _number(s.mean_tokens, 0), percent(s.format_adherence),
                       percent(s.self_correction), percent(s.long_horizon),
                       f"{s.infra_errors} ({percent(s.infra_error_rate)})"
                       + (f" + {s.internal_errors} internal" if s.internal_errors else ""), str(s.episodes)])
    return header, rows


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def markdown(summaries: Sequence[Summary]) -> str:
    """The ranked table in Markdown (rates over episodes without infrastructure errors)."""
    header, rows = table(summaries)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def best_of_n_table(best: Sequence[BestOfNSummary], summaries: Sequence[Summary] = ()
                    ) -> tuple[list[str], list[list[str]]]:
    """(column names, one row per best-of-n summary): its rate beside the same agent's pass@1 ('n/a' without)."""
    plain = {(s.agent, s.suite, s.checkpoint): s for s in summaries}
    show_checkpoint = any(b.checkpoint for b in best)
    header = (["agent", "suite"] + ["checkpoint"] * show_checkpoint
              + ["n", "pass@1", "best-of-n [95% CI]", "trials", "fallbacks (no fork)", "infra errors"])
    rows = []
    for b in best:
        p1 = plain.get((b.agent, b.suite, b.checkpoint))
        rate = "n/a" if math.isnan(b.rate) else f"{percent(b.rate)} [{100 * b.ci_low:.1f}, {100 * b.ci_high:.1f}]"
        rows.append([b.agent, b.suite] + [b.checkpoint] * show_checkpoint
                    + [str(b.n), percent(p1.resolved_rate) if p1 else "n/a", rate, str(b.trials), str(b.fallbacks),
                       str(b.infra_errors) + (f" + {b.internal_errors} internal" if b.internal_errors else "")])
    return header, rows


def best_of_n_markdown(best: Sequence[BestOfNSummary], summaries: Sequence[Summary] = ()) -> str:
    """The best-of-n table in Markdown ('' when there are no best-of-n trials)."""
    if not best:
        return ""
    header, rows = best_of_n_table(best, summaries)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# -- SVG plots --------------------------------------------------------------------------------------------
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 720, 300, 56, 16, 16, 44


def _svg_frame(title: str, y_max: float, x_labels: list[tuple[float, str]], body: list[str]) -> str:
    """Axes (y from 0 to ``y_max`` as percent), x tick labels at x positions, and ``body`` drawn inside."""
    e = html.escape
    bottom, plot_h = _H - _BOTTOM, _H - _TOP - _BOTTOM
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
             f'role="img" aria-label="{e(title)}" font-family="sans-serif" font-size="11">']
    for i in range(5):
        value = y_max * i / 4
        y = bottom - plot_h * i / 4
        parts.append(f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_W - _RIGHT}" y2="{y:.1f}" stroke="#ddd"/>'
                     f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{100 * value:.0f}%</text>')
    for x, label in x_labels:
        parts.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{e(label)}</text>')
    parts.append(f'<line x1="{_LEFT}" y1="{bottom}" x2="{_W - _RIGHT}" y2="{bottom}" stroke="#333"/>'
                 f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{bottom}" stroke="#333"/>')
    return "\n".join(parts + body + ["</svg>"])


def _y(value: float, y_max: float) -> float:
    return _H - _BOTTOM - (_H - _TOP - _BOTTOM) * min(value, y_max) / y_max


def _legend(names: list[str]) -> str:
    items = "".join(f'<span><i class="swatch" style="background:{COLOURS[i % len(COLOURS)]}"></i>'
                    f"{html.escape(name)}</span>" for i, name in enumerate(names))
    return f'<div class="legend">{items}</div>'


def bars_svg(title: str, groups: list[str], series: list[tuple[str, list[float | None]]]) -> str:
    """Grouped bars: one group per label in ``groups``, one bar per series (None: no bar), and a legend."""
    plot_w = _W - _LEFT - _RIGHT
    group_w = plot_w / max(len(groups), 1)
    bar_w = group_w * 0.8 / max(len(series), 1)
    body = []
    for s, (name, values) in enumerate(series):
        for g, value in enumerate(values):
            if value is None or math.isnan(value):
                continue
            x = _LEFT + g * group_w + group_w * 0.1 + s * bar_w
            y = _y(value, 1.0)
            body.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{_H - _BOTTOM - y:.1f}" '
                        f'fill="{COLOURS[s % len(COLOURS)]}">'
                        f"<title>{html.escape(name)}: {percent(value)}</title></rect>"
                        f'<text x="{x + bar_w / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle" font-size="10">'
                        f"{100 * value:.0f}%</text>")
    labels = [(_LEFT + (g + 0.5) * group_w, label) for g, label in enumerate(groups)]
    return _svg_frame(title, 1.0, labels, body) + _legend([name for name, _ in series])


def lines_svg(title: str, series: list[tuple[str, list[tuple[int, float]]]],
              bands: dict[str, list[tuple[int, float, float]]] | None = None) -> str:
    """One polyline per series of (step, value) points over a shared step axis, and a legend; ``bands`` (series
    name -> (step, low, high) points) shades an interval around a series."""
    steps = [step for _, points in series for step, _ in points]
    low, high = min(steps), max(steps)
    span = (high - low) or 1
    y_max = max([1.0] + [v for _, points in series for _, v in points])

    def x(step: int) -> float:
        return _LEFT + (_W - _LEFT - _RIGHT) * (step - low) / span
    body = []
    for s, (name, points) in enumerate(series):
        colour = COLOURS[s % len(COLOURS)]
        band = (bands or {}).get(name)
        if band:
            outline = [(x(step), _y(hi, y_max)) for step, _, hi in band] + \
                      [(x(step), _y(lo, y_max)) for step, lo, _ in reversed(band)]
            body.append(f'<polygon points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in outline)}" fill="{colour}" '
                        f'fill-opacity="0.15" stroke="none"><title>{html.escape(name)}: 95% interval</title></polygon>')
        coords = " ".join(f"{x(step):.1f},{_y(v, y_max):.1f}" for step, v in points)
        body.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2">'
                    f"<title>{html.escape(name)}</title></polyline>")
        if len(points) == 1:  # a polyline of one point draws nothing
            (step, value), = points
            body.append(f'<circle cx="{x(step):.1f}" cy="{_y(value, y_max):.1f}" r="3" fill="{colour}"/>')
    ticks = sorted({low, low + span // 2, high}) if high > low else [low]
    labels = [(x(t), f"step {t}" if t == low else str(t)) for t in ticks]
    return _svg_frame(title, y_max, labels, body) + _legend([name for name, _ in series])


# -- the HTML page ----------------------------------------------------------------------------------------
def _label(s: Summary, several_suites: bool) -> str:
    name = f"{s.agent} · {s.checkpoint}" if s.checkpoint else s.agent
    return f"{name} ({s.suite})" if several_suites else name


def _table_html(summaries: Sequence[Summary]) -> str:
    e = html.escape
    header, rows = table(summaries)
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    body = "\n".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="leaderboard"><thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>'


def _best_of_n_html(rows, summaries: Sequence[Summary]) -> list[str]:
    """The best-of-n section (a heading and a table), or nothing when the database has no best-of-n trials."""
    if not rows:
        return []
    e = html.escape
    header, cells = best_of_n_table(summarize_best_of_n(rows), summaries)
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    body = "\n".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in cells)
    return ["<h2>Best-of-n at test time</h2><p class=\"note\">a verifier (the visible tests) picks one of n branches "
            "of each episode and only it is graded: not pass@1, never ranked with it</p>",
            f'<table id="best-of-n"><thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>']


def _difficulty_html(summaries: Sequence[Summary]) -> str:
    levels = sorted({d for s in summaries for d in s.by_difficulty})
    if not levels:
        return '<p class="note">no episode has a difficulty level</p>'
    several = len({s.suite for s in summaries}) > 1
    series = [(_label(s, several), [s.by_difficulty.get(d) for d in levels]) for s in summaries]
    return bars_svg("resolved rate by difficulty", [f"difficulty {d}" for d in levels], series)


def _curves_html(runs: dict[str, dict[str, list[tuple[int, float]]]]) -> str:
    if not runs:
        return ('<p class="note">no training runs in the database '
                "(<code>repogym leaderboard --import-run RUN_DIR</code> adds one)</p>")
    parts = []
    for metric in LEARNING_CURVES:
        series = [(run, metrics[metric]) for run, metrics in sorted(runs.items()) if metrics.get(metric)]
        split = metric.split("/")[0]
        bands = {}
        for run, metrics in runs.items():
            low, high = dict(metrics.get(f"{split}/success_low", [])), dict(metrics.get(f"{split}/success_high", []))
            if low and high:
                bands[run] = [(step, low[step], high[step]) for step in sorted(set(low) & set(high))]
        parts.append(f"<h3>{html.escape(metric)}</h3>")
        parts.append(lines_svg(metric, series, bands) if series
                     else f'<p class="note">no run logged {html.escape(metric)}</p>')
    return "\n".join(parts)


def _find_trajectory(row: EpisodeRow, db_dir: Path) -> Path | None:
    if not row.trajectory:
        return None
    path = Path(row.trajectory)
    for candidate in (path,) if path.is_absolute() else (path, db_dir / path):
        if candidate.is_file():
            return candidate
    return None


def _episode_link(row: EpisodeRow, number: int, out: Path, db_dir: Path) -> str:
    """Write the episode's page; return the HTML of its link, or a note saying why there is none."""
    e = html.escape
    path = _find_trajectory(row, db_dir)
    if path is None:
        return f'<span class="note">no trajectory file ({e(row.trajectory or "none recorded")})</span>'
    try:
        view = load_episode(path)
    except ConfigError as exc:
        return f'<span class="note">{e(str(exc))}</span>'
    folder = out.parent / f"{out.stem}_episodes"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{number}.html").write_text(render_html(view, full=True, back_link=f"../{out.name}"),
                                           encoding="utf-8")
    return f'<a href="{e(folder.name)}/{number}.html">episode {number}</a>'


def _episodes_html(summaries: Sequence[Summary], episodes: list[EpisodeRow], db_dir: Path, out: Path) -> str:
    e = html.escape
    several = len({s.suite for s in summaries}) > 1
    parts, number = [], 0
    for s in summaries:
        mine = [r for r in episodes if (r.agent, r.suite, r.checkpoint) == (s.agent, s.suite, s.checkpoint)]
        rows = []
        for row in mine:
            number += 1
            link = _episode_link(row, number, out, db_dir)
            rows.append(f"<tr><td>{e(row.task_id)}</td><td>{row.sample}</td><td>{e(str(row.difficulty or ''))}</td>"
                        f"<td>{e(row.status)}</td><td>{e(_number(row.reward, 2))}</td><td>{row.turns}</td>"
                        f"<td>{link}</td></tr>")
        parts.append(f"<h3>{e(_label(s, several))}</h3><table class=\"episodes\"><thead><tr><th>task</th>"
                     "<th>sample</th><th>difficulty</th><th>status</th><th>reward</th><th>turns</th><th>episode</th>"
                     "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")
    return "\n".join(parts)


def write_html(db: ResultsDB, out: str | Path, suite: str | None = None) -> Path:
    """Write the leaderboard page to ``out`` and one page per episode beside it; returns ``out``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    episodes = db.episodes(suite=suite)
    summaries = summarize(episodes)
    scope = f" &middot; suite {html.escape(suite)}" if suite else ""
    body = [f"<h1>repogym leaderboard</h1><p class=\"note\">ranked best first{scope}; rates exclude "
            "infrastructure errors, which are counted apart</p>", _table_html(summaries),
            *_best_of_n_html(db.best_of_n(suite=suite), summaries),
            "<h2>Resolved rate by difficulty</h2>", _difficulty_html(summaries),
            "<h2>Learning curves</h2>", _curves_html(db.training_runs()),
            "<h2>Episodes</h2>", _episodes_html(summaries, episodes, db.path.parent, out)]
    out.write_text(html_page("repogym leaderboard", "\n".join(body)), encoding="utf-8")
    return out


__all__ = ["LEARNING_CURVES", "bars_svg", "best_of_n_markdown", "best_of_n_table", "import_run", "lines_svg", "markdown", "pass_ks", "percent", "table",
           "write_html"]
