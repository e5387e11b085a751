"""The bundled task repositories (``task_repos/<name>/``) as real git repositories, and the builtin suite.

Each bundled project is ``task_repos/<name>/project/`` (the correct code and its visible test suite) plus
``task_repos/<name>/tasks/<slug>/{bug.patch,test.patch,task.json}``. :func:`build_repo` turns that into a git
repository with fixed authors and dates, so commit ids are the same on every machine: ``main`` holds the
project, and each task has a branch ``task/<slug>`` whose tip (the bug applied) is the task's base commit.
The gold patch is the diff from that base back to ``main``. ``task.json`` holds ``difficulty``, the
``problem_statement`` and, for long-horizon tasks, ``"horizon": "long"`` and a ``min_turns`` estimate, which land in
the record's extra fields (bench reports such tasks apart).

:func:`build_suite` also runs each task's tests on the host to derive FAIL_TO_PASS / PASS_TO_PASS, writing
``task_repos/builtin.jsonl`` (a developer step: ``repogym tasks build-builtin``). ``repogym validate`` then
proves each record inside a real sandbox.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from repogym.envs.core.errors import ConfigError, InfraError
from repogym.envs.core.paths import cache_dir, task_repos_dir
from repogym.envs.tasks.fixed_git import fixed_git
from repogym.envs.tasks.schema import DEFAULT_TEST_COMMAND, Task

_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "*.egg-info")
REPORT_PLUGIN_DIR = Path(__file__).resolve().parents[1] / "sandbox" / "inside"


def project_names() -> list[str]:
    """Names of the bundled projects."""
    root = task_repos_dir()
    return sorted(p.parent.name for p in root.glob("*/project") if p.is_dir())


def _git(repo: Path, *args: str, input: bytes | None = None) -> str:
    return fixed_git(repo, *args, input=input, where="tasks.builtin")


def _source_hash(src: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(src)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def task_slugs(name: str) -> list[str]:
    """The task folders of a bundled project, sorted."""
    return sorted(p.name for p in (task_repos_dir() / name / "tasks").iterdir() if (p / "bug.patch").is_file())


def build_repo(name: str) -> Path:
    """Build (once per content hash) the git repository of bundled project ``name``."""
    src = task_repos_dir() / name
    if not (src / "project").is_dir():
        raise ConfigError(f"unknown bundled project {name!r}: expected one of {project_names()}")
    target = cache_dir() / "builtin" / f"{name}-{_source_hash(src)}"
    if (target / ".git" / "repogym-complete").exists():
        return target
    tmp = target.with_name(target.name + f".tmp-{uuid.uuid4().hex[:6]}")
    shutil.copytree(src / "project", tmp, ignore=_IGNORED)
    _git(tmp, "init", "-q", "-b", "main")
    _git(tmp, "add", "-A")
    _git(tmp, "commit", "-q", "-m", f"Import {name}")
    for slug in task_slugs(name):
        _git(tmp, "checkout", "-q", "-b", f"task/{slug}", "main")
        _git(tmp, "apply", "--index", str(src / "tasks" / slug / "bug.patch"))
        _git(tmp, "commit", "-q", "-m", f"{name}: {slug}")
    _git(tmp, "checkout", "-q", "main")
    (tmp / ".git" / "repogym-complete").write_text("ok\n")
    try:
        tmp.rename(target)
    except OSError:  # another process won the race; its copy is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def run_pytest_report(workdir: Path, python: str = sys.executable, timeout: float = 300) -> dict[str, str]:
    """Run the suite in ``workdir`` on the host and return the plugin's per-test outcomes."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        env = {**os.environ, "REPOGYM_REPORT": str(report), "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONPATH": str(REPORT_PLUGIN_DIR)}
        subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "repogym_report"],
                       cwd=workdir, env=env, capture_output=True, timeout=timeout)
        if not report.exists():
            raise InfraError("tasks.builtin", f"pytest wrote no report in {workdir}")
        return json.loads(report.read_text())["tests"]


def build_task(name: str, slug: str, repo: Path) -> Task:
    """The task record of one bundled task, with F2P/P2P measured on the host."""
    folder = task_repos_dir() / name / "tasks" / slug
    meta = json.loads((folder / "task.json").read_text())
    extra = horizon_fields(meta, f"{name}/{slug}")
    base = _git(repo, "rev-parse", f"task/{slug}").strip()
    gold = _git(repo, "diff", "--binary", base, "main")
    test_patch = (folder / "test.patch").read_text()
    outcomes = {}
    for label, patches in (("before", [test_patch]), ("after", [gold, test_patch])):
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp) / "w"
            subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(work), base], check=True,
                           capture_output=True)
            try:
                for patch in patches:
                    _git(work, "apply", "-", input=patch.encode())
                outcomes[label] = run_pytest_report(work)
            finally:
                subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(work)], capture_output=True)
    f2p = sorted(t for t, o in outcomes["after"].items() if o == "passed" and outcomes["before"].get(t) != "passed")
    p2p = sorted(t for t, o in outcomes["after"].items() if o == "passed" and outcomes["before"].get(t) == "passed")
    if not f2p:
        raise InfraError("tasks.builtin", f"{name}/{slug}: no test fails before the fix")
    return Task(instance_id=f"repogym__{name}-{slug}", repo=f"repogym/{name}", base_commit=base,
                problem_statement=meta["problem_statement"].strip() + "\n", patch=gold, test_patch=test_patch,
                FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p, difficulty=int(meta["difficulty"]),
                setup={"source": f"builtin:{name}"}, test_command=DEFAULT_TEST_COMMAND,
                created_at="2026-01-01T00:00:00Z", version="0.1.0", extra=extra)


def horizon_fields(meta: dict, where: str) -> dict:
    """The optional ``horizon`` ("long") and ``min_turns`` (a positive int) of a task.json, checked.

    Absent fields stay absent, so the records of tasks without them are unchanged."""
    extra = {}
    if "horizon" in meta:
        if meta["horizon"] != "long":
            raise ConfigError(f"{where}/task.json: horizon: expected \"long\" or no field, got {meta['horizon']!r}")
        extra["horizon"] = "long"
    if "min_turns" in meta:
        turns = meta["min_turns"]
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            raise ConfigError(f"{where}/task.json: min_turns: expected a positive integer, got {turns!r}")
        extra["min_turns"] = turns
    return extra


def build_suite(out: Path | None = None) -> list[Task]:
    """Build every bundled task and write the ``builtin`` suite file."""
    from repogym.envs.tasks.schema import save_tasks
    tasks = []
    for name in project_names():
        repo = build_repo(name)
        for slug in task_slugs(name):
            tasks.append(build_task(name, slug, repo))
    save_tasks(tasks, out or task_repos_dir() / "builtin.jsonl")
    return tasks
