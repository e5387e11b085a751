"""The resident process inside every sandbox (stdlib only; runs under the sandbox's python3).

Started once per sandbox with the repository root as its argument, it reads one JSON request per line on
stdin and answers one JSON line on stdout. A command's own output travels inside the JSON string, so no
output of the agent's can forge the end of an answer. It owns what a plain ``exec`` cannot do cheaply:
timeouts that kill the command's whole process group, output limits, binary detection, file reads and
writes confined to the repository, loading a snapshot as a fresh one-commit repository, and resets.

A reset puts back the whole ``.git`` as :func:`load` left it (kept in this process's memory), not just the
files: commits, branches, tags, stash, notes, reflog entries and loose objects an episode made (its own
attempts at the fix among them) never reach the next episode. Nor does the tree's metadata: :func:`load`
records every path's mode and owner and sets its timestamps to fixed ones (:data:`BASE_MTIME_NS`,
:data:`BASE_ATIME_NS`); reset and load put those back and remove every extended attribute (ACLs among them),
on files and folders alike, the repository's root included (:func:`_put_back_metadata`). What they cannot put
back: inode numbers and change times (``st_ctime``), which the kernel alone sets: a path an episode changed
shows a newer ctime and, where reset had to write it again, a new inode number.

Out of the agent's reach: under docker it is started as root and keeps root as its real and saved uid
(its effective uid is the agent's, so the files it writes are the agent's), while every command runs
with all three uids the agent's: the agent cannot signal, trace or read this process. Under the local
backend every command runs in its own nested PID namespace (``REPOGYM_NEST=1``), where this process has
no pid to signal. It is also not dumpable, and commands are the OOM killer's first choice. Should it die
anyway, the host blames whoever could have done it (see ``RunnerClient._blame``).

Its own git calls (the tree id after an edit, the diff, reset) never run a program the agent named: each
runs as the agent (its uid, its nested namespace, a timeout) with the base's ``.git/config`` put back first,
everything else in ``.git`` that could name a program or point elsewhere removed (hooks, info/attributes,
commondir, worktrees, alternates; a ``.git`` that is a file or a link is replaced), no system or global
config, and hooks, fsmonitor, external diff and textconv switched off on the command line. Every child it
starts has dropped every uid to the agent's, so none can return to the runner's root.
"""

import base64
import ctypes
import io
import json
import os
import selectors
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time

ROOT = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else "/repo")
GIT_ID = ["-c", "user.name=repogym", "-c", "user.email=agent@repogym.invalid", "-c", "commit.gpgsign=false",
          "-c", "init.defaultBranch=main", "-c", "gc.auto=0"]
# The runner's own git never runs a program the agent named: no hooks, no fsmonitor, no pager; with the
# repository's config put back (see _sanitize_git), no filter, textconv or external diff driver is defined.
GIT_SAFE = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false",
            "-c", "core.attributesFile=/dev/null", "-c", "core.pager=cat", "-c", "protocol.allow=never"]
GIT_ENV = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": "/nonexistent", "LANG": "C.UTF-8",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
           "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}
GIT_TIMEOUT = 45.0  # per git call; a repository the agent made slow to stage is the agent's, never a hung runner
# What .git keeps between the runner's git calls; everything else in it (config, hooks, info/attributes,
# commondir, worktrees, alternates) is the agent's and is put back or removed first.
GIT_KEEP = {"HEAD", "index", "objects", "refs", "logs", "packed-refs", "ORIG_HEAD", "COMMIT_EDITMSG"}
GIT_KEEP_DIRS = {"objects", "refs", "logs"}
BASE_TAG = "repogym-base"
INSTALL_DIR = ".repogym-install"  # where a task's install step puts what pip makes (see _install)
TREE_ENV = ("SETUPTOOLS_SCM_PRETEND_VERSION",)  # what a load may set for every command of its tree
INSTALL_TIMEOUT = 900.0
# base commit id, tar of the pristine .git, its config, and the tree's metadata (see _put_back_metadata)
_BASE = {"commit": None, "git": None, "config": None, "meta": {}}
# Every path of the tree gets these times at load and back at reset: one modification time, so nothing shows
# when the base was loaded or what an episode touched; an access time in the future, which the kernel's
# default `relatime` never moves on a read (a read then leaves no trace to put back; `touch -a` is put back).
BASE_MTIME_NS = 946684800 * 10**9  # 2000-01-01T00:00:00Z
BASE_ATIME_NS = 4102444800 * 10**9  # 2100-01-01T00:00:00Z
# (inode, ctime) of each path after the last metadata pass: any change since (mode, owner, xattr, content,
# times) moves ctime, which no process can set, so only paths whose pair differs need more than their lstat.
# ctime ticks coarsely (a few ms, a second on some file systems): a change in the same tick as the pair was taken
# could keep it, so a pair whose ctime is later than _CLEAN_BEFORE (set when a reset ends) proves nothing.
_SETTLED = {}
_GIT_SETTLED = {}  # the same for .git's paths that _sync_git found the base's
_CLEAN_BEFORE = [0]
RACY_MARGIN_NS = 2 * 10**9  # over one tick of the coarsest timestamps (a second), and the coarse clock's lag
# The base's working tree as the runner holds it, for a reset without git (see _fast_tree): ``{path: (kind, data)}``,
# data a file's bytes (None past CONTENT_LIMIT: a change there takes git's reset) or a link's target.
_CONTENT = {}
_CONTENT_TRIED = [False]  # whether this base was looked at for it (a base it cannot be held for is not read again)
CONTENT_LIMIT = 32 << 20
_SCRATCH_MODES = {}  # each scratch folder's mode when first seen (before any command of the agent's)
LIBC = ctypes.CDLL(None, use_errno=True)
AGENT = {"uid": None, "prefix": []}  # the uid commands run as; the nested-namespace launcher, if any
# This process's OOM score file, held open from before it stops being dumpable (its /proc files are root's after),
# and its own score. Each command is spawned while this process's score is 1000, which the child keeps from the
# fork, and the score is put back at once: no Python of ours runs in the child, which can then start by vfork (or
# a fork in C), where a function run in the child cost as much as the command's own start (_spawn).
OOM = {"fd": None, "own": b"0"}


def _open_oom_score():
    """``{"fd", "own"}`` when this process can raise its OOM score to 1000 and put it back; else ``{}``."""
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        own = os.pread(fd, 16, 0).strip() or b"0"
        os.pwrite(fd, own, 0)  # as root (docker): also the floor it may come back down to without privilege
        os.pwrite(fd, b"1000", 0)
        os.pwrite(fd, own, 0)
    except OSError:
        os.close(fd)
        return {}
    return {"fd": fd, "own": own}


def _harden():
    """Put this process out of the agent's reach (see the module docstring); returns what holds."""
    OOM.update(_open_oom_score())
    uid = os.environ.pop("REPOGYM_AGENT_UID", "")
    if uid and os.getuid() == 0:
        uid = int(uid)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(0, uid, 0)  # effective: the agent; real and saved: root, which the agent cannot signal
        AGENT["uid"] = uid
    if os.environ.pop("REPOGYM_NEST", "") == "1" and shutil.which("bwrap"):
        prefix = ["bwrap", "--bind", "/", "/", "--dev-bind", "/dev", "/dev", "--unshare-pid", "--unshare-user",
                  "--die-with-parent", "--"]
        if subprocess.run(prefix + ["true"], capture_output=True).returncode == 0:
            AGENT["prefix"] = prefix
    try:
        LIBC.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no /proc/<pid>/fd, mem, environ
    except (OSError, AttributeError):
        pass
    return {"agent_uid": AGENT["uid"], "nested": bool(AGENT["prefix"])}


def _spawn(argv, **popen):
    """Start ``argv`` as the agent: all three uids the agent's, in its nested namespace (if any), in a session of
    its own, the OOM killer's first choice. (``user=`` sets the real and effective uid, so the saved one follows.)"""
    if OOM["fd"] is None or sys.version_info < (3, 9):  # (``user=`` is Python 3.9's)
        return subprocess.Popen(AGENT["prefix"] + argv, start_new_session=True, preexec_fn=_as_agent, **popen)
    os.pwrite(OOM["fd"], b"1000", 0)
    try:
        return subprocess.Popen(AGENT["prefix"] + argv, start_new_session=True, user=AGENT["uid"], **popen)
    finally:
        os.pwrite(OOM["fd"], OOM["own"], 0)


def _as_agent():
    """Runs in each command's child before exec where :func:`_spawn` cannot do without it: the agent's uid, if
    set; the OOM killer takes it first."""
    if AGENT["uid"] is not None:
        os.setresuid(AGENT["uid"], AGENT["uid"], AGENT["uid"])
    # The child inherits the runner's non-dumpable flag, which makes its /proc files root's: writable again
    # only once it is wholly the agent's (on docker, after the uid drop above), so that it may raise its score.
    LIBC.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        pass


def _inside(path):
    full = os.path.realpath(os.path.join(ROOT, path))
    if full != ROOT and not full.startswith(ROOT + os.sep):
        raise ValueError(f"path {path!r} is outside the repository")
    return full


def looks_binary(data):
    """NUL bytes, or more than 5% of the first 8 KiB not decodable as UTF-8."""
    sample = data[:8192]
    if b"\0" in sample:
        return True
    return sample.decode("utf-8", errors="replace").count("\ufffd") > len(sample) // 20 + 1


def _decode(data, total, limit):
    if looks_binary(data):
        return f"[binary output: {total} bytes, not shown]", total > 0
    text = data.decode("utf-8", errors="replace")
    return text, total > limit


def run(req):
    cmd, timeout = req["cmd"], float(req.get("timeout", 60))
    limit = int(req.get("limit", 65536))
    cwd = _inside(req.get("cwd") or ".")
    env = dict(os.environ)
    env.update(_BASE.get("env") or {})  # the loaded tree's (its version for setuptools-scm)
    env.update(req.get("env") or {})
    start = time.monotonic()
    proc = _spawn(["/bin/bash", "-c", cmd], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE)
    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    totals = {proc.stdout: 0, proc.stderr: 0}
    sel = selectors.DefaultSelector()
    for stream in bufs:
        os.set_blocking(stream.fileno(), False)
        sel.register(stream, selectors.EVENT_READ)
    timed_out, exited_at = False, None
    while sel.get_map():
        now = time.monotonic()
        if exited_at is None and proc.poll() is not None:
            exited_at = now
            _killpg(proc.pid)  # background children die with their command
        if exited_at is not None and now - exited_at > 0.2:
            break  # an escaped grandchild holds the pipe open; stop waiting for it
        if exited_at is None and now - start > timeout:
            timed_out = True
            _killpg(proc.pid)
            exited_at = now
        for key, _ in sel.select(timeout=0.05):
            chunk = os.read(key.fileobj.fileno(), 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            totals[key.fileobj] += len(chunk)
            room = limit + 1 - len(bufs[key.fileobj])
            if room > 0:
                bufs[key.fileobj] += chunk[:room]
    for stream in bufs:
        stream.close()
    code = proc.wait()
    duration = time.monotonic() - start
    out, out_cut = _decode(bytes(bufs[proc.stdout][:limit]), totals[proc.stdout], limit)
    err, err_cut = _decode(bytes(bufs[proc.stderr][:limit]), totals[proc.stderr], limit)
    answer = {"stdout": out, "stderr": err, "exit_code": -9 if timed_out else code, "timed_out": timed_out,
              "duration": duration, "stdout_bytes": totals[proc.stdout], "stderr_bytes": totals[proc.stderr],
              "truncated": out_cut or err_cut}
    if req.get("tree"):
        _progress(req)  # the command is done: the host gives the tree the time a `tree` request gets, no more
    return _with_tree(req, answer)


def _killpg(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def read(req):
    path = _inside(req["path"])
    if os.path.isdir(path):
        return {"error": "is_directory", "entries": sorted(os.listdir(path))[:1000]}
    if not os.path.exists(path):
        return {"error": "not_found"}
    limit = int(req.get("limit", 1 << 20))
    with _open_regular(path, os.O_RDONLY) as fh:
        data = fh.read(limit + 1)
    return {"data": base64.b64encode(data[:limit]).decode(), "size": os.path.getsize(path),
            "truncated": len(data) > limit}


def write(req):
    path = _inside(req["path"])
    if os.path.isdir(path):
        return {"error": "is_directory"}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) as fh:
        fh.write(base64.b64decode(req["data"]))
    return _with_tree(req, {})


def _with_tree(req, answer):
    """``answer`` with the tree id after the request, as a `tree` request would give it, when asked (a round trip
    fewer); where that fails, its error beside the answer, which stands."""
    if req.get("tree"):
        try:
            answer["tree"] = tree(req)["tree"]
        except Exception as exc:  # what a `tree` request would answer as its error
            answer["tree_error"] = f"{type(exc).__name__}: {exc}"
    return answer


def _open_regular(path, flags):
    """Open a regular file only: a FIFO or socket the agent put there must not block this process."""
    fd = os.open(path, flags | os.O_NONBLOCK, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{os.path.relpath(path, ROOT)} is not a regular file (a FIFO, socket or device)")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb" if flags == os.O_RDONLY else "wb")


def _git(*args, check=True):
    """Run git as the agent (its uid, its nested namespace), under the repository's pristine config only."""
    return _git_chain([list(args)], check=check)


def _git_chain(commands, check=True):
    """Run git commands one after the other (``&&``) in one process tree (one nested namespace, not one each);
    the output is the last command's."""
    common = ["git", *GIT_ID, *GIT_SAFE]
    argv = common + commands[0] if len(commands) == 1 else [
        "/bin/sh", "-c", " && ".join(shlex.join(common + command) for command in commands)]
    proc = _spawn(argv, cwd=ROOT, env=GIT_ENV, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=GIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        _killpg(proc.pid)
        proc.communicate()
        raise RuntimeError(f"git {commands[-1][0]} took longer than {GIT_TIMEOUT:.0f}s")
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(commands[-1])}: {err.decode(errors='replace').strip()}")
    return out.decode(errors="replace")


def _sanitize_git():
    """Make ``.git`` safe for the runner's git: a real folder, the base's config, nothing that names a program
    or points elsewhere (hooks, info/attributes, commondir, worktrees, alternates). Refs, index and objects
    stay: the agent's commits are its own business, and the diff is always taken against the base commit id."""
    dot_git = os.path.join(ROOT, ".git")
    if _BASE["git"] is None:
        return
    if os.path.islink(dot_git) or not os.path.isdir(dot_git) or os.path.islink(os.path.join(dot_git, "objects")):
        _restore_git()
        return
    for name in os.listdir(dot_git):
        full = os.path.join(dot_git, name)
        if name == "config" and not os.path.islink(full):
            continue  # compared with the base's below
        if name not in GIT_KEEP or os.path.islink(full):
            _remove(full)
        elif os.path.isdir(full) != (name in GIT_KEEP_DIRS) or not (os.path.isdir(full) or os.path.isfile(full)):
            _restore_git()  # a FIFO for the index, a folder for HEAD: git would hang or fail; start again
            return
    for name in ("alternates", "http-alternates"):
        _remove(os.path.join(dot_git, "objects", "info", name))
    config = os.path.join(dot_git, "config")
    # Left as it is (times too) when it is the base's: a file with those bytes, nothing else.
    try:
        st = os.lstat(config)
        same = stat.S_ISREG(st.st_mode) and st.st_size == len(_BASE["config"]) and _read_bytes(config) == _BASE["config"]
    except OSError:
        same = False
    if not same:
        _remove(config)
        with open(config, "wb") as fh:
            fh.write(_BASE["config"])


def _remove(path):
    """Remove a file, link or folder, even one the agent made unreadable; absent is fine."""
    if not (os.path.isdir(path) and not os.path.islink(path)):
        if os.path.lexists(path):
            os.unlink(path)
        return
    try:
        shutil.rmtree(path)
    except OSError:  # `chmod 000` somewhere below: open every folder up (they are the agent's), then again
        os.chmod(path, 0o700)
        for folder, dirs, _ in os.walk(path):
            for name in dirs:
                if not os.path.islink(os.path.join(folder, name)):
                    os.chmod(os.path.join(folder, name), 0o700)
        shutil.rmtree(path)


def _tree_env(given):
    """The variables of ``given`` (the host's, a load's or an exported state's) that a tree may set: names of
    :data:`TREE_ENV` only, values as strings."""
    return {k: str(v) for k, v in (given or {}).items() if k in TREE_ENV}


def load(req):
    """Replace the repository with a snapshot (a tar) committed as the one base commit; nothing of an earlier
    task survives (processes, scratch folders, IPC objects)."""
    killed = _kill_strays()
    _clean_scratch(req.get("scratch", []))
    _clear(ROOT)
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(req["tar"]))) as tar:
        for member in tar.getmembers():
            _inside(member.name)  # no absolute paths, no ../ escapes
            if member.issym() or member.islnk():
                _inside(os.path.join(os.path.dirname(member.name), member.linkname))
        tar.extractall(ROOT)
    _git("init", "-q")
    _git("config", "user.name", "agent")  # the agent's own commits work out of the box (config is put back)
    _git("config", "user.email", "agent@repogym.invalid")
    _git("add", "-A")
    _git("commit", "-q", "--allow-empty", "-m", "base")
    # The host's (the commit's version, the tree having no tags to give it): names of a fixed set only. Install
    # steps and every later command see them, as they would the tags in a clone.
    _BASE["env"] = _tree_env(req.get("tree_env"))
    products, exported = req.get("products"), None
    if products is not None:  # what the same install made in this environment before (the host's cache)
        _extract(products["tar"], ROOT, True)
        for path in products.get("deleted", []):
            full = os.path.join(_inside(os.path.dirname(path) or "."), os.path.basename(path))
            if os.path.lexists(full):
                os.remove(full)
    elif _install(req.get("install") or []) and req.get("export"):
        exported = _install_products()
    if products is not None or req.get("install"):
        # What the install made (metadata, generated modules, the editable hook) is part of the base: reset keeps it.
        _git("add", "-A", "-f")
        _git("commit", "-q", "--amend", "--allow-empty", "-m", "base")
        # The commit the install ran on is gone from history: drop it from the store too (the base is one commit).
        _git("reflog", "expire", "--expire=now", "--all")
        _git("prune", "--expire=now")
    _BASE["meta"] = _record_metadata()
    # The index holds each file's stat data from before the times changed: refresh it, or every later git call
    # would read every file again to find them unchanged.
    _git("update-index", "-q", "--refresh", check=False)
    _git("tag", BASE_TAG)
    _BASE["commit"], _BASE["git"] = _git("rev-parse", "HEAD").strip(), _tar_of(os.path.join(ROOT, ".git"))
    _BASE["members"] = None
    _TREE.clear()
    _GIT_SETTLED.clear()
    _hold_content(_git("ls-files", "-z", "-s").split("\0"))
    _CLEAN_BEFORE[0] = time.time_ns() - RACY_MARGIN_NS
    with open(os.path.join(ROOT, ".git", "config"), "rb") as fh:
        _BASE["config"] = fh.read()
    answer = {"commit": _BASE["commit"], "tree": _git("rev-parse", BASE_TAG + "^{tree}").strip(), "killed": killed}
    if exported is not None:
        answer["products"] = exported
    return answer


def _install_products():
    """What the install steps changed in the tree against the base commit, for the host to cache and hand to the
    next load of the same tree in the same environment: ``{"tar": the files they added or changed, "deleted":
    the paths they removed}``."""
    _git("add", "-A", "-f")
    fields = _git("diff", "--cached", "--name-status", "--no-renames", "-z", "HEAD").split("\0")
    deleted = []
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for status, path in zip(fields[0::2], fields[1::2]):
            if status == "D":
                deleted.append(path)
            else:
                tar.add(os.path.join(ROOT, path), arcname=path, recursive=False)
    return {"tar": base64.b64encode(buf.getvalue()).decode(), "deleted": deleted}


def _install(commands):
    """Run the task's install steps as the agent, in the fresh tree, before the base is tagged; True if any ran.

    pip installs into ``INSTALL_DIR`` (``PIP_TARGET``: the environment's own site-packages are read-only), from
    the environment's wheels only, without dependencies (the environment has them); a ``.pth`` hook in the
    environment adds that folder as a site folder to every interpreter that is not isolated (``-I``).
    """
    env = {"PIP_TARGET": os.path.join(ROOT, INSTALL_DIR), "PIP_NO_INDEX": "1", "PIP_NO_DEPS": "1",
           "PIP_NO_BUILD_ISOLATION": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1",
           "PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_ROOT_USER_ACTION": "ignore", "PIP_NO_INPUT": "1",
           # An editable install that puts the project's folder on sys.path, as `setup.py develop` did (and the
           # datasets' environments have): tools that map files to modules through sys.path (astroid) need it.
           "PIP_CONFIG_SETTINGS": "editable_mode=compat"}
    for command in commands:
        done = run({"cmd": command, "timeout": INSTALL_TIMEOUT, "limit": 4000, "env": env})
        if done["exit_code"] != 0:
            why = "timed out" if done["timed_out"] else f"exit {done['exit_code']}"
            raise RuntimeError(f"install step `{command}` failed ({why}): "
                               f"{(done['stdout'] + done['stderr']).strip()[-1500:]}")
    return bool(commands)


def _tar_of(folder):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(folder, arcname=".git")
    return buf.getvalue()


def _restore_git():
    """Replace ``.git`` with the one :func:`load` made (whatever the agent did to it)."""
    _remove(os.path.join(ROOT, ".git"))
    _GIT_SETTLED.clear()
    with tarfile.open(fileobj=io.BytesIO(_BASE["git"])) as tar:
        tar.extractall(ROOT)


SYNC_GIT_LIMIT = 64 << 20  # a larger .git is put back whole each reset rather than held a second time, parsed


def _git_members():
    """``{path under ROOT: (kind, mode, mtime, data)}`` of the base's ``.git`` (parsed once per base), or None when
    it holds what :func:`_sync_git` does not compare (devices, hard links) or is over :data:`SYNC_GIT_LIMIT`."""
    if _BASE.get("members") is None and _BASE["git"] is not None and len(_BASE["git"]) <= SYNC_GIT_LIMIT:
        members = {}
        with tarfile.open(fileobj=io.BytesIO(_BASE["git"])) as tar:
            for m in tar.getmembers():
                name = os.path.normpath(m.name)
                if m.isdir():
                    members[name] = ("dir", m.mode, m.mtime, None)
                elif m.isfile():
                    members[name] = ("file", m.mode, m.mtime, tar.extractfile(m).read())
                elif m.issym():
                    members[name] = ("link", m.mode, m.mtime, m.linkname)
                else:
                    return None
        _BASE["members"] = members
    return _BASE.get("members")


def _sync_git():
    """Make ``.git`` the base's again, writing only what differs: each file compared with the base's bytes, kind
    and mode; what the base lacks removed; what it has put back (with its time). The same end as
    :func:`_restore_git` (which it falls back to), at the cost of a read of ``.git`` instead of a rewrite."""
    members = _git_members()
    dot_git = os.path.join(ROOT, ".git")
    if members is None or os.path.islink(dot_git) or not os.path.isdir(dot_git):
        _restore_git()
        return
    seen = set()
    for folder, dirs, files in os.walk(dot_git):
        for name in sorted(dirs + files):
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, ROOT)
            st = os.lstat(full)
            want = members.get(rel)
            if want is not None and _settled(_GIT_SETTLED, rel, st):
                seen.add(rel)
                continue
            if want is None or not _holds(full, st, want[0], want[3]):
                _GIT_SETTLED.pop(rel, None)
                _remove(full)
                if name in dirs:
                    dirs.remove(name)
                continue
            seen.add(rel)
            if want[0] != "link" and stat.S_IMODE(st.st_mode) != stat.S_IMODE(want[1]):
                os.chmod(full, stat.S_IMODE(want[1]))
                st = os.lstat(full)
            _GIT_SETTLED[rel] = (st.st_ino, st.st_ctime_ns)
    for rel in sorted(members):  # folders before what they hold
        if rel in seen or rel == ".git":
            continue
        kind, mode, mtime, data = members[rel]
        full = os.path.join(ROOT, rel)
        _make(full, kind, data, stat.S_IMODE(mode))
        if kind == "file":
            os.chmod(full, stat.S_IMODE(mode))
            os.utime(full, (mtime, mtime))
    kind, mode, mtime, _ = members.get(".git", ("dir", 0o755, 0, None))
    os.chmod(dot_git, stat.S_IMODE(mode))


def _read_bytes(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:  # unreadable (the agent's chmod 000): not the base's, so it is replaced
        return None


def _kind(st):
    mode = st.st_mode
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "link" if stat.S_ISLNK(mode) else "other"


def _holds(full, st, kind, data):
    """Whether ``full`` (``st`` its lstat) is a ``kind`` holding ``data``: a file's bytes, a link's target."""
    return _kind(st) == kind and (kind == "dir" or (kind == "link" and os.readlink(full) == data)
                                  or (kind == "file" and st.st_size == len(data) and _read_bytes(full) == data))


def _make(full, kind, data, mode=0o700):
    """Make ``full``, where nothing is, a ``kind`` holding ``data``: a folder (of ``mode``), a link, or a file
    (:func:`_create`'s: never written through a link)."""
    if kind == "dir":
        os.mkdir(full, mode)
    elif kind == "link":
        os.symlink(data, full)
    else:
        _create(full, data)


def _settled(records, rel, st):
    """Whether ``rel`` (``st`` its lstat) is as a look at it found it last: same inode, same ctime, and that ctime
    old enough (before :data:`_CLEAN_BEFORE`) that no change could have left it."""
    return records.get(rel) == (st.st_ino, st.st_ctime_ns) and st.st_ctime_ns < _CLEAN_BEFORE[0]


def _hold_content(listed=None):
    """Hold the base's working tree (as it is now: just loaded, or just put back by git) for :func:`_fast_tree`:
    every folder, link and file (``listed``: git's ``ls-files -s -z`` fields, the paths git keeps; ``None``: every
    path now there), files' bytes up to :data:`CONTENT_LIMIT` in all. A submodule or a special file leaves nothing
    held: every reset then takes git's way."""
    _CONTENT.clear()
    _CONTENT_TRIED[0] = True
    kept = None
    if listed is not None:
        kept = set()
        for field in filter(None, listed):
            info, path = field.split("\t", 1)
            if info.startswith("160000") or "\ufffd" in path:  # a submodule, a name not UTF-8: git's business
                return
            kept.add(path)
    budget, held = CONTENT_LIMIT, {}
    for full, rel, st in _tree_entries(ROOT, "."):
        kind = _kind(st)
        if kind == "dir":
            held[rel] = ("dir", None)  # (a folder git does not keep is put back too, by _put_back_metadata)
        elif kept is not None and rel not in kept:
            continue  # untracked at load (ignored): git's clean removes it, so does _fast_tree
        elif kind == "link":
            held[rel] = ("link", os.readlink(full))
        elif kind == "file" and st.st_nlink == 1:
            data = None
            if st.st_size <= budget:
                data = _read_bytes(full)
                budget -= len(data or b"")
            held[rel] = ("file", data)
        else:
            return
    _CONTENT.update(held)


def _fast_tree():
    """Put the working tree back to the base held by :func:`_hold_content`, without git: what is not the base's
    removed, what differs from it rewritten, what is missing made. Only paths not :func:`_settled` are looked at;
    metadata is :func:`_put_back_metadata`'s. False, having changed nothing, when nothing is held or a path to put
    back was over the limit: git's reset and clean do it then."""
    if not _CONTENT:
        return False
    present, stale = set(), []
    for full, rel, st in _tree_entries(ROOT, "."):
        present.add(rel)
        if not _settled(_SETTLED, rel, st):
            stale.append((full, rel, st))
    missing = [rel for rel in _CONTENT if rel not in present]
    if any(_CONTENT[rel][1] is None and _CONTENT[rel][0] == "file"
           for rel in [*missing, *(rel for _, rel, _ in stale if rel in _CONTENT)]):
        return False
    for full, rel, st in stale:  # children before their folder
        want = _CONTENT.get(rel)
        # (A file with a second link is rewritten: the other name, wherever it is, keeps nothing of the base's.)
        if want is not None and (want[0] != "file" or st.st_nlink == 1) and _holds(full, st, *want):
            continue
        _remove(full)
        if want is not None:
            missing.append(rel)
    for rel in sorted(missing):  # folders before what they hold
        _make(os.path.join(ROOT, rel), *_CONTENT[rel])
    return True


def _clear(folder):
    try:
        os.chmod(folder, 0o755)
    except OSError:
        pass
    for name in os.listdir(folder):
        _remove(os.path.join(folder, name))


def _ipc_objects():
    """Whether any System V shared memory, semaphore or message queue exists in this IPC namespace."""
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                if len(fh.readlines()) > 1:  # a header line, then one per object
                    return True
        except OSError:
            pass
    return False


def _clean_scratch(folders):
    """Empty the scratch folders (/tmp, /dev/shm, home) and drop System V IPC objects: nothing carries over."""
    for scratch in folders:
        if os.path.isdir(scratch):
            for name in os.listdir(scratch):
                try:
                    _remove(os.path.join(scratch, name))
                except OSError:
                    pass
            # The folder itself (mode, extended attributes, times) is a channel too: as at its first sight.
            try:
                mode = _SCRATCH_MODES.setdefault(scratch, stat.S_IMODE(os.lstat(scratch).st_mode))
                _strip_xattrs(scratch)
                os.chmod(scratch, mode)
                os.utime(scratch, ns=(BASE_ATIME_NS, BASE_MTIME_NS))
            except OSError:
                pass
    if _ipc_objects() and shutil.which("ipcrm"):
        proc = _spawn(["ipcrm", "--all"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _killpg(proc.pid)
            proc.wait()


def reset(req):
    """Back to the base commit; kill stray processes; empty the scratch folders. Answers how many processes were
    killed and the seconds each phase took (``phases``)."""
    phases, mark = {}, [time.monotonic()]

    def lap(name):
        now = time.monotonic()
        phases[name] = round(now - mark[0], 6)
        mark[0] = now
    killed = _kill_strays()
    lap("kill_strays")
    if _BASE["git"] is None:
        raise RuntimeError("nothing loaded to reset to")
    _clean_scratch(req.get("scratch", []))
    lap("clean_scratch")
    try:
        _sync_git()
        lap("sync_git")
        if _fast_tree():
            lap("fast_tree")
        else:
            _git_chain([["reset", "-q", "--hard", _BASE["commit"]], ["clean", "-q", "-ffdx"]])
            lap("git_reset_clean")
        _put_back_metadata()
        lap("metadata")
    except (RuntimeError, OSError):  # a full disk, say: start from an empty folder and check the base out
        _clear(ROOT)
        _restore_git()
        _git("reset", "-q", "--hard", _BASE["commit"])
        _put_back_metadata()
        lap("from_empty")
    if not _CONTENT_TRIED[0]:  # (after a fork's import_state): the tree is the base's now, as git put it back
        _hold_content()
        lap("hold_content")
    _CLEAN_BEFORE[0] = time.time_ns() - RACY_MARGIN_NS  # every pair taken above is older than this look
    return {"killed": killed, "phases": phases}


def _tree_entries(folder, rel):
    """``(full path, path relative to ROOT, lstat)`` of every path under ``folder``, children before their
    folder (fixing a child leaves its folder's times alone), links never followed, ``.git`` left out (reset
    puts it back whole)."""
    with os.scandir(folder) as entries:
        children = [(entry.path, os.path.join(rel, entry.name) if rel != "." else entry.name,
                     entry.stat(follow_symlinks=False)) for entry in entries if not (rel == "." and entry.name == ".git")]
    for full, child, st in children:
        if stat.S_ISDIR(st.st_mode):
            yield from _tree_entries(full, child)
        yield full, child, st


def _strip_xattrs(path):
    """Remove every extended attribute of ``path`` (a POSIX ACL is one); True if any was there. Those this
    process may not remove (``security.*`` a host set) stay, as they were at load."""
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:  # a file system without them
        return False
    for name in names:
        try:
            os.removexattr(path, name, follow_symlinks=False)
        except OSError:
            pass
    return bool(names)


def _set_times(path, st):
    """Give ``path`` the fixed times unless ``st`` (its lstat) shows them already; True if it did."""
    if st.st_mtime_ns == BASE_MTIME_NS and st.st_atime_ns == BASE_ATIME_NS:
        return False
    os.utime(path, ns=(BASE_ATIME_NS, BASE_MTIME_NS), follow_symlinks=False)
    return True


def _record_metadata():
    """At load: strip every extended attribute, set the fixed times; each path's ``[mode, uid, gid]`` as it is."""
    meta = {}
    _SETTLED.clear()
    for full, rel, st in [*_tree_entries(ROOT, "."), (ROOT, ".", os.lstat(ROOT))]:
        _strip_xattrs(full)
        _set_times(full, st)
        meta[rel] = [st.st_mode, st.st_uid, st.st_gid]
        done = os.lstat(full)
        _SETTLED[rel] = (done.st_ino, done.st_ctime_ns)
    return meta


def _put_back_metadata():
    """After git put the base's content back: every path's mode, owner and times as :func:`load` recorded them,
    no extended attribute, and the base's folders git does not keep (empty ones) made again. A path whose
    inode and ctime are those the last pass left is only checked for its times (a read could have moved its
    access time, on a file system mounted `strictatime`); the rest are looked at in full."""
    meta = _BASE["meta"] or {}
    for rel in sorted(r for r, (mode, _, _) in meta.items() if stat.S_ISDIR(mode)):
        full = os.path.join(ROOT, rel)
        if not os.path.lexists(full):
            os.mkdir(full, 0o700)
    settled = {}
    for full, rel, st in [*_tree_entries(ROOT, "."), (ROOT, ".", os.lstat(ROOT))]:
        changed = not _settled(_SETTLED, rel, st)
        if changed:
            base = meta.get(rel)
            stripped = _strip_xattrs(full)
            if base is not None:
                mode, uid, gid = base
                if stat.S_IFMT(st.st_mode) != stat.S_IFMT(mode):
                    raise RuntimeError(f"{rel} is not what the base has there")  # start again from an empty tree
                if (st.st_uid, st.st_gid) != (uid, gid):
                    os.lchown(full, uid, gid)  # (the agent cannot chown; if it could, this fails: start again)
                if not stat.S_ISLNK(mode) and (stripped or stat.S_IMODE(st.st_mode) != stat.S_IMODE(mode)):
                    os.chmod(full, stat.S_IMODE(mode))
        if _set_times(full, st) or changed:
            st = os.lstat(full)
        settled[rel] = (st.st_ino, st.st_ctime_ns)
    _SETTLED.clear()
    _SETTLED.update(settled)


# Scratch folders a fork cannot copy: POSIX message queues live in their own file system, not as files.
UNCOPIABLE_SCRATCH = ("/dev/mqueue",)


def _archive(folder, base, not_copied, budget):
    """A tar (bytes) of ``folder``'s content, names relative to it, links kept as links. Written with this
    process's effective uid, the agent's under docker, so it holds nothing the agent could not read; what
    cannot be read or is not a file, folder, link or FIFO (a socket) is listed in ``not_copied``."""
    buf = io.BytesIO()
    def unreadable(exc):
        not_copied.append(f"{os.path.join(base, os.path.relpath(exc.filename or folder, folder))} "
                          f"({exc.strerror or exc})")

    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for top, dirs, files in os.walk(folder, onerror=unreadable):
            dirs.sort()
            for name in list(dirs) + sorted(files):
                path = os.path.join(top, name)
                arcname = os.path.relpath(path, folder)
                try:
                    info = tar.gettarinfo(path, arcname)
                    if info is not None and buf.tell() + info.size > budget[0]:
                        raise ValueError(f"the state is over the fork limit of {budget[1]} bytes "
                                         f"(at {os.path.join(base, arcname)})")
                    if info is None:
                        not_copied.append(f"{os.path.join(base, arcname)} (a socket)")
                    elif info.isreg():
                        with open(path, "rb") as fh:
                            tar.addfile(info, fh)
                    else:
                        tar.addfile(info)
                except OSError as exc:
                    not_copied.append(f"{os.path.join(base, arcname)} ({exc.strerror or exc})")
                    if name in dirs:
                        dirs.remove(name)
    return buf.getvalue()


EXPORTED_BASE = ("commit", "git", "config", "meta", "env")  # what import_state reads; the rest is derived again


def export_state(req):
    """Everything a fork needs to be this sandbox now: the repository with its whole ``.git``, the scratch
    folders, and the pristine base a reset goes back to. Running processes are not part of it."""
    not_copied = []
    scratch = {}
    limit = int(req.get("limit", 128 << 20))
    budget = [limit, limit]  # bytes left, the limit

    def archive(folder, base):
        data = _archive(folder, base, not_copied, budget)
        budget[0] -= len(data)
        return base64.b64encode(data).decode()

    for folder in req.get("scratch", []):
        if folder in UNCOPIABLE_SCRATCH:
            if os.path.isdir(folder) and os.listdir(folder):
                not_copied.append(f"{folder} (POSIX message queues)")
            continue
        if os.path.isdir(folder):
            scratch[folder] = archive(folder, folder)
    repo = archive(ROOT, ".")
    base = {k: base64.b64encode(v).decode() if isinstance(v, bytes) else v for k, v in _BASE.items()
            if k in EXPORTED_BASE}
    return {"repo": repo, "scratch": scratch, "base": base, "not_copied": not_copied}


def _extract(data, folder, repository):
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(data))) as tar:
        for member in tar.getmembers():
            if repository:
                _inside(member.name)  # no absolute paths, no ../ escapes
            elif os.path.isabs(member.name) or ".." in member.name.split("/"):
                raise ValueError(f"scratch path {member.name!r} is outside {folder}")
            member.mode &= 0o1777  # no setuid/setgid bits (what Python 3.12's "tar" filter does; images run older)
        # Links may point anywhere, as the agent's own could: written with the agent's effective uid, they reach
        # nothing it could not.
        tar.extractall(folder)


def import_state(req):
    """Become the sandbox :func:`export_state` described: strays killed, scratch and repository replaced."""
    killed = _kill_strays()
    _clean_scratch(req.get("clean", []))
    _clear(ROOT)
    _extract(req["repo"], ROOT, True)
    for folder, data in (req.get("scratch") or {}).items():
        if folder not in req.get("clean", []):
            raise ValueError(f"{folder} is not a scratch folder of this sandbox")
        _extract(data, folder, False)
    base = req["base"]
    _BASE["commit"] = base["commit"]
    _BASE["git"] = base64.b64decode(base["git"]) if base.get("git") else None
    _BASE["members"] = None
    _TREE.clear()
    _BASE["config"] = base64.b64decode(base["config"]) if base.get("config") else None
    _BASE["meta"] = base.get("meta") or {}
    _BASE["env"] = _tree_env(base.get("env"))
    _SETTLED.clear()  # another file system: every path is looked at in full on the next reset
    _GIT_SETTLED.clear()
    _CONTENT.clear()  # held again after the next reset (by git) puts the base back
    _CONTENT_TRIED[0] = False
    return {"killed": killed}


def _start_time(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[19])


def _real_uid(pid):
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    return -1


def _kill_strays():
    """Kill whatever the agent left running: under docker every process of the agent's uid (PID 1, the
    container's main process and this runner are root's, whenever they started); elsewhere every process
    started after this runner (bubblewrap's init started it)."""
    me, mine = os.getpid(), _start_time(os.getpid())
    killed = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if AGENT["uid"] is not None:
                stray = _real_uid(name) == AGENT["uid"]
            else:
                started = _start_time(name)  # in clock ticks, so a tie is broken by the pid
                stray = started > mine or (started == mine and int(name) > me)
            if stray:
                os.kill(int(name), signal.SIGKILL)
                killed += 1
        except (OSError, ValueError, IndexError):
            pass  # gone already, or not ours to signal
    return killed


def _staged(final, needs_base=True):
    """``git add -A`` then the git command ``final`` (a list of arguments), in one go; should the agent have
    broken or removed ``.git`` (``needs_base``: the base commit gone too), put back the base's and try again."""
    chain = [["add", "-A"], *([["cat-file", "-e", _BASE["commit"] or BASE_TAG]] if needs_base else []), final]
    try:
        _sanitize_git()
        return _git_chain(chain)
    except (RuntimeError, OSError):
        if _BASE["git"] is None:
            raise
        _restore_git()
        return _git_chain(chain)


STAGE_ROOT = "/run/repogym"  # docker: a root-owned tmpfs (mode 0711) the agent can neither list, fill nor chmod


def _as_root(fn, *args):
    """``fn(*args)`` with the effective uid root (the saved uid, see _harden), then the agent's again."""
    os.seteuid(0)
    try:
        return fn(*args)
    finally:
        os.seteuid(AGENT["uid"])


def stage(req):
    """A fresh folder for one test run in STAGE_ROOT, where the agent's commands cannot write: the harness stages
    its launcher there whatever the agent did to /tmp. Root makes it and opens it to the run (whose processes,
    the agent's, may write there); earlier runs' folders are removed first. ``{"folder": None}`` where there is
    no such place (the local backend: the agent's uid is the runner's).

    ``files`` (``[[name there, harness file beside this runner], ...]``) are copied in and ``key`` written to
    ``key`` (mode 0600), all as the agent's uid: the run's staging without a command of its own."""
    nonce = str(req.get("nonce", ""))
    files, key = req.get("files") or [], str(req.get("key", ""))
    plain = [str(name) for pair in files for name in pair]
    if any(not name or "/" in name or name.startswith(".") for name in plain) or (key and not key.isalnum()):
        raise ValueError(f"a stage names files by plain names and a key of letters and digits: {plain}")
    if AGENT["uid"] is None or not nonce.isalnum() or not os.path.isdir(STAGE_ROOT):
        return {"folder": None}
    for name in _as_root(os.listdir, STAGE_ROOT):
        old = os.path.join(STAGE_ROOT, name)
        try:  # what is in it is the agent's (removed as the agent); the folder is root's
            for entry in os.listdir(old):
                _remove(os.path.join(old, entry))
            _as_root(os.rmdir, old)
        except OSError:
            pass
    folder = os.path.join(STAGE_ROOT, f".repogym-{nonce}")
    _as_root(os.mkdir, folder, 0o700)
    _as_root(os.chmod, folder, 0o777)  # root lacks CAP_CHOWN here: opened, in a parent only root can list
    here = os.path.dirname(os.path.realpath(__file__))
    for name, source in files:
        with open(os.path.join(here, source), "rb") as fh:
            _create(os.path.join(folder, name), fh.read())
    if key:
        _create(os.path.join(folder, "key"), key.encode())
    return {"folder": folder}


def _create(path, data):
    """A new file of the agent's (this process's effective uid), readable by it alone; never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def diff(req):
    """The working tree against the base, new files included, as a git patch."""
    return {"diff": _staged(["diff", "--cached", "--binary", "--no-ext-diff", "--no-textconv", "--no-color",
                             _BASE["commit"] or BASE_TAG])}


# The last tree id and the signature of the files it was computed from (see tree).
_TREE = {}
# How recent a change time may be for its file to count as possibly changed again unseen: file times tick
# coarsely (a few ms), so a write in the same tick as a look leaves them equal. Wide, to be safe.
RACY_NS = 50_000_000


def _signature():
    """``(signature, settled)``: every file's ``(path, inode, size, mtime, ctime, mode)``, and only ``(path, inode,
    mode, size)`` of folders, and whether every file's ctime is older than :data:`RACY_NS` (no change can hide in a
    clock tick). Left out: what the runner's own git writes, the index and the object store (the content's id, what
    the signature stands for, never depends on them: the working tree and the rest of ``.git`` decide it)."""
    start = time.time_ns()
    entries, newest = [], 0
    dot_git = os.path.join(ROOT, ".git")
    index = os.path.join(dot_git, "index")
    for folder, dirs, files in os.walk(ROOT):
        if folder == dot_git and "objects" in dirs:
            dirs.remove("objects")
        dirs.sort()
        for name in sorted(files + dirs):
            full = os.path.join(folder, name)
            if full == index:
                continue
            try:
                st = os.lstat(full)
            except OSError:
                return None, False
            if stat.S_ISDIR(st.st_mode):  # what a folder holds is listed here: its own times only say it changed
                entries.append((full, st.st_ino, st.st_mode, st.st_size))
                continue
            entries.append((full, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode))
            newest = max(newest, st.st_ctime_ns)
    return tuple(entries), newest < start - RACY_NS


def tree(req):
    """The id of the working tree's content (new files included): cheaper than a diff, same change signal.

    Unchanged since the last call (every path's inode, size, times and mode the same, and none changed so recently
    that a change could hide in the same clock tick) gives the last id without running git."""
    signature, settled = _signature()
    if signature is not None and _TREE.get("signature") == signature and _TREE.get("settled"):
        return {"tree": _TREE["id"], "cached": True}
    _TREE.clear()
    tree_id = _staged(["write-tree"], needs_base=False).strip()  # the content's id needs no base commit
    # The look before git stands for what git staged: git writes only what the signature leaves out, and a change
    # made meanwhile (an escaped process) shows at the next look, or left it unsettled.
    _TREE.update(signature=signature, settled=settled, id=tree_id)
    return {"tree": tree_id}


OPS = {"run": run, "tree": tree, "read": read, "write": write, "load": load, "reset": reset, "diff": diff,
       "stage": stage,
       "export_state": export_state, "import_state": import_state,
       "ping": lambda req: {"pid": os.getpid(), **HARDENED}}
HARDENED = {}


def _answer(req, answer):
    answer["id"] = req.get("id")
    try:
        line = json.dumps(answer)
    except (TypeError, ValueError) as exc:  # a bug of the runner's: said as one, never a dead runner
        line = json.dumps({"ok": False, "error": f"runner bug: its answer to {req.get('op')!r} is not JSON: {exc}",
                           "id": req.get("id")})
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _progress(req):
    """Tell the host that ``req`` is past its first part (a line before its answer, with its id)."""
    _answer(req, {"progress": True})


def main():
    HARDENED.update(_harden())
    os.makedirs(ROOT, exist_ok=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            answer = OPS[req["op"]](req)
            answer["ok"] = True
        except Exception as exc:  # every failure is an answer, never a dead runner
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            req = req if isinstance(locals().get("req"), dict) else {}
        _answer(req, answer)


if __name__ == "__main__":
    main()
