"""pytest plugin run inside sandboxes: the per-test outcome report the grader reads.

Loaded with ``-p`` (the harness copies it under a random module name, see ``envs/sandbox/testrun.py``).
Two ways out, chosen by the environment when pytest loads it:

- **stream** (``REPOGYM_STREAM_FD``, under the harness's launcher ``repogym_launch.py``): one JSON line per
  report, written to that fd as it happens: ``{"id", "when", "outcome", "xfail"}`` (and ``kind``) per test phase,
  ``{"collect_error": nodeid}``, and ``{"finish": exitstatus}`` at session end. The launcher, outside this
  process, keeps what arrived; a later rewrite cannot take back what was already sent.
- **file** (``REPOGYM_REPORT``, for test commands the launcher does not wrap): ``{"nonce", "exitstatus",
  "tests": {nodeid: outcome}, "collection_errors"}`` written at session end.

Outcomes: ``passed``, ``failed``, ``error`` (setup/teardown failed), ``skipped``, ``xfailed``, ``xpassed``.
Only ``passed`` counts as a pass; a test absent from the report did not pass.

The fd, path and nonce are read when pytest loads the plugin, before any code under test runs, and taken out
of ``os.environ`` so that code (and its subprocesses) does not find them there. At load the plugin also
moves the repository's entries of ``sys.path`` to its end (as the launcher does), so modules imported later
come from the standard library and site-packages first. Code under test still runs in this process and can
rewrite all of this: the grader does not trust this plugin alone (see ``envs/rewards/guards.py``).
"""

import json
import os
import sys

_REPORT = os.environ.pop("REPOGYM_REPORT", "")
_NONCE = os.environ.pop("REPOGYM_REPORT_NONCE", "")
_STREAM = os.environ.pop("REPOGYM_STREAM_FD", "")

_OUTCOMES: dict = {}
_COLLECTION_ERRORS: list = []


def _demote_repository():
    root = os.path.realpath(os.getcwd())

    def inside(entry):
        path = os.path.realpath(os.path.abspath(entry or "."))
        return path == root or path.startswith(root + os.sep)

    mine = [p for p in sys.path if inside(p)]
    sys.path[:] = [p for p in sys.path if not inside(p)] + mine


_demote_repository()


def _send(record):
    if _STREAM:
        try:
            os.write(int(_STREAM), (json.dumps(record) + "\n").encode())
        except (OSError, ValueError):
            pass


def pytest_runtest_logreport(report):
    xfail = hasattr(report, "wasxfail")
    _send({"id": report.nodeid, "when": report.when, "outcome": report.outcome, "xfail": xfail,
           "kind": type(report).__name__})
    current = _OUTCOMES.get(report.nodeid)
    if report.when == "call":
        if xfail:
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
        _send({"collect_error": report.nodeid or "<session>"})


def pytest_sessionfinish(session, exitstatus):
    _send({"finish": int(exitstatus)})
    if not _REPORT:
        return
    with open(_REPORT, "w", encoding="utf-8") as fh:
        json.dump({"nonce": _NONCE, "exitstatus": int(exitstatus),
                   "tests": _OUTCOMES, "collection_errors": _COLLECTION_ERRORS}, fh)
