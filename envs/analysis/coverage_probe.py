"""A pytest plugin that records, per test, which functions of the repository ran: copied into a sandbox, never
imported by the host (standard library only, Python 3.8 and later).

Loaded with ``-p <module>`` (its folder on ``PYTHONPATH``). ``REPOGYM_COVERAGE_ROOT`` names the repository's root
(default: the working directory) and ``REPOGYM_COVERAGE_OUT`` the JSON file written when the session ends.
A test's context opens when pytest starts it (``pytest_runtest_logstart``: its fixtures' set-up included) and
closes when it finishes (its teardown included), like coverage.py's per-test contexts. Within a context, every
code object under the root whose frame starts is recorded once as ``[path, first line, name]`` (``first line`` is
``co_firstlineno``: the first decorator's line for a decorated def). Comprehensions, lambdas and generator
expressions count for the function around them (their own code objects are skipped), and module and class bodies
(they run at import, outside every test) are never recorded. Threads a test starts are traced too where
``threading.settrace`` reaches them (Python < 3.12); processes it starts are not.

On Python 3.12+ it uses ``sys.monitoring`` (``PY_START``, disabled per code object once seen in a test and
restarted at the next test): near-zero cost. Before, ``sys.settrace`` with a call-only trace function (no line
events): one Python call per function call while a test runs.

Output: ``{"version": 1, "python": "3.11.7", "functions": [[path, line, name], ...], "tests": {node id: [index into
functions, ...]}, "errors": [...]}``.
"""

import json
import os
import sys
import threading

_ROOT = os.path.realpath(os.environ.get("REPOGYM_COVERAGE_ROOT") or os.getcwd()) + os.sep
_OUT = os.environ.get("REPOGYM_COVERAGE_OUT", "")
_SELF = os.path.realpath(__file__)
_CO_NEWLOCALS = 0x0002
_TOOL = 3  # sys.monitoring's tool id for "optimizer"-free use; 0-2 are debugger, coverage, profiler

_functions = []  # [path, line, name], in first-seen order
_keys = {}  # code object -> index into _functions, or None when it is not the repository's
_tests = {}  # node id -> set of indexes
_current = None  # the running test's set, or None between tests
_errors = []
_monitoring = getattr(sys, "monitoring", None)


def _key(code):
    """The index of ``code`` in ``_functions`` (added on first sight), or None when it is not recorded."""
    try:
        return _keys[code]
    except KeyError:
        pass
    index = None
    name = code.co_name
    filename = code.co_filename
    # a function's code has fresh locals; a module or class body's has not (they run at import, not in a test)
    if (code.co_flags & _CO_NEWLOCALS and not name.startswith("<") and filename
            and not filename.startswith("<")):
        path = os.path.realpath(filename) if not filename.startswith(_ROOT) else filename
        if path.startswith(_ROOT) and path != _SELF and os.sep + "site-packages" + os.sep not in path:
            index = len(_functions)
            _functions.append([path[len(_ROOT):].replace(os.sep, "/"), code.co_firstlineno, name])
    _keys[code] = index
    return index


def _trace(frame, event, arg):
    """``sys.settrace``'s global function: record the frame's code; no local tracing (returns None)."""
    current = _current
    if current is not None:
        index = _key(frame.f_code)
        if index is not None:
            current.add(index)
    return None


def _on_start(code, offset):
    """``sys.monitoring``'s PY_START: record, then stop this code object's events until the next test."""
    current = _current
    if current is not None:
        index = _key(code)
        if index is not None:
            current.add(index)
    return _monitoring.DISABLE


def _start_tracing():
    if _monitoring is not None:
        try:
            _monitoring.use_tool_id(_TOOL, "repogym-coverage")
        except ValueError as exc:  # another tool holds the id: fall back to settrace
            _errors.append("sys.monitoring: " + str(exc))
        else:
            _monitoring.register_callback(_TOOL, _monitoring.events.PY_START, _on_start)
            return True
    return False


_USE_MONITORING = _start_tracing()


def _open(nodeid):
    global _current
    _current = _tests.setdefault(nodeid, set())
    if _USE_MONITORING:
        _monitoring.restart_events()
        _monitoring.set_events(_TOOL, _monitoring.events.PY_START)
    else:
        threading.settrace(_trace)
        sys.settrace(_trace)


def _close():
    global _current
    if _USE_MONITORING:
        _monitoring.set_events(_TOOL, 0)
    else:
        sys.settrace(None)
        threading.settrace(None)
    _current = None


def pytest_runtest_logstart(nodeid, location):
    _open(nodeid)


def pytest_runtest_logfinish(nodeid, location):
    _close()


def pytest_sessionfinish(session, exitstatus):
    _close()
    if not _OUT:
        return
    data = {"version": 1, "python": "%d.%d.%d" % sys.version_info[:3], "functions": _functions,
            "tests": {nodeid: sorted(found) for nodeid, found in _tests.items()}, "errors": _errors}
    with open(_OUT, "w", encoding="utf-8") as out:
        json.dump(data, out, separators=(",", ":"))
