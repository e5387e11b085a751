"""A warm pool: sandboxes started ahead of time so grading and new episodes do not wait for a start.

A start that fails for an outside cause (the Docker daemon, bubblewrap, an image build, the disk) is logged with
its reason and tried again after a growing pause (:attr:`SandboxPool.backoff_s` doubling up to
:attr:`SandboxPool.max_backoff_s`); after :attr:`SandboxPool.max_failures` such failures in a row the pool stops
refilling, and :meth:`SandboxPool.acquire` starts sandboxes itself (so its caller sees the cause) until one of those
starts succeeds, which resumes refilling. A failure no retry can mend (a config error, failing install steps, a bug of
ours) stops refilling at once; a bug goes to :func:`repogym.envs.core.bugs.report_bug`.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

from repogym.envs.core.bugs import report_bug
from repogym.envs.core.errors import ConfigError, InfraError, InstallFailed, RepogymError
from repogym.envs.sandbox import cleanup
from repogym.envs.sandbox.base import Sandbox
from repogym.envs.sandbox.docker_client import daemon_errors

log = logging.getLogger(__name__)


class SandboxPool:
    """Keeps up to ``size`` started sandboxes ready; ``acquire`` hands one out and a thread refills."""

    def __init__(self, factory: Callable[[], Sandbox], size: int = 1, *, max_failures: int = 10,
                 backoff_s: float = 1.0, max_backoff_s: float = 60.0, spares: list[Sandbox] | None = None):
        """``max_failures``: failed starts in a row before the pool stops refilling; ``backoff_s``: the pause after
        the first, doubled after each further one up to ``max_backoff_s``; ``spares``: the list of sandboxes the
        factory takes before it starts any (:func:`repogym.envs.rewards.evaluate.prepared`): those it has not taken
        yet are the pool's too, closed by :meth:`close` and handed over by :meth:`take_ready`."""
        if max_failures < 1 or backoff_s < 0 or max_backoff_s < backoff_s:
            raise ConfigError(f"expected max_failures >= 1 and 0 <= backoff_s <= max_backoff_s, got {max_failures}, "
                             f"{backoff_s}, {max_backoff_s}")
        self.factory, self.size = factory, max(0, int(size))
        self._spares = spares if spares is not None else []
        self.max_failures, self.backoff_s, self.max_backoff_s = max_failures, backoff_s, max_backoff_s
        self.failures = 0
        """Failed starts in a row of the filling thread (0 after a success)."""
        self.refilling = False
        """Whether a thread keeps the pool filled (``False`` once it gave up, until a start of ``acquire`` succeeds)."""
        self._ready: queue.Queue[Sandbox] = queue.Queue()
        self._wanted = threading.Semaphore(0)
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        cleanup.register_pool(self)  # closed at exit, with whatever it is still starting
        if self.size:
            for _ in range(self.size):
                self._wanted.release()
            self._start_filling()

    def _start_filling(self) -> None:
        with self._lock:
            if self.refilling or self._closed.is_set():
                return
            self.refilling, self.failures = True, 0
            self._thread = threading.Thread(target=self._fill, name="repogym-pool", daemon=True)
            self._thread.start()

    def _fill(self) -> None:
        while True:
            self._wanted.acquire()
            if self._closed.is_set() or cleanup.exiting():
                return
            try:
                sandbox = self.factory()
            except InstallFailed as exc:  # the task's install steps (a pool of prepared sandboxes): the same each try
                self._wanted.release()
                self._give_up(f"a sandbox's install steps failed and trying again cannot help: {exc}")
                return
            except (InfraError, *daemon_errors()) as exc:  # the backend: its daemon, bubblewrap, an image, the disk
                self._wanted.release()  # still wanted, by the next try or the next filling thread
                if not self._failed(exc):
                    return
                continue
            except RepogymError as exc:  # a config error (a bad setup, say): no retry mends it
                self._wanted.release()
                self._give_up(f"a sandbox start failed and trying again cannot help: {exc}")
                return
            except Exception as exc:  # a bug of ours
                self._wanted.release()
                self._give_up(f"a sandbox start failed with a bug ({type(exc).__name__}: {exc})")
                report_bug("sandbox.pool.start", exc)
                return
            self.failures = 0
            if self._closed.is_set():  # closed while it started: nobody will acquire it
                sandbox.close()
                return
            self._ready.put(sandbox)

    def _failed(self, exc: BaseException) -> bool:
        """Count one failed start; ``True`` to try again (after the pause), ``False`` when the pool gives up."""
        self.failures += 1
        if self.failures >= self.max_failures:
            self._give_up(f"{self.failures} sandbox starts in a row failed, the last: {exc}")
            return False
        pause = min(self.backoff_s * 2 ** (self.failures - 1), self.max_backoff_s)
        log.warning("warm pool: a sandbox start failed (%d in a row; next try in %.0f s): %s", self.failures, pause,
                    exc)
        self._closed.wait(pause)
        return True

    def _give_up(self, why: str) -> None:
        log.error("warm pool stops refilling: %s; acquire() starts sandboxes itself until one start succeeds", why)
        with self._lock:
            self.refilling = False

    def acquire(self) -> Sandbox:
        """A started sandbox: a warm one when ready, else one started now (its failure raised here)."""
        try:
            sandbox = self._ready.get_nowait()
        except queue.Empty:
            sandbox = self.factory()
            if self.size and not self.refilling:  # the cause of the pool's failures is gone: refill again
                log.info("warm pool: a start succeeded again; refilling resumes")
                self._start_filling()
            return sandbox
        self._wanted.release()
        return sandbox

    def take_ready(self) -> list[Sandbox]:
        """Stop refilling and hand over every sandbox waiting (never acquired, so nothing ran in it): the caller owns
        them now (:meth:`close` then closes none of them)."""
        self.stop()
        taken = self._untaken_spares()
        while True:
            try:
                taken.append(self._ready.get_nowait())
            except queue.Empty:
                return taken

    def _untaken_spares(self) -> list[Sandbox]:
        taken = []
        while True:
            try:
                taken.append(self._spares.pop())  # (atomic: the factory may pop at the same time)
            except IndexError:
                return taken

    def stop(self) -> None:
        """Stop refilling (a start in progress finishes, and its sandbox is closed); returns at once."""
        self._closed.set()
        self._wanted.release()

    def close(self, timeout: float = 30.0) -> None:
        """Stop refilling and close every sandbox still waiting (waiting up to ``timeout`` s for a start in progress)."""
        self.stop()
        if self._thread is not None:
            self._thread.join(timeout=max(0.0, timeout))
        while not self._ready.empty():
            self._ready.get_nowait().close()
        for spare in self._untaken_spares():
            spare.close()
        cleanup.unregister_pool(self)
