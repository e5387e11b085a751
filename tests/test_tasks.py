"""Task records: SWE-bench compatibility, defaults, round trips, and errors naming line and field."""

import json

import pytest

from repogym.envs.core.errors import ConfigError, TaskFileError
from repogym.envs.tasks import load_tasks, save_tasks
from repogym.envs.tasks.schema import DEFAULT_TEST_COMMAND, Task
from repogym.envs.tasks.suites import find_task, suite_path

SWEBENCH = {
    "repo": "astropy/astropy", "instance_id": "astropy__astropy-12907", "base_commit": "d16bfe05a7",
    "patch": "diff --git a/x b/x\n", "test_patch": "diff --git a/t b/t\n", "problem_statement": "Bug",
    "hints_text": "", "created_at": "2022-03-03T15:14:54Z", "version": "4.3",
    "FAIL_TO_PASS": "[\"astropy/tests/test_a.py::test_one\"]", "PASS_TO_PASS": "[]",
    "environment_setup_commit": "298ccb478e", "some_future_field": {"kept": True},
}


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_swebench_record_loads_unchanged_and_round_trips(tmp_path):
    path = write_jsonl(tmp_path / "swe.jsonl", [SWEBENCH])
    [task] = load_tasks(path)
    assert task.FAIL_TO_PASS == ["astropy/tests/test_a.py::test_one"]
    assert task.PASS_TO_PASS == []
    assert task.difficulty == 3 and task.setup == {} and task.test_command == DEFAULT_TEST_COMMAND
    assert task.extra == {"some_future_field": {"kept": True}}
    save_tasks([task], tmp_path / "out.jsonl")
    [again] = load_tasks(tmp_path / "out.jsonl")
    assert again == task
    assert json.loads((tmp_path / "out.jsonl").read_text())["some_future_field"] == {"kept": True}


@pytest.mark.parametrize("change, field, words", [
    ({"difficulty": "hard"}, "difficulty", "integer 1..5"),
    ({"difficulty": 9}, "difficulty", "integer 1..5"),
    ({"FAIL_TO_PASS": "not json"}, "FAIL_TO_PASS", "list of test ids"),
    ({"PASS_TO_PASS": [1, 2]}, "PASS_TO_PASS", "list of strings"),
    ({"setup": "pip"}, "setup", "object"),
    ({"base_commit": ""}, "base_commit", "non-empty"),
])
def test_bad_field_names_line_and_field(tmp_path, change, field, words):
    path = write_jsonl(tmp_path / "bad.jsonl", [SWEBENCH, {**SWEBENCH, "instance_id": "b", **change}])
    with pytest.raises(TaskFileError) as err:
        load_tasks(path)
    assert err.value.line == 2 and err.value.field == field
    assert words in str(err.value) and "bad.jsonl:2" in str(err.value)


@pytest.mark.parametrize("text, level", [("<15 min fix", 1), ("15 min - 1 hour", 2), ("1-4 hours", 4),
                                         (">4 hours", 5)])
def test_swebench_verified_difficulty_text_maps_and_round_trips(tmp_path, text, level):
    path = write_jsonl(tmp_path / "verified.jsonl", [{**SWEBENCH, "difficulty": text}])
    [task] = load_tasks(path)
    assert task.difficulty == level and task.extra["difficulty_text"] == text
    assert task.public_view()["difficulty"] == level
    save_tasks([task], tmp_path / "out.jsonl")
    saved = json.loads((tmp_path / "out.jsonl").read_text())
    assert saved["difficulty"] == level and saved["difficulty_text"] == text
    assert load_tasks(tmp_path / "out.jsonl") == [task]


def test_unknown_difficulty_text_lists_the_buckets(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{**SWEBENCH, "difficulty": "2 days"}])
    with pytest.raises(TaskFileError) as err:
        load_tasks(path)
    assert err.value.field == "difficulty" and err.value.line == 1
    assert "'2 days'" in str(err.value) and "'<15 min fix', '15 min - 1 hour', '1-4 hours', '>4 hours'" in str(err.value)


def test_missing_field_and_bad_json_and_duplicates(tmp_path):
    record = dict(SWEBENCH)
    del record["problem_statement"]
    with pytest.raises(TaskFileError, match="problem_statement.*missing"):
        load_tasks(write_jsonl(tmp_path / "a.jsonl", [record]))
    with pytest.raises(TaskFileError, match=r"b.jsonl:2: invalid JSON"):
        load_tasks(write_jsonl(tmp_path / "b.jsonl", [SWEBENCH, "{oops"]))
    with pytest.raises(TaskFileError, match="duplicate id"):
        load_tasks(write_jsonl(tmp_path / "c.jsonl", [SWEBENCH, SWEBENCH]))


def test_public_view_hides_gold_and_hidden_tests():
    task = Task.from_dict(SWEBENCH)
    view = task.public_view()
    assert "patch" not in view and "test_patch" not in view and "FAIL_TO_PASS" not in view


def test_unknown_suite_lists_valid_names():
    with pytest.raises(ConfigError, match="builtin"):
        suite_path("no-such-suite")


def test_builtin_suite_shape():
    from repogym.envs.tasks.suites import load_suite
    tasks = load_suite("builtin")
    assert len(tasks) >= 30
    assert {t.difficulty for t in tasks} >= {1, 2, 3}
    assert len({t.repo for t in tasks}) >= 3
    for task in tasks:
        assert task.patch.startswith("diff --git") and task.test_patch.startswith("diff --git")
        assert task.FAIL_TO_PASS and task.PASS_TO_PASS
        assert not set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS)
    with pytest.raises(ConfigError, match="no task"):
        find_task("nope")


@pytest.mark.parametrize("typed, closest", [
    ("repogym__tablekit-wrap-long-word-ordr", "repogym__tablekit-wrap-long-word-order"),  # a typo in the whole id
    ("tablekit-zero-header-label", "repogym__tablekit-zero-header-label"),  # the owner left out
    ("someone__cfgparse-dollar-escape-in-lists", "repogym__cfgparse-dollar-escape-in-lists"),  # the wrong owner
    ("tablekit-wrap", "repogym__tablekit-wrap-"),  # the start of a long id
])
def test_an_unknown_task_id_names_the_closest_ids(typed, closest):
    with pytest.raises(ConfigError) as caught:
        find_task(typed)
    message = str(caught.value)
    assert message.startswith(f"no task {typed!r} in suite 'builtin' (48 tasks; closest: {closest}")
    assert message.partition("closest: ")[2].count("repogym__") <= 3  # at most three matches
    assert message.endswith("; list its ids with `repogym tasks list --suite builtin`")


def test_an_id_like_no_other_says_so_and_select_tasks_keeps_the_suites_order(tmp_path):
    from repogym.envs.tasks.suites import load_suite, select_tasks
    with pytest.raises(ConfigError, match=r"no task 'zz' in suite 'builtin' \(48 tasks; no close match\); list its"):
        find_task("zz")
    tasks = load_suite("builtin")
    picked = select_tasks(tasks, [tasks[3].instance_id, tasks[1].instance_id, tasks[3].instance_id], "builtin")
    assert picked == [tasks[1], tasks[3]]
    with pytest.raises(ConfigError, match=r"no tasks 'zz', 'yy' in suite 'builtin' \(48 tasks\): 'zz' \(no close"):
        select_tasks(tasks, ["zz", tasks[0].instance_id, "yy", "zz"], "builtin")
