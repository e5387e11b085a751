"""Where generated tasks come from: a local folder, a git URL, or a PyPI sdist, each made a git repository.

``materialize(source)`` returns a :class:`SourceRepo` in repogym's cache: a git repository whose HEAD is
the pristine project (the commit mutations start from). PyPI sources (``pypi:NAME==VERSION``) are
downloaded with pip (the sdist, no binary), unpacked and committed with fixed authors and dates, so the
same version gives the same commit everywhere.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from repogym.envs.core.errors import ConfigError
from repogym.envs.core.paths import cache_dir
from repogym.envs.tasks.fixed_git import fixed_git

_PYPI = re.compile(r"^pypi:([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.\-+!]+)$")
_IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".pytest_cache", "*.egg-info", ".tox", ".venv")


@dataclass(frozen=True)
class SourceRepo:
    """A project ready for task generation."""

    source: str
    name: str
    version: str
    path: Path
    """A git repository in the cache."""
    head: str
    """The pristine commit."""


def git(repo: Path, *args: str, input: bytes | None = None) -> str:
    """git in ``repo`` with repogym's fixed identity and dates."""
    return fixed_git(repo, *args, input=input, where="taskgen.git")


def materialize(source: str) -> SourceRepo:
    """The cached git repository for ``pypi:NAME==VERSION``, a git URL, or a local folder."""
    match = _PYPI.match(source)
    if match:
        return _from_pypi(source, *match.groups())
    if source.startswith("pypi:"):
        raise ConfigError(f"expected pypi:NAME==VERSION with an exact version, got {source!r}")
    if re.match(r"^(https?|git|ssh)://|^git@", source) or source.endswith(".git"):
        return _from_git_url(source)
    folder = Path(source).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"source {source!r} is not a folder, a git URL or pypi:NAME==VERSION")
    return _from_folder(source, folder.resolve())


def _target(kind: str, key: str) -> Path:
    path = cache_dir() / "taskgen" / kind / key
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _commit_tree(folder: Path, message: str) -> str:
    git(folder, "init", "-q", "-b", "main")
    git(folder, "add", "-A", "--force")
    git(folder, "commit", "-q", "--allow-empty", "-m", message)
    (folder / ".git" / "repogym-complete").write_text("ok\n")
    return git(folder, "rev-parse", "HEAD").strip()


def _from_pypi(source: str, name: str, version: str) -> SourceRepo:
    target = _target("pypi", f"{name.lower()}-{version}")
    if not (target / ".git" / "repogym-complete").exists():
        shutil.rmtree(target, ignore_errors=True)
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                                   "-d", tmp, f"{name}=={version}"], capture_output=True, text=True)
            if proc.returncode != 0:
                raise ConfigError(f"pip could not download the sdist of {name}=={version}: "
                                  f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'no output'}")
            archives = [p for p in Path(tmp).iterdir() if p.suffix in (".gz", ".zip", ".bz2")]
            if not archives:
                raise ConfigError(f"{name}=={version} has no sdist on the index")
            unpacked = Path(tmp) / "unpacked"
            _unpack(archives[0], unpacked)
            roots = [p for p in unpacked.iterdir() if p.is_dir()]
            shutil.copytree(roots[0] if len(roots) == 1 else unpacked, target, ignore=_IGNORE)
        _commit_tree(target, f"{name} {version} (sdist)")
    return SourceRepo(source, name, version, target, git(target, "rev-parse", "HEAD").strip())


def _unpack(archive: Path, dest: Path) -> None:
    dest.mkdir()
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(dest)
        return
    with tarfile.open(archive) as tar:
        extract_tar(tar, dest)


def extract_tar(tar: tarfile.TarFile, dest: Path) -> None:
    """Unpack an untrusted archive into ``dest``: tarfile's ``data`` filter, or, on Python before 3.11.4 (Debian
    bookworm's 3.11.2 has no filters), its plain files and folders that land inside ``dest``."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
        return
    root = Path(dest).resolve()
    tar.extractall(dest, members=[m for m in tar.getmembers() if (m.isfile() or m.isdir())
                                  and (root / m.name).resolve().is_relative_to(root)])


def _from_git_url(url: str) -> SourceRepo:
    import git as gitpython
    target = _target("git", hashlib.sha256(url.encode()).hexdigest()[:16])
    if not (target / ".git").exists():
        gitpython.Repo.clone_from(url, target)
    name = url.rstrip("/").removesuffix(".git").rsplit("/", 1)[-1]
    return SourceRepo(url, name, "", target, git(target, "rev-parse", "HEAD").strip())


def _from_folder(source: str, folder: Path) -> SourceRepo:
    if (folder / ".git").exists():
        if git(folder, "status", "--porcelain").strip():
            raise ConfigError(f"{folder} has uncommitted changes; commit them so the base commit is well defined")
        return SourceRepo(source, folder.name, "", folder, git(folder, "rev-parse", "HEAD").strip())
    digest = hashlib.sha256(str(folder).encode()).hexdigest()[:12]
    target = _target("folders", f"{folder.name}-{digest}")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(folder, target, ignore=_IGNORE)
    head = _commit_tree(target, f"{folder.name} (folder import)")
    return SourceRepo(source, folder.name, "", target, head)
