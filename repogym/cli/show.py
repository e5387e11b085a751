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

    view = load_episode(args.trajectory)
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    sys.stdout.write(render_text(view, full=args.full, color=color))
    if args.html:
        out = Path(args.html)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render_html(view, full=args.full), encoding="utf-8")
        print(f"wrote {out}")
    return 0
