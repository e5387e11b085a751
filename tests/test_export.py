"""Trajectories exported as one row per episode to JSONL and Parquet (and loaded back by Hugging Face datasets)."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest

from repogym.agents.errors import TrajectoryFileError
from repogym.agents.export import arrow_schema, episode_row, export_trajectories
from repogym.agents.hf import HFAgent, HFAgentConfig, HFEngine
from repogym.agents.oracle import OracleAgent
from repogym.agents.rollout import run_episode
from repogym.agents.trajectory import TRAJECTORY_FORMAT, read_trajectory
from repogym.cli import main
from repogym.envs.core.errors import ConfigError
from repogym.trainer.tiny import TinyModelConfig, build_tiny_model, build_tokenizer
from tests.conftest import require_backend

TINY = TinyModelConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                       num_kv_heads=1, max_position_embeddings=8192)


def write_lines(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def header(task_id, agent):
    return {"type": "header", "format": TRAJECTORY_FORMAT, "task_id": task_id, "agent": agent, "seed": 7,
            "observation": "Fix the bug."}


@pytest.fixture(scope="module")
def trajectories(tiny_task, tmp_path_factory):
    """Real episodes (the oracle: tool calls and a graded 1.0; a tiny hf model: tokens) and written ones (an llm
    agent's recorded OpenAI tool calls, an infrastructure failure, an unfinished file), in one folder."""
    require_backend("local")
    folder = tmp_path_factory.mktemp("trajectories")
    env = gym.make("repogym/RepoTask-v0", task=tiny_task, sandbox="local", max_turns=3).unwrapped
    try:
        oracle = run_episode(env, OracleAgent(tasks=[tiny_task]), agent_name="oracle",
                             trajectory=folder / "a-oracle.jsonl")
        tokenizer = build_tokenizer(['<tool_call>{"name": "submit", "arguments": {}}</tool_call>'] * 5, 300)
        hf = HFAgent(HFEngine(build_tiny_model(tokenizer, TINY), device="cpu"), tokenizer,
                     HFAgentConfig(max_new_tokens=12, seed=1, tools=["submit"]))
        run_episode(env, hf, seed=3, agent_name="hf", trajectory=folder / "b-hf.jsonl")
    finally:
        env.close()
    assert oracle.reward == 1.0
    call = {"id": "abc", "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}
    write_lines(folder / "c-llm.jsonl", [
        header("t-llm", "llm"),
        {"type": "step", "turn": 1, "action": '{"name": "bash", "arguments": {"command": "ls"}}',
         "observation": "README.md", "reward": 0.0, "terminated": False, "truncated": False, "info": {},
         "agent": {"message": {"role": "assistant", "content": None, "tool_calls": [call]}}},
        {"type": "step", "turn": 2, "action": "I give up", "observation": "error (parse_error): invalid JSON",
         "reward": 0.0, "terminated": False, "truncated": True, "info": {},
         "agent": {"message": {"role": "assistant", "content": "I give up"}}},
        {"type": "end", "status": "unresolved", "reward": 0.0, "eval": {}}])
    (folder / "d-infra.jsonl").write_text(json.dumps(header("t-infra", "llm")) + "\n"
                                          + '{"type": "end", "status": "infra_error", "reward": NaN, "eval": {}}\n')
    write_lines(folder / "e-unfinished.jsonl", [header("t-cut", "llm")])
    (folder / "run").mkdir()
    write_lines(folder / "run" / "metrics.jsonl", [{"step": 1, "loss": 0.5}])  # beside trajectories in a run dir
    return folder


@pytest.mark.slow
def test_rows_carry_messages_tool_calls_rewards_and_tokens(trajectories, tiny_task):
    oracle = episode_row(read_trajectory(trajectories / "a-oracle.jsonl"))
    assert (oracle["task_id"], oracle["status"], oracle["reward"]) == (tiny_task.instance_id, "resolved", 1.0)
    roles = [m["role"] for m in oracle["messages"]]
    assert roles == ["user"] + ["assistant", "tool"] * oracle["turns"] and oracle["turns"] >= 2
    assert tiny_task.problem_statement in oracle["messages"][0]["content"]
    calls = [m["tool_calls"][0] for m in oracle["messages"] if m["role"] == "assistant"]
    assert calls[-1]["function"]["name"] == "submit" and json.loads(calls[-1]["function"]["arguments"]) == {}
    answers = [m for m in oracle["messages"] if m["role"] == "tool"]
    assert [a["tool_call_id"] for a in answers] == [c["id"] for c in calls]
    assert oracle["input_ids"] is None and oracle["loss_mask"] is None  # the oracle records no tokens

    hf = episode_row(read_trajectory(trajectories / "b-hf.jsonl"))
    recorded = read_trajectory(trajectories / "b-hf.jsonl").tokens()
    assert hf["input_ids"] == recorded.ids and hf["loss_mask"] == recorded.mask and hf["logprobs"] == recorded.logprobs
    assert 0 in hf["loss_mask"] and 1 in hf["loss_mask"] and hf["context_starts"] == [0]
    assert hf["seed"] == 3 and len(hf["messages"]) == 1 + 2 * hf["turns"]

    llm = episode_row(read_trajectory(trajectories / "c-llm.jsonl"))
    first, answer, text, error = llm["messages"][1:5]
    assert first["tool_calls"] == [{"id": "abc", "type": "function",
                                    "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]
    assert first["content"] == '{"name": "bash", "arguments": {"command": "ls"}}'  # content None: the action
    assert (answer["role"], answer["tool_call_id"], answer["content"]) == ("tool", "abc", "README.md")
    # An action that did not parse has no tool call; the error observation answers it as a user message.
    assert (text["content"], text["tool_calls"]) == ("I give up", []) and error["role"] == "user"

    infra = episode_row(read_trajectory(trajectories / "d-infra.jsonl"))
    assert infra["status"] == "infra_error" and infra["reward"] is None  # NaN is no reward, never 0
    cut = episode_row(read_trajectory(trajectories / "e-unfinished.jsonl"))
    assert (cut["status"], cut["reward"], cut["turns"], cut["messages"][0]["content"]) == ("unfinished", None, 0,
                                                                                          "Fix the bug.")


def test_jsonl_and_parquet_hold_the_same_rows(trajectories, tmp_path):
    import pyarrow.parquet as pq

    summary = export_trajectories([trajectories], tmp_path / "out.jsonl")
    assert summary.rows == 5 and summary.skipped == [str(trajectories / "run" / "metrics.jsonl")]
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    export_trajectories([trajectories], tmp_path / "out.parquet")
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.schema.equals(arrow_schema()) and table.to_pylist() == lines
    assert [r["agent"] for r in lines] == ["oracle", "hf", "llm", "llm", "llm"]
    assert all(set(m) == {"role", "content", "tool_calls", "tool_call_id"} for r in lines for m in r["messages"])
    slim = export_trajectories([trajectories / "b-hf.jsonl"], tmp_path / "slim.jsonl", tokens=False)
    row = json.loads((tmp_path / "slim.jsonl").read_text())
    assert slim.rows == 1 and row["input_ids"] is None and row["messages"] == lines[1]["messages"]
    assert not any(isinstance(v, float) and math.isnan(v) for r in lines for v in r.values())


def test_bad_input_is_a_clear_error(trajectories, tmp_path):
    with pytest.raises(ConfigError, match=r"\.jsonl or \.parquet"):
        export_trajectories([trajectories], tmp_path / "out.csv")
    with pytest.raises(ConfigError, match="not found"):
        export_trajectories([tmp_path / "missing.jsonl"], tmp_path / "out.jsonl")
    with pytest.raises(TrajectoryFileError, match="no header"):  # named, not a trajectory: an error, not a skip
        export_trajectories([trajectories / "run" / "metrics.jsonl"], tmp_path / "out.jsonl")
    with pytest.raises(ConfigError, match="no trajectory files"):
        export_trajectories([trajectories / "run"], tmp_path / "out.jsonl")


def test_the_cli_writes_the_file_and_reports_errors_in_one_line(trajectories, tmp_path, capsys):
    assert main(["export", str(trajectories / "a-oracle.jsonl"), str(trajectories / "run"),
                 "--out", str(tmp_path / "x.parquet")]) == 0
    assert "wrote 1 episodes" in capsys.readouterr().out and (tmp_path / "x.parquet").is_file()
    assert main(["export", str(trajectories), "--out", str(tmp_path / "x.txt")]) == 2
    assert "repogym: error:" in capsys.readouterr().err


@pytest.mark.integrations
def test_datasets_loads_both_files_and_fields_round_trip(trajectories, tmp_path):
    import datasets  # in .venv-integrations only
    export_trajectories([trajectories], tmp_path / "out.jsonl")
    export_trajectories([trajectories], tmp_path / "out.parquet")
    expected = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    for kind in ("json", "parquet"):
        ds = datasets.load_dataset(kind, data_files=str(tmp_path / f"out.{kind.replace('json', 'jsonl')}"),
                                   split="train", cache_dir=str(tmp_path / f"cache-{kind}"))
        assert ds.num_rows == 5
        for got, want in zip(ds, expected):
            for key in ("task_id", "agent", "status", "reward", "turns", "input_ids", "loss_mask", "context_starts"):
                assert got[key] == want[key], (kind, key)
            assert got["logprobs"] == pytest.approx(want["logprobs"]) if want["logprobs"] else got["logprobs"] is None
            assert [(m["role"], m["content"], m["tool_call_id"]) for m in got["messages"]] == \
                [(m["role"], m["content"], m["tool_call_id"]) for m in want["messages"]]
            assert [m["tool_calls"] for m in got["messages"]] == [m["tool_calls"] for m in want["messages"]]
        hf = ds.filter(lambda r: r["agent"] == "hf")[0]
        assert len(hf["input_ids"]) == len(hf["loss_mask"]) > 0
