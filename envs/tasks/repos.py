"""Where a task's repository comes from, and the snapshot of its base commit that sandboxes load.

A snapshot is the tree at ``base_commit`` as a tar archive, nothing more: no ``.git``, so the agent's
sandbox starts from one fresh commit and holds no history past (or before) the base.

A task's source, first match wins (docs/sources.md):

1. ``setup.source``: ``builtin:NAME``, ``path:DIR``, ``mirror:DIR`` or ``git:URL`` (:data:`SOURCE_KINDS`);
2. ``repo: repogym/NAME``: the bundled repository ``NAME``;
3. a mirror: a git repository ``OWNER__NAME`` (or bare ``OWNER__NAME.git``) in one of the folders of
   ``REPOGYM_MIRRORS`` (separated by ``os.pathsep``), searched in order; the first one found is used, and
   a base commit it lacks is an error (a mirror is never fetched into);
4. a clone of ``${REPOGYM_GIT_BASE_URL:-https://github.com}/OWNER/NAME.git`` in the cache, made once
   and fetched again when it lacks a task's base commit.

Guaranteed: ``repo`` is validated before it becomes a path or a URL (``owner/name``, GitHub's characters,
no ``..``, no leading ``-`` or ``.``), and a base commit starting with ``-`` is refused, so a task file
cannot inject git options or escape the mirror folders. Clones are renamed into place only once complete
(a killed clone leaves no half repository) and are made and fetched under a file lock. repogym reads a
mirror through a repository of its own that borrows the mirror's objects (``objects/info/alternates``):
the mirror's config, hooks and attributes are never used, and nothing is written to it. Every git call
runs with hooks and fsmonitor off and the ``ext::`` transport refused.

Not guaranteed: that a clone over the network finishes (git's own timeouts apply), that a mirror's
objects are intact, or that ``path:`` and ``builtin:`` sources ignore their own repository config
(they are read in place, as before, with hooks and fsmonitor off).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Callable, Iterator

from repogym.envs.core.errors import ConfigError, InfraError
from repogym.envs.core.paths import cache_dir
from repogym.envs.core.registry import Registry
from repogym.envs.sandbox.install import install_steps
from repogym.envs.sandbox.snapshot import RepoSnapshot
from repogym.envs.tasks.schema import Task

DEFAULT_GIT_BASE_URL = "https://github.com"
# GitHub's characters for owner and repository names; the first may not be '-' (an option) or '.' (a dot file).
_NAME_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
# A commit-ish never starts with '-' (it would be an option) nor holds whitespace or control characters.
_COMMIT = re.compile(r"[^-\s\x00-\x1f\x7f][^\s\x00-\x1f\x7f]*")
_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# Options on every git call: none of them lets a repository's config run a program.
_SAFE_GIT = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "protocol.ext.allow=never")
# Variables that would point git at another repository than the one named with -C.
_REPO_LOCATING_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
                      "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE")
# git's words for "that repository does not exist (or is private)": the task's fault, not the network's.
_NOT_FOUND = ("not found", "does not appear to be a git repository", "does not exist", "could not read username",
              "terminal prompts disabled", "authentication failed")


# -- naming ----------------------------------------------------------------------------------------------
def parse_repo(repo: str) -> tuple[str, str]:
    """``(owner, name)`` of ``owner/name`` (a trailing ``.git`` dropped); :class:`ConfigError` for anything else."""
    owner, sep, name = repo.partition("/") if isinstance(repo, str) else ("", "", "")
    name = name[:-4] if name.endswith(".git") else name
    if not sep or not all(_NAME_PART.fullmatch(part) and ".." not in part for part in (owner, name)):
        raise ConfigError(f"expected repo 'owner/name' (letters, digits, '-', '_', '.'; not starting with '-' "
                          f"or '.'; no '..'), got {repo!r}")
    return owner, name


def _checked_commit(commit: str) -> str:
    if not isinstance(commit, str) or not _COMMIT.fullmatch(commit):
        raise ConfigError(f"expected a commit id (not starting with '-', no spaces), got {commit!r:.80}")
    return commit


def mirror_folders() -> list[Path]:
    """The folders of ``REPOGYM_MIRRORS`` (``os.pathsep``-separated), in order; each must exist."""
    folders = [Path(p).expanduser() for p in os.environ.get("REPOGYM_MIRRORS", "").split(os.pathsep) if p.strip()]
    for folder in folders:
        if not folder.is_dir():
            raise ConfigError(f"REPOGYM_MIRRORS names {str(folder)!r}, which is not a folder")
    return folders


def find_mirror(repo: str) -> Path | None:
    """The mirror of ``repo`` (``OWNER__NAME`` or ``OWNER__NAME.git`` in a mirror folder), or None."""
    owner, name = parse_repo(repo)
    for folder in mirror_folders():
        for candidate in (folder / f"{owner}__{name}", folder / f"{owner}__{name}.git"):
            if not candidate.exists():
                continue
            if _objects_dir(candidate) is None:
                raise ConfigError(f"mirror {candidate} of repo {repo!r} is not a git repository (expected a "
                                  "folder holding .git/, or a bare repository)")
            return candidate.resolve()
    return None


def git_base_url() -> str:
    """Where repositories without a mirror are cloned from (``REPOGYM_GIT_BASE_URL``, default GitHub)."""
    return (os.environ.get("REPOGYM_GIT_BASE_URL") or DEFAULT_GIT_BASE_URL).rstrip("/")


def task_source(task: Task) -> str:
    """``KIND:WHERE`` for a task: ``setup.source``, else builtin, a mirror or a clone (see the module docstring)."""
    source = task.setup.get("source")
    if source:
        return str(source)
    try:
        owner, name = parse_repo(task.repo)
        if owner == "repogym":
            return f"builtin:{name}"
        mirror = find_mirror(task.repo)
    except ConfigError as e:
        raise ConfigError(f"task {task.instance_id}: {e}; or set setup.source to 'path:/a/git/repo' or "
                          "'git:URL'") from e
    if mirror is not None:
        return f"mirror:{mirror}"
    return f"git:{git_base_url()}/{owner}/{name}.git"


# -- git -------------------------------------------------------------------------------------------------
def _git(repo: Path | str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in _REPO_LOCATING_ENV}
    env["GIT_TERMINAL_PROMPT"] = "0"  # a missing GitHub repository asks for a password: fail instead
    return subprocess.run(["git", *_SAFE_GIT, "-C", str(repo), *args], capture_output=True, env=env)


def _stderr(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.decode(errors="replace").strip()


_HELD: set[tuple[str, str]] = set()  # (repository, commit) found there: a commit stays (every reset asks again)


def has_commit(repo: Path | str, commit: str) -> bool:
    """Whether the git repository ``repo`` holds ``commit`` (``git cat-file -e COMMIT^{commit}``; a yes is kept for
    the process, a no asked again)."""
    key = (str(repo), _checked_commit(commit))
    if key in _HELD:
        return True
    held = _git(repo, "cat-file", "-e", f"{key[1]}^{{commit}}").returncode == 0
    if held:
        _HELD.add(key)
    return held


def _remote_error(what: str, url: str, proc: subprocess.CompletedProcess) -> Exception:
    """A failed clone or fetch: ConfigError when the repository is missing, InfraError otherwise (the network)."""
    message = f"git {what} of {url} failed: {_stderr(proc)}"
    if any(word in _stderr(proc).lower() for word in _NOT_FOUND):
        return ConfigError(message + " (does the repository exist, and is it public?)")
    return InfraError("tasks.repos", message)


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """Hold an exclusive lock beside ``target``: one process at a time clones or fetches it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _make_once(target: Path, make: Callable[[Path], None]) -> Path:
    """``target``, built by ``make`` in a folder beside it and renamed into place; call under :func:`_locked`."""
    if target.exists():
        return target
    for stale in target.parent.glob(f".{target.name}.partial-*"):  # left by a killed build: we hold the lock
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        make(tmp)
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _clone(url: str) -> Path:
    """A no-checkout clone of ``url`` in the cache, made once."""
    if url.startswith("-"):
        raise ConfigError(f"expected a git URL, got {url!r}")
    target = cache_dir() / "clones" / hashlib.sha256(url.encode()).hexdigest()[:16]
    if target.exists():
        return target

    def clone(tmp: Path) -> None:
        proc = _git(tmp.parent, "clone", "--quiet", "--no-checkout", "--", url, str(tmp))
        if proc.returncode != 0:
            raise _remote_error("clone", url, proc)

    with _locked(target):
        return _make_once(target, clone)


def _fetch(clone: Path, url: str, commit: str) -> None:
    """Fetch ``origin`` into a cached clone that lacks ``commit``: every branch and tag, then the commit itself."""
    with _locked(clone):
        if has_commit(clone, commit):  # another process fetched it while we waited
            return
        proc = _git(clone, "fetch", "--quiet", "--tags", "origin")
        if proc.returncode != 0:
            raise _remote_error("fetch", url, proc)
        if not has_commit(clone, commit) and _FULL_SHA.fullmatch(commit):
            # On no branch (a pull request's commit, say): servers that allow it send it by id. When this
            # fails, the commit is missing, which the caller reports.
            _git(clone, "fetch", "--quiet", "origin", "--end-of-options", commit)


def _objects_dir(repo: Path) -> Path | None:
    """The object store of a repository with ``.git/`` or of a bare one; None for anything else."""
    for objects, marker in ((repo / ".git" / "objects", repo / ".git" / "HEAD"), (repo / "objects", repo / "HEAD")):
        if objects.is_dir() and marker.is_file():
            return objects.resolve()
    return None


def _mirror_view(mirror: Path) -> Path:
    """A bare repository of our own in the cache that reads ``mirror``'s objects and tags and nothing else of it."""
    objects = _objects_dir(mirror)
    if objects is None:
        raise ConfigError(f"mirror {mirror} is not a git repository")
    # (v2: with the mirror's tags, which give a commit its version: views made before had none)
    target = cache_dir() / "mirror-views" / hashlib.sha256(f"v2:{objects}".encode()).hexdigest()[:16]
    if target.exists():
        return target

    def make(tmp: Path) -> None:
        proc = _git(tmp, "-c", "init.templateDir=", "init", "--quiet", "--bare", ".")
        if proc.returncode != 0:
            raise InfraError("tasks.repos", f"git init of a view of mirror {mirror} failed: {_stderr(proc)}")
        (tmp / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (tmp / "objects" / "info" / "alternates").write_text(f"{objects}\n")
        (tmp / "packed-refs").write_text("".join(f"{sha} refs/tags/{name}\n" for name, sha in _tags(objects.parent)))

    with _locked(target):
        return _make_once(target, make)


_TAG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,200}")


def _tags(git_dir: Path) -> list[tuple[str, str]]:
    """``(name, object id)`` of a repository's tags, read from its files (``packed-refs``, ``refs/tags/``): no git
    runs in a user's mirror, whose config could name programs. Names that are not plain version-like words are
    left out."""
    found: dict[str, str] = {}
    try:
        packed = (git_dir / "packed-refs").read_text(errors="replace")
    except OSError:
        packed = ""
    for line in packed.splitlines():
        sha, _, ref = line.partition(" ")
        if ref.startswith("refs/tags/") and re.fullmatch(r"[0-9a-f]{40}", sha):
            found[ref[len("refs/tags/"):]] = sha
    folder = git_dir / "refs" / "tags"
    for path in folder.rglob("*") if folder.is_dir() else []:
        try:
            sha = path.read_text(errors="replace").strip()
        except OSError:
            continue
        if path.is_file() and re.fullmatch(r"[0-9a-f]{40}", sha):
            found[path.relative_to(folder).as_posix()] = sha
    return sorted((name, sha) for name, sha in found.items() if _TAG_NAME.fullmatch(name))


@functools.lru_cache(maxsize=1024)
def scm_version(repo: Path | str, commit: str) -> str | None:
    """The version setuptools-scm would give ``commit`` in a clone with its tags (``v5.0`` and 594 commits on:
    ``5.1.dev594``), from ``git describe``; None where no version tag reaches it. A task's tree is loaded as one
    commit with no tags, where setuptools-scm would say ``0.1.dev1``: projects that compare their own version
    (astropy's test plugins) then take the wrong branch."""
    from packaging.version import InvalidVersion, Version
    proc = _git(repo, "describe", "--tags", "--long", commit)
    match = re.fullmatch(r"(.+)-(\d+)-g[0-9a-f]+", proc.stdout.decode(errors="replace").strip()) \
        if proc.returncode == 0 else None
    if match is None:
        return None
    try:
        tag = Version(match.group(1).removeprefix("v").removeprefix("V"))
    except InvalidVersion:
        return None
    distance = int(match.group(2))
    if distance == 0:
        return str(tag)
    if tag.is_prerelease:  # 5.1.dev, 5.0rc1: a development release of the one it leads to
        return f"{tag.base_version}.dev{distance}"
    release = list(tag.release)
    release[-1] += 1  # setuptools-scm's default: the next release's development release
    return f"{'.'.join(map(str, release))}.dev{distance}"


SOURCE_KINDS: Registry[Callable[[str], Path]] = Registry("task source kind", {
    "builtin": "repogym.envs.tasks.builtin:build_repo",
    "path": Path,
    "mirror": Path,
    "git": _clone,
}, error=lambda message: ConfigError(f"{message} (a source is builtin:NAME, path:DIR, mirror:DIR or git:URL)"))
"""``KIND`` of a ``KIND:WHERE`` source -> the function making ``WHERE`` a local git repository."""


@functools.lru_cache(maxsize=None)
def _resolve(source: str) -> Path:
    # Cached: a source's local repository never moves. Whether it holds a commit is checked on every call
    # (see _locate), so this cache cannot hide a commit fetched since.
    kind, _, where = source.partition(":")
    return SOURCE_KINDS.resolve(kind)(where)


def clear_caches() -> None:
    """Forget resolved sources, snapshots and commits found (the files in the cache stay)."""
    _resolve.cache_clear()
    _HELD.clear()
    _snapshots.cache_clear()
    scm_version.cache_clear()


# -- a task's repository ---------------------------------------------------------------------------------
def _locate(task: Task) -> tuple[Path, Path]:
    """``(repository, where to read it)`` for a task, the base commit present (fetched when a clone lacks it)."""
    commit = task.base_commit
    try:
        _checked_commit(commit)
    except ConfigError as e:
        raise ConfigError(f"task {task.instance_id}: base_commit: {e}") from e
    source = task_source(task)
    kind, _, where = source.partition(":")
    context = f"task {task.instance_id} (repo {task.repo!r})"
    try:
        path = _resolve(source)
        reader = _mirror_view(path) if kind == "mirror" else path
        if kind == "git" and not has_commit(reader, commit):
            _fetch(path, where, commit)
    except InfraError as e:
        raise InfraError(e.where, f"{context}: {e.message}") from e
    except ConfigError as e:
        raise ConfigError(f"{context}: {e}") from e
    if not has_commit(reader, commit):
        looked = {"git": f"{where} (fetched into {path})", "mirror": f"mirror {path}",
                  "builtin": f"builtin repository {where!r} ({path})"}.get(kind, str(path))
        raise ConfigError(f"{context}: base commit {commit} is not in {looked}")
    return path, reader


def repo_path(task: Task) -> Path:
    """A local git repository that holds the task's base commit (for a mirror, the mirror itself)."""
    return _locate(task)[0]


def snapshot(task: Task) -> RepoSnapshot:
    """The tree at the task's base commit, with the task's install steps (``setup.pre_install``, ``setup.install``)
    and, where the repository's tags give the commit a version (:func:`scm_version`), that version for setuptools-scm
    (``SETUPTOOLS_SCM_PRETEND_VERSION``) in the install steps and every later command: a project that asks git for its
    version at import (astropy) gets it too."""
    reader = _locate(task)[1]
    tree = snapshot_of(str(reader), task.base_commit)
    steps = install_steps(task.setup)
    if not steps:
        return tree
    version = scm_version(reader, task.base_commit)
    env = (("SETUPTOOLS_SCM_PRETEND_VERSION", version),) if version else ()
    digest = hashlib.sha256("\n".join(steps + tuple(f"{k}={v}" for k, v in env)).encode()).hexdigest()[:12]
    return dataclasses.replace(tree, key=f"{tree.key}+install:{digest}", install=steps, tree_env=env)


SNAPSHOT_CACHE_BYTES = int(os.environ.get("REPOGYM_SNAPSHOT_CACHE_MB", "256")) << 20
"""Bytes of snapshots kept in memory per process (``REPOGYM_SNAPSHOT_CACHE_MB``, default 256): by size, not count, so
a run over Django- or sympy-size trees (tens of MB each) holds a few of them, not 64."""


class _SnapshotCache:
    """The most recently used snapshots, up to ``budget`` bytes of tar (one larger than that is not kept)."""

    def __init__(self, budget: int):
        self.budget, self.size = budget, 0
        self._items: collections.OrderedDict[tuple[str, str], RepoSnapshot] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> RepoSnapshot | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: tuple[str, str], snap: RepoSnapshot) -> None:
        with self._lock:
            if key in self._items or len(snap.tar) > self.budget:
                return
            self._items[key] = snap
            self.size += len(snap.tar)
            while self.size > self.budget:
                _, dropped = self._items.popitem(last=False)
                self.size -= len(dropped.tar)

    def cache_clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.size = 0


_snapshots = _SnapshotCache(SNAPSHOT_CACHE_BYTES)


def snapshot_of(repo: str, commit: str) -> RepoSnapshot:
    """The tree of ``repo`` at ``commit`` (cached up to :data:`SNAPSHOT_CACHE_BYTES`; a failure is not)."""
    found = _snapshots.get((repo, commit))
    if found is not None:
        return found
    if not has_commit(repo, commit):
        raise ConfigError(f"commit {commit} is not in the git repository {repo}")
    proc = _git(repo, "archive", "--format=tar", commit)
    if proc.returncode != 0:
        raise InfraError("tasks.repos", f"git archive {commit} in {repo} failed: {_stderr(proc)}")
    snap = RepoSnapshot(key=f"{repo}@{commit}", tar=proc.stdout)
    _snapshots.put((repo, commit), snap)
    return snap

