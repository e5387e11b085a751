"""Progress on stderr for every long phase of a training run: one tqdm bar per phase (model, SFT collection and
epochs, the fleet's start, each evaluation, the RL steps), redrawn at least every :data:`TICK_S` seconds even when
nothing finishes, so that the elapsed time moves and a run is never silent for long.

Guaranteed: with ``enabled=False`` nothing is drawn (``repogym train --no-progress``, ``train(progress=False)``).
Not guaranteed: a redraw while the main thread holds the GIL in a long C call (the bar's thread waits for it).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

TICK_S = 5.0
"""Seconds between redraws of a bar with nothing new (the issue's bound is 10 s)."""


class _Silent:
    """The bar of a phase when progress is off."""

    n = 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, **_: Any) -> None:
        pass

    def set_description(self, _: str) -> None:
        pass


@contextmanager
def phase(enabled: bool, desc: str, total: int | None = None, unit: str = "episode", initial: int = 0,
          leave: bool = True) -> Iterator[Any]:
    """A tqdm bar for one phase (``total`` None: a line with the elapsed time), redrawn every :data:`TICK_S`
    seconds by a thread of its own until the phase ends."""
    if not enabled:
        yield _Silent()
        return
    from tqdm import tqdm

    bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=leave, file=sys.stderr, dynamic_ncols=True,
               bar_format="{desc}: {elapsed} elapsed" if total is None else None)
    done = threading.Event()

    def tick() -> None:
        while not done.wait(TICK_S):
            bar.refresh()

    ticker = threading.Thread(target=tick, name=f"progress: {desc}", daemon=True)
    ticker.start()
    try:
        yield bar
    finally:
        done.set()
        ticker.join()
        bar.close()


def say(message: str) -> None:
    """One line on stderr, on a line of its own below any bar, shown whatever ``progress`` is (interrupt notices).
    Written directly, with no lock: it is called from the SIGINT handler, which may run while a bar holds one."""
    sys.stderr.write("\n" + message + "\n")
    sys.stderr.flush()
