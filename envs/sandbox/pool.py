"""A warm pool: sandboxes started ahead of time so grading and new episodes do not wait for a start."""

from __future__ import annotations

import queue
import threading
from typing import Callable

from repogym.envs.sandbox import cleanup
from repogym.envs.sandbox.base import Sandbox


class SandboxPool:
    """Keeps up to ``size`` started sandboxes ready; ``acquire`` hands one out and a thread refills."""

    def __init__(self, factory: Callable[[], Sandbox], size: int = 1):
        self.factory, self.size = factory, max(0, int(size))
        self._ready: queue.Queue[Sandbox] = queue.Queue()
        self._wanted = threading.Semaphore(0)
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        cleanup.register_pool(self)  # closed at exit, with whatever it is still starting
        if self.size:
            for _ in range(self.size):
                self._wanted.release()
            self._thread = threading.Thread(target=self._fill, name="repogym-pool", daemon=True)
            self._thread.start()

    def _fill(self) -> None:
        while True:
            self._wanted.acquire()
            if self._closed.is_set() or cleanup.exiting():
                return
            try:
                sandbox = self.factory()
                if self._closed.is_set():  # closed while it started: nobody will acquire it
                    sandbox.close()
                    return
                self._ready.put(sandbox)
            except Exception:
                # Start failures surface to the caller of acquire(), which starts one itself.
                self._closed.wait(1.0)
                self._wanted.release()

    def acquire(self) -> Sandbox:
        """A started sandbox: a warm one when ready, else one started now."""
        try:
            sandbox = self._ready.get_nowait()
        except queue.Empty:
            return self.factory()
        self._wanted.release()
        return sandbox

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
        cleanup.unregister_pool(self)
