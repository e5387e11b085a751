"""repogym as a verifiers environment (verifiers 0.4.0, its ``verifiers.v1`` stack).

verifiers 0.4.0 has no ``MultiTurnEnv``/``ToolEnv``: an environment is a *taskset* (rows -> tasks), a
*harness* (the program that calls the model), and an ``Env`` whose ``run(task, agents)`` drives the
exchange, the engine playing the user (its own OpenEnv and TextArena tasksets work this way). This module
is that, thin over :mod:`repogym.envs`:

- :class:`RepogymTaskset`: one task per repogym task of a suite (``TaskData.id``/``name`` = the task id,
  ``description`` = the issue, ``info`` = task id, suite and the :class:`EnvConfig` fields). The prompt is
  empty: repogym's first observation exists only once the sandbox is up (it names its path), so the env
  opens the conversation with it.
- :class:`RepogymTask`: ``setup`` makes and resets this rollout's :class:`RepoTaskEnv` (held by trace id,
  never in the serialized state), ``finalize`` grades a diff the model left unsubmitted (repogym's
  truncation rule) and closes it, and its one ``@vf.reward``, ``repogym``, is repogym's reward. An
  infrastructure failure, or a bug of repogym's that the environment caught (which ends the episode:
  :mod:`repogym.integrations.outcomes`), is raised there, each saying which it is, so verifiers records an
  error on the trace (and may retry) rather than a reward 0. ``validate`` (verifiers' gold check) proves the gold patch earns 1.0.
- :class:`RepogymEnv`: sends the first observation, passes each reply to ``RepoTaskEnv.step`` (repogym's
  action parser takes JSON and ``<tool_call>`` text; a native tool call is turned into the same JSON), and
  sends the observation back as the next user turn until ``submit`` or a limit ends the episode.
  ``trace.info["repogym"]`` keeps the last step's ``info`` (``eval``, ``reward_components``, ...).
- :class:`RepogymHarness`: an in-process chat loop (one completion per segment through verifiers'
  interception endpoint, as ``Harness.launch`` allows), so no harness program is installed with ``uv``.

Guaranteed: every call the model makes ends in an observation; the reward is exactly repogym's. Not
guaranteed: the ``vf-eval``/``vf-validate`` command lines in a fresh process (the plugin id
:data:`PLUGIN_ID` is registered when this module loads; verifiers finds plugins by top-level module
name), native tool calling (the tools are described in the prompt, none are sent as ``tools``), and
training clients (only verifiers' eval client is tested here).

``verifiers`` is imported on first use: importing this module never needs it.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from dataclasses import fields
from typing import Any

from repogym.envs.core.errors import ConfigError
from repogym.envs.core.status import Status
from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from repogym.integrations.outcomes import ended_by_bug, internal_error_of

PLUGIN_ID = "repogym_verifiers"
"""The taskset id verifiers loads this module by (an alias registered in ``sys.modules``)."""
INSTALL_HINT = 'the verifiers adapter needs verifiers: pip install "repogym[integrations]"'
_ENV_FIELDS = {f.name for f in fields(EnvConfig)} - {"sandbox_config", "tokenizer"}
_LIVE: dict[str, RepoTaskEnv] = {}  # trace id -> this rollout's env (live objects stay out of the trace)

__all__ = ["RepogymTaskset", "RepogymEnv", "RepogymHarness", "load_environment"]


def _import_verifiers():
    try:
        import verifiers.v1 as vf
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return vf


def _env_config(info: dict[str, Any]) -> EnvConfig:
    return EnvConfig(**info.get("env", {}))


def _make_env(info: dict[str, Any]) -> RepoTaskEnv:
    return RepoTaskEnv(task=info["task_id"], suite=info["suite"], config=_env_config(info))


def action_of(reply: str, messages: list) -> Any:
    """What to step the env with: the last assistant message's first native tool call (as repogym's JSON
    form), else the reply's text."""
    for message in reversed(messages):  # verifiers' message objects (third-party): its types vary by role
        calls = getattr(message, "tool_calls", None)
        if getattr(message, "role", None) == "assistant" and calls:
            call = calls[0]
            function = getattr(call, "function", call)
            return json.dumps({"name": getattr(function, "name", None),
                               "arguments": getattr(function, "arguments", None) or {}})
        if getattr(message, "role", None) == "assistant":
            break
    return reply


def _build() -> dict[str, Any]:
    vf = _import_verifiers()
    from verifiers.v1.dialects.chat import message_to_wire
    from verifiers.v1.runtimes import ProgramResult

    class RepogymTasksetConfig(vf.TasksetConfig):
        """Which repogym tasks load, and the settings of each episode's environment."""

        suite: str = "builtin"
        """The repogym suite."""
        task_ids: list[str] | None = None
        """The tasks to keep (None: every task of the suite)."""
        env: dict[str, Any] = {}
        """Fields of :class:`repogym.envs.repo_env.EnvConfig` (``sandbox``, ``max_turns``, ``reward``, ...)."""

    class RepogymData(vf.TaskData):
        info: dict[str, Any]
        """``task_id``, ``suite`` and ``env`` (the EnvConfig fields): what an episode is made from."""

    class RepogymTask(vf.Task[RepogymData]):
        """One repogym task; its rollout's RepoTaskEnv lives from ``setup`` to ``finalize``."""

        @property
        def key(self) -> str:
            return f"{self.data.info['suite']}/{self.data.info['task_id']}"

        async def setup(self, trace, runtime) -> None:
            env = await asyncio.to_thread(_make_env, self.data.info)
            kept = False
            try:
                obs, info = await asyncio.to_thread(env.reset, options={"task_id": self.data.info["task_id"]})
                kept = True
            finally:
                if not kept:  # the reset raised (verifiers records it on the trace) or was cancelled: free the sandbox
                    await asyncio.to_thread(env.close)
            _LIVE[trace.id] = env
            trace.info["repogym_first_observation"] = obs
            trace.info["repogym"] = {"reset": {k: info[k] for k in ("task_id", "max_turns", "sandbox")}}

        async def finalize(self, trace, runtime) -> None:
            env = _LIVE.pop(trace.id, None)
            if env is None:
                return
            try:
                last = trace.info.get("repogym", {})
                if not last.get("done"):  # the exchange ended (a verifiers limit, noop validation) before submit
                    if env.config.grade_on_truncation:
                        await _step(env, trace, json.dumps({"name": "submit", "arguments": {}}))
                        trace.info["repogym"]["ended_by"] = "verifiers"
                    else:
                        trace.info["repogym"] = {**last, "reward": 0.0, "status": "not_submitted"}
            finally:
                await asyncio.to_thread(env.close)

        @vf.reward
        async def repogym(self, trace) -> float:
            """repogym's reward for the episode; an excluded one (an infrastructure failure, a bug of repogym's)
            is an error, not a 0."""
            result = trace.info.get("repogym", {})
            if "reward" not in result:
                raise RuntimeError("repogym: the episode has no reward (setup failed or finalize did not run)")
            reward = result["reward"]
            if result.get("exclude") or (isinstance(reward, float) and math.isnan(reward)):
                error = (result.get("eval") or {}).get("error") or result.get("infra_error") or {}
                where = error.get("where", "repogym")
                if result.get("status") == Status.INTERNAL_ERROR:
                    raise RuntimeError(f"repogym internal error (a bug of repogym's, logged where it ran) in {where}: "
                                       f"{error.get('message', '')}")
                raise RuntimeError(f"repogym infrastructure error in {where}: {error}")
            return float(reward)

        async def validate(self, runtime) -> bool:
            """Gold check: the task's gold patch through repogym's tools, then submit, earns 1.0."""
            return await asyncio.to_thread(_gold_earns_one, self.data.info)

    class RepogymTaskset(vf.Taskset[RepogymTask, RepogymTasksetConfig]):
        """One verifiers task per repogym task of ``config.suite``."""

        def load(self):
            from repogym.envs.tasks.suites import load_suite
            config = self.config
            unknown = sorted(set(config.env) - _ENV_FIELDS)
            if unknown:
                raise ConfigError(f"env: unknown EnvConfig fields {unknown}; expected {sorted(_ENV_FIELDS)}")
            EnvConfig(**config.env)  # bad values fail here, not in every rollout
            tasks = load_suite(config.suite)
            if config.task_ids is not None:
                known = {t.instance_id for t in tasks}
                if missing := [t for t in config.task_ids if t not in known]:
                    raise ConfigError(f"task_ids: {missing} are not in suite {config.suite!r}")
                tasks = [t for t in tasks if t.instance_id in set(config.task_ids)]
            for task in tasks:
                yield RepogymTask(RepogymData(
                    id=task.instance_id, name=task.instance_id, description=task.problem_statement, prompt=None,
                    info={"task_id": task.instance_id, "suite": config.suite, "env": dict(config.env)}),
                    config.task)

    class RepogymHarnessConfig(vf.HarnessConfig):
        max_tokens: int | None = None
        """Completion tokens per turn (None: the server's default)."""

    class RepogymHarness(vf.Harness[RepogymHarnessConfig]):
        """One chat completion per segment, in process, through the rollout's interception endpoint."""

        APPENDS_SYSTEM_PROMPT = True
        SUPPORTS_RESUME = True
        EXECUTES_CODE = False  # the model's commands run in repogym's sandbox, not in verifiers' runtime
        NEEDS_CONTAINER = False

        async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **_) -> ProgramResult:
            from openai import AsyncOpenAI
            system, prompt = self.resolve_prompt(data)
            messages = [{"role": "system", "content": system}] if system else []
            if isinstance(prompt, str):
                messages.append({"role": "user", "content": prompt})
            else:
                messages += [message_to_wire(m) for m in prompt or []]
            extra = {} if self.config.max_tokens is None else {"max_tokens": self.config.max_tokens}
            async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
                await client.chat.completions.create(model=ctx.model, messages=messages, **extra)
            return ProgramResult(exit_code=0, stdout="", stderr="")

    class RepogymEnvConfig(vf.EnvConfig):
        agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
        """The one seat. Its runtime holds nothing (the episode runs in repogym's sandbox), so a local one."""

    class RepogymEnv(vf.Env[RepogymEnvConfig]):
        """The engine plays the user: each reply is one repogym step, each observation the next user turn."""

        async def run(self, task, agents) -> None:
            async with agents.agent.interaction(task) as interaction:
                trace = interaction.trace
                env = _LIVE.get(trace.id)
                if env is None:  # setup failed: verifiers has recorded why on the trace
                    return
                segment = await interaction.turn(trace.info.pop("repogym_first_observation"))
                while not segment.terminated:
                    obs, done = await _step(env, trace, action_of(segment.last_reply, segment.messages))
                    if done:
                        break
                    segment = await interaction.turn(obs)

    built = (RepogymTasksetConfig, RepogymData, RepogymTask, RepogymTaskset, RepogymHarnessConfig, RepogymHarness,
             RepogymEnvConfig, RepogymEnv)
    for cls in built:  # named as if defined at module level (traces record the task type's name)
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
    return {cls.__name__: cls for cls in built}


async def _step(env: RepoTaskEnv, trace: Any, action: Any) -> tuple[str, bool]:
    """One repogym step; records its info (and at the end the reward) on ``trace.info["repogym"]``."""
    obs, reward, terminated, truncated, info = await asyncio.to_thread(env.step, action)
    bug = internal_error_of(info)
    if bug is not None:  # a bug of ours the env caught ends the episode, excluded (as run_episode does)
        info, reward, truncated = ended_by_bug(info, bug), float("nan"), True
    done = terminated or truncated
    record = {"turn": info.get("turn"), "tool": info.get("tool"), "error": info.get("error"), "done": done}
    if done:
        record = {**info, "done": True, "reward": reward, "observation": obs,
                  "status": str(info.get("eval", {}).get("status", "not_submitted"))}
    trace.info["repogym"] = {**trace.info.get("repogym", {}), **record}
    return obs, done


def _gold_earns_one(info: dict[str, Any]) -> bool:
    from repogym.agents.oracle import OracleAgent
    env = _make_env(info)
    try:
        obs, reset_info = env.reset(options={"task_id": info["task_id"]})
        agent = OracleAgent(suite=info["suite"])
        agent.reset(obs, reset_info)
        for _ in range(env.config.max_turns):
            obs, reward, terminated, truncated, step_info = env.step(agent.act(obs, reset_info))
            if terminated or truncated:
                return reward == 1.0
        return False
    finally:
        env.close()


_CLASSES: dict[str, Any] | None = None


def classes() -> dict[str, Any]:
    """The verifiers classes by name (built on first call; needs verifiers). Also registers :data:`PLUGIN_ID`."""
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = _build()
        sys.modules.setdefault(PLUGIN_ID, sys.modules[__name__])
    return _CLASSES


def __getattr__(name: str) -> Any:
    # PEP 562: the classes are built on first access (verifiers' plugin loader reads them through __all__).
    if name.startswith("Repogym"):
        found = classes().get(name)
        if found is not None:
            return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_environment(suite: str = "builtin", task_ids: list[str] | None = None, **env: Any):
    """The verifiers env over ``suite`` (``task_ids`` keeps those); other keyword arguments are
    :class:`EnvConfig` fields (``sandbox="local"``, ``max_turns=20``, ``reward="shaped"``, ...)."""
    unknown = sorted(set(env) - _ENV_FIELDS)
    if unknown:
        raise ConfigError(f"load_environment: unknown arguments {unknown}; expected suite, task_ids or an "
                          f"EnvConfig field ({', '.join(sorted(_ENV_FIELDS))})")
    EnvConfig(**env)
    found = classes()
    vf = _import_verifiers()
    config = vf.resolve_env_config({"taskset": {"id": PLUGIN_ID, "suite": suite, "task_ids": task_ids, "env": env}})
    assert isinstance(config, found["RepogymEnvConfig"]), type(config)
    return vf.load_environment(config)
