"""Best-of-n at test time: one task's episode forked into n branches, a verifier picks one, only it is graded.

:func:`run_best_of_n` resets the environment on the task, forks the episode into n branches there (the source is
branch 0, :meth:`repogym.envs.repo_env.RepoTaskEnv.fork` gives the other n - 1) and drives each branch with its own
agent. When a branch's agent calls ``submit``, the submit is held back: the task's visible tests run in a throw-away
fork of that branch through the environment's own ``run_tests`` tool action (the verifier is exactly what the
agent could have run; the branch itself keeps its turn count and episode state), and the branch scores
(tests passed / tests run, then fewer turns). A branch that ends otherwise (turn limit, infrastructure error,
context overflow, a killed sandbox) scores below every branch that submitted. Then the held-back submit is
stepped in the best branch only: its graded outcome is the best-of-n result.

Guarantees:
- branch 0 runs with the trial's own seed (so it is the pass@1 episode of that seed up to its submit); branch b
  gets ``seed + b * BRANCH_SEED_STRIDE`` in its agent's reset info, with ``info["branch"] = b`` and
  ``info["best_of_n"] = n``;
- the hidden tests grade one branch per trial, never more: nothing but the visible tests selects the branch;
- every branch writes its own trajectory (``<base>.b<index>.jsonl``); its header and end line carry a
  ``best_of_n`` record (n, branch, whether it was chosen, its verifier score). A submitted branch that was not
  chosen ends with status ``not_chosen`` and no reward;
- when the episode cannot be forked (:class:`repogym.envs.core.errors.ForkRefused`) the trial is one plain episode
  (branch 0 only), recorded with ``fallback`` set to the reason; an infrastructure failure (reset, fork, the
  agent's server) never raises: the trial is an ``infra_error``;
- every fork is closed before this returns; the source environment is not (it is the caller's).

Not guaranteed: branches run one after another (a trial takes about n episodes of wall time); whether any branch
would have resolved (an oracle upper bound) is not computed, since it would take n gradings per trial.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from repogym.agents.errors import ContextOverflow
from repogym.agents.rollout import UNKNOWN_STATUS
from repogym.agents.trajectory import TRAJECTORY_FORMAT, TrajectoryWriter, status_of
from repogym.envs.actions import parse_action
from repogym.envs.core.errors import ForkRefused, InfraError, ToolError
from repogym.bench.db import Outcome
from repogym.envs.core.status import Status

BRANCH_SEED_STRIDE = 1_000_000
"""Branch seeds never collide with a pass@1 seed (task index * 1000 + sample) while a suite has < 1000 tasks."""
NOT_CHOSEN = "not_chosen"
"""End status of a branch that submitted but was not picked: never graded, no reward."""
VERIFY_ACTION = json.dumps({"name": "run_tests", "arguments": {}})


@dataclass
class Branch:
    """One branch of a trial as it runs."""

    index: int
    env: Any
    agent: Any
    seed: int
    writer: TrajectoryWriter
    path: Path
    obs: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    turns: int = 0
    submit: str | None = None
    """The held-back submit action (None: the branch did not submit)."""
    submit_turn: dict[str, Any] | None = None
    """What the agent recorded of its submit turn (``turn_record``)."""
    verifier: dict[str, Any] | None = None
    """``{"passed", "run", ...}`` of the verifier run (submitted branches)."""
    end: dict[str, Any] | None = None
    """``{"status", "reward", "eval", "info"}`` once the branch has ended (by itself or by its graded submit)."""

    @property
    def length(self) -> int:
        """Turns of the branch's episode, a held-back submit included (the same before and after it is stepped)."""
        return self.turns + (self.submit is not None and self.end is None)

    @property
    def score(self) -> tuple:
        """Higher is better: submitted first, then tests passed / run, then fewer turns, then the lower index."""
        if self.submit is None:
            return (0, 0.0, -self.length, -self.index)
        v = self.verifier or {}
        ratio = v["passed"] / v["run"] if v.get("run") else 0.0
        return (1, ratio, -self.length, -self.index)

    def record(self, chosen: bool) -> dict[str, Any]:
        """The branch as stored in the results row and its trajectory's end line."""
        return {"branch": self.index, "seed": self.seed, "turns": self.length, "submitted": self.submit is not None,
                "verifier": self.verifier, "chosen": chosen, "trajectory": str(self.path),
                "status": str(self.end["status"]) if self.end else NOT_CHOSEN}


@dataclass
class BestOfNResult(Outcome):
    """What one best-of-n trial came to: the chosen branch's graded outcome and every branch's score."""

    task_id: str
    n: int
    """Branches asked for."""
    branches: int
    """Branches run: n, or 1 after a fallback."""
    chosen: int | None
    """Index of the graded branch (None when the trial failed before any branch ran)."""
    status: Status | str
    reward: float
    turns: int
    """Turns of the chosen branch."""
    duration_s: float
    eval: dict[str, Any] = field(default_factory=dict)
    scores: list[dict[str, Any]] = field(default_factory=list)
    """One :meth:`Branch.record` per branch, by index."""
    fallback: str | None = None
    """Why the episode could not be forked (the trial is then one plain episode); None when it was."""
    trajectory: str | None = None
    """The chosen branch's trajectory file."""

    @property
    def error(self) -> dict[str, str] | None:
        """Where and what went wrong (``eval["error"]``), or None."""
        return self.eval.get("error")



def branch_path(base: str | Path, index: int) -> Path:
    """The trajectory file of branch ``index`` of the trial whose base path is ``base`` (``X.jsonl`` -> ``X.b<i>.jsonl``)."""
    base = Path(base)
    return base.with_name(f"{base.name.removesuffix('.jsonl')}.b{index}.jsonl")


def is_submit(action: Any) -> bool:
    """``action`` is a well-formed call of ``submit`` (a malformed one is stepped like any action)."""
    try:
        return parse_action(action).name == "submit"
    except ToolError:  # unparsable: the environment's to answer when it is stepped
        return False


def run_best_of_n(env, agents: list, *, task_id: str, seed: int, n: int, agent_name: str = "agent",
                  trajectory: str | Path | None = None) -> BestOfNResult:
    """One best-of-``n`` trial of ``task_id`` in ``env`` (see the module docstring); ``agents`` holds at least n
    agents, one per branch. ``trajectory`` is the trial's base path (branch files are :func:`branch_path` of it)."""
    if len(agents) < n:
        raise ValueError(f"best-of-{n} needs {n} agents, got {len(agents)}")
    start = time.monotonic()
    base = Path(trajectory) if trajectory else None

    def failed(where: str, message: str, scores=None, chosen=None) -> BestOfNResult:
        record = {"status": Status.INFRA_ERROR, "error": {"where": where, "message": message}}
        return BestOfNResult(task_id, n, len(scores or []), chosen, Status.INFRA_ERROR, float("nan"), 0,
                             time.monotonic() - start, record, scores or [])

    try:
        obs, info = env.reset(seed=seed, options={"task_id": task_id})
    except InfraError as exc:
        return failed(exc.where, exc.message)
    source = env.unwrapped
    forks, fallback = [], None
    if n > 1:
        try:
            forks = source.fork(n - 1)
        except ForkRefused as exc:
            fallback = exc.message
        except InfraError as exc:
            return failed(exc.where, exc.message)
    branches: list[Branch] = []
    try:
        for index, branch_env in enumerate([env, *forks]):
            path = branch_path(base, index) if base else None
            branch = Branch(index, branch_env, agents[index], seed + index * BRANCH_SEED_STRIDE,
                            TrajectoryWriter(path), path or Path(""), obs, dict(info))
            branches.append(branch)
            branch.writer.write({"type": "header", "format": TRAJECTORY_FORMAT, "task_id": info["task_id"],
                                 "agent": agent_name, "seed": branch.seed, "observation": obs,
                                 "best_of_n": {"n": n, "branch": index, "fork": branch_env.unwrapped.fork_info,
                                               "fallback": fallback}})
            branch.agent.reset(obs, {**info, "seed": branch.seed, "branch": index, "best_of_n": n})
        for branch in branches:
            _drive(branch, hold_submit=len(branches) > 1)
            if branch.submit is not None:
                branch.verifier = _verify(branch)
        best = max(branches, key=lambda b: b.score)
        if best.end is None:  # it submitted: grade that submit, and only it
            _step(best, best.submit, best.submit_turn)
        for branch in branches:
            end = branch.end or {"status": NOT_CHOSEN, "reward": None, "eval": {}}
            branch.writer.write({"type": "end", "status": end["status"], "reward": end["reward"], "eval": end["eval"],
                                 "best_of_n": branch.record(branch is best)})
        scores = [b.record(b is best) for b in branches]
        end = best.end
        return BestOfNResult(task_id, n, len(branches), best.index, end["status"], end["reward"], best.turns,
                             time.monotonic() - start, end["eval"], scores, fallback,
                             str(best.path) if base else None)
    except InfraError as exc:  # a trajectory file that cannot be written: the machine's failure, not the agent's
        return failed(exc.where, exc.message)
    finally:
        for branch in branches:
            branch.writer.close()
        for fork in forks:  # forks before their source, as fork() asks
            fork.close()


def _drive(branch: Branch, hold_submit: bool) -> None:
    """Run ``branch`` until it ends or (``hold_submit``) its agent asks to submit."""
    while branch.end is None:
        try:
            action = branch.agent.act(branch.obs, branch.info)
        except InfraError as exc:
            record = {"status": Status.INFRA_ERROR, "error": exc.record()}
            branch.end = {"status": Status.INFRA_ERROR, "reward": float("nan"), "eval": record}
            return
        except ContextOverflow as exc:  # the policy's limit: a 0 for this branch
            record = {"status": Status.CONTEXT_OVERFLOW, "error": {"where": "agent.context", "message": str(exc)}}
            branch.end = {"status": Status.CONTEXT_OVERFLOW, "reward": 0.0, "eval": record}
            return
        turn = branch.agent.turn_record()
        if hold_submit and is_submit(action):
            branch.submit, branch.submit_turn = action, turn
            return
        _step(branch, action, turn)


def _step(branch: Branch, action: str, turn: dict[str, Any] | None) -> None:
    """Step ``action`` in the branch's environment, write the step, and note the end when it ends the episode."""
    obs, reward, terminated, truncated, info = branch.env.step(action)
    branch.turns += 1
    step = {"type": "step", "turn": branch.turns, "action": action, "observation": obs, "reward": reward,
            "terminated": terminated, "truncated": truncated, "info": {k: v for k, v in info.items() if k != "eval"}}
    if turn:
        step["agent"] = turn
    branch.writer.write(step)
    branch.obs, branch.info = obs, info
    if "internal_error" in info:  # a bug of ours ended the branch: excluded, never a reward
        record = {"status": Status.INTERNAL_ERROR, "error": info["internal_error"]}
        branch.end = {"status": Status.INTERNAL_ERROR, "reward": float("nan"), "eval": record}
    elif terminated or truncated:
        record = info.get("eval", {})
        branch.end = {"status": status_of(record.get("status", UNKNOWN_STATUS)), "reward": reward, "eval": record}


def _verify(branch: Branch) -> dict[str, Any]:
    """The visible tests of ``branch`` now, run through ``run_tests`` in a throw-away fork of it (so the branch's
    own turn count and episode state stay the agent's): ``{"passed", "run", "counts", ...}``."""
    try:
        [probe] = branch.env.unwrapped.fork(1)
    except (ForkRefused, InfraError) as exc:
        return {"passed": 0, "run": 0, "counts": {}, "error": f"no verifier fork: {exc}"}
    try:
        # The verifier's own step may hit the turn limit: end it without grading (the hidden tests must not run).
        probe.config = replace(probe.config, grade_on_truncation=False)
        _, _, _, _, info = probe.step(VERIFY_ACTION)
    finally:
        probe.close()
    counts = {k: int(v) for k, v in (info.get("counts") or {}).items()}
    result = {"passed": counts.get("passed", 0), "run": sum(v for k, v in counts.items() if k != "skipped"),
              "counts": counts}
    if info.get("error") or info.get("infra_error"):
        result["error"] = info.get("infra_error") or info["error"]
    return result


__all__ = ["BRANCH_SEED_STRIDE", "BestOfNResult", "NOT_CHOSEN", "branch_path", "is_submit", "run_best_of_n"]
