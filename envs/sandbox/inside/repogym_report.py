"""pytest plugin run inside sandboxes: writes the per-test outcome report the grader trusts.

Loaded with ``-p repogym_report`` (its folder on PYTHONPATH). Writes ``{"nonce", "tests": {nodeid: outcome},
"collection_errors": [...]}`` to the path in ``REPOGYM_REPORT`` at session end. Outcomes: ``passed``,
``failed``, ``error`` (setup/teardown failed), ``skipped``, ``xfailed``, ``xpassed``. Only ``passed``
counts as a pass; a test absent from the report did not pass.
"""

import json
import os

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
    path = os.environ.get("REPOGYM_REPORT")
    if not path:
        return
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"nonce": os.environ.get("REPOGYM_REPORT_NONCE", ""), "exitstatus": int(exitstatus),
                   "tests": _OUTCOMES, "collection_errors": _COLLECTION_ERRORS}, fh)
