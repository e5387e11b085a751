"""``repogym show``: one episode's trajectory in the terminal, or as a standalone HTML page."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def add_parser(sub) -> None:
    parser = sub.add_parser("show", help="render an episode's trajectory (tool calls, outputs, grading)",
                            description="Render one episode's trajectory file in the terminal: each tool call and "
                                        "its output, then the grading (status, reward components, tests, final "
                                        "diff); optionally also as a standalone HTML page.")
    parser.add_argument("trajectory", metavar="TRAJECTORY", help="a trajectory JSONL file")
    parser.add_argument("--html", metavar="OUT.html", help="also write the episode as a standalone HTML page")
    parser.add_argument("--full", action="store_true",
                        help="show whole observations (default: cut past 40 lines, with a marker)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from repogym.bench.viewer import load_episode, render_html, render_text

    _check_not_a_task_id(args.trajectory)
    view = load_episode(args.trajectory)
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    sys.stdout.write(render_text(view, full=args.full, color=color))
    if args.html:
        out = Path(args.html)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render_html(view, full=args.full), encoding="utf-8")
        print(f"wrote {out}")
    return 0


def _check_not_a_task_id(given: str, runs: Path = Path("runs")) -> None:
    """A bare task id where a trajectory file belongs (``repogym show repogym__tablekit-...``): say what show takes
    and name the trajectory files of that task found under ``runs/``."""
    from repogym.envs.core.errors import ConfigError

    path = Path(given)
    if path.exists() or path.suffix or path.name != given:
        return  # a path of some kind: load_episode says what is wrong with it
    found = sorted(str(p) for p in runs.rglob(f"{given}*.jsonl"))[:3] if runs.is_dir() else []
    where = f"; found: {', '.join(found)}" if found else f"; none for {given!r} under {runs}/"
    raise ConfigError(f"expected a trajectory file, got {given!r}: show takes the file an episode wrote (the demo "
                      f"writes runs/demo/AGENT/TASK_ID.jsonl), not a task id{where}")
