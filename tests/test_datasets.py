"""Real datasets' rows as tasks: detection, conversion, parquet, round trips, the import command, and errors."""

import json
import subprocess
import sys

import pytest

from repogym.cli import main
from repogym.envs.core.errors import ConfigError, TaskFileError
from repogym.envs.tasks.datasets import detect, load_dataset
from repogym.envs.tasks.patches import new_files_patch, reverse_patch
from repogym.envs.tasks.schema import load_tasks, save_tasks

# --- rows shaped as the published datasets' (fields, types, encodings), contents cut short ---------------

VERIFIED = {  # SWE-bench Verified: lists as JSON strings, difficulty as text
    "repo": "astropy/astropy", "instance_id": "astropy__astropy-12907",
    "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
    "patch": "diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py\n--- a/astropy/modeling/"
             "separable.py\n+++ b/astropy/modeling/separable.py\n@@ -242,7 +242,7 @@ def _cstack(left, right):\n"
             "         cright = _coord_matrix(right, 'right', noutp)\n     else:\n         cright = np.zeros((noutp, "
             "right.shape[1]))\n-        cright[-right.shape[0]:, -right.shape[1]:] = 1\n+        cright[-right.shape"
             "[0]:, -right.shape[1]:] = right\n \n     return np.hstack([cleft, cright])\n \n",
    "test_patch": "diff --git a/astropy/modeling/tests/test_separable.py b/astropy/modeling/tests/test_separable.py\n",
    "problem_statement": "Modeling's `separability_matrix` does not compute separability correctly for nested "
                         "CompoundModels\n",
    "hints_text": "", "created_at": "2022-03-03T15:14:54Z", "version": "4.3",
    "FAIL_TO_PASS": "[\"astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]\", "
                    "\"astropy/modeling/tests/test_separable.py::test_separable[compound_model9-result9]\"]",
    "PASS_TO_PASS": "[\"astropy/modeling/tests/test_separable.py::test_coord_matrix\"]",
    "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752", "difficulty": "15 min - 1 hour",
}
DJANGO = {**VERIFIED, "repo": "django/django", "instance_id": "django__django-11099", "version": "3.0",
          "base_commit": "d26b2424437dabeeca94d7900b37d2df4410da0c", "difficulty": "<15 min fix",
          "FAIL_TO_PASS": json.dumps(["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"]),
          "PASS_TO_PASS": json.dumps(["test_help_text (auth_tests.test_validators.UserAttributeSimilarityValidatorTest)"])}

ORIGINAL = "def split(text, sep=None):\n    parts = text.split(sep)\n    return [p.strip() for p in parts]\n"
BUGGY = "def split(text, sep=None):\n    parts = text.split(sep)\n    return [p for p in parts]\n"
BUG_PATCH = ("diff --git a/src/tokens.py b/src/tokens.py\nindex 3b18e51..8c7e5d2 100644\n--- a/src/tokens.py\n"
             "+++ b/src/tokens.py\n@@ -1,3 +1,3 @@\n def split(text, sep=None):\n     parts = text.split(sep)\n"
             "-    return [p.strip() for p in parts]\n+    return [p for p in parts]\n")
SWESMITH = {  # SWE-smith: repo is its mirror, patch is the diff that makes the bug, lists as lists
    "instance_id": "oauthlib__oauthlib.1fd52536.func_basic__0e1ydx0z", "repo": "swesmith/oauthlib__oauthlib.1fd52536",
    "patch": BUG_PATCH, "FAIL_TO_PASS": ["tests/test_tokens.py::test_split_strips"],
    "PASS_TO_PASS": ["tests/test_tokens.py::test_split_empty"], "created_at": "2025-03-14T17:52:32.361318",
    "image_name": "swesmith.x86_64.oauthlib__oauthlib.1fd52536",
    "base_commit": "f1c6bd5de3a36b4ce1d8d3c0a2a0c3af3c6c2d38", "problem_statement": "",
}

OLD_SOURCE = "class Idx:\n    def __ge__(self, other):\n        raise TypeError('cannot compare')\n"
NEW_SOURCE = "class Idx:\n    def __ge__(self, other):\n        return self.upper >= other\n"
TEST_CODE = "from sympy.tensor.indexed import Idx\n\n\ndef test_Idx_inequalities():\n    assert Idx('i')\n"


def _line(text, kind):
    return {"content": text, "type": kind}


PARSED_COMMIT = {  # R2E-Gym's ParsedCommit (commit_models/diff_classes.py), one source file and one test file
    "old_commit_hash": "6a8f25c1d6b5bb3e4f1b1a1c29e7c7d3e8c1a9b0",
    "new_commit_hash": "003029fe443c6c234775a2517f0d40b9d62dc40b",
    "commit_message": "Idx: allow comparisons", "commit_date": "2017-05-02T10:11:12", "metadata": {},
    "file_diffs": [
        {"header": {"file": {"path": "sympy/tensor/indexed.py"}, "misc_line": None},
         "index_line": {"old_commit_hash": "1a2b3c4", "new_commit_hash": "5d6e7f8", "mode": "100644"},
         "is_binary_file": False, "binary_line": None,
         "minus_file": {"path": "a/sympy/tensor/indexed.py"}, "plus_file": {"path": "b/sympy/tensor/indexed.py"},
         "old_file_content": OLD_SOURCE, "new_file_content": NEW_SOURCE,
         "hunks": [{"descriptor": {"old_range": {"start": 1, "length": 3}, "new_range": {"start": 1, "length": 3},
                                   "section": ""},
                    "line_group": {"all_lines": [_line("class Idx:", "context"),
                                                 _line("    def __ge__(self, other):", "context"),
                                                 _line("        raise TypeError('cannot compare')", "deleted"),
                                                 _line("        return self.upper >= other", "added")]},
                    "modified_entities": [], "added_entities": [], "deleted_entities": []}]},
        {"header": {"file": {"path": "sympy/tensor/tests/test_indexed.py"}, "misc_line": None},
         "index_line": {"old_commit_hash": "9a9a9a9", "new_commit_hash": "8b8b8b8", "mode": "100644"},
         "minus_file": {"path": "a/sympy/tensor/tests/test_indexed.py"},
         "plus_file": {"path": "b/sympy/tensor/tests/test_indexed.py"}, "old_file_content": "", "new_file_content": "",
         "hunks": [{"descriptor": {"old_range": {"start": 1, "length": 0}, "new_range": {"start": 1, "length": 1},
                                   "section": ""},
                    "line_group": {"all_lines": [_line("def test_new(): pass", "added")]}}]},
    ],
}
OLD_RUN = ("============ test session starts ============\ncollected 3 items\n\nr2e_tests/test_1.py .F.\n"
           "======= short test summary info =======\nPASSED r2e_tests/test_1.py::test_Idx_construction\n"
           "FAILED r2e_tests/test_1.py::test_Idx_inequalities - TypeError: cannot compare\n"
           "PASSED r2e_tests/test_1.py::TestIdx::test_subs\n======= 1 failed, 2 passed in 0.57s =======\n")
NEW_RUN = OLD_RUN.replace("FAILED r2e_tests/test_1.py::test_Idx_inequalities - TypeError: cannot compare",
                          "PASSED r2e_tests/test_1.py::test_Idx_inequalities")
R2E = {  # R2E-Gym (validate_docker_and_hf.DatasetRow): no instance_id, JSON-encoded commit and run
    "repo_name": "sympy", "docker_image": "namanjain12/sympy_final:003029fe443c6c234775a2517f0d40b9d62dc40b",
    "commit_hash": "003029fe443c6c234775a2517f0d40b9d62dc40b",
    "parsed_commit_content": json.dumps(PARSED_COMMIT),
    "execution_result_content": json.dumps({
        "repo_name": "sympy", "new_commit_hash": "003029fe443c6c234775a2517f0d40b9d62dc40b",
        "test_file_codes": [TEST_CODE], "test_file_names": ["test_1.py"], "setup_res_code": 0,
        "setup_res_stdout": "", "setup_res_stderr": "", "new_commit_res_code": 0, "new_commit_res_stdout": NEW_RUN,
        "new_commit_res_stderr": "", "old_commit_res_code": 1, "old_commit_res_stdout": OLD_RUN,
        "old_commit_res_stderr": ""}),
    "modified_files": ["sympy/tensor/indexed.py"], "modified_entity_summaries": [],
    "relevant_files": ["sympy/tensor/indexed.py"], "num_non_test_files": 1, "num_non_test_func_methods": 1,
    "num_non_test_lines": 2, "prompt": "Write an issue for this commit...",
    "problem_statement": "[ISSUE]\nTitle: Idx cannot be compared with >=\n[/ISSUE]",
    "expected_output_json": json.dumps({"test_Idx_construction": "PASSED", "test_Idx_inequalities": "PASSED",
                                        "TestIdx.test_subs": "PASSED"}, indent=4),
}
REBENCH = {**VERIFIED, "instance_id": "encode__httpx-2701", "repo": "encode/httpx", "difficulty": None,
           "FAIL_TO_PASS": ["tests/test_urls.py::test_url_query"], "PASS_TO_PASS": [],
           "docker_image": "swerebench/sweb.eval.x86_64.encode_1776_httpx-2701",
           "meta": {"llm_score": {"difficulty_score": 1, "issue_text_score": 2, "test_score": 1}, "is_lite": True},
           "install_config": {"python": "3.9", "install": "pip install -e ."}}
del REBENCH["difficulty"]

ALL = [VERIFIED, DJANGO, SWESMITH, R2E, REBENCH]


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def write_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def git_apply(folder, patch):
    subprocess.run(["git", "apply", "-"], cwd=folder, input=patch.encode(), check=True, capture_output=True)


# --- detection and conversion -----------------------------------------------------------------------------

def test_each_row_shape_is_detected():
    assert [detect(r) for r in ALL] == ["swe-bench-verified", "swe-bench-verified", "swe-smith", "r2e-gym",
                                        "swe-rebench"]
    plain = {k: v for k, v in VERIFIED.items() if k != "difficulty"}
    assert detect(plain) == "swe-bench"
    assert detect({**plain, "setup": {}}) == "repogym"
    assert detect({**plain, "setup": None}) == "swe-bench"  # a null parquet column is no field


def test_swebench_verified_loads_as_is_with_its_difficulty_and_image(tmp_path):
    astropy, django = load_dataset(write_jsonl(tmp_path / "verified.jsonl", [VERIFIED, DJANGO]))
    assert astropy.difficulty == 2 and astropy.extra["difficulty_text"] == "15 min - 1 hour"
    assert django.difficulty == 1
    assert astropy.FAIL_TO_PASS[1] == "astropy/modeling/tests/test_separable.py::test_separable[compound_model9-result9]"
    assert django.FAIL_TO_PASS == ["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"]
    assert astropy.patch == VERIFIED["patch"] and astropy.environment_setup_commit == VERIFIED["environment_setup_commit"]
    assert astropy.setup == {"workdir": "/testbed", "image": "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"}
    assert astropy.extra["dataset"] == "swe-bench-verified"


def test_swe_gym_forced_gets_its_image_names(tmp_path):
    row = {k: v for k, v in VERIFIED.items() if k != "difficulty"} | {"instance_id": "getmoto__moto-5406",
                                                                       "repo": "getmoto/moto"}
    [task] = load_dataset(write_jsonl(tmp_path / "gym.jsonl", [row]), dataset="swe-gym")
    assert task.setup["image"] == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5406:latest"
    assert task.extra["dataset"] == "swe-gym" and task.difficulty == 3


def test_swe_rebench_keeps_its_image_and_metadata(tmp_path):
    [task] = load_dataset(write_jsonl(tmp_path / "rebench.jsonl", [REBENCH]))
    assert task.setup["image"] == REBENCH["docker_image"]
    assert task.extra["meta"]["llm_score"]["difficulty_score"] == 1 and task.extra["install_config"]["python"] == "3.9"
    assert task.FAIL_TO_PASS == ["tests/test_urls.py::test_url_query"]


def test_swe_smith_gold_patch_is_the_bug_reversed(tmp_path):
    [task] = load_dataset(write_jsonl(tmp_path / "smith.jsonl", [SWESMITH]))
    assert task.extra["dataset"] == "swe-smith" and task.extra["bug_patch"] == BUG_PATCH
    assert task.extra["upstream_repo"] == "oauthlib/oauthlib"
    assert task.setup == {"workdir": "/testbed",
                          "image": "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536:latest"}
    assert task.base_commit == SWESMITH["base_commit"] and task.test_patch == ""
    # The issue text was empty: the statement names the failing tests, and says it was made here.
    assert "tests/test_tokens.py::test_split_strips" in task.problem_statement
    assert task.extra["problem_statement_generated"] is True
    # The gold patch really fixes the buggy tree.
    (tmp_path / "repo" / "src").mkdir(parents=True)
    (tmp_path / "repo" / "src" / "tokens.py").write_text(BUGGY)
    git_apply(tmp_path / "repo", task.patch)
    assert (tmp_path / "repo" / "src" / "tokens.py").read_text() == ORIGINAL


def test_swe_smith_keeps_a_real_statement_and_an_org_qualified_image(tmp_path):
    row = {**SWESMITH, "problem_statement": "split() no longer strips spaces",
           "image_name": "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536"}
    [task] = load_dataset(write_jsonl(tmp_path / "smith.jsonl", [row]))
    assert task.problem_statement == "split() no longer strips spaces" and "problem_statement_generated" not in task.extra
    assert task.setup["image"] == row["image_name"]


def test_r2e_gym_row_becomes_a_task_with_hidden_tests(tmp_path):
    [task] = load_dataset(write_jsonl(tmp_path / "r2e.jsonl", [R2E]))
    assert task.instance_id == "r2e-gym__sympy-003029fe443c" and task.repo == "sympy/sympy"
    assert task.base_commit == PARSED_COMMIT["old_commit_hash"]  # the image holds the commit before the fix
    assert task.FAIL_TO_PASS == ["r2e_tests/test_1.py::test_Idx_inequalities"]
    assert task.PASS_TO_PASS == ["r2e_tests/test_1.py::test_Idx_construction", "r2e_tests/test_1.py::TestIdx::test_subs"]
    assert task.problem_statement == "Title: Idx cannot be compared with >="
    assert task.extra["problem_statement_raw"] == R2E["problem_statement"]
    assert task.setup == {"workdir": "/testbed", "image": R2E["docker_image"]}
    assert task.extra["expected_output_json"] == R2E["expected_output_json"] and task.extra["repo_name"] == "sympy"
    # The gold patch is the source change only (the commit's test file is not part of the fix) and applies.
    assert "tests/test_indexed.py" not in task.patch
    (tmp_path / "repo" / "sympy" / "tensor").mkdir(parents=True)
    (tmp_path / "repo" / "sympy" / "tensor" / "indexed.py").write_text(OLD_SOURCE)
    git_apply(tmp_path / "repo", task.patch)
    git_apply(tmp_path / "repo", task.test_patch)
    assert (tmp_path / "repo" / "sympy" / "tensor" / "indexed.py").read_text() == NEW_SOURCE
    assert (tmp_path / "repo" / "r2e_tests" / "test_1.py").read_text() == TEST_CODE
    assert (tmp_path / "repo" / "r2e_tests" / "__init__.py").read_text() == ""


def test_reverse_patch_undoes_new_deleted_and_unterminated_files(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "gone.py").write_text("keep\n")
    (repo / "tail.py").write_text("no newline")
    forward = ("diff --git a/gone.py b/gone.py\ndeleted file mode 100644\nindex 2fa992c..0000000\n--- a/gone.py\n"
               "+++ /dev/null\n@@ -1 +0,0 @@\n-keep\n"
               + new_files_patch({"new.py": "new\n"})
               + "diff --git a/tail.py b/tail.py\n--- a/tail.py\n+++ b/tail.py\n@@ -1 +1 @@\n-no newline\n"
                 "\\ No newline at end of file\n+changed\n\\ No newline at end of file\n")
    git_apply(repo, forward)
    assert not (repo / "gone.py").exists() and (repo / "tail.py").read_text() == "changed"
    git_apply(repo, reverse_patch(forward))
    assert sorted(p.name for p in repo.iterdir()) == ["gone.py", "tail.py"]
    assert (repo / "gone.py").read_text() == "keep\n" and (repo / "tail.py").read_text() == "no newline"
    with pytest.raises(ValueError, match="binary"):
        reverse_patch("diff --git a/x.png b/x.png\nGIT binary patch\nliteral 5\n")


# --- files: parquet, json, limits, round trips ------------------------------------------------------------

def test_parquet_files_load_like_jsonl(tmp_path):
    from_jsonl = []
    for name, rows in {"verified": [VERIFIED, DJANGO], "smith": [SWESMITH], "r2e": [R2E]}.items():
        from_parquet = load_dataset(write_parquet(tmp_path / f"{name}.parquet", rows))
        from_jsonl = load_dataset(write_jsonl(tmp_path / f"{name}.jsonl", rows))
        assert from_parquet == from_jsonl


def test_parquet_timestamps_become_iso_strings(tmp_path):
    import datetime
    row = {**SWESMITH, "created_at": datetime.datetime(2025, 3, 14, 17, 52, 32)}
    [task] = load_dataset(write_parquet(tmp_path / "smith.parquet", [row]))
    assert task.created_at == "2025-03-14T17:52:32"


def test_json_array_and_json_lines_and_limit(tmp_path):
    array = tmp_path / "rows.json"
    array.write_text(json.dumps([VERIFIED, SWESMITH, R2E]))
    assert [t.extra["dataset"] for t in load_dataset(array)] == ["swe-bench-verified", "swe-smith", "r2e-gym"]
    lines = write_jsonl(tmp_path / "hf_to_json.json", [VERIFIED, SWESMITH])  # what datasets' to_json writes
    assert len(load_dataset(lines)) == 2
    seen = []
    assert len(load_dataset(array, limit=2, progress=lambda done, total: seen.append((done, total)))) == 2
    assert seen[-1] == (2, 2)


def test_save_and_load_round_trip_keeps_every_field(tmp_path):
    tasks = load_dataset(write_jsonl(tmp_path / "all.jsonl", ALL))
    save_tasks(tasks, tmp_path / "suite.jsonl")
    assert load_tasks(tmp_path / "suite.jsonl") == tasks
    assert load_dataset(tmp_path / "suite.jsonl") == tasks  # a saved suite reads back as repogym's own kind
    saved = [json.loads(line) for line in (tmp_path / "suite.jsonl").read_text().splitlines()]
    assert saved[0]["difficulty"] == 2 and saved[0]["difficulty_text"] == "15 min - 1 hour"
    for row, record in zip(ALL, saved):
        unknown = set(row) - {"instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement",
                              "FAIL_TO_PASS", "PASS_TO_PASS", "difficulty", "hints_text", "created_at", "version",
                              "environment_setup_commit"}
        assert {k: record[k] for k in unknown} == {k: row[k] for k in unknown}


# --- errors -----------------------------------------------------------------------------------------------

def _without(row, name):
    return {k: v for k, v in row.items() if k != name}


@pytest.mark.parametrize("bad, field, words", [
    ({**VERIFIED, "difficulty": "a weekend"}, "difficulty", "'<15 min fix', '15 min - 1 hour', '1-4 hours', '>4 hours'"),
    (_without(SWESMITH, "image_name"), "image_name", "missing required field"),
    ({**SWESMITH, "FAIL_TO_PASS": []}, "FAIL_TO_PASS", "no failing test"),
    ({**SWESMITH, "patch": "diff --git a/x.bin b/x.bin\nGIT binary patch\nliteral 3\n"}, "patch", "binary"),
    # Without its image the row is no R2E-Gym row: read as SWE-bench, it has no instance_id.
    (_without(R2E, "docker_image"), "instance_id", "missing required field"),
    ({**R2E, "parsed_commit_content": "{not json"}, "parsed_commit_content", "invalid JSON"),
    ({**R2E, "execution_result_content": json.dumps({"test_file_names": ["a.py"]})}, "execution_result_content",
     "test_file_codes"),
    ({**R2E, "expected_output_json": json.dumps({"test_Idx_construction": "PASSED"})}, "expected_output_json",
     "no test fails before the fix"),
    ({**R2E, "expected_output_json": json.dumps({"test_unknown": "PASSED"})}, "expected_output_json",
     "not in the recorded test output"),
    (_without(R2E, "repo_name"), "repo_name", "missing required field"),
])
def test_bad_rows_name_line_and_field(tmp_path, bad, field, words):
    path = write_jsonl(tmp_path / "bad.jsonl", [VERIFIED, bad])
    with pytest.raises(TaskFileError) as err:
        load_dataset(path)
    assert err.value.line == 2 and err.value.field == field, str(err.value)
    assert words in str(err.value) and "bad.jsonl:2" in str(err.value)


def test_parquet_errors_name_the_row(tmp_path):
    path = write_parquet(tmp_path / "bad.parquet", [SWESMITH, {**SWESMITH, "instance_id": "x", "base_commit": ""}])
    with pytest.raises(TaskFileError, match=r"bad.parquet:2: field 'base_commit'"):
        load_dataset(path)


def test_file_level_errors(tmp_path, monkeypatch):
    with pytest.raises(TaskFileError, match="no such dataset file"):
        load_dataset(tmp_path / "missing.jsonl")
    (tmp_path / "rows.csv").write_text("a,b\n")
    with pytest.raises(ConfigError, match=r"\.jsonl, \.json or \.parquet"):
        load_dataset(tmp_path / "rows.csv")
    with pytest.raises(ConfigError, match="swe-smith"):
        load_dataset(write_jsonl(tmp_path / "a.jsonl", [VERIFIED]), dataset="swe-bench-lite")
    with pytest.raises(TaskFileError, match=r"b.jsonl:2: invalid JSON"):
        load_dataset(write_jsonl(tmp_path / "b.jsonl", [VERIFIED, "{oops"]))
    with pytest.raises(TaskFileError, match="duplicate id"):
        load_dataset(write_jsonl(tmp_path / "c.jsonl", [SWESMITH, SWESMITH]))
    parquet = write_parquet(tmp_path / "ok.parquet", [VERIFIED])
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if pyarrow were not installed
    with pytest.raises(ConfigError, match=r"pip install 'repogym\[datasets\]'"):
        load_dataset(parquet)


# --- the command ------------------------------------------------------------------------------------------

def test_import_command_writes_a_suite_and_counts_by_dataset(tmp_path, capsys):
    source = write_parquet(tmp_path / "smith.parquet", [SWESMITH, {**SWESMITH, "instance_id": SWESMITH["instance_id"] + "x"}])
    out = tmp_path / "suite.jsonl"
    assert main(["tasks", "import", str(source), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "imported 2 tasks" in printed and "swe-smith 2" in printed and f"wrote {out}" in printed
    assert len(load_tasks(out)) == 2
    mixed = write_jsonl(tmp_path / "mixed.jsonl", ALL)
    assert main(["tasks", "import", str(mixed), "--out", str(out), "--limit", "4"]) == 0
    printed = capsys.readouterr().out
    assert "imported 4 tasks" in printed
    assert "r2e-gym 1, swe-bench-verified 2, swe-smith 1" in printed
    assert [t.instance_id for t in load_tasks(out)] == ["astropy__astropy-12907", "django__django-11099",
                                                        SWESMITH["instance_id"], "r2e-gym__sympy-003029fe443c"]
    assert main(["tasks", "list", "--suite", str(out)]) == 0
    assert "4 tasks" in capsys.readouterr().out


def test_import_command_bad_file_is_exit_2_with_line_and_field(tmp_path, capsys):
    bad = write_jsonl(tmp_path / "bad.jsonl", [VERIFIED, {**DJANGO, "difficulty": "a weekend"}])
    out = tmp_path / "suite.jsonl"
    assert main(["tasks", "import", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2: field 'difficulty'" in err and "Traceback" not in err
    assert not out.exists()
    assert main(["tasks", "import", str(bad), "--out", str(out), "--limit", "0"]) == 2
    assert "positive --limit" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tasks", "import", str(bad), "--out", str(out), "--dataset", "nope"])


def test_import_command_shows_progress_on_long_files(tmp_path, capsys):
    rows = [{**SWESMITH, "instance_id": f"{SWESMITH['instance_id']}{n}"} for n in range(1200)]
    out = tmp_path / "suite.jsonl"
    assert main(["tasks", "import", str(write_jsonl(tmp_path / "long.jsonl", rows)), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "200/1200 rows" in captured.err and "1200/1200 rows" in captured.err and captured.err.endswith("\n")
    assert "imported 1200 tasks" in captured.out


def test_known_swebench_repos_get_the_builtin_environment(tmp_path):
    sympy = {**VERIFIED, "repo": "sympy/sympy", "instance_id": "sympy__sympy-13877", "version": "1.1"}
    rows = write_jsonl(tmp_path / "verified.jsonl", [VERIFIED, DJANGO, sympy])
    astropy, django, sympy_task = load_dataset(rows)
    assert "image" in astropy.setup and "runner" not in astropy.setup  # builds C extensions: the dataset's image
    assert django.setup["python"] == "3.9" and django.setup["runner"] == "django"
    assert django.setup["install"] == "python -m pip install -e ." and "asgiref==3.4.1" in django.setup["pip"]
    assert django.test_command == "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
    assert django.extra["dataset_image"] == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert sympy_task.setup["runner"] == "sympy" and sympy_task.test_command.endswith("bin/test -C --verbose")
    _, imaged, _ = load_dataset(rows, environments="images")
    assert imaged.setup == {"workdir": "/testbed", "image": django.extra["dataset_image"]}
    assert load_tasks(_saved(tmp_path, [django]))[0] == django  # the built-in environment is saved with the task
    with pytest.raises(ConfigError, match="unknown environments choice 'conda'"):
        load_dataset(rows, environments="conda")


def _saved(tmp_path, tasks):
    path = tmp_path / "saved.jsonl"
    save_tasks(tasks, path)
    return path


def test_import_command_skips_invalid_rows_and_checks_mirrors(tmp_path, capsys):
    bad = write_jsonl(tmp_path / "mixed.jsonl", [VERIFIED, {**DJANGO, "difficulty": "a weekend"},
                                                 {**DJANGO, "instance_id": "django__django-2"}, {"repo": "x/y"}])
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    out = tmp_path / "suite.jsonl"
    assert main(["tasks", "import", str(bad), "--out", str(out), "--skip-invalid", "--mirrors", str(mirrors)]) == 0
    printed = capsys.readouterr().out
    assert "imported 2 tasks" in printed and "environments: 1 built-in, 0 inferred, 1 from the dataset's images" in printed
    assert "skipped 2 invalid rows, by field: difficulty 1, instance_id 1" in printed
    assert "mirrors: 0 of 2 tasks" in printed and "no mirror: astropy/astropy 1, django/django 1" in printed
    assert [t.instance_id for t in load_tasks(out)] == ["astropy__astropy-12907", "django__django-2"]
