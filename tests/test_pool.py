"""The warm pool's refilling: failed starts are logged with their reason, retried after a growing pause, and bounded;
a bug stops it at once. Fake sandboxes (no backend needed)."""

from __future__ import annotations

import logging
import time

import pytest

from repogym.envs.core.bugs import bug_counts
from repogym.envs.core.errors import ConfigError, InstallFailed, SandboxError
from repogym.envs.sandbox.pool import SandboxPool


class Box:
    """Stands in for a started sandbox: the pool only hands it out and closes it."""

    def __init__(self):
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Factory:
    """Starts a :class:`Box`, or raises the next of ``failures`` first."""

    def __init__(self, *failures: BaseException):
        self.failures, self.calls = list(failures), 0

    def __call__(self) -> Box:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return Box()


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_failed_start_is_logged_with_its_reason_and_tried_again(caplog):
    factory = Factory(SandboxError("sandbox.docker.start", "daemon hiccup one"),
                      SandboxError("sandbox.docker.start", "daemon hiccup two"))
    with caplog.at_level(logging.WARNING, logger="repogym.envs.sandbox.pool"):
        pool = SandboxPool(factory, size=1, backoff_s=0.01)
        try:
            wait_for(lambda: not pool._ready.empty())
            assert factory.calls == 3 and pool.failures == 0 and pool.refilling
            warnings = [r.getMessage() for r in caplog.records]
            assert len(warnings) == 2
            assert "1 in a row" in warnings[0] and "daemon hiccup one" in warnings[0]
            assert "2 in a row" in warnings[1] and "daemon hiccup two" in warnings[1]
            assert isinstance(pool.acquire(), Box)
        finally:
            pool.close()


def test_starts_that_keep_failing_stop_the_refilling_after_max_failures_until_acquire_succeeds(caplog):
    factory = Factory(*[SandboxError("sandbox.local.start", f"no bubblewrap {i}") for i in range(4)])
    with caplog.at_level(logging.WARNING, logger="repogym.envs.sandbox.pool"):
        pool = SandboxPool(factory, size=2, max_failures=3, backoff_s=0.01)
        try:
            wait_for(lambda: not pool.refilling)
            time.sleep(0.1)
            assert factory.calls == 3, "the pool keeps trying past max_failures"
            assert pool._ready.empty()
            assert any(r.levelno == logging.ERROR and "stops refilling" in r.getMessage()
                       and "no bubblewrap 2" in r.getMessage() for r in caplog.records)
            with pytest.raises(SandboxError, match="no bubblewrap 3"):  # acquire's own start shows the cause
                pool.acquire()
            assert not pool.refilling
            assert isinstance(pool.acquire(), Box)  # the cause is gone: refilling resumes, for the full size
            wait_for(lambda: pool._ready.qsize() == 2)
            assert pool.refilling and pool.failures == 0
        finally:
            pool.close()


def test_the_pause_doubles_up_to_its_cap():
    pool = SandboxPool(Factory(), size=0, max_failures=10, backoff_s=1.0, max_backoff_s=3.0)
    pauses = []
    pool._closed.wait = pauses.append  # record the pauses instead of taking them
    for _ in range(4):
        assert pool._failed(SandboxError("sandbox.docker.start", "down"))
    assert pauses == [1.0, 2.0, 3.0, 3.0]
    pool.close()


@pytest.mark.parametrize("error, words", [
    (ConfigError("setup.image: expected an image name, got ''"), ("cannot help", "setup.image")),
    # A pool of prepared sandboxes (the base loaded, its install run): a failing install fails again every try.
    (InstallFailed("sandbox.install", "pip: no matching distribution"), ("cannot help", "install steps")),
], ids=["config error", "install steps"])
def test_a_failure_no_retry_mends_stops_the_refilling_at_once(caplog, error, words):
    factory = Factory(error)
    with caplog.at_level(logging.ERROR, logger="repogym.envs.sandbox.pool"):
        pool = SandboxPool(factory, size=1, backoff_s=0.01)
        try:
            wait_for(lambda: not pool.refilling)
            time.sleep(0.05)
            assert factory.calls == 1
            assert any(all(w in r.getMessage() for w in words) for r in caplog.records)
        finally:
            pool.close()


def test_a_bug_in_a_start_is_reported_and_stops_the_refilling(monkeypatch):
    monkeypatch.setenv("REPOGYM_STRICT", "0")  # counted rather than raised, so the thread's end can be seen
    before = bug_counts().get("sandbox.pool.start: TypeError", 0)
    factory = Factory(TypeError("an argument of ours is wrong"))
    pool = SandboxPool(factory, size=1, backoff_s=0.01)
    try:
        wait_for(lambda: bug_counts().get("sandbox.pool.start: TypeError", 0) == before + 1)
        time.sleep(0.05)
        assert factory.calls == 1 and not pool.refilling
    finally:
        pool.close()


def test_a_sandbox_started_while_the_pool_closes_is_closed():
    started = []

    def slow() -> Box:
        time.sleep(0.2)
        started.append(Box())
        return started[-1]

    pool = SandboxPool(slow, size=1)
    pool.close(timeout=5)
    assert len(started) == 1 and started[0].closed


def test_arguments_are_checked():
    with pytest.raises(ConfigError, match="expected max_failures >= 1"):
        SandboxPool(Factory(), size=1, max_failures=0)


def test_closing_at_exit_logs_an_outside_failure_and_keeps_a_bug_for_reporting(caplog):
    from repogym.envs.sandbox import cleanup

    def daemon_gone():
        raise SandboxError("sandbox.docker", "the daemon went away")

    def our_bug():
        raise TypeError("close() takes no arguments")

    bugs: list[Exception] = []
    with caplog.at_level(logging.WARNING, logger="repogym.envs.sandbox.cleanup"):
        cleanup._close_quietly(daemon_gone, "box-1", bugs)
        cleanup._close_quietly(our_bug, "box-2", bugs)
    assert [type(b) for b in bugs] == [TypeError]  # reported by close_all once everything else is closed
    assert any("box-1" in r.getMessage() and "daemon went away" in r.getMessage() for r in caplog.records)


def test_spares_the_factory_has_not_taken_are_closed_or_handed_over_with_the_pool():
    """A pool closed (or emptied for the next one) before its factory took the spares it was given leaks none."""
    boxes = [Box(), Box()]
    spares = list(boxes)
    pool = SandboxPool(Factory(), size=0, spares=spares)
    pool.close()
    assert all(box.closed for box in boxes) and not spares
    handed = [Box(), Box()]
    pool = SandboxPool(Factory(), size=0, spares=list(handed))
    assert sorted(map(id, pool.take_ready())) == sorted(map(id, handed))
    pool.close()
    assert not any(box.closed for box in handed)  # the taker's now
