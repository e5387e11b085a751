"""The rollout fleet: workers that each own environments and an inference client, running episodes.

A :class:`RolloutWorker` holds ``envs_per_worker`` environments, an engine (transformers in-process, or a
client of a shared vLLM engine actor) and one agent per environment. :class:`RayFleet` runs workers as
Ray actors (threaded, so their episodes and weight updates interleave) and replaces a worker that dies,
rescheduling its episodes; :class:`LocalFleet` runs one worker in-process for tests and debugging.
Both are a :class:`Fleet`: they take requests with ``submit`` and hand back finished episodes with ``wait``.
"""

from __future__ import annotations

import logging
import queue
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from repogym.agents import Agent
from repogym.agents.rollout import EpisodeResult
from repogym.agents.trajectory import TokenSequence
from repogym.envs.core.bugs import report_bug
from repogym.envs.core.errors import ConfigError, InfraError
from repogym.envs.core.registry import Registry
from repogym.envs.repo_env import EnvConfig
from repogym.envs.step_info import ErrorInfo
from repogym.envs.core.status import Status
from repogym.trainer.branching import Branch, BranchingConfig, branch_path, branching_rollout

log = logging.getLogger(__name__)

POLICY_TOKENIZER = "policy"
"""``env.tokenizer`` of a training run: the rollout worker gives each env the policy's own tokenizer. Filled in
when ``env.max_observation_tokens`` is set without a tokenizer (EnvConfig needs one to count with)."""


@dataclass(frozen=True)
class EpisodeRequest:
    """One episode to run: a task, a seed, and the group (GRPO) it belongs to."""

    task_id: str
    seed: int
    group: int = 0
    tag: str = "train"
    """``train``, ``eval`` or ``sft``: where the result goes (and the trajectory folder)."""
    temperature: float | None = None
    """Overrides the agent's sampling temperature (evaluations)."""


@dataclass
class EpisodeOutcome(EpisodeResult):
    """A finished episode as the learner needs it: the rollout's :class:`~repogym.agents.rollout.EpisodeResult`
    (status, reward, turns, duration, tokens, error; ``excluded``, ``resolved``, ``components``) and the fleet's own
    facts, given by keyword."""

    trajectory: str | None = None
    """The file the episode was written to (None: not written). The records themselves stay on the worker: an
    outcome crosses Ray, and carries only what the learner reads."""
    request: EpisodeRequest = field(kw_only=True)
    generate_s: float = field(default=0.0, kw_only=True)
    """Time spent in the inference engine (the environment idles meanwhile)."""
    worker: int = field(default=-1, kw_only=True)
    branch: Branch | None = field(default=None, kw_only=True)
    """With branching (:mod:`repogym.trainer.branching`): which continuation of which branch point this is, or
    why the episode did not branch; None when branching is off."""

    @classmethod
    def of(cls, result: EpisodeResult, *, request: EpisodeRequest, generate_s: float, worker: int,
           trajectory: str | None, duration_s: float, tokens: TokenSequence | None,
           branch: Branch | None = None) -> "EpisodeOutcome":
        """The outcome of a rollout's ``result``: its facts, the last step's info cut to what the learner reads."""
        return cls(result.task_id, result.agent, result.status, result.reward, result.turns, duration_s, result.eval,
                   tokens, {"reward_components": result.components}, trajectory, result.error, request=request,
                   generate_s=generate_s, worker=worker, branch=branch)

    @classmethod
    def failed(cls, request: EpisodeRequest, status: Status, error: ErrorInfo, *, agent: str, worker: int,
               duration_s: float = 0.0, trajectory: str | None = None) -> "EpisodeOutcome":
        """An episode that ended before the rollout could say how (``infra_error`` or ``internal_error``): NaN
        reward, no turns."""
        return cls(request.task_id, agent, status, float("nan"), 0, duration_s, {"status": status, "error": error},
                   trajectory=trajectory, error=error, request=request, worker=worker)

    @property
    def version(self) -> int:
        """Oldest policy version that generated any token of the episode."""
        return min(self.tokens.versions) if self.tokens and self.tokens.versions else 0


@dataclass
class WorkerSpec:
    """What a worker builds: its environments, engine and agents."""

    tasks: list[Any]
    """Task objects the environments may be asked for."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The environments' config; a ``tokenizer`` of None or ``"policy"`` becomes the worker's (the policy's)."""
    agent: str = "hf"
    agent_options: dict[str, Any] = field(default_factory=dict)
    model_path: str | None = None
    """Model folder for the in-process engine and the tokenizer."""
    engine_handles: list[Any] = field(default_factory=list)
    """Ray handles of shared engine actors (vLLM); empty: an in-process transformers engine."""
    engine_pool: Any = None
    """The :class:`~repogym.trainer.inference.engine_pool.EnginePool` actor that owns ``engine_handles`` and
    replaces one that dies (None: a dead engine is an infra error)."""
    envs_per_worker: int = 1
    trajectory_dir: str | None = None
    format_options: dict[str, Any] = field(default_factory=dict)
    """The hf agent's prompt options (system prompt, tools), to tokenise other agents' episodes as SFT data."""
    branching: BranchingConfig | None = None
    """Branch ``train`` episodes (:mod:`repogym.trainer.branching`); None or ``at: off``: plain episodes."""

    def __post_init__(self):
        if not isinstance(self.env, EnvConfig):
            raise TypeError(f"WorkerSpec.env: expected an EnvConfig, got {type(self.env).__name__}")
        if self.branching is not None and self.branching.enabled and self.agent != "hf":
            raise ConfigError(f"branching needs an agent that can fork (hf), got agent {self.agent!r}")


class _TimedEngine:
    """Wraps an engine to add up the time spent generating."""

    def __init__(self, engine):
        self.engine, self.seconds = engine, 0.0

    @property
    def version(self) -> int:
        return self.engine.version

    @property
    def max_model_len(self) -> int | None:
        return self.engine.max_model_len

    def generate(self, prompts, params):
        start = time.monotonic()
        try:
            return self.engine.generate(prompts, params)
        finally:
            self.seconds += time.monotonic() - start

    def update_weights(self, state_dict, version):
        self.engine.update_weights(state_dict, version)


def caused_outside(exc: BaseException) -> bool:
    """Whether ``exc`` is the outside world's doing, not a bug of ours: an :class:`InfraError` (a sandbox, a model
    server, an engine actor, as the stack names them), a Ray failure other than a task's own exception (an actor
    or node that died, an object lost, a timeout), or the Docker daemon's error."""
    if isinstance(exc, InfraError):
        return True
    # Looked up among loaded modules: one never imported cannot have raised (and Ray and Docker stay optional).
    ray_errors = sys.modules.get("ray.exceptions")
    if ray_errors is not None and isinstance(exc, ray_errors.RayError) and not isinstance(exc, ray_errors.RayTaskError):
        return True
    docker_errors = sys.modules.get("docker.errors")
    return docker_errors is not None and isinstance(exc, docker_errors.DockerException)


class RolloutWorker:
    """Runs episodes on its own environments with its own agents (one of each per slot)."""

    def __init__(self, spec: WorkerSpec, worker_id: int = 0):
        self.spec, self.worker_id = spec, worker_id
        self.tokenizer, self.engine = None, None
        if spec.model_path:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(spec.model_path, local_files_only=True)
        if spec.agent == "hf":
            if spec.engine_handles:
                from repogym.trainer.inference import RayEngineClient
                from repogym.trainer.inference.engine_pool import pool_client

                index = worker_id % len(spec.engine_handles)
                handle = spec.engine_handles[index]
                self.engine = (pool_client(spec.engine_pool, index, handle) if spec.engine_pool is not None
                               else RayEngineClient(handle))
            else:
                from repogym.agents.hf import HFEngine

                self.engine = HFEngine.from_pretrained(spec.model_path, dtype="float32", device="cpu")
        self._slots: queue.Queue = queue.Queue()
        self._envs: list[dict] = []
        for _ in range(spec.envs_per_worker):
            slot = {"env": None}
            self._envs.append(slot)
            self._slots.put(slot)
        _reap_dead_owners_here()  # what a killed worker of this node left: its pid is provably gone

    def _env(self):
        import gymnasium as gym

        config = self.spec.env
        if config.tokenizer in (None, POLICY_TOKENIZER):
            # Usage and the token budget count the policy's tokens; no policy (a scripted agent): characters only.
            config = replace(config, tokenizer=self.tokenizer)
        if self._branching() is not None and config.fork_pool_size == 0:
            # Forks from warm sandboxes: a branch point does not wait for group - 1 sandboxes to start.
            config = replace(config, fork_pool_size=self.spec.branching.group - 1)
        return gym.make("repogym/RepoTask-v0", tasks=self.spec.tasks, config=config).unwrapped

    def _agent(self, request: EpisodeRequest) -> tuple[Agent, _TimedEngine | None]:
        """The agent for ``request``, and the timer of its engine (None: an agent without an engine of ours)."""
        if self.spec.agent == "hf":
            from repogym.agents.hf import HFAgent, HFAgentConfig

            config = HFAgentConfig(**self.spec.agent_options)
            if request.temperature is not None:
                config = replace(config, temperature=request.temperature)
            timer = _TimedEngine(self.engine)
            return HFAgent(timer, self.tokenizer, config), timer
        from repogym.agents import make_agent

        options = dict(self.spec.agent_options)
        if self.spec.agent == "oracle":
            options.setdefault("tasks", self.spec.tasks)
        return make_agent(self.spec.agent, **options), None

    def _branching(self, request: EpisodeRequest | None = None) -> BranchingConfig | None:
        """The branching config that applies (to ``request``: training episodes only), or None."""
        b = self.spec.branching
        if b is None or not b.enabled or (request is not None and request.tag != "train"):
            return None
        return b

    def run(self, request: EpisodeRequest) -> EpisodeOutcome:
        """Run one plain episode (never branched); infrastructure failures come back as an ``infra_error`` outcome."""
        return self._run(request, None)[0]

    def run_all(self, request: EpisodeRequest) -> list[EpisodeOutcome]:
        """Every outcome of one request: its episode, or with ``spec.branching`` (training requests) one per
        continuation of its branch point, the source first (the fleets hand them back in this order)."""
        return self._run(request, self._branching(request))

    def _run(self, request: EpisodeRequest, branching: BranchingConfig | None) -> list[EpisodeOutcome]:
        from repogym.agents.rollout import run_episode

        slot = self._slots.get()
        start = time.monotonic()
        trajectory = None
        if self.spec.trajectory_dir:
            name = f"{request.task_id}.s{request.seed}.jsonl"
            trajectory = str(Path(self.spec.trajectory_dir) / request.tag / name)
        try:
            if slot["env"] is None:
                slot["env"] = self._env()
            agent, timer = self._agent(request)
            if branching is not None:
                return [self._outcome(request, c.result, c.generate_s, branch_path(trajectory, c.branch.index),
                                      c.result.duration_s, c.branch)
                        for c in branching_rollout(slot["env"], agent, branching, task_id=request.task_id,
                                                   seed=request.seed, agent_name=self.spec.agent,
                                                   trajectory=trajectory)]
            result = run_episode(slot["env"], agent, task_id=request.task_id, seed=request.seed,
                                 agent_name=self.spec.agent, trajectory=trajectory)
            generate_s = timer.seconds if timer is not None else 0.0
            return [self._outcome(request, result, generate_s, trajectory, time.monotonic() - start)]
        # The worker's boundary: a bad rollout is data, never a dead worker. What the outside world caused (a
        # sandbox, a daemon, an engine actor, Ray) is an infra_error outcome; anything else is a bug of ours,
        # reported (raised in strict mode) and returned as an internal_error outcome. Both are excluded.
        except Exception as exc:
            self._drop_env(slot, exc)
            if caused_outside(exc):
                status = Status.INFRA_ERROR
                error: ErrorInfo = (exc.record() if isinstance(exc, InfraError)
                                   else {"where": "fleet.worker", "message": f"{type(exc).__name__}: {exc}"})
            else:
                status, error = Status.INTERNAL_ERROR, report_bug("fleet.worker", exc).record()
            return [EpisodeOutcome.failed(request, status, error, agent=self.spec.agent, worker=self.worker_id,
                                          duration_s=time.monotonic() - start, trajectory=trajectory)]
        finally:
            self._slots.put(slot)

    def _drop_env(self, slot: dict, why: BaseException) -> None:
        """Close the slot's environment after a failed episode (its next episode makes a fresh one)."""
        env, slot["env"] = slot["env"], None
        if env is None:
            return
        try:
            env.close()
        except Exception as exc:  # its sandbox's daemon or runner is likely what just failed: nothing more to do
            log.warning("worker %d: could not close the environment of a failed episode (%s: %s) after %s: %s",
                        self.worker_id, type(why).__name__, why, type(exc).__name__, exc)

    def _outcome(self, request: EpisodeRequest, result: EpisodeResult, generate_s: float, trajectory: str | None,
                 duration_s: float, branch: Branch | None = None) -> EpisodeOutcome:
        tokens = result.tokens
        if tokens is None and self.tokenizer is not None and not result.excluded:
            from repogym.trainer.sft_data import teacher_forced_tokens

            tokens = teacher_forced_tokens(result.trajectory, self.tokenizer, self.spec.format_options)
        return EpisodeOutcome.of(result, request=request, generate_s=generate_s, worker=self.worker_id,
                                 trajectory=trajectory, duration_s=duration_s, tokens=tokens, branch=branch)

    def set_weights(self, state_dict, version: int) -> int:
        """Load new policy weights into the in-process engine."""
        if self.engine is not None and not self.spec.engine_handles:
            self.engine.update_weights(state_dict, version)
        return version

    def ping(self) -> int:
        return self.worker_id

    def owner(self) -> str:
        """This worker's owner id (host, pid, start time): what its sandboxes are labelled with."""
        from repogym.envs.sandbox.owner import owner_id

        return owner_id()

    def close(self) -> int:
        """Close every environment of this worker (its sandboxes and pools); returns how many were open."""
        closed = 0
        for slot in self._envs:
            if slot["env"] is not None:
                try:
                    slot["env"].close()
                    closed += 1
                except Exception as exc:  # a daemon or a sandbox runner that is already gone: gc reaps what is left
                    log.warning("worker %d: could not close an environment: %s: %s", self.worker_id,
                                type(exc).__name__, exc)
                slot["env"] = None
        return closed


def _wait_gone(owners: list[str], timeout_s: float) -> None:
    """Wait until the processes of these owner ids (on this host) have exited, or ``timeout_s`` passed."""
    from repogym.envs.sandbox.owner import owner_alive

    deadline = time.monotonic() + timeout_s
    while owners and time.monotonic() < deadline:
        owners = [o for o in owners if owner_alive(o, stale_after_s=1e9)]
        if owners:
            time.sleep(0.2)


def _reap_dead_owners_here() -> None:
    """Remove what dead owners on this host left (best effort: a failure here must not stop a worker or the driver)."""
    try:
        from repogym.envs.sandbox.gc import reap_dead_owners_here

        report = reap_dead_owners_here()
        removed = [item.name for item in report.leftovers if item.removed]
        if removed:
            log.info("removed %d sandboxes of dead workers: %s", len(removed), ", ".join(removed))
    except Exception as exc:  # the Docker daemon or the host's process table, not ours: the next reap retries
        log.warning("could not reap dead workers' sandboxes: %s: %s", type(exc).__name__, exc)


@runtime_checkable
class Fleet(Protocol):
    """What the trainer needs of a rollout fleet."""

    restarts: int
    """Rollout workers replaced so far (a ``charts/`` metric)."""

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet handed back by ``wait``."""

    def submit(self, requests: list[EpisodeRequest]) -> None:
        """Queue episodes to run."""

    def wait(self, timeout: float | None = None) -> list[EpisodeOutcome]:
        """Finished episodes: at least one unless ``timeout`` passes or nothing is in flight."""

    def push_weights(self, state_dict, version: int) -> None:
        """New policy weights for every in-process engine of the fleet."""

    def close(self) -> None:
        """Stop the workers; requests still in flight are dropped."""


class LocalFleet:
    """One worker in this process; ``wait`` runs the next queued request. Never restarts its worker."""

    restarts: int = 0

    def __init__(self, spec: WorkerSpec):
        self.worker = RolloutWorker(spec, 0)
        self._queue: list[EpisodeRequest] = []

    @property
    def in_flight(self) -> int:
        return len(self._queue)

    def submit(self, requests: list[EpisodeRequest]) -> None:
        self._queue.extend(requests)

    def wait(self, timeout: float | None = None) -> list[EpisodeOutcome]:
        if not self._queue:
            return []
        return self.worker.run_all(self._queue.pop(0))

    def push_weights(self, state_dict, version: int) -> None:
        self.worker.set_weights(state_dict, version)

    def close(self) -> None:
        self._queue.clear()
        self.worker.close()


class RayFleet:
    """Workers as Ray actors; a dead worker is replaced (with the current weights) and its episodes rerun."""

    restarts: int = 0
    """Workers replaced so far; past ``max_restarts`` the run fails with an InfraError."""

    def __init__(self, spec: WorkerSpec, workers: int, worker_cpus: float = 1.0, max_restarts: int = 8):
        import ray

        self.ray = ray
        self.spec, self.max_restarts, self.restarts = spec, max_restarts, 0
        concurrency = spec.envs_per_worker + 1  # one more thread so weight updates never wait for an episode
        self._actor = ray.remote(num_cpus=worker_cpus, max_concurrency=concurrency)(RolloutWorker)
        self._weights: tuple[Any, int] | None = None
        self.workers = [self._start(i) for i in range(workers)]
        self._futures: dict[Any, tuple[EpisodeRequest, int, Any]] = {}
        self._load = [0] * workers

    def _start(self, index: int):
        actor = self._actor.remote(self.spec, index)
        if self._weights is not None:
            actor.set_weights.remote(*self._weights)
        return actor

    @property
    def in_flight(self) -> int:
        return len(self._futures)

    def submit(self, requests: list[EpisodeRequest]) -> None:
        for request in requests:
            index = min(range(len(self.workers)), key=self._load.__getitem__)
            worker = self.workers[index]
            self._futures[worker.run_all.remote(request)] = (request, index, worker)
            self._load[index] += 1

    def wait(self, timeout: float | None = None) -> list[EpisodeOutcome]:
        """Finished episodes (at least one unless ``timeout`` passes or nothing is in flight)."""
        if not self._futures:
            return []
        done, _ = self.ray.wait(list(self._futures), num_returns=1, timeout=timeout)
        # Collect everything else that is already finished too.
        more, _ = self.ray.wait([f for f in self._futures if f not in done], num_returns=len(self._futures) - len(done),
                                timeout=0) if len(self._futures) > len(done) else ([], [])
        results = []
        for future in list(done) + list(more):
            request, index, worker = self._futures.pop(future)
            self._load[index] -= 1
            try:
                results.extend(self.ray.get(future))  # one request: one outcome, or its continuations
            except self.ray.exceptions.RayActorError:
                if self.workers[index] is worker:  # the first of its failed episodes replaces it
                    self._replace(index)
                self.submit([request])
            except self.ray.exceptions.RayTaskError as exc:
                # `run_all` returns every failure as an outcome: a worker raises only in strict mode or through a bug
                # of ours, never for the outside world's sake. Raised here in strict mode.
                error = report_bug("fleet.ray_worker", exc).record()
                error["message"] = error["message"][-2000:]
                results.append(EpisodeOutcome.failed(request, Status.INTERNAL_ERROR, error, agent=self.spec.agent,
                                                     worker=index))
        return results

    def _replace(self, index: int) -> None:
        self.restarts += 1
        if self.restarts > self.max_restarts:
            raise InfraError("fleet", f"{self.restarts} rollout workers died (max_restarts {self.max_restarts})")
        # Every episode in flight on the dead worker fails with RayActorError and is resubmitted as it comes. Its
        # sandboxes (on this node) go now, before the replacement starts its own; on another node the next worker
        # started there reaps them.
        _reap_dead_owners_here()
        self.workers[index] = self._start(index)

    def push_weights(self, state_dict, version: int) -> None:
        """Send new weights to every worker (one object in the Ray store, shared)."""
        ref = self.ray.put(state_dict)
        self._weights = (ref, version)
        pending = {w.set_weights.remote(ref, version): i for i, w in enumerate(self.workers)}
        for future, index in pending.items():
            try:
                self.ray.get(future)
            except self.ray.exceptions.RayActorError:
                self._replace(index)

    def close(self) -> None:
        """Close each worker's environments (a killed actor runs no clean-up), then kill the workers and reap
        what any of them still left on this node."""
        closing = [worker.close.remote() for worker in self.workers]
        try:
            self.ray.wait(closing, num_returns=len(closing), timeout=60)
        except self.ray.exceptions.RayError as exc:  # a dead worker cannot close: the reap below takes its sandboxes
            log.warning("some rollout workers could not close their environments (%s); reaping their sandboxes", exc)
        owners = []
        try:
            owners = self.ray.get([worker.owner.remote() for worker in self.workers], timeout=30)
        except self.ray.exceptions.RayError as exc:  # a dead or hung worker: its sandboxes wait for gc's next reap
            log.warning("could not ask every rollout worker for its owner id (%s); not waiting for them to exit", exc)
        for worker in self.workers:
            self.ray.kill(worker)
        self._futures.clear()
        _wait_gone(owners, timeout_s=15)  # a killed actor's pid must be gone before gc may call it dead
        _reap_dead_owners_here()


def make_fleet(spec: WorkerSpec, backend: str, workers: int = 1, worker_cpus: float = 1.0,
               max_restarts: int = 8) -> Fleet:
    """A fleet of backend ``backend`` (see :data:`FLEETS`); a miss lists the backends."""
    return FLEETS.resolve(backend)(spec, workers=workers, worker_cpus=worker_cpus, max_restarts=max_restarts)


def _local_fleet(spec: WorkerSpec, **_: Any) -> LocalFleet:
    return LocalFleet(spec)  # one worker in this process: the Ray options do not apply


FLEETS: Registry[Callable[..., Fleet]] = Registry("fleet backend", {"local": _local_fleet, "ray": RayFleet})


__all__ = ["EpisodeOutcome", "EpisodeRequest", "Fleet", "LocalFleet", "RayFleet", "RolloutWorker", "WorkerSpec",
           "FLEETS", "make_fleet"]
