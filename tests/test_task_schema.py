"""A task that tests nothing pays everyone: loading refuses a task with no FAIL_TO_PASS test (or skips it, counted,
when told to), and a misspelt known field is an error naming the field it resembles, not a silent extra.

The attack these tests replay: a suite row whose FAIL_TO_PASS is deleted (or spelt ``fail_to_pass``, which used to
be kept as an unknown field) loaded, listed with "F2P 0", and the null agent scored it resolved in ``repogym bench``
(grading passes a task whose PASS_TO_PASS all pass when it has no FAIL_TO_PASS test to fail).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from repogym.bench.db import ResultsDB
from repogym.cli import main
from repogym.envs.core.errors import ConfigError, TaskCannotFail, TaskFileError
from repogym.envs.tasks import load_dataset, load_suite, load_tasks
from repogym.envs.tasks.schema import Task
from tests.conftest import require_backend

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = [json.loads(line) for line in (ROOT / "task_repos" / "builtin.jsonl").read_text().splitlines()
           if line.strip()]


def real(index: int = 0) -> dict:
    """A real builtin record (it has FAIL_TO_PASS and PASS_TO_PASS)."""
    return dict(BUILTIN[index])


def without_f2p(record: dict, instance_id: str) -> dict:
    """The attack: the same task with its FAIL_TO_PASS row deleted (PASS_TO_PASS kept, so grading passes it)."""
    copy = {k: v for k, v in record.items() if k != "FAIL_TO_PASS"}
    return {**copy, "instance_id": instance_id}


def misspelt(record: dict, instance_id: str, name: str = "fail_to_pass") -> dict:
    """The attack's other form: FAIL_TO_PASS under a name the schema does not know."""
    copy = without_f2p(record, instance_id)
    return {**copy, name: record["FAIL_TO_PASS"]}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# -- loading refuses a task that cannot fail --------------------------------------------------------------------
@pytest.mark.parametrize("f2p", [None, [], "[]", ""], ids=["deleted", "empty-list", "swebench-json-empty", "blank"])
def test_a_task_with_no_fail_to_pass_is_refused_naming_task_file_and_line(tmp_path, f2p):
    bad = without_f2p(real(), "attack__no-f2p")
    if f2p is not None:
        bad["FAIL_TO_PASS"] = f2p
    path = write_jsonl(tmp_path / "suite.jsonl", [real(), bad])
    with pytest.raises(TaskCannotFail) as err:
        load_tasks(path)
    assert isinstance(err.value, ConfigError) and isinstance(err.value, TaskFileError)
    assert err.value.line == 2 and err.value.field == "FAIL_TO_PASS"
    message = str(err.value)
    assert "suite.jsonl:2" in message and "'attack__no-f2p'" in message and "no FAIL_TO_PASS test" in message
    assert "--skip-no-f2p" in message  # the way out is named


def test_a_json_array_file_and_a_task_spec_are_refused_too(tmp_path):
    path = tmp_path / "suite.json"
    path.write_text(json.dumps([real(), without_f2p(real(), "attack__no-f2p")]))
    with pytest.raises(TaskCannotFail, match="suite.json.*'attack__no-f2p'"):
        load_tasks(path)
    with pytest.raises(TaskCannotFail, match="<task spec>"):
        Task.from_dict(without_f2p(real(), "x"), path="<task spec>")


def test_the_skip_flag_leaves_them_out_and_reports_the_count(tmp_path, caplog):
    path = write_jsonl(tmp_path / "suite.jsonl", [without_f2p(real(0), "attack__a"), real(0),
                                                 without_f2p(real(1), "attack__b"), real(1)])
    with caplog.at_level(logging.WARNING):
        tasks = load_tasks(path, skip_no_f2p=True)
    assert [t.instance_id for t in tasks] == [BUILTIN[0]["instance_id"], BUILTIN[1]["instance_id"]]
    assert all(t.FAIL_TO_PASS for t in tasks)
    [record] = [r for r in caplog.records if "FAIL_TO_PASS" in r.getMessage()]
    assert "skipped 2 tasks with no FAIL_TO_PASS" in record.getMessage() and "suite.jsonl" in record.getMessage()
    assert "attack__a" in record.getMessage() and "attack__b" in record.getMessage()
    # by suite path as well
    assert [t.instance_id for t in load_suite(str(path), skip_no_f2p=True)] == [t.instance_id for t in tasks]
    with pytest.raises(TaskCannotFail):
        load_suite(str(path))


def test_the_skip_flag_does_not_skip_a_misspelt_field(tmp_path):
    path = write_jsonl(tmp_path / "suite.jsonl", [real(), misspelt(real(), "attack__typo")])
    with pytest.raises(TaskFileError, match="did you mean 'FAIL_TO_PASS'"):
        load_tasks(path, skip_no_f2p=True)


def test_nothing_skipped_nothing_said(tmp_path, caplog):
    path = write_jsonl(tmp_path / "suite.jsonl", [real(0), real(1)])
    with caplog.at_level(logging.WARNING):
        assert len(load_tasks(path, skip_no_f2p=True)) == 2
    assert not [r for r in caplog.records if "skipped" in r.getMessage()]


# -- misspelt known fields ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, known", [
    ("fail_to_pass", "FAIL_TO_PASS"), ("FAIL_TO_PAS", "FAIL_TO_PASS"), ("Fail-To-Pass", "FAIL_TO_PASS"),
    ("FAILTOPASS", "FAIL_TO_PASS"), ("pass_to_pass", "PASS_TO_PASS"), ("test_comand", "test_command"),
    ("Test_Patch", "test_patch"), ("instance_ID", "instance_id"), ("base_comit", "base_commit"),
])
def test_a_field_spelt_like_a_known_one_is_an_error_naming_it(tmp_path, name, known):
    record = real()
    value = record.pop(known)
    path = write_jsonl(tmp_path / "x.jsonl", [real(1), real(2), {**record, name: value}])
    with pytest.raises(TaskFileError) as err:
        load_tasks(path)
    assert err.value.line == 3 and err.value.field == name
    assert f"unknown field {name!r}" in str(err.value) and f"did you mean {known!r}?" in str(err.value)
    assert "x.jsonl:3" in str(err.value)


def test_a_field_differing_only_by_case_is_an_error_even_beside_the_real_one(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{**real(), "fail_to_pass": ["tests/test_x.py::test_more"]}])
    with pytest.raises(TaskFileError, match="did you mean 'FAIL_TO_PASS'"):
        load_tasks(path)


@pytest.mark.parametrize("name", [
    # the extras repogym's own converters and generators write, and real datasets' columns
    "problem_statement_raw", "problem_statement_generated", "difficulty_text", "bug_patch", "dataset_image",
    "upstream_repo", "repo_name", "dataset", "horizon", "min_turns", "heldout", "taskgen", "family", "meta",
    "install_config", "expected_output_json", "docker_image", "image_name", "commit_hash", "some_future_field",
    "parsed_commit_content", "execution_result_content", "modified_files", "test_cmds", "environment",
    "requirements", "patches", "instance",
])
def test_other_unknown_fields_are_still_kept(tmp_path, name):
    path = write_jsonl(tmp_path / "x.jsonl", [{**real(), name: "kept"}])
    [task] = load_tasks(path)
    assert task.extra[name] == "kept"


def test_a_version_like_extra_beside_the_real_field_is_kept(tmp_path):
    # close in spelling, but the known field is there too: two fields, not a typo
    path = write_jsonl(tmp_path / "x.jsonl", [{**real(), "versions": ["0.1.0", "0.2.0"]}])
    [task] = load_tasks(path)
    assert task.version == "0.1.0" and task.extra["versions"] == ["0.1.0", "0.2.0"]


# -- datasets ---------------------------------------------------------------------------------------------------
SWEBENCH_ROW = {
    "repo": "psf/requests", "instance_id": "psf__requests-1", "base_commit": "a" * 40, "patch": "diff --git a/x b/x\n",
    "test_patch": "diff --git a/t b/t\n", "problem_statement": "Bug", "hints_text": "", "created_at": "2020",
    "version": "2.0", "FAIL_TO_PASS": "[\"test_requests.py::test_a\"]", "PASS_TO_PASS": "[\"test_requests.py::t\"]",
    "environment_setup_commit": "b" * 40,
}


def test_dataset_rows_with_json_string_lists_still_load_and_empty_ones_are_refused(tmp_path):
    empty = {**SWEBENCH_ROW, "instance_id": "psf__requests-2", "FAIL_TO_PASS": "[]"}
    path = write_jsonl(tmp_path / "swe.jsonl", [SWEBENCH_ROW, empty])
    [task] = load_dataset(path, limit=1)
    assert task.FAIL_TO_PASS == ["test_requests.py::test_a"]
    with pytest.raises(TaskCannotFail, match="swe.jsonl:2.*'psf__requests-2'"):
        load_dataset(path)
    skipped: list[TaskFileError] = []
    assert [t.instance_id for t in load_dataset(path, on_error=skipped.append)] == ["psf__requests-1"]
    assert [e.field for e in skipped] == ["FAIL_TO_PASS"]


def test_dataset_row_with_a_misspelt_field_names_it(tmp_path):
    row = {k: v for k, v in SWEBENCH_ROW.items() if k != "FAIL_TO_PASS"}
    path = write_jsonl(tmp_path / "swe.jsonl", [SWEBENCH_ROW, {**row, "instance_id": "b", "fail_to_pass": "[\"t\"]"}])
    with pytest.raises(TaskFileError, match="swe.jsonl:2.*did you mean 'FAIL_TO_PASS'"):
        load_dataset(path)


# -- the commands that load suites --------------------------------------------------------------------------------
@pytest.fixture()
def attack_suite(tmp_path) -> Path:
    """The first builtin task, then the attack's two forms of it."""
    return write_jsonl(tmp_path / "attack.jsonl", [real(0), without_f2p(real(0), "attack__deleted")])


def test_tasks_list_refuses_then_skips_with_a_count(attack_suite, capsys, caplog):
    assert main(["tasks", "list", "--suite", str(attack_suite)]) == 2
    err = capsys.readouterr().err
    assert "attack.jsonl:2" in err and "'attack__deleted'" in err and "no FAIL_TO_PASS test" in err
    with caplog.at_level(logging.WARNING):
        assert main(["tasks", "list", "--suite", str(attack_suite), "--skip-no-f2p"]) == 0
    out = capsys.readouterr().out
    assert "attack__deleted" not in out and "1 tasks" in out
    assert "skipped 1 task with no FAIL_TO_PASS" in caplog.text


def test_tasks_list_names_a_misspelt_field(tmp_path, capsys):
    path = write_jsonl(tmp_path / "x.jsonl", [real(0), real(1), misspelt(real(2), "attack__typo")])
    assert main(["tasks", "list", "--suite", str(path), "--skip-no-f2p"]) == 2
    err = capsys.readouterr().err
    assert "x.jsonl:3" in err and "unknown field 'fail_to_pass'" in err and "did you mean 'FAIL_TO_PASS'?" in err


def test_bench_refuses_a_suite_with_a_task_that_cannot_fail(attack_suite, tmp_path, capsys):
    db = tmp_path / "r.db"
    assert main(["bench", "--agent", "null", "--suite", str(attack_suite), "--db", str(db), "--sandbox", "local",
                 "--no-progress"]) == 2
    assert "'attack__deleted'" in capsys.readouterr().err
    assert not db.exists() or not ResultsDB(db).episodes()


@pytest.mark.slow
def test_bench_null_agent_resolves_nothing_with_the_skip_flag(attack_suite, tmp_path, caplog):
    require_backend("local")
    db = tmp_path / "r.db"
    with caplog.at_level(logging.WARNING):
        assert main(["bench", "--agent", "null", "--suite", str(attack_suite), "--db", str(db), "--sandbox", "local",
                     "--no-progress", "--skip-no-f2p"]) == 0
    assert "skipped 1 task with no FAIL_TO_PASS" in caplog.text
    with ResultsDB(db) as results:
        rows = results.episodes(agent="null")
    assert [r.task_id for r in rows] == [BUILTIN[0]["instance_id"]]
    assert not any(r.resolved for r in rows) and all(r.reward == 0.0 for r in rows)
