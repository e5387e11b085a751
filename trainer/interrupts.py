"""Ctrl-C during a training run: the first SIGINT stops the run at a point where the last finished step can be
checkpointed, and says so at once; a second exits the process at once.

The run tells :class:`Interrupts` what it is doing (``doing``), whether the learner is mid-update (``updating``:
a half-applied update cannot be checkpointed, so the interrupt waits for it, seconds, and :meth:`check` stops the
run right after it) and the state of the last finished step (``finished``: what the checkpoint will hold).
Anything else (rollouts, evaluations, the SFT warm start, the fleet's start) is stopped at once: nothing of it
is kept, and the resumed run does it again.

Guaranteed: only in the main thread (Python delivers signals there alone); elsewhere :meth:`install` does nothing
and a Ctrl-C is Python's plain ``KeyboardInterrupt``. Not guaranteed: a second Ctrl-C saves nothing more and runs
no clean-up (``repogym gc`` removes sandboxes left behind).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from repogym.trainer.progress import say


class Interrupts:
    """The run's SIGINT handler and what it needs to know; :meth:`install` it for the run, :meth:`restore` after."""

    def __init__(self) -> None:
        self.doing = "setting up"
        """What an interrupt would stop, for its message (``step 5's rollouts``)."""
        self.updating = False
        """The learner is mid-update: an interrupt now waits for :meth:`check`."""
        self.finished: dict[str, Any] | None = None
        """The last finished step's state (its ``step`` at least); None: nothing worth a checkpoint yet."""
        self.interrupted = False
        """A first Ctrl-C came."""
        self._previous: Any = None

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self)

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def __call__(self, signum: int, frame: Any) -> None:
        if self.interrupted:
            say("interrupted again: exiting now, without saving (`repogym gc` removes sandboxes left behind)")
            os._exit(130)
        self.interrupted = True
        again = "Ctrl-C again exits at once, without saving"
        step = self.finished["step"] if self.finished is not None else None
        if self.updating:
            say(f"interrupted: finishing step {(step or 0) + 1}'s learner update, then saving a checkpoint of it "
                f"({again})")
            return
        what = f"saving a checkpoint of step {step}..." if step is not None else "no step has finished: nothing to save"
        say(f"interrupted: stopping {self.doing}; {what} ({again})")
        raise KeyboardInterrupt

    def check(self) -> None:
        """Where an interrupt that waited for a learner update stops the run."""
        if self.interrupted:
            raise KeyboardInterrupt
