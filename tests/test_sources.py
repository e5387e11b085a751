"""A task's ``repo: owner/name`` resolves to git without edits: a mirror folder first, then a cached clone.

Real git throughout: repositories, mirrors and ``file://`` remotes are built in ``tmp_path``; the cache is
the test's own (``REPOGYM_CACHE``), never the user's.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from repogym.envs.core.errors import ConfigError, InfraError
from repogym.envs.tasks import repos
from repogym.envs.tasks.repos import clear_caches, parse_repo, repo_path, snapshot, task_source
from repogym.envs.tasks.schema import Task

IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **IDENTITY}).stdout.strip()


def commit_file(repo: Path, text: str) -> str:
    """Commit ``widget.py`` holding ``text``; the new commit's id."""
    (repo / "widget.py").write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", text)
    return git(repo, "rev-parse", "HEAD")


def make_repo(path: Path) -> tuple[str, str]:
    """A repository with two commits of ``widget.py``: ``("v1", "v2")`` commit ids."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    return commit_file(path, "v = 1\n"), commit_file(path, "v = 2\n")


def task(commit: str, repo: str = "acme/widget", **setup) -> Task:
    return Task(instance_id="acme__widget-1", repo=repo, base_commit=commit, problem_statement="fix it", setup=setup)


def widget(snap) -> str:
    with tarfile.open(fileobj=io.BytesIO(snap.tar)) as tar:
        return tar.extractfile("widget.py").read().decode()


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Our own cache, no mirrors, no base URL, and no resolution remembered from another test."""
    monkeypatch.setenv("REPOGYM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("REPOGYM_MIRRORS", raising=False)
    monkeypatch.delenv("REPOGYM_GIT_BASE_URL", raising=False)
    clear_caches()
    yield
    clear_caches()


@pytest.fixture
def remote(tmp_path, monkeypatch):
    """A ``file://`` base URL holding ``acme/widget.git``; returns the working repository that pushes to it."""
    work = tmp_path / "work"
    make_repo(work)
    bare = tmp_path / "remote" / "acme" / "widget.git"
    bare.parent.mkdir(parents=True)
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    git(work, "remote", "add", "origin", str(bare))
    monkeypatch.setenv("REPOGYM_GIT_BASE_URL", f"file://{tmp_path / 'remote'}/")
    return work


# -- mirrors -----------------------------------------------------------------------------------------------
def test_a_repo_resolves_through_a_mirror_folder_at_its_base_commit(tmp_path, monkeypatch):
    mirror = tmp_path / "mirrors" / "acme__widget"
    v1, _ = make_repo(mirror)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("REPOGYM_MIRRORS", f"{tmp_path / 'empty'}{os.pathsep}{tmp_path / 'mirrors'}")
    monkeypatch.setenv("REPOGYM_GIT_BASE_URL", "http://127.0.0.1:1")  # a clone would fail: the mirror must win

    assert task_source(task(v1)) == f"mirror:{mirror.resolve()}"
    assert repo_path(task(v1)) == mirror.resolve()  # what a local sandbox hides: the mirror's history
    assert widget(snapshot(task(v1))) == "v = 1\n"  # the base commit's tree, not the mirror's HEAD


def test_a_commit_gets_the_version_its_tags_give_through_a_mirror_and_its_install_steps_see_it(tmp_path, monkeypatch):
    mirror = tmp_path / "mirrors" / "acme__widget"
    v1, v2 = make_repo(mirror)
    git(mirror, "tag", "-a", "v1.4.0", "-m", "release", v1)  # annotated, then packed
    git(mirror, "pack-refs", "--all")
    v3 = commit_file(mirror, "v = 3\n")
    git(mirror, "tag", "2.0rc1", v3)  # lightweight, loose
    v4 = commit_file(mirror, "v = 4\n")
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "mirrors"))
    view = repos._locate(task(v1))[1]
    assert view != mirror.resolve()  # read through the view, which got the mirror's tags from its files
    assert [repos.scm_version(view, c) for c in (v1, v2, v3, v4)] == ["1.4.0", "1.4.1.dev1", "2.0rc1", "2.0.dev1"]
    installing = snapshot(task(v2, install="python -m pip install -e ."))
    assert installing.tree_env == (("SETUPTOOLS_SCM_PRETEND_VERSION", "1.4.1.dev1"),)
    assert snapshot(task(v3, install="python -m pip install -e .")).key != installing.key
    assert snapshot(task(v2)).tree_env == ()  # nothing installs: no version to give
    untagged = tmp_path / "untagged"
    _, last = make_repo(untagged)
    assert repos.scm_version(untagged, last) is None


def test_a_bare_mirror_named_owner__name_dot_git_resolves(tmp_path, monkeypatch):
    _, v2 = make_repo(tmp_path / "work")
    git(tmp_path, "clone", "-q", "--bare", str(tmp_path / "work"), str(tmp_path / "mirrors" / "acme__widget.git"))
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "mirrors"))
    assert widget(snapshot(task(v2))) == "v = 2\n"


def test_a_mirror_s_config_and_attributes_never_run_a_program(tmp_path, monkeypatch):
    mirror = tmp_path / "mirrors" / "acme__widget"
    mirror.mkdir(parents=True)
    git(mirror, "init", "-q", "-b", "main")
    (mirror / ".gitattributes").write_text("*.py filter=evil\n")
    base = commit_file(mirror, "v = 1\n")
    ran = tmp_path / "ran"
    git(mirror, "config", "filter.evil.smudge", f"touch {ran}; cat")
    git(mirror, "config", "core.fsmonitor", f"touch {ran}")
    # Control: git run in the mirror itself does run the smudge filter, so the check below can fail.
    subprocess.run(["git", "-C", str(mirror), "archive", "--format=tar", base], check=True, capture_output=True)
    assert ran.exists()
    ran.unlink()
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "mirrors"))
    before = sorted(p.relative_to(mirror) for p in mirror.rglob("*"))

    assert widget(snapshot(task(base))) == "v = 1\n"
    assert not ran.exists()
    assert sorted(p.relative_to(mirror) for p in mirror.rglob("*")) == before  # nothing written to the mirror


def test_a_mirror_without_the_base_commit_names_repo_commit_and_mirror(tmp_path, monkeypatch):
    mirror = tmp_path / "mirrors" / "acme__widget"
    make_repo(mirror)
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "mirrors"))
    missing = "1" * 40
    with pytest.raises(ConfigError) as caught:
        snapshot(task(missing))
    message = str(caught.value)
    assert "acme/widget" in message and missing in message and str(mirror.resolve()) in message
    assert "fatal" not in message  # ours, not git's raw stderr


def test_a_mirror_folder_that_does_not_exist_or_a_mirror_that_is_no_repository_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="REPOGYM_MIRRORS names .*nowhere"):
        task_source(task("1" * 40))
    (tmp_path / "mirrors" / "acme__widget").mkdir(parents=True)
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "mirrors"))
    with pytest.raises(ConfigError, match="acme__widget .*not a git repository"):
        task_source(task("1" * 40))


# -- clones ------------------------------------------------------------------------------------------------
def test_without_a_mirror_the_repo_is_cloned_once_into_the_cache(tmp_path, remote):
    v1 = git(remote, "rev-parse", "HEAD~1")
    url = f"file://{tmp_path / 'remote'}/acme/widget.git"
    assert task_source(task(v1)) == f"git:{url}"
    assert widget(snapshot(task(v1))) == "v = 1\n"
    clone = repo_path(task(v1))
    assert clone.parent == tmp_path / "cache" / "clones"
    assert not [p for p in clone.parent.iterdir() if ".partial-" in p.name]
    (clone / "marker").write_text("")

    clear_caches()  # forget the resolution: the folder on disk must be reused, not cloned again
    assert repo_path(task(v1)) == clone and (clone / "marker").exists()


def test_a_commit_pushed_after_the_clone_is_fetched_when_a_task_asks_for_it(remote):
    first = git(remote, "rev-parse", "HEAD")
    assert widget(snapshot(task(first))) == "v = 2\n"
    later = commit_file(remote, "v = 3\n")
    git(remote, "push", "-q", "origin", "main")
    # No clear_caches(): the remembered resolution must not hide the new commit.
    assert widget(snapshot(task(later))) == "v = 3\n"


def test_a_commit_on_no_branch_is_fetched_by_its_id(tmp_path, remote):
    bare = tmp_path / "remote" / "acme" / "widget.git"
    snapshot(task(git(remote, "rev-parse", "HEAD")))
    orphan = commit_file(remote, "v = 9\n")
    git(remote, "push", "-q", "origin", "HEAD:refs/pull/7/head")  # GitHub keeps pull requests outside heads
    git(bare, "config", "uploadpack.allowAnySHA1InWant", "true")
    assert widget(snapshot(task(orphan))) == "v = 9\n"


def test_a_commit_the_remote_lacks_names_repo_commit_and_url(tmp_path, remote):
    missing = "2" * 40
    with pytest.raises(ConfigError) as caught:
        repo_path(task(missing))
    message = str(caught.value)
    assert "acme/widget" in message and missing in message and "acme/widget.git" in message
    assert "fatal" not in message


def test_a_repo_that_does_not_exist_is_a_config_error_naming_repo_and_url(tmp_path, remote):
    with pytest.raises(ConfigError) as caught:
        repo_path(task("1" * 40, repo="acme/nope"))
    assert "acme/nope" in str(caught.value) and f"file://{tmp_path / 'remote'}/acme/nope.git" in str(caught.value)
    assert not [p for p in (tmp_path / "cache" / "clones").iterdir() if not p.name.endswith(".lock")]


def test_an_unreachable_server_is_an_infra_error_naming_repo_and_url(monkeypatch):
    monkeypatch.setenv("REPOGYM_GIT_BASE_URL", "http://127.0.0.1:1")
    with pytest.raises(InfraError) as caught:
        repo_path(task("1" * 40))
    assert "acme/widget" in str(caught.value) and "http://127.0.0.1:1/acme/widget.git" in str(caught.value)


def test_a_killed_clone_leaves_no_half_repository_and_the_next_one_sweeps_its_leftovers(tmp_path, remote,
                                                                                         monkeypatch):
    v1 = git(remote, "rev-parse", "HEAD~1")
    url = task_source(task(v1)).partition(":")[2]
    target = tmp_path / "cache" / "clones" / hashlib.sha256(url.encode()).hexdigest()[:16]
    real_git = repos._git

    def killed(repo, *args):
        if "clone" in args:  # the clone dies after writing part of its folder
            (Path(args[-1]) / "objects").mkdir(parents=True)
            raise KeyboardInterrupt
        return real_git(repo, *args)

    monkeypatch.setattr(repos, "_git", killed)
    with pytest.raises(KeyboardInterrupt):
        repo_path(task(v1))
    assert not target.exists()
    monkeypatch.setattr(repos, "_git", real_git)
    swept = target.parent / f".{target.name}.partial-sigkilled"  # as SIGKILL leaves it: no finally ran
    (swept / "objects").mkdir(parents=True)
    other = target.parent / ".0123456789abcdef.partial-x"  # another URL's: maybe cloning right now
    other.mkdir()

    assert widget(snapshot(task(v1))) == "v = 1\n"
    assert repo_path(task(v1)) == target and not swept.exists() and other.exists()


# -- what a task file may say ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../x", "a/--upload-pack=x", "a/b/c", "", "a/..", "-a/b", ".a/b", "a/", "/b",
                                  "a/b c", "a/.git", "a/b\n", "a\\b/c"])
def test_a_repo_name_that_is_not_owner_slash_name_is_refused(name, tmp_path, monkeypatch):
    (tmp_path / "mirrors").mkdir()
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "mirrors"))
    with pytest.raises(ConfigError, match="expected repo 'owner/name'"):
        repo_path(task("1" * 40, repo=name))
    assert not (tmp_path / "cache" / "clones").exists()  # refused before git ran


def test_real_dataset_names_parse():
    assert parse_repo("psf/requests") == ("psf", "requests")
    assert parse_repo("scikit-learn/scikit-learn") == ("scikit-learn", "scikit-learn")
    assert parse_repo("pydata/xarray.git") == ("pydata", "xarray")
    assert parse_repo("sphinx-doc/sphinx_1.x") == ("sphinx-doc", "sphinx_1.x")


@pytest.mark.parametrize("commit", ["--output=/tmp/pwned", "", "HEAD --remote=x", "-1"])
def test_a_base_commit_that_could_be_an_option_is_refused(commit, tmp_path, monkeypatch):
    make_repo(tmp_path / "mirrors" / "acme__widget")
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "mirrors"))
    with pytest.raises(ConfigError, match="base_commit"):
        snapshot(task(commit))


def test_setup_source_still_wins_over_mirror_and_clone(tiny_task, tmp_path, monkeypatch):
    (tmp_path / "mirrors" / "tests__calc").mkdir(parents=True)  # not a repository: would fail if looked at
    monkeypatch.setenv("REPOGYM_MIRRORS", str(tmp_path / "mirrors"))
    assert task_source(tiny_task) == tiny_task.setup["source"]
    assert snapshot(tiny_task).tar


def test_setup_source_kinds_are_checked(tmp_path):
    work = tmp_path / "work"
    v1, _ = make_repo(work)
    assert widget(snapshot(task(v1, source=f"path:{work}"))) == "v = 1\n"
    assert widget(snapshot(task(v1, source=f"mirror:{work}"))) == "v = 1\n"
    assert widget(snapshot(task(v1, source=f"git:file://{work}"))) == "v = 1\n"
    with pytest.raises(ConfigError, match="builtin:NAME, path:DIR, mirror:DIR or git:URL"):
        repo_path(task(v1, source="svn:x"))
    with pytest.raises(ConfigError, match="expected a git URL"):
        repo_path(task(v1, source="git:--upload-pack=touch /tmp/pwned"))


def test_snapshots_are_cached_by_size_not_count(tmp_path):
    # A run over big trees must not hold dozens of them whole: the cache keeps the most recent within its bytes.
    from repogym.envs.sandbox.snapshot import RepoSnapshot
    cache = repos._SnapshotCache(budget=250)
    for i in range(5):
        cache.put(("repo", f"c{i}"), RepoSnapshot(key=f"k{i}", tar=b"x" * 100))
        cache.get(("repo", "c0"))  # the oldest, kept in use
    assert cache.size <= 250
    assert [k for k in ("c0", "c1", "c2", "c3", "c4") if cache.get(("repo", k))] == ["c0", "c4"]
    cache.put(("repo", "huge"), RepoSnapshot(key="huge", tar=b"x" * 251))  # larger than the budget: not kept
    assert cache.get(("repo", "huge")) is None and cache.size == 200
