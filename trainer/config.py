"""The training config: one dataclass per component, loaded from YAML, overridable as ``a.b=value``.

Unknown keys are errors that name the closest valid key and list them all (a typo must not silently train the
default), in every section, in ``algorithm.options`` and in ``sft.agent_options``: :func:`load_config` and
:meth:`TrainConfig.check` raise them before a model is built or the run folder is written. The ``env``
section is the environment's own :class:`~repogym.envs.repo_env.EnvConfig`, with its defaults: a run
that wants fewer turns or shorter timeouts says so in its YAML.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import inspect
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from repogym.agents.hf import HFAgentConfig
from repogym.envs.core.errors import ConfigError
from repogym.envs.repo_env import EnvConfig
from repogym.trainer.algorithms import check_options
from repogym.trainer.branching import BranchingConfig
from repogym.trainer.curriculum import CurriculumConfig
from repogym.trainer.fleet import FLEETS, POLICY_TOKENIZER
from repogym.trainer.inference.weights import WEIGHT_MOVERS, InferenceConfig
from repogym.trainer.learner import LearnerConfig
from repogym.trainer.tiny import TinyModelConfig


@dataclass
class ModelConfig:
    """Which policy to train."""

    path: str | None = None
    """A local model folder (weights + tokenizer with a chat template); None builds the tiny model."""
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    """Shape of the tiny model when ``path`` is None; its tokenizer is trained on the training tasks' text."""


@dataclass
class AlgorithmConfig:
    """The RL algorithm and its options (see ``trainer/algorithms/<name>.py`` for each option)."""

    name: str = "grpo"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class SFTSection:
    """The SFT warm start before RL (``steps: 0`` skips it)."""

    steps: int = 0
    batch_size: int = 8
    lr: float | None = None
    """Learning rate of the warm start (None: the learner's)."""
    agent: str = "oracle"
    agent_options: dict[str, Any] = field(default_factory=lambda: {"style": "edit"})
    agent_variants: list[dict[str, Any]] = field(default_factory=list)
    """More option sets for ``agent``: one trajectory per task is collected with each (say, two oracle styles)."""
    trajectories: str | None = None
    """A glob of trajectory files to learn from instead of collecting (resolved episodes only)."""


@dataclass
class FleetConfig:
    """The rollout fleet."""

    backend: str = "ray"
    """``ray`` (actors) or ``local`` (in-process, one episode at a time; for tests and debugging)."""
    workers: int = 2
    envs_per_worker: int = 1
    """Environments (and concurrent episodes) per worker."""
    mode: str = "sync"
    """``sync`` (generate a batch, then train) or ``async`` (rollouts continue while the learner trains)."""
    max_staleness: int = 1
    """Async: a sample generated more than this many policy versions ago is dropped."""
    max_restarts: int = 8
    """Dead workers replaced before the run gives up."""
    worker_cpus: float = 1.0
    """Ray CPUs reserved per worker."""
    save_trajectories: bool = True
    """Write every episode's trajectory under ``RUN_DIR/trajectories/``."""


@dataclass
class RayConfig:
    """How to reach Ray."""

    address: str | None = None
    """None starts a local cluster; ``auto`` or ``ray://HOST:10001`` joins a running one."""
    num_cpus: int | None = None
    """CPUs of the local cluster (None: all)."""


@dataclass
class LoopConfig:
    """The training loop."""

    steps: int = 20
    """RL steps (learner updates)."""
    tasks_per_step: int = 4
    """Groups per step; each has the algorithm's ``group_size`` episodes."""
    max_refills: int = 8
    """Extra groups per step to replace groups with no signal (all rewards equal) or infra errors."""
    checkpoint_every: int = 5
    eval_every: int = 5
    """Steps between evaluations on every training task (0: never)."""
    eval_samples: int = 4
    """Episodes per task in an evaluation."""
    eval_at_start: bool = True
    """Evaluate before the first step (the starting policy: after SFT, before RL)."""
    eval_tasks: int | None = None
    """Training tasks in ``eval/*`` (a sample fixed by ``seed``; None: all). The held-out split is always whole."""
    eval_temperature: float | None = None
    """Sampling temperature of evaluations (None: the agent's)."""
    control: str = "none"
    """A control run: ``none`` (RL), ``sft_continue`` (each step is one more SFT update on the warm-start data
    instead of RL: does RL beat more imitation?), ``shuffled_rewards`` (RL with the episodes' rewards permuted
    within each step: it must not improve; anything it learns leaked through something but the reward). The
    base model without RL is ``train.steps=0`` (evaluated at step 0)."""
    mask_truncated: bool = True
    """Compact filtering (DeepSWE): an episode that ran out of context (``context_overflow``) keeps its reward in
    its group's statistics but is left out of the loss, as is any sequence longer than the model's context."""
    max_internal_error_rate: float = 0.01
    """The run stops (an ``InternalError``) once episodes that ended in ``internal_error`` (a bug of repogym's,
    logged with its traceback) are more than this share of the episodes finished so far; counted in
    ``charts/internal_errors``. 1 never stops; 0 stops at the first."""


@dataclass
class HeldoutConfig:
    """Tasks the policy never trains on, evaluated beside the training tasks (``eval_heldout/*``)."""

    suites: dict[str, float] = field(default_factory=dict)
    """Suite names whose tasks are held out (the weights are ignored); empty: no held-out split."""
    task_ids: list[str] | None = None
    """Only these tasks of ``suites`` (None: all of them)."""


@dataclass
class WandbConfig:
    """Weights & Biases: the metrics of ``metrics.jsonl`` (same names) to a W&B run. Needs the ``wandb`` extra
    (``pip install "repogym[wandb]"``)."""

    project: str = "repogym"
    entity: str | None = None
    """Team or user (None: your default entity)."""
    name: str | None = None
    """The W&B run's name (None: the run folder's name)."""
    mode: str = "online"
    """``online``, ``offline`` (written under ``RUN_DIR/wandb``, ``wandb sync`` uploads it later) or ``disabled``."""
    tags: list[str] = field(default_factory=list)


WANDB_MODES = ("online", "offline", "disabled")


@dataclass
class LoggingConfig:
    """Where the step metrics go besides ``RUN_DIR/metrics.jsonl`` (always written)."""

    tensorboard: bool = True
    """TensorBoard scalars under ``RUN_DIR/tb`` (when tensorboard is installed)."""
    wandb: WandbConfig | None = None
    """A Weights & Biases run (None: none), e.g. ``{project: my-project, mode: offline}``."""


CONTROLS = ("none", "sft_continue", "shuffled_rewards")


@dataclass
class TrainConfig:
    """A whole training run."""

    seed: int = 0
    run_dir: str = "runs/default"
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    """The environment of every rollout worker; ``tokenizer`` is the policy's unless set (see POLICY_TOKENIZER)."""
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    agent: HFAgentConfig = field(default_factory=HFAgentConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    sft: SFTSection = field(default_factory=SFTSection)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    inference: InferenceConfig = field(default_factory=InferenceConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    train: LoopConfig = field(default_factory=LoopConfig)
    heldout: HeldoutConfig = field(default_factory=HeldoutConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    branching: BranchingConfig = field(default_factory=BranchingConfig)
    """Branch training episodes and compare the continuations of each branch point (GRPO; ``at: off`` by
    default). Fields: ``at`` (``off``, ``after_failing_tests``, ``turn:K``) and ``group`` (continuations per
    branch point); see :mod:`repogym.trainer.branching`."""

    def check(self) -> "TrainConfig":
        """Raise ConfigError on values that cannot work together."""
        if self.fleet.backend not in FLEETS:
            raise ConfigError(f"fleet.backend: unknown fleet backend {self.fleet.backend!r}: expected one of "
                              f"{', '.join(FLEETS.names())}")
        if self.fleet.mode not in ("sync", "async"):
            raise ConfigError(f"fleet.mode must be 'sync' or 'async', got {self.fleet.mode!r}")
        if self.inference.engine not in WEIGHT_MOVERS:
            raise ConfigError(f"inference.engine: unknown inference engine {self.inference.engine!r}: expected one of "
                              f"{', '.join(WEIGHT_MOVERS.names())}")
        if WEIGHT_MOVERS.resolve(self.inference.engine).engine_actors and self.fleet.backend != "ray":
            raise ConfigError(f"inference.engine {self.inference.engine} runs engines as Ray actors: set "
                              f"fleet.backend: ray")
        if self.train.control not in CONTROLS:
            raise ConfigError(f"train.control must be one of {', '.join(CONTROLS)}, got {self.train.control!r}")
        if self.train.control == "sft_continue" and self.sft.steps <= 0 and not self.model.path:
            raise ConfigError("train.control sft_continue continues an SFT warm start: set sft.steps > 0, or "
                              "model.path to a warm-started model")
        if not 0 <= self.train.max_internal_error_rate <= 1:
            raise ConfigError(f"train.max_internal_error_rate must be in [0, 1], got {self.train.max_internal_error_rate}")
        if self.train.eval_tasks is not None and self.train.eval_tasks < 1:
            raise ConfigError(f"train.eval_tasks must be >= 1 (or null: every training task), got {self.train.eval_tasks}")
        if self.learner.world_size < 1:
            raise ConfigError(f"learner.world_size must be >= 1, got {self.learner.world_size}")
        if not (0 < self.learner.gpus_per_rank <= 1) or not (0 < self.inference.gpus_per_engine <= 1):
            raise ConfigError("learner.gpus_per_rank and inference.gpus_per_engine must be in (0, 1]")
        if self.learner.world_size > 1 and self.fleet.backend != "ray":
            raise ConfigError("learner.world_size > 1 runs the learner's ranks as Ray actors: set fleet.backend: ray")
        if self.fleet.workers < 1 or self.fleet.envs_per_worker < 1:
            raise ConfigError("fleet.workers and fleet.envs_per_worker must be >= 1")
        check_options(self.algorithm.name, self.algorithm.options)  # a typo is caught before a model is built
        if self.algorithm.name == "sft":
            raise ConfigError("algorithm sft is the warm start: set sft.steps and an RL algorithm (grpo, ppo)")
        temperature = self.algorithm.options.get("temperature", _default_of(self.algorithm.name, "temperature"))
        if temperature is not None and abs(float(temperature) - self.agent.temperature) > 1e-9:
            # The learner's ratios compare against sampling logprobs: both must be at the same temperature.
            raise ConfigError(f"algorithm.options.temperature ({temperature}) must equal agent.temperature "
                              f"({self.agent.temperature})")
        self._check_sft_agent()
        w = self.logging.wandb
        if w is not None:
            if w.mode not in WANDB_MODES:
                raise ConfigError(f"logging.wandb.mode must be one of {', '.join(WANDB_MODES)}, got {w.mode!r}")
            if importlib.util.find_spec("wandb") is None:
                raise ConfigError('logging.wandb needs the wandb package, which is not installed: '
                                  'pip install "repogym[wandb]" (or drop logging.wandb)')
        if self.branching.enabled and self.algorithm.name != "grpo":
            raise ConfigError(f"branching compares the continuations of a branch point with GRPO's advantages: set "
                              f"algorithm.name: grpo (got {self.algorithm.name!r}) or branching.at: off")
        return self

    def _check_sft_agent(self) -> None:
        """``sft.agent`` exists and takes every option of ``sft.agent_options`` and ``sft.agent_variants`` (the hf
        agent's options are the ``agent`` section's fields, checked as it is read), when the run collects SFT data."""
        s = self.sft
        collects = s.steps > 0 or self.train.control == "sft_continue"
        if not collects or s.trajectories or s.agent == "hf":
            return
        from repogym.agents import AGENTS
        from repogym.agents import check_options as check_agent_options

        if s.agent not in AGENTS:
            close = difflib.get_close_matches(s.agent, AGENTS.names(), n=1)
            raise ConfigError(f"sft.agent: unknown agent {s.agent!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                              + f"; valid: {', '.join(AGENTS.names())}")
        factory = AGENTS.resolve(s.agent)
        params = inspect.signature(factory).parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return
        named = [p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                      inspect.Parameter.KEYWORD_ONLY)]
        for where, options in [("sft.agent_options", s.agent_options),
                               *((f"sft.agent_variants[{i}]", v) for i, v in enumerate(s.agent_variants))]:
            if not isinstance(options, dict):
                raise ConfigError(f"{where}: expected a mapping of options, got {type(options).__name__}")
            check_agent_options(f"{where} (agent {s.agent!r})", options, named)


def _default_of(algorithm: str, option: str) -> Any:
    """The default of one option of ``algorithm``'s config (None when it has no such option)."""
    from repogym.trainer.algorithms import ALGORITHMS

    for f in dataclasses.fields(ALGORITHMS.resolve(algorithm).config_type):
        if f.name == option:
            if f.default is not dataclasses.MISSING:
                return f.default
            return f.default_factory() if f.default_factory is not dataclasses.MISSING else None
    return None


def unknown_keys_message(section: str, unknown: list[str], valid: list[str]) -> str:
    """``section: unknown key 'x' (did you mean 'y'?); valid: ...``: each unknown key with its closest valid one."""
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), valid, n=1)
        hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (f"{section}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
            f"valid: {', '.join(sorted(valid))}")


def from_dict(cls, data: Any, where: str = ""):
    """Build dataclass ``cls`` from a mapping, recursively; unknown keys raise ConfigError."""
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise ConfigError(f"{where.rstrip('.') or cls.__name__}: expected a mapping, got {type(data).__name__}")
    if cls is EnvConfig and data.get("max_observation_tokens") is not None and data.get("tokenizer") is None:
        data = {**data, "tokenizer": POLICY_TOKENIZER}
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names, key=str)
    if unknown:
        raise ConfigError(unknown_keys_message(where.rstrip(".") or cls.__name__, unknown, sorted(names)))
    values = {}
    for key, value in data.items():
        sub = _dataclass_in(hints[key])
        # A dataclass field may also take a name where it admits str (EnvConfig.reward: a RewardConfig or a preset).
        plain = value is None or (isinstance(value, str) and str in typing.get_args(hints[key]))
        nested = sub is not None and not plain
        values[key] = (from_dict(sub, value, f"{where}{key}.") if nested
                       else _tuple(hints[key], _number(hints[key], value, f"{where}{key}")))
    try:
        return cls(**values)
    except (TypeError, ConfigError) as exc:  # ConfigError: the dataclass's own checks (EnvConfig.__post_init__)
        raise ConfigError(f"{where.rstrip('.') or cls.__name__}: {exc}") from None


def _number(hint, value: Any, where: str) -> Any:
    """A number where the field wants one: YAML reads ``1e-4`` (no dot) as a string."""
    args = set(typing.get_args(hint)) if typing.get_args(hint) else {hint}
    if not isinstance(value, str) or not args & {int, float} or str in args:
        return value
    for kind in (int, float):
        if kind in args:
            try:
                return kind(value)
            except ValueError:
                pass
    raise ConfigError(f"{where}: expected a number, got {value!r}")


def _tuple(hint, value: Any) -> Any:
    """A tuple where the field wants one: YAML has only lists."""
    if isinstance(value, list) and (typing.get_origin(hint) is tuple
                                    or any(typing.get_origin(a) is tuple for a in typing.get_args(hint))):
        return tuple(value)
    return value


def _dataclass_in(hint) -> type | None:
    if dataclasses.is_dataclass(hint):
        return hint
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return next((a for a in typing.get_args(hint) if dataclasses.is_dataclass(a)), None)
    return None


def apply_override(data: dict, override: str) -> None:
    """Apply ``a.b.c=value`` (value parsed as YAML) to a nested mapping."""
    if "=" not in override:
        raise ConfigError(f"override {override!r} must look like key.path=value")
    key, raw = override.split("=", 1)
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {override!r}: {part} is not a section")
    node[parts[-1]] = yaml.safe_load(raw)


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> TrainConfig:
    """The config in the YAML file at ``path`` (or the defaults) with ``overrides`` applied."""
    data: dict = {}
    if path:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    for override in overrides:
        apply_override(data, override)
    return from_dict(TrainConfig, data).check()


def to_dict(config: TrainConfig) -> dict:
    """The config as plain data (for the run folder and checkpoints)."""
    return dataclasses.asdict(config)
