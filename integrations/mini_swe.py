"""mini-swe-agent (``minisweagent`` 2.4) as a black-box harness for repogym episodes, its model behind the proxy.

Two pieces:

- :class:`RepoGymEnvironment` implements mini-swe-agent's ``Environment`` protocol (``execute``,
  ``get_template_vars``, ``serialize``) over a :class:`repogym.envs.repo_env.RepoTaskEnv` in progress: each command
  is one ``bash`` tool call through ``env.step`` (the resident runner of the env's sandbox, repogym's timeouts,
  turn limit and observation cut all apply; the output is repogym's observation, exit code and all).
  ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` alone (mini-swe-agent's way to finish) submits the diff to
  repogym's grader; an episode that repogym ends (turn limit, infrastructure) ends the agent's run.
- :func:`run_mini_swe_episode` plays one episode: mini-swe-agent's ``DefaultAgent`` with its ``LitellmModel``
  pointed at a :class:`repogym.integrations.proxy.ChatProxy` (``openai/<model>`` at the proxy's per-episode base
  URL: nothing leaves localhost), grades what the agent left (an agent that stopped without submitting, on a
  step limit or repeated format errors, is graded on its diff as it is), and returns a repogym
  :class:`~repogym.agents.rollout.EpisodeResult` whose tokens are the proxy's record.

Guaranteed: the trajectory's tokens are exactly the tokens the engine was fed and produced, call by call
(``EpisodeResult.tokens``: loss mask 1 on generated tokens only, logprobs from the engine, each call's policy
version), however mini-swe-agent renders its prompts; where a prompt does not extend the previous prompt and
completion, a new context starts (``TokenSequence.contexts()``: the learner trains each as its own sequence with
the episode's reward, as for repogym's own context policies). The reward is repogym's (hidden tests in a pristine
sandbox). A prompt over the context ends the episode as ``context_overflow`` (reward 0, not graded, kept for
training); an unreachable or failing proxy, or a repogym infrastructure failure, as ``infra_error`` (NaN reward); a
bug of repogym's (in the environment or the proxy; logged and counted by :mod:`repogym.envs.core.bugs`) as
``internal_error`` (NaN reward, excluded).
Not guaranteed: one trajectory step per model call, not per command (a call that ran several commands has one
step with their observations joined; a call mini-swe-agent rejected as a format error has an empty
observation); mini-swe-agent's own retries (up to ``MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT``, default 10, with
backoff) run before an engine failure ends the episode. The trajectory file is written when the episode ends.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from repogym.agents.rollout import EpisodeResult
from repogym.agents.trajectory import TRAJECTORY_FORMAT, Trajectory, TrajectoryWriter
from repogym.envs.core.errors import ConfigError, InfraError
from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from repogym.envs.core.status import Status
from repogym.integrations.outcomes import internal_error_of
from repogym.integrations.proxy import CONTEXT_OVERFLOW, ChatProxy

INSTALL_HINT = 'pip install "repogym[integrations]"'
SUBMIT_COMMAND = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
AGENT_NAME = "mini-swe-agent"
SYSTEM_TEMPLATE = "You are a helpful assistant that can interact with a computer through a bash tool."
INSTANCE_TEMPLATE = (
    "Please solve this issue in the repository {{task_repo}}, checked out at {{repo_dir}} (the current directory "
    "of every command):\n\n<issue>\n{{task}}\n</issue>\n\nEach response must include exactly one bash tool call. "
    "Every command runs in a new subshell. Your change is graded by the project's tests, including tests you cannot "
    "see; changes to test files are ignored. When you are done, run `echo " + SUBMIT_COMMAND + "` alone.")


def _require_minisweagent():
    # Quiet start-up and no fetch of litellm's cost map from the internet (set only when the user has not).
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
        import minisweagent
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.exceptions import LimitsExceeded, Submitted
        from minisweagent.models.litellm_model import LitellmModel
    except ImportError as exc:
        raise ImportError(f"repogym.integrations.mini_swe needs mini-swe-agent (mini-swe-agent>=2.4): "
                          f"{INSTALL_HINT}") from exc
    # litellm prints a provider banner each time it prices a local model's call (pricing is off: ignore_errors).
    litellm.suppress_debug_info = True
    return minisweagent, DefaultAgent, LitellmModel, Submitted, LimitsExceeded


@dataclass
class MiniSweConfig:
    """How :func:`run_mini_swe_episode` sets up mini-swe-agent and the repogym environment."""

    suite: str = "builtin"
    """Suite the task comes from (when no environment is given)."""
    sandbox: str | None = "local"
    """``local`` or ``docker`` (None: docker when a daemon answers, else local); when no environment is given."""
    max_turns: int = 30
    """Commands per episode (repogym's turn limit) when no environment is given; the env's own otherwise."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """Other settings of the environment made when none is given (``sandbox`` and ``max_turns`` override it)."""
    step_limit: int | None = None
    """Model calls mini-swe-agent may make (None: the environment's ``max_turns``)."""
    max_consecutive_format_errors: int = 3
    """mini-swe-agent stops after this many answers in a row without a usable tool call (0: never)."""
    temperature: float = 1.0
    """Sampling temperature sent with every request (1.0: the distribution the learner trains)."""
    max_tokens: int = 512
    """Tokens the model may generate per call."""
    system_template: str = SYSTEM_TEMPLATE
    """mini-swe-agent's system message (Jinja; the environment's template variables are available)."""
    instance_template: str = INSTANCE_TEMPLATE
    """The task message (Jinja: ``task`` is the problem statement; also ``repo_dir``, ``task_repo``, ``task_id``)."""
    agent_options: dict[str, Any] = field(default_factory=dict)
    """More ``DefaultAgent`` options (``AgentConfig`` fields), e.g. ``wall_time_limit_seconds``."""
    model_options: dict[str, Any] = field(default_factory=dict)
    """More ``LitellmModel`` options (``LitellmModelConfig`` fields), e.g. ``observation_template``."""
    trajectory_dir: str | None = None
    """Folder for one ``repogym.trajectory/2`` file per episode (None: none written)."""

    def __post_init__(self):
        if self.max_turns < 1 or self.max_tokens < 1:
            raise ConfigError(f"max_turns and max_tokens must be >= 1, got {self.max_turns}, {self.max_tokens}")
        if self.step_limit is not None and self.step_limit < 1:
            raise ConfigError(f"step_limit must be >= 1 or None, got {self.step_limit}")


@dataclass
class EnvironmentConfig:
    """What :class:`RepoGymEnvironment` reports of itself (mini-swe-agent reads ``config``)."""

    task_id: str = ""
    repo_dir: str = "/repo"
    timeout: float | None = None
    """Seconds per command (None: the environment's ``command_timeout``)."""


class RepoGymEnvironment:
    """mini-swe-agent's ``Environment`` over a repogym environment whose episode has been reset.

    ``calls`` (optional) returns how many model calls were made so far: each command is filed under the call
    that asked for it (:attr:`steps`), so a trajectory can put observations beside the tokens that caused them.
    """

    def __init__(self, env: RepoTaskEnv, *, timeout: float | None = None, calls: Callable[[], int] | None = None):
        if env.task is None:
            raise ConfigError("RepoGymEnvironment needs an environment with an episode in progress: reset it first")
        self.env = env
        self.config = EnvironmentConfig(env.task.instance_id, env.ctx.repo_dir, timeout)
        self.calls = calls or (lambda: 0)
        self.steps: list[dict[str, Any]] = []
        """Every ``env.step`` made: command, observation, reward, flags, info, and the model call (0-based) it served."""
        self.final: dict[str, Any] | None = None
        """The last step's info once repogym ended the episode (it holds ``eval``)."""
        self.reward = 0.0
        self.internal_error: dict[str, str] | None = None
        """A bug of repogym's that a step met (:func:`~repogym.integrations.outcomes.internal_error_of`): it ends
        the run, and the episode is ``internal_error``."""

    @property
    def done(self) -> bool:
        return self.final is not None or self.internal_error is not None

    def _step(self, action: dict[str, Any], command: str | None) -> tuple[str, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(json.dumps(action))
        self.steps.append({"call": self.calls() - 1, "command": command, "observation": obs, "reward": reward,
                           "terminated": terminated, "truncated": truncated, "info": info})
        bug = internal_error_of(info)
        if bug is not None:  # the env caught a bug of ours: nothing after it says anything of the policy
            self.internal_error = bug
        if terminated or truncated:
            self.final, self.reward = info, reward
        return obs, info

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Run ``action["command"]`` as one repogym ``bash`` call; mini-swe-agent's output dict."""
        _, _, Submitted, LimitsExceeded = _require_minisweagent()[1:]
        if self.done:
            raise LimitsExceeded(self._exit("RepogymEpisodeEnded"))
        command = str(action.get("command", ""))
        if cwd:
            command = f"cd {shlex.quote(cwd)} && {command}"
        arguments: dict[str, Any] = {"command": command}
        if timeout or self.config.timeout:
            arguments["timeout"] = float(timeout or self.config.timeout)
        obs, info = self._step({"name": "bash", "arguments": arguments}, command)
        code = info.get("exit_code")
        output = {"output": obs, "returncode": -1 if code is None else code,
                  "exception_info": f"error ({info['error']})" if info.get("error") and code is None else ""}
        lines = obs.lstrip().splitlines()
        if lines and lines[0].strip() == SUBMIT_COMMAND and code == 0:
            if not self.done:
                self.submit()
            raise Submitted(self._exit("Submitted"))
        if self.done:  # repogym ended it: the turn limit, a budget, an infrastructure failure, a bug of ours
            raise LimitsExceeded(self._exit("RepogymEpisodeEnded"))
        return output

    def submit(self) -> dict[str, Any]:
        """Submit the diff to repogym's grader (once); the final info, with ``eval``. Not after a bug of ours
        (:attr:`internal_error`): the last step's info then."""
        if not self.done:
            self._step({"name": "submit", "arguments": {}}, None)
        return self.final if self.final is not None else self.steps[-1]["info"]

    def _exit(self, status: str) -> dict[str, Any]:
        summary = (self.final or {}).get("eval", {}).get("status", "")
        return {"role": "exit", "content": f"{status} {summary}".strip(),
                "extra": {"exit_status": status, "submission": ""}}

    def get_template_vars(self, **kwargs) -> dict[str, Any]:
        task = self.env.task
        uname = platform.uname()._asdict()  # mini-swe-agent's own templates name these (the sandbox is Linux)
        return {**uname, "system": "Linux", "repo_dir": self.config.repo_dir, "task_id": task.instance_id,
                "task_repo": task.repo, "cwd": self.config.repo_dir, **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"environment": vars(self.config),
                                    "environment_type": f"{type(self).__module__}.{type(self).__name__}"}}}


def run_mini_swe_episode(proxy: ChatProxy, task_id: str | None = None, *, config: MiniSweConfig | None = None,
                         env: RepoTaskEnv | None = None, seed: int | None = None,
                         episode_id: str | None = None) -> EpisodeResult:
    """One repogym episode of mini-swe-agent whose model is ``proxy`` (started here if it is not serving).

    ``env`` is used (and left open) when given; otherwise one is made from ``config`` and closed. Returns the
    episode with its reward, status, eval record, the proxy's tokens (``tokens``) and the trajectory records.
    """
    _, DefaultAgent, LitellmModel, _, _ = _require_minisweagent()
    c = config or MiniSweConfig()
    own = env is None
    if own:
        env = RepoTaskEnv(suite=c.suite, config=replace(c.env, sandbox=c.sandbox, max_turns=c.max_turns))
    if not proxy.serving:
        proxy.start()
    start = time.monotonic()
    try:
        try:
            obs, info = env.reset(seed=seed, options={"task_id": task_id} if task_id else None)
        except InfraError as exc:
            record = {"status": Status.INFRA_ERROR, "error": {"where": exc.where, "message": exc.message}}
            return EpisodeResult(task_id or "", AGENT_NAME, Status.INFRA_ERROR, float("nan"), 0,
                                 time.monotonic() - start, record)
        task = env.task
        episode_id = episode_id or f"{task.instance_id}.{uuid.uuid4().hex[:12]}"
        environment = RepoGymEnvironment(env, calls=lambda: len(proxy.episode(episode_id).calls))
        # The proxy's per-episode URL always wins: the tokens of this episode must be recorded under its id.
        model_kwargs = {"temperature": c.temperature, "max_tokens": c.max_tokens,
                        **c.model_options.get("model_kwargs", {}),
                        "api_base": proxy.base_url(episode_id), "api_key": "repogym"}
        model = LitellmModel(**{"cost_tracking": "ignore_errors", **c.model_options,
                                "model_name": f"openai/{proxy.config.model_name}", "model_kwargs": model_kwargs})
        agent = DefaultAgent(model, environment, **{
            "system_template": c.system_template, "instance_template": c.instance_template,
            "step_limit": c.step_limit or env.config.max_turns, "cost_limit": 0.0,
            "max_consecutive_format_errors": c.max_consecutive_format_errors, **c.agent_options})
        error: dict[str, Any] | None = None
        try:
            exit_info = agent.run(task.problem_statement.strip())
        except Exception as exc:  # mini-swe-agent ends its run by raising what its model call raised: litellm's error
            # for the proxy's 400 (an overflow) or 500 (a model server down: outside), or a network error. Those are
            # outcomes; anything else (a bug of ours or of the harness's) is raised on.
            exit_info = {"exit_status": type(exc).__name__}
            recorded = proxy.episode(episode_id)
            if recorded.status != CONTEXT_OVERFLOW and recorded.internal_error is None and not _infrastructure(exc):
                raise
            error = {"where": "proxy" if recorded.status != CONTEXT_OVERFLOW else "agent.context",
                     "message": f"{type(exc).__name__}: {exc}"[:2000]}
        recorded = proxy.pop(episode_id)
        internal = recorded.internal_error or environment.internal_error
        if internal is not None:  # a bug of ours (reported where it was met): excluded, never a reward
            status, reward, record = (Status.INTERNAL_ERROR, float("nan"),
                                      {"status": Status.INTERNAL_ERROR, "error": internal})
        elif recorded.status == CONTEXT_OVERFLOW:
            status, reward = Status.CONTEXT_OVERFLOW, 0.0
            record = {"status": status, "error": {"where": "agent.context", "message": json.dumps(recorded.overflow)}}
        elif error is not None:
            status, reward, record = Status.INFRA_ERROR, float("nan"), {"status": Status.INFRA_ERROR, "error": error}
        else:
            final = environment.submit()  # graded as it is when the agent stopped without submitting
            record = final.get("eval", {})
            status = record.get("status", "unknown")
            reward = float("nan") if status == Status.INTERNAL_ERROR else environment.reward
        trajectory = _trajectory(task.instance_id, seed, obs, episode_id, exit_info, recorded, environment,
                                 status, reward, record)
        if c.trajectory_dir:
            _write(Path(c.trajectory_dir) / f"{episode_id}.jsonl", trajectory)
        last_info = (environment.final or (environment.steps[-1]["info"] if environment.steps else info))
        return EpisodeResult(task.instance_id, AGENT_NAME, status, reward, len(recorded.calls),
                             time.monotonic() - start, record, recorded.tokens(), last_info, trajectory)
    finally:
        if own:
            env.close()


def _infrastructure(exc: BaseException) -> bool:
    """The model server (the proxy, the engine behind it, the connection) or repogym's machinery failed."""
    if isinstance(exc, InfraError):
        return True
    module = type(exc).__module__ or ""
    return module.split(".")[0] in ("litellm", "openai", "httpx", "httpcore")


def _trajectory(task_id: str, seed: int | None, observation: str, episode_id: str, exit_info: dict[str, Any],
                recorded, environment: RepoGymEnvironment, status, reward: float, record: dict[str, Any]) -> Trajectory:
    """The episode as repogym trajectory records: one step per model call, its commands' observations beside it."""
    header = {"type": "header", "format": TRAJECTORY_FORMAT, "task_id": task_id, "agent": AGENT_NAME, "seed": seed,
              "observation": observation, "episode_id": episode_id,
              "harness": {"name": AGENT_NAME, "exit_status": exit_info.get("exit_status", "")}}
    steps = []
    tokens = recorded.token_records()
    for call, tok in zip(recorded.calls, tokens):
        # A submit after the run is filed under the last call (the call count had stopped there).
        mine = [s for s in environment.steps if s["call"] == call.index]
        steps.append({"type": "step", "turn": call.index + 1, "action": call.text,
                      "observation": "\n\n".join(s["observation"] for s in mine),
                      "reward": mine[-1]["reward"] if mine else 0.0,
                      "terminated": any(s["terminated"] for s in mine), "truncated": any(s["truncated"] for s in mine),
                      "info": {"commands": [s["command"] for s in mine],
                               "env_steps": [{k: v for k, v in s["info"].items() if k != "eval"} for s in mine]},
                      "agent": {"tokens": tok, "message": call.message}})
    end = {"type": "end", "status": status, "reward": reward, "eval": record}
    return Trajectory(header, steps, end)


def _write(path: Path, trajectory: Trajectory) -> None:
    out = TrajectoryWriter(path)
    try:
        for line in [trajectory.header, *trajectory.steps, trajectory.end]:
            out.write(line)
    finally:
        out.close()


__all__ = ["AGENT_NAME", "EnvironmentConfig", "MiniSweConfig", "RepoGymEnvironment", "SUBMIT_COMMAND",
           "run_mini_swe_episode"]
