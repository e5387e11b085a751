"""The benchmark runner, its metrics and ``repogym bench``: estimators by hand, real runs on the local sandbox,
resume, a ``kill -9`` mid-run, and agent failures stored as data."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repogym.agents.oracle import OracleAgent
from repogym.agents.rollout import EpisodeResult
from repogym.agents.trajectory import Trajectory
from repogym.bench.db import EpisodeRow, ResultsDB
from repogym.bench.metrics import pass_at_k, summarize, summary_table, wilson
from repogym.bench.runner import BenchConfig, episode_row, plan, run_bench
from repogym.envs.core.errors import ConfigError, InfraError
from repogym.envs.core.status import Status
from repogym.envs.tasks.schema import Task
from repogym.envs.tasks.suites import load_suite
from repogym.cli import main
from tests.conftest import require_backend

ROOT = Path(__file__).resolve().parents[1]
STATUSES = {"resolved", "unresolved", "patch_failed", "infra_error", "not_submitted"}


def row(task: str = "t1", status: str = "resolved", sample: int = 0, agent: str = "a", **fields) -> EpisodeRow:
    return EpisodeRow(agent=agent, suite="s", task_id=task, sample=sample, seed=sample, status=status,
                      reward=None if status == "infra_error" else float(status == "resolved"), turns=4,
                      wall_s=1.0, **fields)


def task(instance_id: str, **fields) -> Task:
    return Task(instance_id=instance_id, repo="x/y", base_commit="0" * 40, problem_statement="fix it", **fields)


# -- estimators ----------------------------------------------------------------------------------------
def test_pass_at_k_by_hand():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - math.comb(7, 5) / math.comb(10, 5))
    assert pass_at_k(2000, 1, 1000) == pytest.approx(0.5)  # large n: no overflow
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(3, 1, 4)


def test_wilson_interval_values():
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)
    low, high = wilson(50, 100, z=2.576)  # 99%: wider than 95%
    assert low < wilson(50, 100)[0] and high > wilson(50, 100)[1]


def test_summary_excludes_infra_errors_from_rates():
    rows = [row("t1", "resolved", 0, tool_calls=4, well_formed=3),
            row("t1", "unresolved", 1, tool_calls=4, well_formed=4),
            row("t1", "infra_error", 2, tool_calls=9, well_formed=0), row("t2", "infra_error"),
            row("t3", "unresolved", tool_calls=2, well_formed=2)]
    [s] = summarize(rows)
    assert (s.episodes, s.tasks, s.infra_errors) == (5, 3, 2)
    assert s.infra_error_rate == pytest.approx(0.4)
    assert s.resolved_rate == pytest.approx((1 / 2 + 0) / 2)  # t2 (all infra) is out, t1's infra sample too
    assert (s.ci_low, s.ci_high) == pytest.approx(wilson(1, 3))
    assert s.pass_at_k == pytest.approx({1: 0.25})  # t3 has one valid sample: no pass@2
    assert s.format_adherence == pytest.approx(9 / 10)
    assert s.mean_turns == 4


def test_pass_at_k_in_summary_is_a_mean_over_tasks():
    rows = [row("t1", "resolved" if i < 2 else "unresolved", i) for i in range(5)]
    rows += [row("t2", "unresolved", i) for i in range(5)]
    [s] = summarize(rows)
    assert sorted(s.pass_at_k) == [1, 2, 3, 4, 5]
    assert s.pass_at_k[1] == pytest.approx(s.resolved_rate) == pytest.approx(0.2)
    assert s.pass_at_k[2] == pytest.approx((0.7 + 0.0) / 2)


def test_by_difficulty_long_horizon_apart_and_self_correction():
    rows = [row("easy1", "resolved", difficulty=1), row("easy2", "unresolved", difficulty=1),
            row("hard", "resolved", difficulty=3, long_horizon=True, self_corrected=True),
            row("mid", "unresolved", difficulty=2, prompt_tokens=100, completion_tokens=20)]
    [s] = summarize(rows)
    assert s.by_difficulty == {1: 0.5, 2: 0.0, 3: 1.0}
    assert (s.long_horizon, s.long_horizon_tasks, s.short_horizon) == (1.0, 1, pytest.approx(1 / 3))
    assert s.self_correction == 0.5
    assert s.mean_tokens == 30
    [plain] = summarize([row("t", "unresolved")])
    assert (plain.long_horizon, plain.self_correction, plain.format_adherence) == (None, None, None)


def test_summaries_per_agent_and_checkpoint_best_first():
    rows = [row(agent="b"), row(agent="a", status="unresolved"), row(agent="c"),
            row(agent="b", checkpoint="step-10", status="unresolved"), row(agent="z", status="infra_error")]
    order = [(s.agent, s.checkpoint, s.resolved_rate) for s in summarize(rows)]
    assert order[:4] == [("b", "", 1.0), ("c", "", 1.0), ("a", "", 0.0), ("b", "step-10", 0.0)]
    assert order[4][0] == "z" and math.isnan(order[4][2])  # nothing valid: last, never a fake 0
    table = summary_table(summarize(rows))
    assert "| b | s | step-10 |" in table and "100% (21%-100%)" in table


# -- rows and plans ----------------------------------------------------------------------------------------
def test_episode_row_counts_calls_errors_tokens_and_self_correction():
    steps = [{"type": "step", "action": "{}", "info": {"tool": "run_tests", "exit_code": 1},
              "agent": {"usage": {"prompt_tokens": 100, "completion_tokens": 20}}},
             {"type": "step", "action": "{}", "info": {"tool": "edit", "error": "edit_not_found"},
              "agent": {"tokens": {"prompt": [1, 2, 3], "completion": [4, 5], "logprobs": [0.0, 0.0]}}},
             {"type": "step", "action": "{}", "info": {"tool": "submit"}}]
    result = EpisodeResult("t", "a", "resolved", 1.0, 3, 2.5, {"status": "resolved"},
                           info={"well_formed_calls": 2, "reward_components": {"tests": 1.0}},
                           trajectory=Trajectory({}, steps, None))
    config = BenchConfig(agent="hf", agent_options={"path": "/models/qwen"}, label="qwen-sft")
    spec = plan(config, [task("t", difficulty=2, extra={"min_turns": 12})], set())[0]
    r = episode_row(config, spec, result)
    assert (r.agent, r.checkpoint, r.tool_calls, r.tool_errors, r.well_formed) == ("qwen-sft", "/models/qwen", 3, 1, 2)
    assert (r.prompt_tokens, r.completion_tokens) == (103, 22)
    assert r.self_corrected and r.long_horizon and r.difficulty == 2 and r.components == {"tests": 1.0}
    unresolved = EpisodeResult("t", "a", "unresolved", 0.0, 3, 2.5, {}, trajectory=Trajectory({}, steps, None))
    assert not episode_row(config, spec, unresolved).self_corrected
    infra = EpisodeResult("t", "a", "infra_error", float("nan"), 0, 0.1,
                          {"status": "infra_error", "error": {"where": "llm", "message": "down"}})
    r = episode_row(config, spec, infra)
    assert (r.status, r.reward, r.error) == ("infra_error", None, {"where": "llm", "message": "down"})


def test_statuses_are_status_values_and_nan_rewards_are_excluded(tmp_path):
    result = EpisodeResult("t", "a", "resolved", 1.0, 1, 0.1)
    assert result.status is Status.RESOLVED and result.resolved and not result.excluded
    # A NaN reward is excluded like an infrastructure failure, whatever the status says, and stored as one.
    lost = EpisodeResult("t", "a", "unresolved", float("nan"), 1, 0.1)
    assert lost.status is Status.UNRESOLVED and lost.excluded and not lost.resolved
    config = BenchConfig(agent="null", suite="s", db=tmp_path / "r.db")
    spec = plan(config, [task("t")], set())[0]
    stored = episode_row(config, spec, lost)
    assert (stored.status, stored.reward) == (Status.INFRA_ERROR, None) and stored.excluded
    # SQLite keeps the plain string; it reads back as a Status. An outcome Status does not name stays a string.
    with ResultsDB(tmp_path / "r.db") as db:
        db.add_episode(stored)
        db.add_episode(row("t2", "not_submitted"))
        raw = dict(db.conn.execute("SELECT status, typeof(status) AS kind FROM episodes WHERE task_id = 't'").fetchone())
        back = {r.task_id: r.status for r in db.episodes()}
    assert raw == {"status": "infra_error", "kind": "text"}
    assert back["t"] is Status.INFRA_ERROR and back["t2"] == "not_submitted"
    assert EpisodeRow(agent="a", suite="s", task_id="t", sample=0, seed=0, status="unresolved", reward=None,
                      turns=1, wall_s=1.0).excluded  # no reward: excluded from every rate


def test_unknown_agent_lists_the_agents_and_bad_options_are_config_errors():
    from repogym.agents import AGENTS, make_agent
    with pytest.raises(ConfigError) as caught:
        make_agent("nope")
    assert all(name in str(caught.value) for name in AGENTS.names())
    with pytest.raises(ConfigError, match="agent 'oracle' has no option 'bogus'; its options: context, style, suite"):
        make_agent("oracle", bogus=1)
    with pytest.raises(ConfigError, match="expected style 'patch' or 'edit'"):
        make_agent("oracle", style="diff")
    with pytest.raises(ConfigError, match="ReplayAgent"):
        make_agent("replay")


def test_plan_seeds_are_deterministic_and_skip_what_is_done(tmp_path):
    config = BenchConfig(agent="null", suite="s", db=tmp_path / "r.db", k=2)
    tasks = [task("t0"), task("t1")]
    specs = plan(config, tasks, set())
    assert [(s.task.instance_id, s.sample, s.seed) for s in specs] == [
        ("t0", 0, 0), ("t0", 1, 1), ("t1", 0, 1000), ("t1", 1, 1001)]
    assert specs[2].trajectory == (tmp_path / "r-trajectories" / "null" / "t1.s0.jsonl").resolve()
    done = {json.dumps(["null", "", "s", "t0", 1])}
    assert [(s.task.instance_id, s.sample) for s in plan(config, tasks, done)] == [("t0", 0), ("t1", 0), ("t1", 1)]


# -- configuration errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--agent", "nope", "--suite", "builtin"], "unknown agent 'nope'"),
    (["--agent", "null", "--suite", "no-such-suite"], "unknown suite 'no-such-suite'"),
    (["--agent", "null", "--suite", "builtin", "--k", "0"], "k must be in 1..1000, got 0"),
    (["--agent", "null", "--suite", "builtin", "--agent-config", "missing.yaml"], "cannot read agent config"),
])
def test_bad_arguments_are_clean_errors(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", *args, "--db", str(tmp_path / "r.db"), "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_bad_agent_config_files_are_clean_errors(tmp_path, capsys):
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "broken.json").write_text('{"model": ')
    (tmp_path / "bogus.yaml").write_text("bogus: 1\n")
    cases = [("list.yaml", "expected a mapping of options, got list"), ("broken.json", "not valid YAML or JSON"),
             ("bogus.yaml", "agent 'oracle' has no option 'bogus'")]
    for name, message in cases:
        assert main(["bench", "--agent", "oracle", "--suite", "builtin", "--limit", "1", "--sandbox", "local",
                     "--agent-config", str(tmp_path / name), "--db", str(tmp_path / "r.db"), "--no-progress"]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "r.db").exists()  # checked before the database (or a sandbox) is made


# -- real runs on the local sandbox --------------------------------------------------------------------------
def bench_args(db: Path, agent: str, limit: int | None, k: int = 1, concurrency: int = 1) -> list[str]:
    args = ["bench", "--agent", agent, "--suite", "builtin", "--k", str(k), "--concurrency", str(concurrency),
            "--db", str(db), "--sandbox", "local", "--no-progress"]
    return args + (["--limit", str(limit)] if limit else [])


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """oracle (k=2, two environments) and null (k=1) over the first two builtin tasks, through the CLI."""
    require_backend("local")
    db = tmp_path_factory.mktemp("bench") / "results.db"
    assert main(bench_args(db, "oracle", limit=2, k=2, concurrency=2)) == 0
    assert main(bench_args(db, "null", limit=2)) == 0
    return db


def assert_rows_complete(rows: list[EpisodeRow]) -> None:
    """Every field filled, and every trajectory a whole episode (an end line)."""
    for r in rows:
        assert r.status in STATUSES and r.finished_at and r.wall_s > 0 and r.difficulty is not None
        assert r.turns >= 1 and r.tool_calls == r.turns and r.well_formed == r.turns
        assert r.components == {"tests": r.reward} and r.error is None
        lines = Path(r.trajectory).read_text().splitlines()
        assert json.loads(lines[0])["type"] == "header" and json.loads(lines[-1])["type"] == "end"


@pytest.mark.slow
def test_oracle_resolves_and_null_does_not(small_run):
    with ResultsDB(small_run) as db:
        oracle, null = db.episodes(agent="oracle"), db.episodes(agent="null")
    assert len(oracle) == 4 and len(null) == 2
    assert all(r.resolved and r.reward == 1.0 for r in oracle)
    assert all(r.status == "unresolved" and r.reward == 0.0 for r in null)
    assert sorted((r.task_id, r.sample, r.seed) for r in oracle)[:2] == [
        (load_suite("builtin")[0].instance_id, 0, 0), (load_suite("builtin")[0].instance_id, 1, 1)]
    assert_rows_complete(oracle + null)
    with ResultsDB(small_run) as db:
        by_agent = {s.agent: s for s in summarize(db.episodes())}
    assert by_agent["oracle"].resolved_rate == 1.0 and by_agent["oracle"].pass_at_k == {1: 1.0, 2: 1.0}
    assert by_agent["null"].resolved_rate == 0.0 and by_agent["null"].infra_errors == 0


def test_rerun_runs_nothing_again(small_run, capsys):
    with ResultsDB(small_run) as db:
        before = db.episodes()
    mtimes = {r.trajectory: os.stat(r.trajectory).st_mtime_ns for r in before}
    assert main(bench_args(small_run, "oracle", limit=2, k=2, concurrency=2)) == 0
    out = capsys.readouterr()
    assert "4 already in" in out.err and "0 to run" in out.err
    assert "0 episodes stored this run" in out.out and "| oracle | builtin |" in out.out
    with ResultsDB(small_run) as db:
        assert db.episodes() == before
    assert {p: os.stat(p).st_mtime_ns for p in mtimes} == mtimes


class FailsOnTask:
    """The oracle, except that its model server "goes down" on one task."""

    def __init__(self, tasks: list[Task], bad: str):
        self.oracle, self.bad, self.task_id = OracleAgent(tasks=tasks), bad, None

    def reset(self, observation, info):
        self.task_id = info["task_id"]
        self.oracle.reset(observation, info)

    def act(self, observation, info):
        if self.task_id == self.bad:
            raise InfraError("llm", "connection refused")
        return self.oracle.act(observation, info)

    def turn_record(self):
        return None


@pytest.mark.slow
def test_agent_infra_errors_are_stored_as_data(tmp_path):
    require_backend("local")
    tasks = load_suite("builtin")[:2]
    config = BenchConfig(agent="flaky", suite="builtin", db=tmp_path / "r.db", limit=2, sandbox="local",
                         progress=False)
    report = run_bench(config, agent_factory=lambda: FailsOnTask(tasks, bad=tasks[1].instance_id))
    assert (report.planned, report.skipped, report.written) == (2, 0, 2)
    with ResultsDB(tmp_path / "r.db") as db:
        good, bad = db.episodes()
    assert good.resolved
    assert (bad.task_id, bad.status, bad.reward) == (tasks[1].instance_id, "infra_error", None)
    assert bad.error == {"where": "llm", "message": "connection refused"} and Path(bad.trajectory).exists()
    [s] = report.summaries
    assert (s.resolved_rate, s.infra_errors, s.infra_error_rate) == (1.0, 1, 0.5)


class Buggy:
    """An agent with a bug (not an infrastructure failure)."""

    def reset(self, observation, info):
        pass

    def act(self, observation, info):
        raise RuntimeError("agent bug")

    def turn_record(self):
        return None


def test_an_agent_bug_stops_the_run_and_propagates(tmp_path):
    require_backend("local")
    config = BenchConfig(agent="buggy", suite="builtin", db=tmp_path / "r.db", limit=1, sandbox="local",
                         progress=False)
    with pytest.raises(RuntimeError, match="agent bug"):
        run_bench(config, agent_factory=Buggy)
    assert stored(tmp_path / "r.db") == []


@pytest.mark.slow
def test_the_oracle_resolves_every_builtin_task_through_the_bench(tmp_path):
    """Every task end to end as an agent meets it (tool calls, submit, grading), through the bench CLI. (That the
    empty patch resolves none is test_builtin_suite's validation: three baselines per task on each backend.)"""
    require_backend("local")
    db = tmp_path / "results.db"
    assert main(bench_args(db, "oracle", limit=None, concurrency=2)) == 0
    with ResultsDB(db) as store:
        rows = store.episodes()
        (oracle,) = summarize(rows)
    n = len(load_suite("builtin"))
    assert len(rows) == n
    assert_rows_complete(rows)
    assert (oracle.agent, oracle.tasks, oracle.resolved_rate) == ("oracle", n, 1.0)
    assert set(oracle.by_difficulty.values()) == {1.0}


def bench_process(db: Path, limit: int) -> subprocess.Popen:
    """``repogym bench`` for null as a child process (the way a user runs it)."""
    return subprocess.Popen([sys.executable, "-m", "repogym.cli", *bench_args(db, "null", limit=limit)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def stored(db: Path) -> list[EpisodeRow]:
    if not db.exists():
        return []
    with ResultsDB(db) as store:
        return store.episodes()


@pytest.mark.slow
def test_kill_9_mid_run_loses_nothing_finished(tmp_path):
    require_backend("local")
    db, limit = tmp_path / "results.db", 3
    proc = bench_process(db, limit)
    deadline = time.monotonic() + 300
    while not stored(db) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.kill()  # SIGKILL: no cleanup of any kind
    output = proc.communicate()[0]
    kept = stored(db)
    assert 1 <= len(kept) < limit, output
    assert_rows_complete(kept)
    rerun = bench_process(db, limit)
    output = rerun.communicate(timeout=300)[0]
    assert rerun.returncode == 0, output
    assert f"{len(kept)} already in" in output
    rows = stored(db)
    assert len(rows) == limit and len({(r.task_id, r.sample) for r in rows}) == limit
    assert rows[:len(kept)] == kept
    assert_rows_complete(rows)


@pytest.mark.slow
def test_ctrl_c_stops_cleanly(tmp_path):
    require_backend("local")
    db, limit = tmp_path / "results.db", 3
    proc = bench_process(db, limit)
    while not stored(db) and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130 and "interrupted:" in output and "re-run the same command" in output
    kept = stored(db)
    assert 1 <= len(kept) < limit
    assert_rows_complete(kept)


def test_internal_errors_are_stored_apart_excluded_and_reported_loudly(tmp_path, monkeypatch, capsys):
    require_backend("local")
    from repogym.envs.repo_env import RepoTaskEnv

    def broken_tool(self, name):
        raise KeyError("a bug of ours")

    monkeypatch.setenv("REPOGYM_STRICT", "0")  # counted, not raised: as a real run sees it
    monkeypatch.setattr(RepoTaskEnv, "_tool", broken_tool)
    config = BenchConfig(agent="oracle", suite="builtin", db=tmp_path / "r.db", limit=1, sandbox="local",
                         progress=False)
    report = run_bench(config)
    assert report.internal_errors == 1
    [row] = stored(tmp_path / "r.db")
    assert (row.status, row.reward, row.excluded, row.internal_error) == (Status.INTERNAL_ERROR, None, True, True)
    assert row.error["where"] == "env.step" and "a bug of ours" in row.error["message"]
    [s] = report.summaries
    assert (s.internal_errors, s.infra_errors, s.episodes) == (1, 0, 1) and math.isnan(s.resolved_rate)
    assert "0 (0%) + 1 internal" in summary_table(report.summaries)
    err = capsys.readouterr().err
    assert "INTERNAL ERRORS: 1 of 1 episodes ended in a bug of repogym's" in err and "repogym.bugs" in err


def test_an_internal_error_row_keeps_its_status_and_a_nan_reward_row_is_an_infra_error(tmp_path):
    config = BenchConfig(agent="null", suite="s", db=tmp_path / "r.db")
    spec = plan(config, [task("t")], set())[0]
    error = {"where": "env.step", "message": "KeyError: 'x'"}
    bug = EpisodeResult("t", "a", Status.INTERNAL_ERROR, float("nan"), 2, 0.1, {"status": "internal_error",
                                                                              "error": error})
    row = episode_row(config, spec, bug)
    assert (row.status, row.reward, row.error) == (Status.INTERNAL_ERROR, None, error)
    infra = episode_row(config, spec, EpisodeResult("t", "a", "resolved", float("nan"), 2, 0.1))
    assert (infra.status, infra.reward) == (Status.INFRA_ERROR, None)
    [s] = summarize([row, infra, episode_row(config, spec, EpisodeResult("t", "a", "resolved", 1.0, 2, 0.1))])
    assert (s.episodes, s.infra_errors, s.internal_errors, s.resolved_rate) == (3, 1, 1, 1.0)
