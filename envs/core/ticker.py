"""A line at least every :data:`EVERY_S` seconds while a long step runs that reports nothing of its own (a Docker
build, ``debootstrap``, ``pip download``, vLLM's engine start), so a user never watches a silent terminal.

Guaranteed: the step's name when it begins; while it runs, one line per :data:`EVERY_S` seconds with the time
elapsed; when it ran long enough for a tick, one line when it ends (done or failed, with the time). Lines go to the
caller's ``log`` (a CLI's ``print``), else to stderr. Not guaranteed: a tick while the step holds the GIL in one
long C call (the ticking thread waits for it).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

EVERY_S = 8.0
"""Seconds between two lines (under the 10 s the first hour promises, with room for a late tick)."""
SHORT = 100
"""Characters of the step's name the ticks repeat."""


def to_stderr(line: str) -> None:
    """The default destination: one line on stderr, flushed at once."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _elapsed(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


@contextmanager
def ticking(what: str, log: Callable[[str], Any] | None = None, every: float | None = None) -> Iterator[None]:
    """Say ``what...`` now and ``what: still running (N s)`` every ``every`` seconds (default :data:`EVERY_S`)
    until the block ends."""
    say = log or to_stderr
    every = EVERY_S if every is None else every
    say(f"{what}...")
    # The ticks and the end name the step short: a step named by a long list (pip's requirements) is said once.
    short = what if len(what) <= SHORT else what[:SHORT - 3].rstrip() + "..."
    start = time.monotonic()
    done = threading.Event()
    ticks = 0

    def tick() -> None:
        nonlocal ticks
        while not done.wait(every):
            ticks += 1
            say(f"{short}: still running ({_elapsed(time.monotonic() - start)})")

    thread = threading.Thread(target=tick, name=f"ticker: {what}", daemon=True)
    thread.start()
    failed = True
    try:
        yield
        failed = False
    finally:
        done.set()
        thread.join()
        if ticks:
            say(f"{short}: {'failed' if failed else 'done'} after {_elapsed(time.monotonic() - start)}")
