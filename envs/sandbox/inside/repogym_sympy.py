"""sympy reporter run inside sandboxes: per-test outcomes of sympy's own runner (``bin/test``), from its reporter.

Stdlib only, Python 3.6+. The harness's launcher (``repogym_launch.py --sympy-script``) imports it under a random
name and calls :func:`install` with the stream fd before ``bin/test`` starts. :func:`install` adds an import hook:
when sympy's runner module loads (``sympy.testing.runtests``, or ``sympy.utilities.runtests`` before sympy 1.6),
the outcome methods of its ``PyTestReporter`` are wrapped (``entering_filename``, ``entering_test``,
``test_pass``, ``test_fail``, ``test_exception``, ``test_xfail``, ``test_xpass``, ``test_skip``,
``doctest_fail``, ``import_error``), so each result streams out as sympy's runner decides it, one JSON line:

``{"id": "sympy/x/tests/test_y.py::test_name", "when": "call", "outcome": ...}``

with outcomes ``passed``, ``failed``, ``error``, ``skipped``, ``xfailed``, ``xpassed``, and
``{"collect_error": path}`` for a test file that could not be imported. What the tests print never becomes a
result: sympy's verbose output (``test_x ok``) is text the code under test can write too.

Not guaranteed: code under test runs in this process and can unwrap these methods or write to the fd itself;
the grader cross-checks the run (twins, exit status, sympy's own ``tests finished`` summary).
"""

import importlib.abc
import importlib.util
import json
import os
import sys

RUNNER_MODULES = ("sympy.testing.runtests", "sympy.utilities.runtests")
_FD = []
_WRAPPED = set()


def _send(record):
    if not _FD:
        return
    try:
        os.write(_FD[0], (json.dumps(record) + "\n").encode())
    except (OSError, ValueError):
        pass


def _result(reporter, outcome):
    test = getattr(reporter, "_repogym_test", None)
    if test:
        _send({"id": test, "when": "call", "outcome": outcome, "kind": "TestReport"})
        reporter._repogym_test = None  # one result a test: a second one can only come from a forger


def _skip_outcome(v=None):
    # sympy's own letters: a skip for being slow (w), a timeout (T), a keyboard interrupt (K)
    return "failed" if str(v) in ("Timeout", "KeyboardInterrupt") else "skipped"


def wrap(reporter_class):
    """Wrap ``reporter_class``'s outcome methods (sympy's ``PyTestReporter``) to stream each result; once."""
    if reporter_class in _WRAPPED:
        return
    _WRAPPED.add(reporter_class)

    def around(name, before):
        original = getattr(reporter_class, name, None)
        if original is None:
            return

        def method(self, *args, **kwargs):
            before(self, *args, **kwargs)
            return original(self, *args, **kwargs)

        method.__name__, method.__doc__ = original.__name__, original.__doc__
        setattr(reporter_class, name, method)

    def entering_filename(self, filename, n=0):
        root = getattr(self, "_root_dir", "") or ""
        self._repogym_file = filename[len(root) + 1:] if root and filename.startswith(root) else filename
        self._repogym_test = None

    def entering_test(self, f):
        self._repogym_test = "%s::%s" % (getattr(self, "_repogym_file", "?"), getattr(f, "__name__", f))

    around("entering_filename", entering_filename)
    around("entering_test", entering_test)
    around("test_pass", lambda self, *a, **k: _result(self, "passed"))
    around("test_fail", lambda self, *a, **k: _result(self, "failed"))
    around("test_exception", lambda self, *a, **k: _result(self, "error"))
    around("test_xfail", lambda self, *a, **k: _result(self, "xfailed"))
    around("test_xpass", lambda self, *a, **k: _result(self, "xpassed"))
    around("test_skip", lambda self, v=None, *a, **k: _result(self, _skip_outcome(v)))
    around("doctest_fail", lambda self, *a, **k: _result(self, "failed"))
    around("import_error", lambda self, filename, *a, **k: _send({"collect_error": str(filename)}))


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when another finder's spec loads one of :data:`RUNNER_MODULES`, wraps its reporter."""

    def find_spec(self, name, path=None, target=None):
        if name not in RUNNER_MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Loader(spec.loader)
                return spec
        return None


class _Loader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        reporter = getattr(module, "PyTestReporter", None)
        if isinstance(reporter, type):
            wrap(reporter)


def install(fd):
    """Report every result of sympy's runner to ``fd`` (a file descriptor number, as text); once only."""
    if _FD or not fd:
        return
    _FD.append(int(fd))
    for name in RUNNER_MODULES:  # already imported (by a sitecustomize): wrap it now
        module = sys.modules.get(name)
        if module is not None and isinstance(getattr(module, "PyTestReporter", None), type):
            wrap(module.PyTestReporter)
    sys.meta_path.insert(0, _Finder())
