"""repogym episodes as TRL ``GRPOTrainer`` rollouts (TRL's experimental ``rollout_func`` hook).

Each row of the training dataset is one repogym task: its ``prompt`` column holds the task id. TRL's
sampler repeats each row ``num_generations`` times and hands the batch to :class:`RepoGymRollout`, which
plays one multi-turn episode of :class:`repogym.envs.repo_env.RepoTaskEnv` per row, the trainer's own
model generating every turn through :class:`repogym.agents.hf.HFAgent` (transformers ``generate``, on the
trainer's device). The episode logic stays in repogym (:func:`repogym.agents.rollout.run_episode`); this
module only maps an :class:`~repogym.agents.rollout.EpisodeResult` onto what TRL expects:

- ``prompt_ids``: the first prompt (system prompt, tools, problem statement, generation prompt);
- ``completion_ids``: every token after it, all turns, exactly as fed and generated (nothing re-rendered);
- ``env_mask``: 1 on generated tokens, 0 on tool observations and chat wrapping, which TRL multiplies into
  its loss mask, so only the model's own tokens are trained;
- ``logprobs``: the sampling logprob of each completion token (0.0 where ``env_mask`` is 0);
- ``repogym_reward``, ``repogym_status``, ``repogym_task_id``, ``repogym_turns``: forwarded by TRL to
  reward functions; :func:`repogym_reward` returns the first as the TRL reward.

Guaranteed: the tokens TRL trains on are the tokens the model saw and sampled, with the loss only on the
sampled ones; the reward is repogym's graded reward (hidden tests in a pristine sandbox); an episode that
fails on infrastructure or on a bug of repogym's that the environment caught (status ``infra_error`` or
``internal_error``, NaN reward) is given TRL's "no reward" (``None``), which TRL excludes from the group
baseline and gives no advantage, never a 0 (a sandbox that fails to start is such an episode, not a crash of
the training step). A bug outside the environment's step (in the agent, in this module) is raised: it stops
the training step rather than pass as data. Not guaranteed: TRL's ``rollout_func`` is experimental
and may change; generation is one episode at a time with transformers (no vLLM, no batching across
episodes), so this is for small models and the CPU path; ``max_completion_length`` is not applied to
multi-turn episodes (the per-turn ``max_new_tokens`` and ``max_turns`` bound their length); only the
``full`` context policy is used, so an episode is one training sequence. TRL's ``tools`` and
``environment_factory`` are not used: repogym's own action parser runs the tool calls.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from repogym.agents.hf import DEFAULT_SYSTEM_PROMPT, HFAgent, HFAgentConfig, HFEngine
from repogym.agents.rollout import EpisodeResult, run_episode
from repogym.envs.core.errors import ConfigError, InfraError
from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from repogym.envs.core.status import Status, excluded
from repogym.envs.tasks import load_suite

INSTALL_HINT = 'pip install "repogym[integrations]"'


def _require_trl():
    try:
        import trl
    except ImportError as exc:
        raise ImportError(f"repogym.integrations.trl needs TRL (trl>=1.16): {INSTALL_HINT}") from exc
    return trl


@dataclass
class TRLRolloutConfig:
    """How each GRPO rollout plays its repogym episode."""

    suite: str = "builtin"
    """Suite the dataset's task ids come from."""
    sandbox: str | None = "local"
    """``local`` or ``docker`` (None: docker when a daemon answers, else local)."""
    max_turns: int = 8
    """Tool calls per episode before truncation (graded as it is, by default)."""
    max_new_tokens: int = 256
    """Tokens the model may generate per turn."""
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    tools: list[str] | None = None
    """Tool schemas put in the prompt (None: every tool the environment offers)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """Other environment settings (``sandbox`` and ``max_turns`` above override its own)."""
    trajectory_dir: str | None = None
    """Folder for one ``repogym.trajectory/2`` file per episode (None: none written)."""
    keep_episodes: int = 256
    """Most recent episode results kept in memory on :attr:`RepoGymRollout.episodes` (older ones are dropped)."""

    def __post_init__(self):
        if min(self.max_turns, self.max_new_tokens, self.keep_episodes) < 1:
            raise ConfigError(f"max_turns, max_new_tokens and keep_episodes must be >= 1, got {self.max_turns}, "
                              f"{self.max_new_tokens}, {self.keep_episodes}")


class RepoGymRollout:
    """TRL's ``rollout_func``: ``(prompts, trainer) -> dict``, one repogym episode per prompt (a task id)."""

    def __init__(self, tokenizer, config: TRLRolloutConfig | None = None):
        self.tokenizer = tokenizer
        self.config = config or TRLRolloutConfig()
        self.episodes: deque[EpisodeResult] = deque(maxlen=self.config.keep_episodes)
        """The latest episodes played, oldest first (for inspection and tests; results hold their trajectories)."""
        self._calls = 0

    def __call__(self, prompts: list[Any], trainer) -> dict[str, list]:
        task_ids = [_task_id(p) for p in prompts]
        c = self.config
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        env = RepoTaskEnv(suite=c.suite, config=replace(c.env, sandbox=c.sandbox, max_turns=c.max_turns))
        # TRL computes its logprobs from logits / temperature: sample at the same temperature, so the recorded
        # logprobs are of the distribution the loss sees.
        agent = HFAgent(HFEngine(model, device=str(trainer.accelerator.device)), self.tokenizer,
                        HFAgentConfig(temperature=float(trainer.temperature), max_new_tokens=c.max_new_tokens,
                                      system_prompt=c.system_prompt, tools=c.tools, context="full"))
        out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask",
                                                "repogym_reward", "repogym_status", "repogym_task_id",
                                                "repogym_turns")}
        try:
            for i, task_id in enumerate(task_ids):
                path = None
                if c.trajectory_dir:
                    path = Path(c.trajectory_dir) / f"step{trainer.state.global_step:05d}-{self._calls:04d}-{i:03d}.jsonl"
                try:
                    result = run_episode(env, agent, task_id=task_id, agent_name="trl", trajectory=path)
                except InfraError as exc:  # a sandbox that failed to start: a bad rollout is data, not a crash
                    record = {"status": Status.INFRA_ERROR, "error": {"where": exc.where, "message": exc.message}}
                    result = EpisodeResult(task_id, "trl", Status.INFRA_ERROR, float("nan"), 0, 0.0, record)
                self.episodes.append(result)
                for key, value in zip(out, self._row(result)):
                    out[key].append(value)
        finally:
            env.close()
            model.train(was_training)  # HFEngine put it in eval mode; the trainer's step expects its own mode
            self._calls += 1
        return out

    def _row(self, result: EpisodeResult) -> tuple:
        """One episode as (prompt ids, completion ids, logprobs, env mask, reward, status, task id, turns)."""
        reward = None if excluded(result.status, result.reward) else float(result.reward)
        meta = (reward, str(result.status), result.task_id, result.turns)
        seq = result.tokens
        stop = self.tokenizer.eos_token_id
        if seq is None or 1 not in seq.mask:
            # No turn was generated (the agent failed before its first completion): an untrainable stub, masked
            # out, so the batch keeps one row per prompt.
            prompt = (seq.ids if seq else None) or self.tokenizer.encode(result.task_id, add_special_tokens=False)
            return (prompt, [stop], [0.0], [0], *meta)
        first = seq.mask.index(1)
        return (seq.ids[:first], seq.ids[first:], seq.logprobs[first:], seq.mask[first:], *meta)


def _task_id(prompt: Any) -> str:
    if isinstance(prompt, str) and prompt.strip():
        return prompt.strip()
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):  # a conversational row
        content = prompt[-1].get("content")
        if isinstance(content, str) and content.strip():
            return content.strip()
    raise ConfigError(f"each dataset prompt must be a repogym task id (a string), got {prompt!r}")


def repogym_reward(prompts=None, completions=None, repogym_reward=None, **kwargs) -> list[float | None]:
    """TRL reward function: repogym's graded reward of each episode (``None`` for an excluded episode: an
    infrastructure failure or an internal error)."""
    if repogym_reward is None:
        raise ConfigError("repogym_reward needs the rollouts of RepoGymRollout (pass it as the trainer's rollout_func)")
    return list(repogym_reward)


def task_dataset(tasks: list[str] | None = None, suite: str = "builtin"):
    """A ``datasets.Dataset`` with one ``prompt`` (the task id) per task: ``tasks`` or every task of ``suite``."""
    try:
        from datasets import Dataset
    except ImportError as exc:
        raise ImportError(f"task_dataset needs the datasets package: {INSTALL_HINT}") from exc
    known = [t.instance_id for t in load_suite(suite)]
    ids = list(tasks) if tasks is not None else known
    unknown = [t for t in ids if t not in known]
    if unknown or not ids:
        raise ConfigError(f"tasks: expected a non-empty list of ids of suite {suite!r}, got unknown {unknown or ids}")
    return Dataset.from_dict({"prompt": ids})


def make_grpo_trainer(model, tokenizer, tasks: list[str] | None = None, *, suite: str = "builtin",
                      sandbox: str | None = "local", rollout: TRLRolloutConfig | None = None,
                      reward_funcs: list | None = None, callbacks: list | None = None, **grpo_args: Any):
    """A TRL ``GRPOTrainer`` whose rollouts are repogym episodes of ``tasks`` (ids of ``suite``; None: all).

    ``grpo_args`` go to ``trl.GRPOConfig`` (``output_dir``, ``max_steps``, ``num_generations``, ...), with
    defaults for a small local run (no reporting, no checkpoints, a log every step, bf16 only on a GPU).
    ``reward_funcs`` are extra TRL reward functions summed with :func:`repogym_reward` (weights through
    ``reward_weights``). The rollout function is ``trainer.rollout_func`` (its ``episodes`` list every episode).
    """
    trl = _require_trl()
    import torch

    rollout = replace(rollout or TRLRolloutConfig(), suite=suite, sandbox=sandbox)
    defaults = {"output_dir": "repogym-grpo", "report_to": "none", "save_strategy": "no", "logging_steps": 1,
                "bf16": torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
                "use_cpu": not torch.cuda.is_available()}
    config = trl.GRPOConfig(**{**defaults, **grpo_args})
    if tokenizer.pad_token is None:
        raise ConfigError("the tokenizer needs a pad token for TRL's batches")
    # TRL warns on every trainer that uses its experimental rollout_func; the choice is made here, once.
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    return trl.GRPOTrainer(model=model, reward_funcs=[repogym_reward, *(reward_funcs or [])], args=config,
                           train_dataset=task_dataset(tasks, suite), processing_class=tokenizer,
                           rollout_func=RepoGymRollout(tokenizer, rollout), callbacks=callbacks)


__all__ = ["RepoGymRollout", "TRLRolloutConfig", "make_grpo_trainer", "repogym_reward", "task_dataset"]
