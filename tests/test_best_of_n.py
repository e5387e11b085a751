"""Best-of-n at test time (issue 24): a verifier (the visible tests through ``run_tests``) picks one of n forked
branches and only it is graded; the result is stored and reported apart from pass@1.

Real runs on the local sandbox with the ``tiny_task`` fixture (visible tests: ``add`` and ``clamp`` inside its
range; both pass at the base and with the gold patch) and scripted agents that read their branch index."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from repogym.bench.best_of_n import BRANCH_SEED_STRIDE, NOT_CHOSEN, branch_path, is_submit, run_best_of_n
from repogym.bench.db import BestOfNRow, ResultsDB
from repogym.bench.leaderboard import best_of_n_markdown
from repogym.bench.metrics import best_of_n_table, summarize, summarize_best_of_n
from repogym.bench.runner import BenchConfig, run_bench
from repogym.cli import main
from repogym.envs.core.errors import ConfigError, ForkRefused
from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from repogym.envs.tasks.schema import save_tasks
from tests.conftest import require_backend


def call(name: str, **arguments) -> str:
    return json.dumps({"name": name, "arguments": arguments})


# clamp(x, low, high) -> low: breaks the visible test_clamp_inside (1 of 2 visible tests pass).
WRONG = call("edit", path="calc/ops.py", old="return max(low, min(x, high - 1))", new="return low")
IDLE = call("view", path="calc/ops.py")


def gold(task) -> str:
    return call("apply_patch", patch=task.patch)


class Scripted:
    """Plays ``scripts[info["branch"]]`` (branch 0 outside best-of-n), then submits; ``None`` in a script means
    "never submit" (it views a file until the turn limit). Every reset's info is logged to ``seen``."""

    def __init__(self, scripts: dict[int, list[str] | None], seen: list[dict] | None = None):
        self.scripts, self.seen, self.queue, self.idle = scripts, seen, [], False

    def reset(self, observation, info):
        if self.seen is not None:
            self.seen.append({k: info.get(k) for k in ("branch", "seed", "best_of_n")})
        script = self.scripts[info.get("branch", 0)]
        self.idle, self.queue = script is None, list(script or [])

    def act(self, observation, info):
        if self.idle:
            return IDLE
        return self.queue.pop(0) if self.queue else call("submit")

    def turn_record(self):
        return None


@pytest.fixture(scope="module")
def suite(tiny_task, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("suite") / "tiny.jsonl"
    save_tasks([tiny_task], path)
    return str(path)


def config(db: Path, suite: str, **fields) -> BenchConfig:
    return BenchConfig(agent="scripted", suite=suite, db=db, sandbox="local", max_turns=4, progress=False, **fields)


# -- no sandbox ------------------------------------------------------------------------------------------
def test_branch_paths_submit_detection_and_config_bounds():
    assert branch_path("/t/x.s0.best3.jsonl", 2) == Path("/t/x.s0.best3.b2.jsonl")
    assert is_submit(call("submit")) and not is_submit(IDLE) and not is_submit("not json") and not is_submit(None)
    with pytest.raises(ConfigError, match="best_of must be in 1..64, got 0"):
        BenchConfig(agent="null", best_of=0)


def test_best_of_n_summaries_are_per_n_and_show_pass_at_1_beside():
    def trial(task, status, n=3, fallback=None):
        return BestOfNRow(agent="a", suite="s", task_id=task, sample=0, seed=0, n=n, branches=n, chosen=0,
                          status=status, reward=None if status == "infra_error" else float(status == "resolved"),
                          turns=2, wall_s=1.0, fallback=fallback)
    rows = [trial("t1", "resolved"), trial("t2", "unresolved", fallback="too big"), trial("t3", "infra_error"),
            trial("t1", "unresolved", n=5)]
    three, five = summarize_best_of_n(rows)
    assert (three.n, three.trials, three.tasks, three.rate, three.fallbacks, three.infra_errors) == (3, 3, 3, 0.5, 1, 1)
    assert (five.n, five.rate) == (5, 0.0)
    assert math.isnan(summarize_best_of_n([trial("t", "infra_error")])[0].rate)  # nothing valid: no rate, never 0
    table = best_of_n_table([three], [])
    assert "| a | s | - | 3 | 3 | 3 | - | 50% (" in table


# -- real trials on the local sandbox -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(suite, tiny_task, tmp_path_factory):
    """A pass@1 run (branch 0's script: the wrong fix), then best-of-3: wrong fix / gold / never submits."""
    require_backend("local")
    db = tmp_path_factory.mktemp("bon") / "r.db"
    scripts = {0: [WRONG], 1: [gold(tiny_task)], 2: None}
    plain = run_bench(config(db, suite), agent_factory=lambda: Scripted(scripts))
    with ResultsDB(db) as store:
        before = store.episodes()
    seen: list[dict] = []
    best = run_bench(config(db, suite, best_of=3), agent_factory=lambda: Scripted(scripts, seen))
    return db, plain, before, best, seen


@pytest.mark.slow
def test_best_of_3_picks_the_branch_the_visible_tests_favour(runs):
    db, _, _, report, seen = runs
    with ResultsDB(db) as store:
        [trial] = store.best_of_n()
    assert (trial.n, trial.branches, trial.chosen, trial.status, trial.reward) == (3, 3, 1, "resolved", 1.0)
    assert trial.fallback is None and trial.turns == 2
    wrong, right, idle = trial.scores
    assert (wrong["verifier"]["passed"], wrong["verifier"]["run"], wrong["chosen"]) == (1, 2, False)
    assert (right["verifier"]["passed"], right["verifier"]["run"], right["chosen"]) == (2, 2, True)
    assert not idle["submitted"] and idle["verifier"] is None and idle["turns"] == 4  # ended by the turn limit
    # Each branch had its own agent, told its index, with a seed of its own.
    assert [(s["branch"], s["seed"], s["best_of_n"]) for s in seen] == [(b, b * BRANCH_SEED_STRIDE, 3) for b in range(3)]
    [summary] = report.best_of_n
    assert (summary.n, summary.rate, summary.trials, summary.fallbacks) == (3, 1.0, 1, 0)


def test_each_branch_writes_its_trajectory_and_only_the_chosen_is_graded(runs):
    db, *_ = runs
    with ResultsDB(db) as store:
        [trial] = store.best_of_n()
    ends = []
    for index, score in enumerate(trial.scores):
        lines = [json.loads(line) for line in Path(score["trajectory"]).read_text().splitlines()]
        assert score["trajectory"].endswith(f".s0.best3.b{index}.jsonl")
        assert lines[0]["type"] == "header" and lines[0]["best_of_n"]["branch"] == index
        assert lines[-1]["type"] == "end" and lines[-1]["best_of_n"]["chosen"] == (index == 1)
        steps = [line for line in lines if line["type"] == "step"]
        assert all(json.loads(s["action"])["name"] != "run_tests" for s in steps)  # the verifier ran in a fork
        ends.append((lines[-1]["status"], lines[-1]["reward"]))
    assert ends[0] == (NOT_CHOSEN, None)  # submitted, not chosen: never graded
    assert ends[1] == ("resolved", 1.0) and trial.trajectory == trial.scores[1]["trajectory"]
    assert ends[2][0] == "unresolved"  # the turn limit graded what it had (nothing)


def test_pass_at_1_rows_are_untouched_by_best_of_n(runs):
    db, plain, before, best, _ = runs
    with ResultsDB(db) as store:
        assert store.episodes() == before
        [summary] = summarize(store.episodes())
    assert len(before) == 1 and before[0].status == "unresolved"  # the wrong fix, as a plain episode
    assert summary.resolved_rate == 0.0 and summary.episodes == 1
    assert plain.best_of_n == [] and [s.resolved_rate for s in best.summaries] == [0.0]


def test_a_rerun_of_best_of_n_runs_nothing_again(runs, suite, tiny_task):
    db, *_ = runs
    again = run_bench(config(db, suite, best_of=3), agent_factory=lambda: Scripted({}))
    assert (again.planned, again.skipped, again.written) == (1, 1, 0)


def test_leaderboard_shows_best_of_n_apart_from_pass_at_1(runs, tmp_path, capsys):
    db, *_ = runs
    assert main(["leaderboard", "--db", str(db), "--html", str(tmp_path / "board.html")]) == 0
    out = capsys.readouterr().out
    ranked, best = out.split("Best-of-n at test time")
    assert "| scripted |" in ranked and "| 0.0% [0.0, " in ranked and "100.0% [" not in ranked  # pass@1 only
    assert "| scripted | " in best and "| 3 | 0.0% | 100.0% [" in best
    page = (tmp_path / "board.html").read_text()
    assert 'id="best-of-n"' in page and page.index('id="leaderboard"') < page.index('id="best-of-n"')
    with ResultsDB(db) as store:
        assert "| 3 |" in best_of_n_markdown(summarize_best_of_n(store.best_of_n()), summarize(store.episodes()))


@pytest.mark.slow
def test_a_verifier_tie_goes_to_the_branch_with_fewer_turns(tiny_task, tmp_path):
    require_backend("local")
    # Branch 0 would resolve (gold after a look around: 3 turns); branch 1 submits the untouched base at once
    # (1 turn). The visible tests pass in both (2/2): the tie goes to fewer turns, even though it loses.
    scripts = {0: [IDLE, gold(tiny_task)], 1: []}
    env = RepoTaskEnv(task=tiny_task, sandbox="local", max_turns=6, config=EnvConfig(fork_pool_size=1))
    try:
        result = run_best_of_n(env, [Scripted(scripts), Scripted(scripts)], task_id=tiny_task.instance_id, seed=7,
                               n=2, trajectory=tmp_path / "t.jsonl")
    finally:
        env.close()
    first, second = result.scores
    assert first["verifier"]["passed"] == second["verifier"]["passed"] == first["verifier"]["run"] == 2
    assert (first["turns"], second["turns"]) == (3, 1)  # the submit counts, held back or stepped
    assert (result.chosen, result.status, result.reward, result.branches) == (1, "unresolved", 0.0, 2)
    assert result.trajectory == str(tmp_path / "t.b1.jsonl")


def test_fork_refused_falls_back_to_one_plain_episode(suite, tiny_task, tmp_path, monkeypatch):
    require_backend("local")

    def refuse(self, n):
        raise ForkRefused("over the size limit")
    monkeypatch.setattr(RepoTaskEnv, "fork", refuse)
    scripts = {0: [WRONG], 1: [gold(tiny_task)], 2: None}
    report = run_bench(config(tmp_path / "r.db", suite, best_of=3), agent_factory=lambda: Scripted(scripts))
    with ResultsDB(tmp_path / "r.db") as store:
        [trial] = store.best_of_n()
        assert store.episodes() == []  # a fallback is still a best-of-n trial, never a pass@1 row
    assert (trial.branches, trial.chosen, trial.fallback) == (1, 0, "over the size limit")
    assert (trial.status, trial.reward, trial.turns) == ("unresolved", 0.0, 2)  # branch 0's wrong fix, submitted
    assert [s["branch"] for s in trial.scores] == [0] and trial.scores[0]["verifier"] is None
    assert not branch_path(trial.trajectory, 1).exists() and Path(trial.trajectory).exists()
    [summary] = report.best_of_n
    assert (summary.fallbacks, summary.rate) == (1, 0.0)


@pytest.mark.slow
def test_cli_option_parses_runs_and_is_in_help(suite, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "--best-of N" in capsys.readouterr().out
    db = tmp_path / "r.db"
    assert main(["bench", "--agent", "null", "--suite", suite, "--db", str(db), "--best-of", "0", "--no-progress"]) == 2
    assert "best_of must be in 1..64, got 0" in capsys.readouterr().err
    require_backend("local")
    assert main(["bench", "--agent", "null", "--suite", suite, "--db", str(db), "--sandbox", "local",
                 "--best-of", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "1 best-of-2 trials stored this run" in out and "best-of-n (a verifier picks the branch" in out
    with ResultsDB(db) as store:
        [trial] = store.best_of_n()
        assert store.episodes() == []
    # null submits at once in both branches: a tie on tests and turns goes to branch 0.
    assert (trial.n, trial.branches, trial.chosen, trial.status) == (2, 2, 0, "unresolved")
    assert not math.isnan(trial.reward)
