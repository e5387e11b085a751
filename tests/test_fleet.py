"""The rollout worker's boundary: the outside world's failures are infra_error outcomes, our own bugs are reported
(raised in strict mode, an internal_error outcome otherwise), and an outcome is the rollout's result plus the
fleet's facts."""

from __future__ import annotations

import json
import math

import pytest

from repogym.envs.core.bugs import bug_counts
from repogym.envs.core.errors import InfraError, InternalError
from repogym.envs.core.status import Status
from repogym.trainer.fleet import EpisodeOutcome, EpisodeRequest, LocalFleet, RolloutWorker, WorkerSpec, caused_outside

SUBMIT = json.dumps({"name": "submit", "arguments": {}})


class StubEnv:
    """Grades a submit as resolved (reward 1); ``fail`` raises it from ``step`` instead."""

    def __init__(self, fail: BaseException | None = None):
        self.fail, self.closed = fail, 0

    def reset(self, *, seed=None, options=None):
        return "fix the bug", {"task_id": (options or {}).get("task_id", "t")}

    def step(self, action):
        if self.fail is not None:
            raise self.fail
        info = {"task_id": "t", "eval": {"status": "resolved"}, "reward_components": {"resolved": 1.0}}
        return "graded", 1.0, True, False, info

    def close(self):
        self.closed += 1


def fleet_with(monkeypatch, env: StubEnv) -> LocalFleet:
    monkeypatch.setattr(RolloutWorker, "_env", lambda self: env)
    return LocalFleet(WorkerSpec(tasks=[], agent="null"))


def run_one(fleet: LocalFleet) -> EpisodeOutcome:
    fleet.submit([EpisodeRequest("t", seed=3)])
    [outcome] = fleet.wait()
    return outcome


def test_an_outcome_is_the_rollouts_result_plus_the_fleets_facts(monkeypatch):
    outcome = run_one(fleet_with(monkeypatch, StubEnv()))
    assert (outcome.status, outcome.reward, outcome.turns, outcome.resolved, outcome.excluded) == (
        Status.RESOLVED, 1.0, 1, True, False)
    assert outcome.request == EpisodeRequest("t", seed=3) and outcome.worker == 0 and outcome.branch is None
    assert outcome.components == {"resolved": 1.0} and outcome.error is None and outcome.version == 0


def test_a_bug_of_ours_in_a_worker_raises_in_strict_mode(monkeypatch):
    monkeypatch.setenv("REPOGYM_STRICT", "1")
    with pytest.raises(InternalError, match=r"\[fleet.worker\] ZeroDivisionError: division by zero"):
        run_one(fleet_with(monkeypatch, StubEnv(fail=ZeroDivisionError("division by zero"))))


def test_a_bug_of_ours_in_a_worker_is_an_internal_error_outcome_never_an_infra_error(monkeypatch):
    monkeypatch.setenv("REPOGYM_STRICT", "0")
    env = StubEnv(fail=ZeroDivisionError("division by zero"))
    before = bug_counts().get("fleet.worker: ZeroDivisionError", 0)
    outcome = run_one(fleet_with(monkeypatch, env))
    assert outcome.status is Status.INTERNAL_ERROR and outcome.excluded and math.isnan(outcome.reward)
    assert outcome.error == {"where": "fleet.worker", "message": "ZeroDivisionError: division by zero"}
    assert env.closed == 1  # the environment a bug went through is not reused
    assert bug_counts()["fleet.worker: ZeroDivisionError"] == before + 1  # counted (and logged once per kind)


def test_the_outside_worlds_failure_in_a_worker_is_an_infra_error_outcome(monkeypatch):
    monkeypatch.setenv("REPOGYM_STRICT", "1")  # not a bug: never raised, even in strict mode
    outcome = run_one(fleet_with(monkeypatch, StubEnv(fail=InfraError("sandbox.docker", "daemon gone"))))
    assert outcome.status is Status.INFRA_ERROR and outcome.excluded
    assert outcome.error == {"where": "sandbox.docker", "message": "daemon gone"}


def test_an_internal_error_the_env_caught_is_the_outcomes_status_not_a_reward(monkeypatch):
    class CaughtBug(StubEnv):
        def step(self, action):
            error = {"where": "env.step", "message": "KeyError: 'x'"}
            info = {"task_id": "t", "error": "internal_error", "internal_error": error,
                    "eval": {"status": "internal_error", "error": error}, "exclude": True}
            return "[internal error]", float("nan"), False, True, info

    outcome = run_one(fleet_with(monkeypatch, CaughtBug()))
    assert outcome.status is Status.INTERNAL_ERROR and outcome.excluded and math.isnan(outcome.reward)
    assert outcome.error == {"where": "env.step", "message": "KeyError: 'x'"}


def test_only_the_outside_worlds_errors_count_as_caused_outside():
    assert caused_outside(InfraError("llm", "refused"))
    assert not caused_outside(KeyError("x")) and not caused_outside(InternalError("env.step", "bug"))
