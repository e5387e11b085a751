"""The ``repogym`` command line."""

import argparse
import json

import pytest

from repogym.cli import build_parser, main


def test_tasks_list_table_and_json(capsys):
    assert main(["tasks", "list"]) == 0
    out = capsys.readouterr().out
    assert "repogym__tablekit-" in out and out.strip().endswith("tasks")
    assert main(["tasks", "list", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert len(records) >= 30 and {"patch", "test_patch", "FAIL_TO_PASS", "difficulty", "setup"} <= set(records[0])


def test_unknown_suite_is_a_clean_error(capsys):
    assert main(["tasks", "list", "--suite", "nope"]) == 2
    assert "unknown suite 'nope'" in capsys.readouterr().err


@pytest.mark.slow
def test_validate_one_task_from_a_file(tmp_path, capsys, tiny_task):
    path = tmp_path / "tiny.jsonl"
    path.write_text(json.dumps(tiny_task.to_dict()) + "\n")
    assert main(["validate", "--tasks", str(path), "--sandbox", "local", "--gold-runs", "0"]) == 2
    assert "expected a positive --gold-runs, got 0" in capsys.readouterr().err
    # Gold graded twice: the two grades agree, so the task is valid (a disagreement: test_rewards.py).
    assert main(["validate", "--tasks", str(path), "--sandbox", "local", "--gold-runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "1/1 tasks valid" in out and "twins 1/1 F2P" in out
    assert "twins: 1/1 FAIL_TO_PASS tests (100.0%) have a must-fail twin; 0 unprotected in 0 task(s)" in out
    # A hidden test no twin can be made for (it expects nothing) is named, and counted against the share.
    bare = dict(tiny_task.to_dict(), instance_id="tiny__calc-bare",
                test_patch=tiny_task.test_patch.replace("assert clamp(15, 0, 10) == 10", "clamp(15, 0, 10)"))
    path.write_text(json.dumps(bare) + "\n")
    main(["validate", "--tasks", str(path), "--sandbox", "local"])
    out = capsys.readouterr().out
    assert "no twin (unprotected): tests/test_hidden.py::test_clamp_above" in out
    assert "twins: 0/1 FAIL_TO_PASS tests (0.0%) have a must-fail twin; 1 unprotected in 1 task(s)" in out
    bad = dict(tiny_task.to_dict(), PASS_TO_PASS=["tests/test_hidden.py::test_clamp_above"], FAIL_TO_PASS=[])
    path.write_text(json.dumps(bad) + "\n")
    # A task with no FAIL_TO_PASS test cannot fail: the file is refused before any sandbox starts.
    assert main(["validate", "--tasks", str(path), "--sandbox", "local"]) == 2
    assert "'tiny__calc-1' has no FAIL_TO_PASS test" in capsys.readouterr().err


@pytest.mark.slow
def test_validate_resumes_from_its_results_and_tables_the_causes(tmp_path, capsys, tiny_task):
    # Two tasks: one valid, one whose environment cannot be made here (the local sandbox runs one Python).
    path, results = tmp_path / "two.jsonl", tmp_path / "verdicts.jsonl"
    other = dict(tiny_task.to_dict(), instance_id="tiny__calc-py39", setup={**tiny_task.setup, "python": "3.9"})
    path.write_text(json.dumps(tiny_task.to_dict()) + "\n" + json.dumps(other) + "\n")
    assert main(["validate", "--tasks", str(path), "--sandbox", "local", "--results", str(results)]) == 1
    out = capsys.readouterr().out
    assert "1/2 tasks valid" in out and "[2/2]" in out
    table = {line.split()[0]: int(line.split()[1]) for line in out.splitlines() if line.startswith("  ")
             and len(line.split()) > 1 and line.split()[1].isdigit()}
    assert table == {"valid": 1, "env_build": 1}
    assert "needs Python 3.9" in out
    verdicts = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(v["instance_id"] for v in verdicts) == ["tiny__calc-1", "tiny__calc-py39"]
    # A rerun validates nothing again (a torn last line from a killed run is ignored) and keeps the summary.
    results.write_text(results.read_text() + '{"instance_id": "tiny__calc-')
    assert main(["validate", "--tasks", str(path), "--sandbox", "local", "--results", str(results)]) == 1
    out = capsys.readouterr().out
    assert "validating 0 task(s)" in out and "2 already in" in out and "1/2 tasks valid" in out
    # Resuming after the torn line: a new task's verdict lands on a line of its own.
    third = dict(other, instance_id="tiny__calc-py39-b")
    path.write_text(path.read_text() + json.dumps(third) + "\n")
    assert main(["validate", "--tasks", str(path), "--sandbox", "local", "--results", str(results)]) == 1
    assert json.loads(results.read_text().splitlines()[-1])["instance_id"] == "tiny__calc-py39-b"


@pytest.mark.slow
def test_demo_runs_oracle_and_null(tmp_path, capsys):
    assert main(["demo", "--limit", "2", "--sandbox", "local", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| oracle |" in out and "| null |" in out
    oracle_row = next(line for line in out.splitlines() if line.startswith("| oracle |"))
    null_row = next(line for line in out.splitlines() if line.startswith("| null |"))
    assert "2/2 (100%)" in oracle_row and "0/2 (0%)" in null_row
    lines = (tmp_path / "oracle").glob("*.jsonl")
    first = [json.loads(line) for line in next(lines).read_text().splitlines()]
    assert first[0]["format"] == "repogym.trajectory/2" and first[-1]["type"] == "end"


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("tasks", "validate", "demo", "images", "gc"):
        assert command in out


def _commands(parser, path=("repogym",)):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _commands(child, path + (name,))


def test_every_command_and_option_has_help_text():
    commands = list(_commands(build_parser()))
    assert {path[1] for path, _ in commands if len(path) > 1} >= {"tasks", "validate", "demo", "bench", "analyze",
                                                                "images", "gc", "train", "leaderboard", "show"}
    for path, parser in commands:
        assert parser.description and len(parser.description) > 30, f"{' '.join(path)}: no description"
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                listed = {a.dest: a.help for a in action._choices_actions}
                assert set(listed) == set(action.choices) and all(listed.values()), f"{' '.join(path)}: {listed}"
                continue
            assert action.help, f"{' '.join(path)} {action.option_strings or action.dest}: no help"


def test_choices_and_agent_names_come_from_the_registries(capsys):
    from repogym.agents import AGENTS
    from repogym.envs.sandbox import BACKENDS
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"one of {', '.join(AGENTS.names())}" in out and "{" + ",".join(BACKENDS.names()) + "}" in out


@pytest.mark.slow
def test_replay_agent_plays_back_a_trajectory(tmp_path, tiny_task):
    import gymnasium as gym

    from repogym.agents import make_agent
    from repogym.agents.rollout import run_episode
    env = gym.make("repogym/RepoTask-v0", task=tiny_task, sandbox="local", max_turns=5)
    try:
        oracle = make_agent("oracle", tasks=[tiny_task])
        first = run_episode(env, oracle, agent_name="oracle", trajectory=tmp_path / "t.jsonl")
        replay = make_agent("replay", path=str(tmp_path / "t.jsonl"))
        again = run_episode(env, replay, agent_name="replay")
        assert first.status == again.status == "resolved" and again.turns == first.turns == 2
    finally:
        env.close()


def test_validate_names_a_task_whose_repository_is_missing(tmp_path, capsys, tiny_task):
    path = tmp_path / "gone.jsonl"
    gone = dict(tiny_task.to_dict(), instance_id="tiny__gone", setup={"source": f"path:{tmp_path / 'nowhere'}"})
    path.write_text(json.dumps(gone) + "\n")
    assert main(["validate", "--tasks", str(path), "--sandbox", "local"]) == 1
    out = capsys.readouterr().out
    assert "no_source" in out and "repository not available" in out and "nowhere" in out
