"""unittest reporter run inside sandboxes: per-test outcomes of a unittest-based runner (Django's ``runtests.py``).

Stdlib only, Python 3.9+. The harness's launcher (``repogym_launch.py --unittest-script``) imports it under a
random name and calls :func:`install` with the stream fd before the test script starts, so the script's own
imports find unittest already patched. :func:`install` wraps the outcome methods of
``unittest.result.TestResult`` (``addSuccess``, ``addFailure``, ``addError``, ``addSkip``,
``addExpectedFailure``, ``addUnexpectedSuccess``, ``addSubTest``): every result class that calls its base
(``TextTestResult``, Django's ``DebugSQLTextTestResult``...) reports through it. Each outcome is one JSON line,
written to the fd as it happens:

``{"id": "test_name (module.Class)", "when": "call", "outcome": ..., "doc": "first docstring line"}``

with outcomes ``passed``, ``failed``, ``error``, ``skipped``, ``xfailed``, ``xpassed``; a failing subtest is a
``failed`` record of its test (``kind: "SubTestReport"``). The id is always the pre-3.11 form
``name (module.Class)`` whatever the Python (3.11 prints ``name (module.Class.name)``); ``doc`` is the first
line of the test method's docstring, as unittest's verbose output prints it (empty when there is none). A
class or module fixture that failed is reported as unittest describes it (``setUpClass (module.Class)``).

Not guaranteed: code under test runs in this process and can unwrap these methods or write to the fd itself;
the grader cross-checks the run (twins, exit status, unittest's own ``Ran N tests`` summary).
"""

import json
import os
import unittest.result

_FD = []


def test_id(test):
    """``name (module.Class)`` of a test case; unittest's own description for anything else."""
    name = getattr(test, "_testMethodName", None)
    if not isinstance(name, str):
        return str(test)
    cls = type(test)
    return "%s (%s.%s)" % (name, cls.__module__, cls.__qualname__)


def doc_line(test):
    """The docstring's first line, as ``TestCase.shortDescription`` gives it (empty when there is none)."""
    doc = getattr(test, "_testMethodDoc", None)
    return doc.strip().split("\n")[0].strip() if isinstance(doc, str) and doc.strip() else ""


def _send(test, outcome, kind="TestReport"):
    if not _FD:
        return
    record = {"id": test_id(test), "when": "call", "outcome": outcome, "doc": doc_line(test), "kind": kind}
    try:
        os.write(_FD[0], (json.dumps(record) + "\n").encode())
    except (OSError, ValueError):
        pass


def _wrap(name, outcome):
    original = getattr(unittest.result.TestResult, name)

    def method(self, test, *args, **kwargs):
        _send(test, outcome)
        return original(self, test, *args, **kwargs)

    method.__name__, method.__doc__ = original.__name__, original.__doc__
    setattr(unittest.result.TestResult, name, method)


def install(fd):
    """Report every outcome to ``fd`` (a file descriptor number, as text); once only."""
    if _FD or not fd:
        return
    _FD.append(int(fd))
    for name, outcome in (("addSuccess", "passed"), ("addFailure", "failed"), ("addError", "error"),
                          ("addSkip", "skipped"), ("addExpectedFailure", "xfailed"),
                          ("addUnexpectedSuccess", "xpassed")):
        _wrap(name, outcome)
    original = unittest.result.TestResult.addSubTest

    def addSubTest(self, test, subtest, err):  # noqa: N802  (unittest's name)
        if err is not None:
            failed = getattr(test, "failureException", AssertionError)
            _send(test, "failed" if issubclass(err[0], failed) else "error", "SubTestReport")
        return original(self, test, subtest, err)

    unittest.result.TestResult.addSubTest = addSubTest
