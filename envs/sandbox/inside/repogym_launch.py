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
  "sha256": of the stream, "summary": the run's last summary line, "warm": whether a warm process ran it}``,
  then the stream itself, and removes its folder. The summary is pytest's last summary line; for unittest
  ``Ran N tests in Xs; OK`` or ``...; FAILED (failures=1)``; for sympy its ``tests finished: ... in X seconds`` line. The host trusts the stream only if its hash matches
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

A **warm** inner process (pytest modes only): ``--serve NAME MODE`` (run as the outer is, with the environment a run
will have) starts ``python -P <this file> --warm NAME``: an inner process that imports pytest and waits, in a session
of its own, on the abstract unix socket ``NAME``; it prints nothing and returns once that process is ready. The
harness starts one in a grading sandbox before the agent's patch is applied (nothing of the agent's has run
there), so pytest's start-up is paid while the agent works. A run whose environment holds ``REPOGYM_WARM=NAME``
then hands the warm process its two pipes and arguments instead of starting an inner process: the warm process
takes the first connection only (it stops listening at once), checks that the run's interpreter and whole
environment are the ones it started with (else it refuses and the outer starts an inner process as without it),
forks the run (its own session, dumpable again, the run's environment, the same ``sys.path`` the inner process
gets) and sends back the run's wait status when it ends, killing what the run left behind. The outer reads that
status where it would have read its child's; a warm process killed before it sends one leaves the frame with no
exit status (the host then reads no frame: fails closed). Whatever fails before the fork is refused (nothing of the
agent's has run yet); once the pipes went over without a refusal the outer never starts a second run on them.

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
# The outer's environment names a warm inner process here (see the docstring); the inner never sees it.
WARM_ENV = "REPOGYM_WARM"
PYTEST_MODES = ("--module", "--script")


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


def _dumpable(flag):
    """PR_SET_DUMPABLE: 0, so code under test (same uid) cannot read this process's memory, environment or fds;
    1, a forked run's /proc files its own again."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, flag, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _text(data):
    """Valid UTF-8 without NULs, so the runner never takes the output (and the frame) for binary."""
    return bytes(data).decode("utf-8", "backslashreplace").replace("\0", "\\0").replace("\ufffd", "?")


def _spawn(argv, env, output_w, stream_w, setsid=False):
    """Start the inner process: stdin from /dev/null, stdout and stderr into ``output_w`` (``None``: /dev/null),
    ``stream_w`` kept (under its own number), no other descriptor of this process, the signals Python ignores back
    to their defaults."""
    import signal

    keep = {0, 1, 2, stream_w}
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
    if output_w is None:
        actions += [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
    else:
        actions += [(os.POSIX_SPAWN_DUP2, output_w, 1), (os.POSIX_SPAWN_DUP2, output_w, 2)]
    for fd in os.listdir("/proc/self/fd"):  # an inherited descriptor would reach the tests (Popen's close_fds)
        if fd.isdigit() and int(fd) not in keep:
            try:
                if os.get_inheritable(int(fd)):
                    actions.append((os.POSIX_SPAWN_CLOSE, int(fd)))
            except OSError:
                pass
    os.set_inheritable(stream_w, True)
    defaults = [getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ", "SIGXFZ") if hasattr(signal, name)]
    return os.posix_spawn(argv[0], argv, env, file_actions=actions, setsigdef=defaults, setsid=setsid)


def _inner_argv(*args):
    """The inner process's command line: this file under ``-P`` (3.11+; before it the launcher takes its own
    folder off ``sys.path`` itself, above)."""
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe_path, os.path.realpath(__file__), *args]


def _inner_env():
    """The inner process's environment, less the stream's descriptor (a warm process's too: the same for every run of
    a sandbox, so a warm one can tell a run it may serve)."""
    env = dict(os.environ)
    env.pop(WARM_ENV, None)
    # The harness's prefix (a read-only warm one, see envs/sandbox/bytecode.py), else one of this run's own.
    prefix = env.pop("REPOGYM_BYTECODE", "") or os.path.join(FOLDER, "pycache")
    env.update({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": prefix,
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": "", "PYTEST_PLUGINS": ""})
    env.pop("PYTHONSTARTUP", None)
    return env


class _Spawned:
    """The inner process, this process's child."""

    def __init__(self, pid):
        self.pid, self.done, self.status = pid, False, None

    def poll(self):
        done, raw = os.waitpid(self.pid, os.WNOHANG)
        if done:
            self.done, self.status = True, os.waitstatus_to_exitcode(raw)
        return self.done

    def wait(self):
        if not self.done:
            self.done, self.status = True, os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])


class _Handed:
    """A run handed to a warm inner process, whose wait status comes back on the connection (``None`` if it never
    does: the warm process was killed)."""

    def __init__(self, sock, pending):
        self.sock, self.done, self.status, self._buf = sock, False, None, pending

    @classmethod
    def start(cls, name, mode, args, env, output_w, stream_w):
        """The run handed to the warm process ``name``; ``None`` when there is none or it refuses the run (the run
        was not made: the caller starts its own). Once the pipes went over without a refusal the run may be under
        way: never ``None`` then (an answer that never comes is a run with no status, which fails closed)."""
        import json
        import socket

        sock, sent, answer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), False, b""
        try:
            sock.settimeout(30)
            sock.connect("\0" + name)
            data = json.dumps({"executable": sys.executable, "mode": mode, "args": args, "env": env,
                               "folder": FOLDER}).encode()
            socket.send_fds(sock, [len(data).to_bytes(8, "big")], [output_w, stream_w])
            sent = True
            sock.sendall(data)
            while b"\n" not in answer:
                chunk = sock.recv(64)
                if not chunk:
                    break
                answer += chunk
        except OSError:
            pass
        word, newline, pending = answer.partition(b"\n")
        if not sent or (newline and word == b"refused"):
            sock.close()
            return None
        handed = cls(sock, b"")
        if word == b"started" and newline:
            sock.setblocking(False)
            handed._take(pending, eof=False)
        else:
            handed._take(b"", eof=True)  # no word on the run: no status
        return handed

    def _take(self, chunk, eof):
        self._buf += chunk
        line, newline, _ = self._buf.partition(b"\n")
        if not newline and not eof:
            return
        self.done = True
        try:
            self.status = os.waitstatus_to_exitcode(int(line)) if newline else None
        except ValueError:
            self.status = None
        self.sock.close()

    def poll(self):
        if not self.done:
            try:
                chunk = self.sock.recv(64)
            except BlockingIOError:
                return False
            except OSError:
                chunk = b""
            self._take(chunk, eof=not chunk)
        return self.done

    def wait(self):
        if not self.done:
            self.sock.setblocking(True)
        while not self.done:
            try:
                chunk = self.sock.recv(64)
            except OSError:
                chunk = b""
            self._take(chunk, eof=not chunk)


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
    _dumpable(0)
    stream_r, stream_w = os.pipe()
    output_r, output_w = os.pipe()
    warm = os.environ.get(WARM_ENV, "")
    env = _inner_env()
    if mode not in SCRIPT_MODES:
        args = environment_plugins(args) + args
    child = _Handed.start(warm, mode, args, env, output_w, stream_w) if warm and mode in PYTEST_MODES else None
    if child is None:
        env["REPOGYM_STREAM_FD"] = str(stream_w)
        child = _Spawned(_spawn(_inner_argv("--inner", mode, *args), env, output_w, stream_w))
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
    drain_until = None
    while sel.get_map():
        if drain_until is None and not child.done:
            if child.poll():
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
    child.wait()
    # The stream goes out after the frame line, as text (what the host reads is what was hashed): no file that an
    # escaped grandchild could rewrite, and no second command to read one.
    data = _text(stream).encode()
    frame = {"exit": child.status, "sha256": hashlib.sha256(data).hexdigest(), "summary": summary.text,
             "warm": isinstance(child, _Handed)}
    sys.stdout.buffer.write(_text(output).encode())
    sys.stdout.buffer.write(f"\n{key} {json.dumps(frame)}\n".encode() + data)
    sys.stdout.flush()
    _remove_folder()
    return 0


def inner(mode, args, folder=FOLDER):
    """The tests, in this process; ``folder``: the run's, holding the report plugin."""
    if mode in SCRIPT_MODES:
        return inner_script(mode, args)
    sys.path.insert(0, folder)  # the report plugin, named with -p
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


def serve(name, mode):
    """``--serve NAME MODE`` (in the outer's place): start the warm inner process ``NAME`` for runs of ``MODE`` with
    the environment a run gets, in a session of its own; exit 0 once it is ready (1 if it never is)."""
    import select

    if mode not in PYTEST_MODES or not name.isalnum() or sys.version_info < (3, 9):  # (socket.send_fds is 3.9's)
        return 2
    ready_r, ready_w = os.pipe()
    _spawn(_inner_argv("--warm", name, mode, str(ready_w)), _inner_env(), None, ready_w, setsid=True)
    os.close(ready_w)
    answer = b""
    while b"\n" not in answer and select.select([ready_r], [], [], 120)[0]:
        chunk = os.read(ready_r, 16)
        if not chunk:
            break
        answer += chunk
    _remove_folder()  # the warm process has read this file: it needs nothing here
    return 0 if answer == b"ready\n" else 1


def warm(name, mode, ready_fd):
    """``--warm NAME MODE FD``: the warm inner process (the module's docstring). Returns only in the run it forks."""
    import importlib
    import json
    import socket
    import threading

    started_with = dict(os.environ)
    # What the run will start with runpy, by name (the tests' environment's pytest): the start-up paid ahead.
    importlib.import_module("pytest")

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(1)
    _dumpable(0)
    os.write(ready_fd, b"ready\n")
    os.close(ready_fd)
    conn, _ = listener.accept()
    listener.close()  # the first connection only: nothing after it reaches this process
    # Until the fork nothing of the agent's runs: whatever fails here is refused, and the outer runs the tests
    # itself. After it, the answer is "started", then the run's wait status: never a second run.
    try:
        conn.settimeout(30)
        size, fds, _, _ = socket.recv_fds(conn, 8, 2)
        data = b""
        while len(data) < int.from_bytes(size, "big"):
            chunk = conn.recv(int.from_bytes(size, "big") - len(data))
            if not chunk:
                raise OSError("the run's request was cut short")
            data += chunk
        request = json.loads(data)
        if (len(fds) != 2 or not isinstance(request, dict) or request.get("executable") != sys.executable
                or request.get("mode") != mode or request.get("env") != started_with):
            raise ValueError("not a run this process can make")
        output_w, stream_w = fds
        args, folder = [str(a) for a in request["args"]], str(request["folder"])
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
    except Exception:
        try:
            conn.sendall(b"refused\n")
        finally:
            os._exit(0)
    if pid == 0:
        conn.close()
        _become_run(request, output_w, stream_w)
        sys.exit(inner(mode, args, folder))
    try:
        conn.sendall(b"started\n")
    except OSError:  # the outer is gone: so is the run
        _kill_group(pid)
        os._exit(0)
    os.close(output_w)
    os.close(stream_w)

    def reap():
        raw = os.waitpid(pid, 0)[1]
        _kill_group(pid)  # what the run left behind dies with it, as a command's background children do
        try:
            conn.sendall(b"%d\n" % raw)
        except OSError:
            pass
        os._exit(0)

    threading.Thread(target=reap, daemon=True).start()
    try:
        conn.settimeout(None)
        while conn.recv(64):
            pass
    except OSError:
        pass
    _kill_group(pid)  # the outer went first (killed, or its command timed out): the run goes with it
    threading.Event().wait(30)
    os._exit(0)


def _become_run(request, output_w, stream_w):
    """In the forked run: a session of its own, dumpable again (its /proc files its own), stdin from /dev/null,
    stdout and stderr into ``output_w``, ``stream_w`` kept, no other descriptor, and the run's environment."""
    os.setsid()
    _dumpable(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(output_w, 1)
    os.dup2(output_w, 2)
    for fd in [int(fd) for fd in os.listdir("/proc/self/fd") if fd.isdigit()]:
        if fd > 2 and fd != stream_w:
            try:
                os.close(fd)
            except OSError:
                pass
    os.set_inheritable(stream_w, True)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in request["env"].items()})
    os.environ["REPOGYM_STREAM_FD"] = str(stream_w)


def _kill_group(pid):
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


if __name__ == "__main__":
    if sys.argv[1:2] == ["--inner"]:
        sys.exit(inner(sys.argv[2], sys.argv[3:]))
    if sys.argv[1:2] == ["--warm"]:
        sys.exit(warm(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    if sys.argv[1:2] == ["--serve"]:
        sys.exit(serve(sys.argv[2], sys.argv[3]))
    sys.exit(outer(sys.argv[1], sys.argv[2:]))
