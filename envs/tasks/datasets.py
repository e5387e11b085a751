"""Real datasets' rows as repogym tasks: SWE-bench (Lite, Verified), SWE-Gym, SWE-rebench, SWE-smith, R2E-Gym.

:func:`load_dataset` reads a ``.jsonl`` file, a ``.json`` file (an array, or JSON lines as Hugging Face's
``to_json`` writes them) or a ``.parquet`` file (needs pyarrow: ``pip install 'repogym[datasets]'``), finds
each row's shape, and converts the row into a :class:`~repogym.envs.tasks.schema.Task`. Every field of the row
that the task has no place for is kept in ``extra`` (saved at the top level of the record), and
``extra["dataset"]`` names the shape it was read as. ``docs/datasets.md`` gives each dataset's conventions.

Detection: the first rule that matches wins; ``dataset=`` skips detection and reads every row as that kind.

====================== ======================================================= ==================================
kind                   the row has                                             conversion
====================== ======================================================= ==================================
``repogym``            ``setup``, ``test_command`` or ``dataset`` (a file this  none: :meth:`Task.from_dict`
                       loader or repogym wrote)
``r2e-gym``            ``parsed_commit_content`` and ``docker_image``           gold patch and hidden tests
                                                                               rebuilt from the row (below)
``swe-smith``          ``image_name`` naming a ``swesmith.`` image, or a        gold patch = ``patch`` reversed
                       ``repo`` under ``swesmith/``
``swe-rebench``        ``meta`` or ``install_config``, or a ``swerebench/``     as SWE-bench
                       ``docker_image``
``swe-bench-verified`` SWE-bench's fields and a text ``difficulty``             as SWE-bench; the difficulty
                                                                               bucket maps to 1..5
``swe-bench``          anything else (``instance_id``, ``repo``,                as is
                       ``base_commit``, ...); SWE-bench Lite and SWE-Gym
                       rows look the same: force ``swe-gym`` for its images
====================== ======================================================= ==================================

A SWE-bench row (any kind read as SWE-bench) whose ``repo`` and ``version`` the built-in table knows
(:mod:`repogym.envs.tasks.swebench_envs`) gets that environment as its ``setup`` and ``test_command``, the dataset's
image name kept in ``dataset_image`` (``environments="images"`` turns this off). A row the table does not know,
whose repository has a mirror (``REPOGYM_MIRRORS``), gets the environment inferred from the repository at its base
commit (:mod:`repogym.envs.tasks.infer_env`), with ``setup_inferred`` saying which file decided what (``environments=
"infer"`` infers every row, the table off, cloning repositories without a mirror; a row it cannot serve keeps its
image and ``setup_inferred["failed"]`` says why). Every other converted task gets
``setup["workdir"] = "/testbed"`` (where all these images keep the repository) and ``setup["image"]`` (the row's
``image_name`` / ``docker_image``, else the dataset's naming convention, else nothing). No task gets a
``setup["source"]``: the ``repo`` resolves through ``REPOGYM_MIRRORS`` or a cached clone.

Guaranteed: a row either becomes a task or raises :class:`TaskFileError` naming the file, the line (the row
number, from 1, for ``.json`` arrays and ``.parquet``) and the field; saving the tasks with ``save_tasks`` and
loading them back (with ``load_tasks`` or this function) gives equal tasks. Not guaranteed: that a task's environment builds and its gold patch passes there; ``repogym validate`` says.
A task with ``setup.image`` runs on the docker backend only, in a derived image of it built once offline with
the repository loaded at ``setup.workdir`` (docs/datasets.md, "Prebuilt images").
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from pathlib import Path
from typing import Any, Callable, Iterator

from repogym.envs.core.errors import ConfigError, InfraError, TaskFileError
from repogym.envs.core.paths import cache_dir
from repogym.envs.tasks.infer_env import Inference, files_from_git, infer_for_repo, pin_conflicts
from repogym.envs.tasks.patches import new_files_patch, reverse_patch
from repogym.envs.tasks.pypi import PyPI
from repogym.envs.tasks.repos import find_mirror
from repogym.envs.tasks.schema import Task, test_list
from repogym.envs.tasks.swebench_envs import UNSUPPORTED, swebench_setup

DATASET_KINDS = ("repogym", "swe-bench", "swe-bench-verified", "swe-gym", "swe-rebench", "swe-smith", "r2e-gym")
"""The kinds :func:`load_dataset` reads; ``dataset=`` takes one of these."""
WORKDIR = "/testbed"
"""Where SWE-bench's, SWE-Gym's, SWE-rebench's, SWE-smith's and R2E-Gym's images keep the repository."""
SWESMITH_DOCKER_ORG = "jyangballin"
"""Docker Hub account of SWE-smith's images (``swesmith/build_repo/download_images.py``)."""
R2E_GYM_REPOS = {
    "aiohttp": "aio-libs/aiohttp", "bokeh": "bokeh/bokeh", "coveragepy": "nedbat/coveragepy",
    "datalad": "datalad/datalad", "numpy": "numpy/numpy", "orange3": "biolab/orange3",
    "pandas": "pandas-dev/pandas", "pillow": "python-pillow/Pillow", "pyramid": "Pylons/pyramid",
    "scrapy": "scrapy/scrapy", "sympy": "sympy/sympy", "tornado": "tornadoweb/tornado",
}
"""R2E-Gym's ``repo_name`` -> GitHub ``owner/name`` (the clones in its ``base_dockerfiles/``)."""
ENVIRONMENT_CHOICES = ("builtin", "infer", "images")
"""Where converted SWE-bench rows get their environment: the built-in table where it knows them, else inference
from a mirror of the repository (``builtin``); inference alone, the table off (``infer``); or images."""
PROGRESS_EVERY = 200
"""Rows between two calls of the progress callback."""

Progress = Callable[[int, int], None]
"""``progress(rows_read, rows_total)``, called every :data:`PROGRESS_EVERY` rows and at the end."""


def load_dataset(path: str | Path, *, dataset: str | None = None, limit: int | None = None,
                 progress: Progress | None = None, environments: str = "builtin",
                 on_error: Callable[[TaskFileError], None] | None = None) -> list[Task]:
    """Read a dataset file into tasks (the first ``limit`` rows if given); ``dataset`` forces the row kind.

    ``environments``: ``builtin`` gives a SWE-bench row whose repo and version the built-in table knows
    (:mod:`repogym.envs.tasks.swebench_envs`) that environment, a row whose repository has a mirror in
    ``REPOGYM_MIRRORS`` an inferred one (:mod:`repogym.envs.tasks.infer_env`), and every other row its dataset's
    image; ``infer`` infers every SWE-bench row's environment (the table off; a repository without a mirror is
    cloned), keeping the image of a row it cannot serve; ``images`` gives every row its dataset's image. ``on_error``: a row that does not convert (or repeats an id)
    is passed to it and skipped, instead of stopping the load."""
    if dataset is not None and dataset not in DATASET_KINDS:
        raise ConfigError(f"unknown dataset kind {dataset!r}; expected one of {', '.join(DATASET_KINDS)}")
    if environments not in ENVIRONMENT_CHOICES:
        raise ConfigError(f"unknown environments choice {environments!r}; expected one of "
                          f"{', '.join(ENVIRONMENT_CHOICES)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"expected a positive row limit, got {limit!r}")
    path = Path(path)
    if not path.is_file():
        raise TaskFileError(str(path), None, None, "no such dataset file")
    rows, total = _read_rows(path)
    total = min(total, limit) if limit else total
    tasks: list[Task] = []
    seen: dict[str, int | None] = {}
    for line, row in rows:
        try:
            task = convert_row(row, dataset=dataset, path=str(path), line=line, environments=environments)
            if task.instance_id in seen:
                raise TaskFileError(str(path), line, "instance_id",
                                    f"duplicate id {task.instance_id!r} (first on line {seen[task.instance_id]})")
        except TaskFileError as exc:
            if on_error is None:
                raise
            on_error(exc)
            continue
        seen[task.instance_id] = line
        tasks.append(task)
        if progress is not None and len(tasks) % PROGRESS_EVERY == 0:
            progress(len(tasks), total)
        if limit is not None and len(tasks) >= limit:
            break
    if progress is not None:
        progress(len(tasks), total)
    return tasks


def detect(row: dict[str, Any]) -> str:
    """The kind of a row, by the rules of the module docstring's table."""
    # A field counts when it holds a value: a parquet file gives every row all of its columns, null or not.
    def has(name: str) -> bool:
        return row.get(name) is not None

    if has("setup") or has("test_command") or has("dataset"):
        return "repogym"
    if has("parsed_commit_content") and has("docker_image"):
        return "r2e-gym"
    image = str(row.get("image_name") or "")
    if image.startswith("swesmith.") or "/swesmith." in image or str(row.get("repo") or "").startswith("swesmith/"):
        return "swe-smith"
    if has("meta") or has("install_config") or str(row.get("docker_image") or "").startswith("swerebench/"):
        return "swe-rebench"
    if isinstance(row.get("difficulty"), str):
        return "swe-bench-verified"
    return "swe-bench"


def convert_row(row: Any, *, dataset: str | None = None, path: str = "<row>", line: int | None = None,
                environments: str = "builtin") -> Task:
    """One dataset row as a task; raises :class:`TaskFileError` naming ``path``, ``line`` and the field."""
    if not isinstance(row, dict):
        raise TaskFileError(path, line, None, f"expected a JSON object, got {type(row).__name__}")

    def fail(name: str, message: str) -> TaskFileError:
        return TaskFileError(path, line, name, message)

    kind = dataset or detect(row)
    if kind == "repogym":
        record = row
    elif kind == "r2e-gym":
        record = _r2e_gym(row, fail)
    elif kind == "swe-smith":
        record = _swe_smith(row, fail)
    else:
        record = _swe_bench(row, kind, fail, environments=environments)
    return Task.from_dict(record, path=path, line=line)


# --- reading files ---------------------------------------------------------------------------------------

def _read_rows(path: Path) -> tuple[Iterator[tuple[int | None, Any]], int]:
    """The rows as ``(line or row number, row)``, and how many there are."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _parquet_rows(path)
    if suffix not in (".jsonl", ".json"):
        raise ConfigError(f"expected a .jsonl, .json or .parquet dataset file, got {path.name!r}")
    with path.open("rb") as fh:
        head = fh.read(4096).lstrip()
    if suffix == ".json" and head.startswith(b"["):
        text = path.read_text(encoding="utf-8")
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TaskFileError(str(path), exc.lineno, None, f"invalid JSON: {exc.msg}") from None
        if not isinstance(records, list):
            raise TaskFileError(str(path), None, None, "expected a JSON array of rows")
        return iter(list(enumerate(records, start=1))), len(records)
    with path.open("rb") as fh:
        total = sum(1 for raw in fh if raw.strip())
    return _jsonl_rows(path), total


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    # Streamed: R2E-Gym's rows carry whole files, so its JSONL can run to gigabytes.
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield lineno, json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise TaskFileError(str(path), lineno, None, f"not UTF-8: {exc.reason}") from None
            except json.JSONDecodeError as exc:
                raise TaskFileError(str(path), lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})") from None


def _parquet_rows(path: Path) -> tuple[Iterator[tuple[int, Any]], int]:
    try:
        import pyarrow
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(f"reading {path.name} needs pyarrow, which is not installed: "
                          "pip install 'repogym[datasets]'") from None
    try:
        parquet = pq.ParquetFile(path)
    except (pyarrow.ArrowException, OSError) as exc:  # the file: not parquet (ArrowInvalid), unreadable (OSError)
        raise TaskFileError(str(path), None, None, f"not a readable parquet file: {exc}") from None

    def rows() -> Iterator[tuple[int, Any]]:
        number = 0
        for batch in parquet.iter_batches(batch_size=256):
            for row in batch.to_pylist():
                number += 1
                yield number, _plain(row)

    return rows(), parquet.metadata.num_rows


def _plain(value: Any) -> Any:
    """Parquet values as JSON ones: timestamps as ISO strings (a task file is JSON), bytes as text."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


# --- SWE-bench, SWE-bench Verified, SWE-Gym, SWE-rebench -------------------------------------------------

def _swe_bench(row: dict[str, Any], kind: str, fail: Callable[[str, str], TaskFileError], *,
               environments: str) -> dict[str, Any]:
    instance_id, repo = _need(row, "instance_id", fail), _need(row, "repo", fail)
    image = _row_image(row) or _conventional_image(kind, instance_id)
    known = swebench_setup(repo, str(row.get("version") or "")) if environments == "builtin" else None
    kept = {"dataset_image": image} if image else {}
    if known is not None:
        conflicts = _table_conflicts(repo, row.get("base_commit"), known)
        test_command = known.pop("test_command")
        if conflicts:  # the entry's dependencies are wrong at this commit: inferred ones instead; the rest is kept
            inferred = _infer(repo, row["base_commit"], must=False)
            if isinstance(inferred, Inference):
                rest = {k: v for k, v in known.items() if k not in _DEPENDENCY_KEYS}  # e.g. cpus, runner
                return {**row, "setup": {**rest, **inferred.setup}, "test_command": test_command,
                        "setup_inferred": {**inferred.provenance, "table_refused": conflicts}, "dataset": kind, **kept}
        noted = {"setup_table_conflicts": conflicts} if conflicts else {}
        return {**row, "setup": known, "test_command": test_command, "dataset": kind, **kept, **noted}
    if environments != "images" and isinstance(row.get("base_commit"), str) and row["base_commit"].strip():
        inferred = _infer(repo, row["base_commit"], must=environments == "infer")
        if isinstance(inferred, Inference):
            return {**row, "setup": inferred.setup, "test_command": inferred.test_command,
                    "setup_inferred": inferred.provenance, "dataset": kind, **kept}
        if inferred:
            return {**row, "setup": _setup(repo, image), "dataset": kind, "setup_inferred": {"failed": inferred}}
    return {**row, "setup": _setup(repo, image), "dataset": kind}


# What a table entry says about dependencies (what inference replaces when the commit refuses the entry's pins).
_DEPENDENCY_KEYS = ("python", "pip", "pre_install", "install", "toolchain")


def _table_conflicts(repo: str, commit: Any, setup: dict[str, Any]) -> list[str]:
    """The table's pins that ``repo``'s own install requirements at ``commit`` refuse, read from its mirror (none
    without a mirror: nothing is cloned to check a table entry)."""
    if not isinstance(commit, str) or not commit.strip():
        return []
    try:
        mirror = find_mirror(repo)
    except ConfigError:  # REPOGYM_MIRRORS names no folder: _infer says so for the rows that need it
        return []
    if mirror is None:
        return []
    try:
        return pin_conflicts(files_from_git(mirror, commit), setup)
    except InfraError:  # the commit is not in the mirror: the import's mirror check reports it
        return []


def _infer(repo: str, commit: str, *, must: bool) -> Inference | str:
    """The inferred environment of ``repo`` at ``commit``, or why there is none ('' when not tried: ``builtin``
    infers only what a mirror holds, never cloning, and leaves the table's unsupported repositories their image)."""
    if not must:
        try:
            if repo in UNSUPPORTED or find_mirror(repo) is None:
                return ""
        except ConfigError as exc:  # REPOGYM_MIRRORS names no folder, or the repo name is not owner/name
            return f"no mirror read: {exc}"
    try:
        return infer_for_repo(repo, commit, pypi=_pypi())
    except (ConfigError, InfraError) as exc:  # the commit is not in the mirror, the clone failed
        return f"inference failed: {exc}"


@functools.lru_cache(maxsize=4)
def _pypi_for(cache: str) -> PyPI:
    return PyPI(cache=Path(cache))


def _pypi() -> PyPI:
    """One PyPI client per cache folder, so rows of one load share its answers in memory too."""
    return _pypi_for(str(cache_dir() / "pypi"))


def _conventional_image(kind: str, instance_id: str) -> str | None:
    # Docker forbids "__" in names: SWE-bench's images spell it _1776_, SWE-Gym's (OpenHands') _s_.
    if kind in ("swe-bench", "swe-bench-verified"):
        return f"swebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest".lower()
    if kind == "swe-gym":
        return f"xingyaoww/sweb.eval.x86_64.{instance_id.replace('__', '_s_')}:latest".lower()
    return None  # SWE-rebench publishes docker_image only for the rows that have one


# --- SWE-smith --------------------------------------------------------------------------------------------

def _swe_smith(row: dict[str, Any], fail: Callable[[str, str], TaskFileError]) -> dict[str, Any]:
    repo = _need(row, "repo", fail)
    for name in ("instance_id", "base_commit", "image_name"):
        _need(row, name, fail)
    bug = _need(row, "patch", fail)
    try:
        failing = test_list(row.get("FAIL_TO_PASS", []), "FAIL_TO_PASS", "<row>", None)
    except TaskFileError as exc:
        raise fail("FAIL_TO_PASS", exc.message) from None
    if not failing:
        raise fail("FAIL_TO_PASS", "no failing test: a SWE-smith task needs the tests its bug breaks")
    try:
        fix = reverse_patch(bug)
    except ValueError as exc:
        raise fail("patch", f"cannot reverse the bug patch into a fix: {exc}") from None
    record = {**row, "patch": fix, "bug_patch": bug, "dataset": "swe-smith",
              "setup": _setup(repo, _swesmith_image(row["image_name"]))}
    upstream = re.fullmatch(r"swesmith/([^/]+?)__([^/]+)\.([0-9a-f]{7,40})", repo)
    if upstream:
        record["upstream_repo"] = f"{upstream.group(1)}/{upstream.group(2)}"
    if not str(row.get("problem_statement") or "").strip():
        # SWE-smith leaves the issue text empty for rows without a generated issue; its own static fallback
        # (swesmith/issue_gen/get_static.py) names the failing tests, and so does this one.
        record["problem_statement"] = _statement_from_tests(failing)
        record["problem_statement_generated"] = True
    return record


def _swesmith_image(name: str) -> str:
    # Older rows name the local tag (swesmith.x86_64.owner__repo.commit), pulled from the Docker Hub
    # account with "__" spelled _1776_; newer ones name the Docker Hub image itself.
    if "/" in name:
        return name
    return f"{SWESMITH_DOCKER_ORG}/{name.replace('__', '_1776_')}:latest".lower()


def _statement_from_tests(failing: list[str]) -> str:
    shown = "\n".join(f"- {test}" for test in failing[:20])
    more = f"\n- ... and {len(failing) - 20} more" if len(failing) > 20 else ""
    return (f"Some tests of this repository fail:\n{shown}{more}\n\n"
            "Find the bug in the code (not in the tests) and fix it so that these tests pass.")


# --- R2E-Gym ----------------------------------------------------------------------------------------------

_ISSUE = re.compile(r"\[ISSUE\](.*?)\[/ISSUE\]", re.S)
_SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S+)")
_ANSI = re.compile(r"\x1b\[\d+m")


def _r2e_gym(row: dict[str, Any], fail: Callable[[str, str], TaskFileError]) -> dict[str, Any]:
    repo_name = _need(row, "repo_name", fail)
    image = _need(row, "docker_image", fail)
    statement = _need(row, "problem_statement", fail)
    commit = _json_object(row, "parsed_commit_content", fail)
    old, new = commit.get("old_commit_hash"), commit.get("new_commit_hash")
    if not isinstance(old, str) or not old or not isinstance(new, str) or not new:
        raise fail("parsed_commit_content", "expected old_commit_hash and new_commit_hash")
    try:
        gold = _render_commit(commit)
    except (KeyError, TypeError, AttributeError) as exc:
        raise fail("parsed_commit_content", f"not a parsed commit (file_diffs/hunks): {exc!r}") from None
    if not gold:
        raise fail("parsed_commit_content", "no change to a non-test Python file: nothing to fix")
    execution = _json_object(row, "execution_result_content", fail)
    names, codes = execution.get("test_file_names"), execution.get("test_file_codes")
    if not isinstance(names, list) or not isinstance(codes, list) or len(names) != len(codes) or not names \
            or not all(isinstance(x, str) for x in names + codes):
        raise fail("execution_result_content", "expected test_file_names and test_file_codes, lists of strings "
                                               "of the same length")
    # The image copies these files to /r2e_tests; R2E-Gym links them at /testbed/r2e_tests to run them.
    tests = {"r2e_tests/__init__.py": "", **{f"r2e_tests/{n}": c for n, c in zip(names, codes)}}
    failing, passing = _r2e_tests(row, execution, fail)
    iid = row.get("instance_id") if isinstance(row.get("instance_id"), str) and row["instance_id"].strip() \
        else f"r2e-gym__{repo_name}-{str(row.get('commit_hash') or new)[:12]}"
    repo = R2E_GYM_REPOS.get(repo_name, repo_name)
    record = {**row, "instance_id": iid, "repo": repo, "base_commit": old, "patch": gold,
              "test_patch": new_files_patch(tests), "FAIL_TO_PASS": failing, "PASS_TO_PASS": passing,
              "setup": _setup(repo, image), "dataset": "r2e-gym"}
    issue = _ISSUE.search(statement)
    if issue and issue.group(1).strip():
        # R2E-Gym shows the agent only the text between the tags (DockerRuntime.get_task_instruction).
        record["problem_statement"] = issue.group(1).strip()
        record["problem_statement_raw"] = statement
    return record


def _r2e_tests(row: dict[str, Any], execution: dict[str, Any],
               fail: Callable[[str, str], TaskFileError]) -> tuple[list[str], list[str]]:
    """FAIL_TO_PASS and PASS_TO_PASS as pytest ids, from the statuses R2E-Gym recorded before and after."""
    before = _summary(execution.get("old_commit_res_stdout"))
    after_run = _summary(execution.get("new_commit_res_stdout"))
    ids = {key: full for key, (full, _) in {**before, **after_run}.items()}
    # expected_output_json is what R2E-Gym grades against (it may have been re-validated since the run).
    expected_text = row.get("expected_output_json")
    if isinstance(expected_text, str) and expected_text.strip():
        try:
            expected = json.loads(expected_text)
        except json.JSONDecodeError as exc:
            raise fail("expected_output_json", f"invalid JSON: {exc.msg}") from None
        if not isinstance(expected, dict):
            raise fail("expected_output_json", f"expected an object of test -> status, got {type(expected).__name__}")
        after = {_ANSI.sub("", k).split(" - ")[0]: v for k, v in expected.items()}
    else:
        after = {key: status for key, (_, status) in after_run.items()}
    failing, passing = [], []
    for key, status in after.items():
        if status != "PASSED":
            continue  # R2E-Gym also wants these to keep failing; repogym's lists cannot say so
        if key not in ids:
            raise fail("expected_output_json", f"test {key!r} is not in the recorded test output "
                                               "(execution_result_content), so its pytest id is unknown")
        (passing if before.get(key, ("", ""))[1] == "PASSED" else failing).append(ids[key])
    if not failing:
        raise fail("expected_output_json", "no test fails before the fix and passes after it")
    return failing, passing


def _summary(log: Any) -> dict[str, tuple[str, str]]:
    """pytest's ``-rA`` summary as R2E-Gym keys it (the id after the file, joined by dots) -> (id, status)."""
    if not isinstance(log, str) or "short test summary info" not in log:
        return {}
    found = {}
    for line in log.split("short test summary info", 1)[1].splitlines():
        match = _SUMMARY_LINE.match(_ANSI.sub("", line.strip()))
        if match and "::" in match.group(2):
            full = match.group(2)
            found[".".join(full.split("::")[1:])] = (full, match.group(1))
    return found


def _is_r2e_test_file(path: str) -> bool:
    # R2E-Gym's FileDiff.is_test_file: such files are the hidden tests, not part of the fix.
    parts = path.split("/")
    return (path.endswith("_test.py") or path.startswith("test_") or parts[-1].startswith("test_")
            or bool({"tests", "Tests", "test", "Test"} & set(parts)))


def _render_commit(commit: dict[str, Any]) -> str:
    """The non-test Python files of R2E-Gym's parsed commit as a git patch (its ``get_patch(test_file=False)``)."""
    patch = []
    for diff in commit["file_diffs"]:
        path = diff["header"]["file"]["path"]
        if _is_r2e_test_file(path) or not path.endswith(".py"):
            continue
        patch.append(f"diff --git a/{path} b/{path}\n")
        if diff["header"].get("misc_line"):
            patch.append(diff["header"]["misc_line"] + "\n")
        index = diff.get("index_line")
        if index:
            mode = index.get("mode") or ""
            patch.append(f"index {index['old_commit_hash']}..{index['new_commit_hash']}{' ' if mode else ''}{mode}\n")
        if diff.get("is_binary_file"):
            patch.append(f"{diff['binary_line']}\n")
        if diff.get("minus_file") and diff.get("plus_file"):
            patch.append(f"--- {diff['minus_file']['path']}\n+++ {diff['plus_file']['path']}\n")
        for hunk in diff.get("hunks") or []:
            d = hunk["descriptor"]
            section = f" {d['section']}" if d.get("section") else ""
            patch.append(f"@@ -{_range(d['old_range'])} +{_range(d['new_range'])} @@{section}\n")
            for line in hunk["line_group"]["all_lines"]:
                patch.append({"context": " ", "added": "+", "deleted": "-", "note": "\\ "}[line["type"]]
                             + line["content"] + "\n")
    return "".join(patch)


def _range(r: dict[str, Any]) -> str:
    return f"{r['start']}" if r.get("length") is None else f"{r['start']},{r['length']}"


# --- shared -----------------------------------------------------------------------------------------------

def _need(row: dict[str, Any], name: str, fail: Callable[[str, str], TaskFileError]) -> str:
    value = row.get(name)
    if name not in row or value is None:
        raise fail(name, "missing required field")
    if not isinstance(value, str) or not value.strip():
        raise fail(name, f"expected a non-empty string, got {value!r:.60}")
    return value


def _json_object(row: dict[str, Any], name: str, fail: Callable[[str, str], TaskFileError]) -> dict[str, Any]:
    value = row.get(name)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise fail(name, f"invalid JSON: {exc.msg}") from None
    if value is None:
        raise fail(name, "missing required field")
    if not isinstance(value, dict):
        raise fail(name, f"expected a JSON object, got {type(value).__name__}")
    return value


def _row_image(row: dict[str, Any]) -> str | None:
    for name in ("image_name", "docker_image"):
        if isinstance(row.get(name), str) and row[name].strip():
            return row[name]
    return None


def _setup(repo: str, image: str | None) -> dict[str, Any]:
    setup: dict[str, Any] = {"workdir": WORKDIR}
    if image:
        setup["image"] = image
    return setup  # no source: ``repo`` resolves by itself (a mirror, else a cached clone; tasks/repos.py)
