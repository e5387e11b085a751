"""The ``repogym`` command: one module per command group, each thin over the library.

Every command and option has ``--help`` text (tests/test_cli.py walks the parser to keep it so). A
:class:`repogym.envs.core.errors.RepogymError` (a bad argument, an unknown name, an infrastructure failure) is
printed as one ``repogym: error:`` line with exit status 2; Ctrl-C exits with 130. A bug of repogym's
(:class:`~repogym.envs.core.errors.InternalError`, raised in strict mode, or any other exception) is not a user's
mistake: it propagates with its traceback. ``repogym --version`` prints the installed package's version.

Output piped into a reader that stops early (``repogym tasks list | head -1``) ends the command quietly with exit
status 1, as Python's documentation recommends ("Note on SIGPIPE"): no ``BrokenPipeError`` traceback. A broken
pipe that is not standard output's (a daemon's socket, a subprocess) is not hidden.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from repogym.envs.core.errors import InternalError, RepogymError
from repogym.cli import (analyze, bench, demo, export, images, leaderboard, models, proxy, serve, show, tasks, train,
                         validate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="repogym", description="Coding-agent gym over real repositories: tasks from real projects, graded "
                                    "in sandboxes, for benchmarking agents and training them with RL.",
        epilog="Run 'repogym COMMAND --help' for a command's options.")
    parser.add_argument("-V", "--version", action="version", version=f"repogym {installed_version()}",
                        help="print repogym's version (of the installed package) and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for module in (tasks, validate, demo, bench, analyze, images, models, train, leaderboard, show, export, serve,
                   proxy):
        module.add_parser(sub)
    return parser


def installed_version() -> str:
    """The version of the installed ``repogym`` distribution (its metadata, as pip sees it)."""
    try:
        return version("repogym")
    except PackageNotFoundError:  # imported from a source tree that was never installed: no metadata to read
        return "(not installed: no package metadata; pip install -e .)"


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            code = _run(build_parser(), argv)
        except SystemExit:  # --help, --version, a usage error: their text may still sit in stdout's buffer
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # a closed pipe shows here when the whole output fit in the buffer
        return code
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # some other pipe broke: not the reader of our output going away
        # Python flushes stdout again at exit, which would fail the same way: point it at devnull first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _run(parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InternalError:
        raise  # a bug of ours (strict mode): its traceback, not a one-line "error" that reads as the user's
    except RepogymError as exc:
        print(f"repogym: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _stdout_closed() -> bool:
    """Whether standard output is a pipe or socket whose reader has gone (poll reports an error on it)."""
    import io
    import select
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):  # replaced by a test's capture, or closed
        return False
    if not hasattr(select, "poll"):  # Windows: no poll, and there a closed pipe is the only broken stdout
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


if __name__ == "__main__":
    sys.exit(main())
