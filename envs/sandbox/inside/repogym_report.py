"""pytest plugin run inside sandboxes: writes the per-test outcome report the grader trusts.

Loaded with ``-p`` (the harness copies it under a random module name, see ``envs/sandbox/testrun.py``). Writes ``{"nonce", "tests": {nodeid: outcome},
"collection_errors": [...]}`` to the path in ``REPOGYM_REPORT`` at session end. Outcomes: ``passed``,
``failed``, ``error`` (setup/teardown failed), ``skipped``, ``xfailed``, ``xpassed``. Only ``passed``
counts as a pass; a test absent from the report did not pass.

The report path and nonce are read when pytest loads the plugin, before any code under test runs, and
taken out of ``os.environ`` so that code (and its subprocesses) does not find them there.
"""

import json
import os

_REPORT = os.environ.pop("REPOGYM_REPORT", "")
_NONCE = os.environ.pop("REPOGYM_REPORT_NONCE", "")

_OUTCOMES: dict = {}
_COLLECTION_ERRORS: list = []


def pytest_runtest_logreport(report):
    current = _OUTCOMES.get(report.nodeid)
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            outcome = "xpassed" if report.passed else "xfailed"
        else:
            outcome = report.outcome
        if current in (None, "passed"):
            _OUTCOMES[report.nodeid] = outcome
    elif report.failed:
        _OUTCOMES[report.nodeid] = "error"
    elif report.skipped and current is None:
        _OUTCOMES[report.nodeid] = "skipped"


def pytest_collectreport(report):
    if report.failed:
        _COLLECTION_ERRORS.append(report.nodeid or "<session>")


def pytest_sessionfinish(session, exitstatus):
    if not _REPORT:
        return
    with open(_REPORT, "w", encoding="utf-8") as fh:
        json.dump({"nonce": _NONCE, "exitstatus": int(exitstatus),
                   "tests": _OUTCOMES, "collection_errors": _COLLECTION_ERRORS}, fh)
