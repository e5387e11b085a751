"""The ``repogym`` command: one module per command group, each thin over the library.

Every command and option has ``--help`` text (tests/test_cli.py walks the parser to keep it so). A
:class:`repogym.envs.core.errors.RepogymError` (a bad argument, an unknown name, an infrastructure failure) is
printed as one ``repogym: error:`` line with exit status 2; Ctrl-C exits with 130. A bug of repogym's
(:class:`~repogym.envs.core.errors.InternalError`, raised in strict mode, or any other exception) is not a user's
mistake: it propagates with its traceback.
"""

from __future__ import annotations

import argparse
import sys

from repogym.envs.core.errors import InternalError, RepogymError
from repogym.cli import (analyze, bench, demo, export, images, leaderboard, models, proxy, serve, show, tasks, train,
                         validate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="repogym", description="Coding-agent gym over real repositories: tasks from real projects, graded "
                                    "in sandboxes, for benchmarking agents and training them with RL.",
        epilog="Run 'repogym COMMAND --help' for a command's options.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for module in (tasks, validate, demo, bench, analyze, images, models, train, leaderboard, show, export, serve,
                   proxy):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InternalError:
        raise  # a bug of ours (strict mode): its traceback, not a one-line "error" that reads as the user's
    except RepogymError as exc:
        print(f"repogym: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
