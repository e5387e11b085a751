"""The harness's test launcher, run inside sandboxes (stdlib only, Python 3.9+; the harness copies it under a random name).

Started from the repository root as ``python -I <folder>/<random>.py MODE ...``, one of:

- ``--module|--script <pytest arguments>``: pytest (``python -m pytest`` or the ``pytest`` script);
- ``--unittest-script <reporter> <script> <arguments>``: a script that runs unittest (Django's
  ``tests/runtests.py``), with the harness's reporter module (``repogym_unittest.py``, staged as
  ``<reporter>``) imported first: it patches unittest's result class so each test's outcome streams out;
- ``--sympy-script <reporter> <script> <arguments>``: sympy's ``bin/test``, with the harness's reporter module
  (``repogym_sympy.py``) imported first: it wraps sympy's ``PyTestReporter`` when sympy's runner loads, so each
  result streams out as the runner decides it (never read from what the tests print).

It runs in two processes:

- **outer** (no code of the repository runs here: ``-I`` ignores ``PYTHONPATH``, so not even a
  ``sitecustomize`` of the repository is imported): reads the frame key from ``<folder>/key`` and deletes
  it, makes itself non-dumpable (so code under test, same uid, cannot read its memory, environment or fds),
  starts the inner process, and reads two pipes from it: the run's output and the report stream, one JSON
  line per test phase, written by the report plugin (or the unittest reporter) as each result happens. Once
  the run has exited it prints the tail of its output, then one frame line: ``<key> {"exit": real exit status,
  "sha256": of the stream, "summary": the run's last summary line}``, then the stream itself, and removes its
  folder. The summary is
  pytest's last summary line; for unittest ``Ran N tests in Xs; OK`` or ``...; FAILED (failures=1)``; for
  sympy its ``tests finished: ... in X seconds`` line. The host trusts the stream only if its hash matches
  the frame; there is no report file for a late writer (an ``atexit`` handler, an escaped grandchild) to
  rewrite; the key is never in the inner process's reach, so the frame cannot be forged from its output.
  It starts the inner process before importing what reading it takes (the tests start sooner).
- **inner** (``python -P``, the task's ``PYTHON*`` variables honoured): puts the standard library and
  site-packages before the repository on ``sys.path`` (the repository root and any ``PYTHONPATH`` entry
  inside it moved to the end; a script's own folder, which ``python script`` puts first, goes last too), so
  no file of the repository can stand in for ``json``, ``pytest`` or the report plugin; then runs pytest
  with plugin autoload off and the report plugin named with ``-p``, or the script with ``runpy``, bytecode
  read from and written to a harness-private cache only. The pytest plugins the environment itself installed
  (listed when it was built, under the interpreter's prefix) are named with ``-p`` before the report plugin.
  In the script modes the inner process itself sends
  ``{"finish": exit status}`` on the stream when the script ends (by ``sys.exit`` or by returning), the
  counterpart of the pytest plugin's session-end record.

Not guaranteed: code under test still runs in the inner process and can rewrite pytest, unittest, the
reporters or the script's printing there (outcomes, reports, the plugin); with the repository on the task's
``PYTHONPATH``, a ``sitecustomize`` there runs in it too (the tamper filter drops those). The launcher only
keeps it from forging what happens after it (the exit status, the stream and output already sent); grading's
twin tests and cross-checks (``envs/rewards/guards.py``) catch the rest.
"""

import sys
import os

_ROOT = os.path.realpath(os.getcwd())


def _in_repository(entry):
    path = os.path.realpath(os.path.abspath(entry or "."))
    return path == _ROOT or path.startswith(_ROOT + os.sep)


def _demote_repository():
    """The repository's entries of ``sys.path`` moved to its end (before any further import)."""
    mine = [p for p in sys.path if _in_repository(p)]
    sys.path[:] = [p for p in sys.path if not _in_repository(p)] + mine


_demote_repository()
# The launcher's own folder is not an import root (what -P does for the inner process on 3.11+; -I for the outer).
_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(os.path.abspath(p or ".")) != _HERE]

FOLDER = os.path.dirname(os.path.realpath(__file__))
OUTPUT_TAIL = 64 * 1024
# What else the launcher uses is imported where it is used: the outer process starts the tests first and imports
# the rest while they start, and the inner one (pytest's process) imports nothing pytest would not.
SCRIPT_MODES = ("--unittest-script", "--sympy-script")
# Under the interpreter's sys.prefix: the pytest plugins the environment installed (repogym.envs.sandbox.install).
PLUGIN_LIST = "share/repogym/pytest-plugins"


def environment_plugins(args):
    """``-p`` arguments naming the pytest plugins the environment installed (its ``pytest11`` entry points, listed
    when it was built: plain pytest loads them by itself, here autoload is off), less those ``args`` block with
    ``-p no:NAME``. Only a list the tests' user cannot write counts."""
    path = os.path.join(sys.prefix, PLUGIN_LIST)
    try:
        if os.access(path, os.W_OK) or os.access(os.path.dirname(path), os.W_OK):
            return []
        with open(path) as fh:
            entries = [line.split() for line in fh if len(line.split()) == 2]
    except OSError:
        return []
    blocked = set()
    for i, arg in enumerate(args):
        value = (args[i + 1] if i + 1 < len(args) else "") if arg == "-p" else arg[2:] if arg.startswith("-p") else ""
        if value.startswith("no:"):
            blocked.add(value[3:])
    return [word for name, module in entries if not blocked & {name, module} for word in ("-p", module)]


def _patterns():
    """The summary lines' patterns (compiled on first use: ``re`` is not imported before the tests start)."""
    import re

    return {
        # pytest's last terminal line, e.g. "1 failed, 3 passed in 0.10s" (``-q``) or "==== 4 passed in 0.1s ====".
        "SUMMARY": re.compile(r"^=*\s*((?:\d+ \w+,? )*\d+ \w+|no tests ran) in [\d.]+s\b"),
        # unittest: "Ran 3 tests in 0.001s", then (after a blank line) "OK" or "FAILED (failures=1, errors=2)".
        "UNITTEST_RAN": re.compile(r"^Ran \d+ tests? in [\d.]+s$"),
        "UNITTEST_VERDICT": re.compile(r"^(OK|FAILED)\b"),
        # sympy: "============ tests finished: 3 passed, 1 failed, in 0.05 seconds ============".
        "SYMPY_SUMMARY": re.compile(r"^=*\s*tests finished: .* in [\d.]+ seconds\s*=*$"),
        "ANSI": re.compile(r"\x1b\[[0-9;]*[A-Za-z]"),
    }


class _Summary:
    """The run's last summary line, read line by line as the output arrives."""

    def __init__(self, mode):
        self.mode, self.text = mode, ""
        self._pending = ""  # a summary not yet whole: unittest's "Ran N tests" line, or sympy's wrapped one
        self._re = _patterns()

    def feed(self, line):
        text = self._re["ANSI"].sub("", line).strip()
        if self.mode == "--unittest-script":
            if self._re["UNITTEST_RAN"].match(text):
                self._pending = text
            elif self._pending and self._re["UNITTEST_VERDICT"].match(text):
                self.text, self._pending = self._pending + "; " + text, ""
        elif self.mode == "--sympy-script":
            # sympy wraps a long summary at the terminal's width: "tests finished: 1 passed, ..., \n3 exceptions,
            # in 0.5 seconds"; the parts are joined (at most three lines).
            if text.strip("= ").startswith("tests finished:"):
                self._pending = text
            elif self._pending and self._pending.count("\n") < 2:
                self._pending += "\n" + text
            else:
                self._pending = ""
            joined = " ".join(self._pending.split())
            if self._pending and self._re["SYMPY_SUMMARY"].match(joined):
                self.text, self._pending = joined.strip("= "), ""
        elif self._re["SUMMARY"].match(text):
            self.text = text


def _undumpable():
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    except (OSError, AttributeError):
        pass


def _text(data):
    """Valid UTF-8 without NULs, so the runner never takes the output (and the frame) for binary."""
    return bytes(data).decode("utf-8", "backslashreplace").replace("\0", "\\0").replace("\ufffd", "?")


def _spawn(argv, env, output_w, stream_w):
    """Start the inner process: stdin from /dev/null, stdout and stderr into ``output_w``, ``stream_w`` kept (under
    its own number), no other descriptor of this process, the signals Python ignores back to their defaults."""
    import signal

    keep = {0, 1, 2, stream_w}
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
               (os.POSIX_SPAWN_DUP2, output_w, 1), (os.POSIX_SPAWN_DUP2, output_w, 2)]
    for fd in os.listdir("/proc/self/fd"):  # an inherited descriptor would reach the tests (Popen's close_fds)
        if fd.isdigit() and int(fd) not in keep:
            try:
                if os.get_inheritable(int(fd)):
                    actions.append((os.POSIX_SPAWN_CLOSE, int(fd)))
            except OSError:
                pass
    os.set_inheritable(stream_w, True)
    defaults = [getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ", "SIGXFZ") if hasattr(signal, name)]
    return os.posix_spawn(argv[0], argv, env, file_actions=actions, setsigdef=defaults)


def _remove_folder():
    """This run's folder emptied and removed (a runner's staging folder, whose parent is root's, stays empty)."""
    for folder, dirs, files in os.walk(FOLDER, topdown=False):
        for name in files + dirs:
            path = os.path.join(folder, name)
            try:
                os.rmdir(path) if name in dirs and not os.path.islink(path) else os.unlink(path)
            except OSError:
                pass
    try:
        os.rmdir(FOLDER)
    except OSError:
        pass


def outer(mode, args):
    key_path = os.path.join(FOLDER, "key")
    try:
        with open(key_path) as fh:
            key = fh.read().strip()
        os.unlink(key_path)
    except OSError:
        key = ""
    _undumpable()
    stream_r, stream_w = os.pipe()
    output_r, output_w = os.pipe()
    env = dict(os.environ)
    # The harness's prefix (a read-only warm one, see envs/sandbox/bytecode.py), else one of this run's own.
    prefix = env.pop("REPOGYM_BYTECODE", "") or os.path.join(FOLDER, "pycache")
    env.update({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": prefix,
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": "", "PYTEST_PLUGINS": "",
                "REPOGYM_STREAM_FD": str(stream_w)})
    env.pop("PYTHONSTARTUP", None)
    # -P exists from 3.11; before it the launcher takes its own folder off sys.path itself (above).
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    if mode not in SCRIPT_MODES:
        args = environment_plugins(args) + args
    pid = _spawn([sys.executable, *safe_path, os.path.realpath(__file__), "--inner", mode, *args], env,
                 output_w, stream_w)
    os.close(stream_w)
    os.close(output_w)
    # Only now, while the tests start: what reading them takes.
    import hashlib
    import json
    import selectors
    import time

    output, stream, pending, summary = bytearray(), bytearray(), b"", _Summary(mode)
    sel = selectors.DefaultSelector()
    sel.register(output_r, selectors.EVENT_READ, "output")
    sel.register(stream_r, selectors.EVENT_READ, "stream")
    drain_until, status = None, None
    while sel.get_map():
        if drain_until is None and status is None:
            done, raw_status = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(raw_status)
                # What is queued now was written before pytest exited; a stray grandchild gets half a second more.
                drain_until = time.monotonic() + 0.5
                for k in list(sel.get_map().values()):
                    os.set_blocking(k.fileobj, False)
        events = sel.select(timeout=0.05)
        if drain_until is not None and (not events or time.monotonic() > drain_until):
            break
        for k, _ in events:
            try:
                chunk = os.read(k.fileobj, 65536)
            except BlockingIOError:
                chunk = b""
            if not chunk:
                sel.unregister(k.fileobj)
                continue
            if k.data == "stream":
                stream += chunk
                continue
            output += chunk
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()[-4096:]
            for line in lines:
                summary.feed(line.decode("utf-8", "replace"))
            del output[:-OUTPUT_TAIL]
    summary.feed(pending.decode("utf-8", "replace"))
    if status is None:
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    # The stream goes out after the frame line, as text (what the host reads is what was hashed): no file that an
    # escaped grandchild could rewrite, and no second command to read one.
    data = _text(stream).encode()
    frame = {"exit": status, "sha256": hashlib.sha256(data).hexdigest(), "summary": summary.text}
    sys.stdout.buffer.write(_text(output).encode())
    sys.stdout.buffer.write(f"\n{key} {json.dumps(frame)}\n".encode() + data)
    sys.stdout.flush()
    _remove_folder()
    return 0


def inner(mode, args):
    if mode in SCRIPT_MODES:
        return inner_script(mode, args)
    sys.path.insert(0, FOLDER)  # the report plugin, named with -p
    if mode == "--module" and _ROOT not in sys.path:
        sys.path.append(_ROOT)  # what `python -m` puts first, put last
    sys.argv = ["pytest", *args]
    import runpy
    runpy.run_module("pytest", run_name="__main__", alter_sys=True)  # exactly what `python -m pytest` runs
    return 0


def _exit_code(code):
    """The process exit status ``sys.exit(code)`` gives (``None`` 0, a bool or int itself, anything else 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code) & 0xFF
    return 1


def inner_script(mode, args):
    """Run ``script`` as ``python script`` would (its folder an import root, last), then send its end."""
    stream = os.environ.pop("REPOGYM_STREAM_FD", "")
    reporter, args = args[0], args[1:]
    sys.path.insert(0, FOLDER)
    __import__(reporter).install(stream)  # in place before the script imports anything of its own
    sys.path.remove(FOLDER)
    script, rest = args[0], args[1:]
    folder = os.path.dirname(os.path.realpath(script))
    if folder not in sys.path:
        sys.path.append(folder)
    sys.argv = [script, *rest]
    import runpy
    code = None
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    status = _exit_code(code)
    if stream:
        try:
            os.write(int(stream), ('{"finish": %d}\n' % status).encode())
        except (OSError, ValueError):
            pass
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # what the interpreter prints for sys.exit("message")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    if sys.argv[1:2] == ["--inner"]:
        sys.exit(inner(sys.argv[2], sys.argv[3:]))
    sys.exit(outer(sys.argv[1], sys.argv[2:]))
