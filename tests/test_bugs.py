"""Our own bugs are loud: reported bugs raise in strict mode, and otherwise are counted and logged once per kind."""

import logging

import pytest

from repogym.envs.core import bugs
from repogym.envs.core.errors import InternalError, LocatedError
from repogym.envs.core.status import Status, excluded


def test_strict_mode_raises_the_bug_as_an_internal_error(monkeypatch):
    monkeypatch.setenv(bugs.STRICT_ENV, "1")
    with pytest.raises(InternalError) as caught:
        bugs.report_bug("test.strict", KeyError("missing"))
    assert caught.value.where == "test.strict" and "KeyError" in caught.value.message
    assert isinstance(caught.value.__cause__, KeyError)


def test_lenient_mode_counts_each_bug_and_logs_the_traceback_once_per_kind(monkeypatch, caplog):
    monkeypatch.setenv(bugs.STRICT_ENV, "0")
    caplog.set_level(logging.ERROR, logger="repogym.bugs")
    before = bugs.bug_counts().get("test.lenient: ZeroDivisionError", 0)
    for _ in range(3):
        try:
            1 / 0
        except ZeroDivisionError as exc:
            error = bugs.report_bug("test.lenient", exc)
    assert bugs.bug_counts()["test.lenient: ZeroDivisionError"] == before + 3
    assert error.record() == {"where": "test.lenient", "message": "ZeroDivisionError: division by zero"}
    logged = [r for r in caplog.records if "test.lenient" in r.getMessage()]
    assert len(logged) == (1 if before == 0 else 0) and (not logged or logged[0].exc_info)


def test_an_internal_error_episode_is_excluded_and_located_errors_share_one_base():
    assert excluded(Status.INTERNAL_ERROR, 0.0) and not excluded(Status.UNRESOLVED, 0.0)
    assert issubclass(InternalError, LocatedError)
