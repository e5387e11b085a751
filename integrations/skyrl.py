"""repogym as a SkyRL-Gym environment: one :class:`RepoTaskEnv` episode per SkyRL trajectory.

SkyRL's generator makes one env per trajectory with ``skyrl_gym.make(env_class, env_config=...,
extras=...)``, calls ``init(prompt)`` once, then ``step(model_text)`` until ``done``, then ``close()``.
:class:`RepogymSkyRLEnv` maps that onto repogym (the episode logic stays in :mod:`repogym.envs`):

- ``init`` resets a RepoTaskEnv on the task named by ``extras["task_id"]`` (or
  ``extras["extra_info"]["task_id"]``, or ``env_config["task_id"]``; none: a task of the suite drawn by the
  env) and returns the dataset prompt's system messages followed by repogym's first observation as the user
  message (the issue, the tools, the format; the dataset's own user text is replaced, as the real
  first observation names the sandbox's path and exists only after the reset). Metadata: reset's ``info``.
- ``step`` passes the model's text to ``RepoTaskEnv.step`` unchanged (JSON or ``<tool_call>`` forms, see
  :mod:`repogym.envs.actions`). A bad call is an ``error (<kind>): ...`` observation and the episode goes
  on. The observation comes back as one ``user`` message (SkyRL's multi-turn tokenization expects
  observations as user turns); reward is 0 until the final step, which carries repogym's reward;
  ``done`` on submit and on any of repogym's limits (turns, tokens, wall time). On the final step the
  observation list is empty, as in SkyRL's own envs, and the closing line is ``metadata["observation"]``.
- ``metadata`` is the step's ``info`` (``tool``, ``error``, and at the end ``eval`` with its ``status``,
  ``reward_components``, ``exclude``), plus ``status`` at the end.

Guaranteed: every call an agent can make ends in an observation (repogym's rule); ``extras["max_turns"]``
(which SkyRL's generator always sets) bounds the episode in turns. An infrastructure failure, or a bug of
repogym's that the environment caught (status ``internal_error``: :mod:`repogym.integrations.outcomes`), ends
the episode with repogym's NaN reward and ``metadata["exclude"] = True`` unless ``infra_reward`` replaces it
(SkyRL has no way to drop a trajectory, and a NaN poisons a batch: set it, or filter upstream). Not
guaranteed: a step after ``done`` raises (the caller's mistake, as in RepoTaskEnv); nothing here
tokenizes, so token budgets stay SkyRL's.

``skyrl_gym`` is imported on first use: the class is built when first asked for
(``repogym.integrations.skyrl.RepogymSkyRLEnv``), so importing this module never needs it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from repogym.envs.core.errors import ConfigError
from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from repogym.integrations.outcomes import ended_by_bug, internal_error_of

ENV_ID = "repogym"
INSTALL_HINT = 'the SkyRL-Gym adapter needs skyrl-gym: pip install "repogym[integrations]"'
_ENV_FIELDS = {f.name for f in fields(EnvConfig)} - {"sandbox_config", "tokenizer"}


@dataclass
class SkyRLConfig:
    """What ``env_config`` (SkyRL's ``skyrl_gym_config.repogym`` block) may hold."""

    suite: str = "builtin"
    """The suite tasks are looked up in."""
    task_id: str | None = None
    """The task when the dataset row names none (``extras["task_id"]`` wins)."""
    infra_reward: float | None = None
    """The reward of an excluded episode (an infrastructure failure, an internal error): None keeps repogym's NaN
    (drop such trajectories yourself, ``metadata["exclude"]``); a number (0.0, say) replaces it for a trainer that
    cannot drop one."""
    env: dict[str, Any] = field(default_factory=dict)
    """Fields of :class:`repogym.envs.repo_env.EnvConfig` (``sandbox``, ``max_turns``, ``reward``, ...)."""

    @classmethod
    def from_mapping(cls, config: Any) -> SkyRLConfig:
        """The config in ``config``: None, a mapping or an OmegaConf ``DictConfig``. Keys other than
        ``suite``, ``task_id`` and ``infra_reward`` are EnvConfig fields."""
        if config is None:
            return cls()
        if isinstance(config, SkyRLConfig):
            return config
        if hasattr(config, "items") and not isinstance(config, Mapping):  # an OmegaConf DictConfig (third-party)
            from omegaconf import OmegaConf
            config = OmegaConf.to_container(config, resolve=True)
        if not isinstance(config, Mapping):
            raise ConfigError(f"env_config: expected a mapping, got {type(config).__name__}")
        own = {k: config[k] for k in ("suite", "task_id", "infra_reward") if k in config}
        env = {k: v for k, v in config.items() if k not in own}
        unknown = sorted(set(env) - _ENV_FIELDS)
        if unknown:
            raise ConfigError(f"env_config: unknown keys {unknown}; expected suite, task_id, infra_reward or "
                              f"an EnvConfig field ({', '.join(sorted(_ENV_FIELDS))})")
        return cls(**own, env=env)


def task_id_of(extras: Mapping[str, Any] | None, config: SkyRLConfig) -> str | None:
    """The task a dataset row names: ``extras["task_id"]``, ``extras["extra_info"]["task_id"]``, else the
    config's."""
    extras = extras or {}
    found = extras.get("task_id")
    if found is None and isinstance(extras.get("extra_info"), Mapping):
        found = extras["extra_info"].get("task_id")
    found = found if found is not None else config.task_id
    if found is not None and not isinstance(found, str):
        raise ConfigError(f"task_id: expected a string, got {type(found).__name__}")
    return found


def dataset_rows(suite: str = "builtin", task_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """SkyRL dataset rows for ``suite`` (one per task; ``task_ids`` keeps those): ``prompt`` (the issue, as a
    placeholder the env replaces with its first observation), ``env_class`` and ``task_id``. Write them to
    parquet for SkyRL's ``data.train_data``."""
    from repogym.envs.tasks.suites import load_suite
    tasks = load_suite(suite)
    if task_ids is not None:
        known = {t.instance_id for t in tasks}
        missing = [t for t in task_ids if t not in known]
        if missing:
            raise ConfigError(f"task_ids: {missing} are not in suite {suite!r}")
        tasks = [t for t in tasks if t.instance_id in set(task_ids)]
    return [{"prompt": [{"role": "user", "content": t.problem_statement}], "env_class": ENV_ID,
             "task_id": t.instance_id, "data_source": f"repogym/{suite}"} for t in tasks]


def _build_class() -> type:
    try:
        from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc

    class RepogymSkyRLEnv(BaseTextEnv):
        """One repogym episode as a SkyRL-Gym text environment (see the module docstring)."""

        def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None):
            super().__init__()
            self.config = SkyRLConfig.from_mapping(env_config)
            extras = dict(extras or {})
            env_fields = dict(self.config.env)
            if extras.get("max_turns") is not None:  # SkyRL's generator sets it: its bound is the episode's
                env_fields["max_turns"] = int(extras["max_turns"])
            try:
                env_config_obj = EnvConfig(**env_fields)
            except TypeError as exc:
                raise ConfigError(f"env_config: {exc}") from None
            self.task_id = task_id_of(extras, self.config)
            self.max_turns = env_config_obj.max_turns
            self.env = RepoTaskEnv(task=self.task_id, suite=self.config.suite, config=env_config_obj)
            self.final: dict[str, Any] = {}

        def init(self, prompt: list[dict[str, str]] | None) -> tuple[list[dict[str, str]], dict[str, Any]]:
            """Reset the episode; the prompt's system messages, then repogym's first observation."""
            options = {"task_id": self.task_id} if self.task_id else None
            obs, info = self.env.reset(options=options)
            self.turns, self.final = 0, {}
            system = [dict(m) for m in (prompt or []) if isinstance(m, Mapping) and m.get("role") == "system"]
            return system + [{"role": "user", "content": obs}], info

        def step(self, action: str) -> BaseTextEnvStepOutput:
            """One tool call from the model's text (see the module docstring)."""
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.turns += 1
            bug = internal_error_of(info)
            if bug is not None:  # a bug of ours the env caught ends the episode, excluded (as run_episode does)
                info, reward, truncated = ended_by_bug(info, bug), float("nan"), True
            done = terminated or truncated
            metadata = dict(info)
            if done:
                if math.isnan(reward) and self.config.infra_reward is not None:
                    reward = float(self.config.infra_reward)
                metadata["observation"] = obs
                metadata["status"] = str(info.get("eval", {}).get("status", "not_submitted"))
                self.final = {"reward": reward, "status": metadata["status"]}
            observations = [] if done else [{"role": "user", "content": obs}]
            return BaseTextEnvStepOutput(observations=observations, reward=reward, done=done, metadata=metadata)

        def get_metrics(self) -> dict[str, Any]:
            """Per-episode metrics SkyRL averages: turns, resolved (1/0), the final reward when finished."""
            metrics: dict[str, Any] = {"turns": self.turns}
            if self.final:
                metrics["resolved"] = float(self.final["status"] == "resolved")
                if not math.isnan(self.final["reward"]):
                    metrics["reward"] = self.final["reward"]
            return metrics

        def close(self) -> None:
            self.env.close()

    RepogymSkyRLEnv.__module__ = __name__
    return RepogymSkyRLEnv


_CLASS: type | None = None


def env_class() -> type:
    """The SkyRL-Gym env class (built on first call; needs skyrl-gym)."""
    global _CLASS
    if _CLASS is None:
        _CLASS = _build_class()
    return _CLASS


def __getattr__(name: str) -> Any:
    # PEP 562: `from repogym.integrations.skyrl import RepogymSkyRLEnv`, and SkyRL's "module:attr" entry
    # point, build the class on first access, so importing the module never imports skyrl_gym.
    if name == "RepogymSkyRLEnv":
        return env_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(env_id: str = ENV_ID) -> str:
    """Register the env with SkyRL-Gym under ``env_id`` (a no-op when it already is); returns the id. Call it
    in the process that runs SkyRL's generator, before training starts."""
    try:
        import skyrl_gym
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    if env_id not in skyrl_gym.registry:
        skyrl_gym.register(id=env_id, entry_point=f"{__name__}:RepogymSkyRLEnv")
    return env_id
