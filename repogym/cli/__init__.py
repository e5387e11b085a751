"""The ``repogym`` command: one module per command group, each thin over the library."""

from __future__ import annotations

import argparse
import sys

from repogym.envs.errors import RepogymError
from repogym.cli import analyze, bench, demo, images, leaderboard, show, tasks, train, validate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="repogym", description="Coding-agent gym over real repositories.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (tasks, validate, demo, bench, analyze, images, train, leaderboard, show):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except RepogymError as exc:
        print(f"repogym: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
