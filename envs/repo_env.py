"""The Gymnasium environment: one episode = one task in a sandbox, one step = one tool call.

``reset`` loads the task's repository at its base commit into the agent's sandbox (reusing the sandbox
when it is clean: a git reset, not a new container) and returns the problem statement with the tool
instructions. ``step`` takes one tool call as text and returns its output. ``submit`` grades the diff in
a pristine sandbox (:mod:`repogym.envs.rewards`) and terminates; the turn limit truncates (and, by default,
grades whatever the diff is then), as do the optional budgets of observation tokens and wall time
(``info["truncation"]`` says which). Every step reports ``info["usage"]``: the observation's characters
(and tokens, given a tokenizer) and the episode's running totals; :class:`repogym.envs.step_info.StepInfo` lists
every key ``info`` may hold. Agent mistakes are observations; infrastructure failures end the episode with
``info["infra_error"]`` and a NaN reward, so training can drop them, and so do bugs of repogym's own
(``info["internal_error"]``, :func:`repogym.envs.core.bugs.report_bug`; raised instead in strict mode). An agent
that kills its own sandbox ends the episode ``unresolved``: nothing is graded, so the ``tests`` component scores
0 and the diff counts for nothing, but the components that read neither still count (``format``, the share of
well-formed calls, pays up to its weight: 0.2 in the ``shaped`` preset, 0.1 in ``process``; ``steps`` costs).
What the episode has done so far (turn, last edit, test runs) is an
:class:`repogym.envs.core.episode_state.EpisodeState`, made fresh on each reset and shared with the tools through
their context; the reward's facts are read from it (:mod:`repogym.envs.rewards.facts`).
"""

from __future__ import annotations

import copy
import string
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym

from repogym.envs.actions import FORMAT_HINT, parse_action
from repogym.envs.core.bugs import report_bug
from repogym.envs.core.errors import (
    ConfigError, ForkRefused, InfraError, InternalError, SandboxError, SandboxKilledByAgent, SandboxRefused)
from repogym.envs.rewards import EvalRecord, grade
from repogym.envs.rewards.evaluate import prepared
from repogym.envs.rewards.components import EpisodeFacts, RewardConfig, compute_reward
from repogym.envs.rewards.facts import analyze_sandbox, ran_tests_since_last_edit, tests_since_last_edit
from repogym.envs.sandbox import SandboxConfig, SandboxRequestError, default_backend, sandbox_factory
from repogym.envs.sandbox.base import Sandbox
from repogym.envs.sandbox.cleanup import close_later, wait_closed
from repogym.envs.sandbox.pool import SandboxPool
from repogym.envs.core.status import Status, excluded
from repogym.envs.tasks.repos import repo_path, snapshot
from repogym.envs.tasks.schema import Task
from repogym.envs.tasks.suites import find_task, load_suite
from repogym.envs.step_info import ForkInfo, StepInfo, TruncationInfo, UsageInfo
from repogym.envs.tools import TOOLS, ToolContext, ToolError, get_tool, tools_schema

if TYPE_CHECKING:  # the analysis (tree-sitter) is imported on use
    from repogym.envs.analysis import DiffAnalysis

ENV_ID = "repogym/RepoTask-v0"
MAX_TEXT = 1 << 20
LOAD_ATTEMPTS = 3  # sandboxes tried per reset before its infrastructure error is raised


class AnyText(gym.spaces.Text):
    """A text space whose members are any string up to ``max_length`` (tool output is arbitrary Unicode);
    ``sample`` draws printable ASCII, as a malformed-action fuzzer."""

    def __init__(self, max_length: int = MAX_TEXT, seed: int | None = None):
        super().__init__(max_length=max_length, min_length=0, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length


@dataclass
class EnvConfig:
    """Settings of :class:`RepoTaskEnv`."""

    max_turns: int = 30
    """Tool calls per episode before truncation."""
    sandbox: str | None = None
    """``docker`` or ``local``; ``None`` picks docker when a daemon answers, else local."""
    sandbox_config: SandboxConfig = field(default_factory=SandboxConfig)
    """Limits and labels of every sandbox."""
    observation_limit: int = 16_000
    """Characters of tool output per observation; the middle of longer output is cut with a marker."""
    command_timeout: float = 60.0
    """Default seconds for a ``bash`` command."""
    max_command_timeout: float = 600.0
    """Most seconds an agent may ask for; also the timeout of ``run_tests``."""
    eval_timeout: float = 900.0
    """Seconds the hidden tests may run when grading."""
    grade_on_truncation: bool = True
    """Grade the diff when the turn limit ends an episode (else reward 0 with status ``not_submitted``)."""
    eval_pool_size: int = 1
    """Grading sandboxes kept started ahead of time (per environment image)."""
    grading_cpu_shares: int = 128
    """CPU weight of docker grading sandboxes against the agent's (``sandbox_config.cpu_shares``, 1024): a grading is
    batch work, so while the cores are contended it yields to live episodes' commands, whose answers the policy waits
    on; alone it runs as fast as before. ``1024``: both alike. (The local backend's grading sandboxes keep the
    default: their cgroups are siblings of the host's own work, not only of other sandboxes.)"""
    fork_pool_size: int = 0
    """Agent sandboxes kept started for :meth:`RepoTaskEnv.fork` (per environment image, filled from reset on);
    0: a fork starts its sandboxes when asked. Set it to the largest ``n`` you fork by for forks without a start."""
    fork_max_bytes: int = 128 << 20
    """Most bytes of files (repository, ``.git``, scratch folders) a fork copies; past it, ``fork`` refuses."""
    reward: RewardConfig | str = "default"
    """Reward components and weights, or the name of a preset in
    :data:`repogym.envs.rewards.components.PRESETS` (``default``: tests only; ``process``; ``shaped``)."""
    analyze_final_diff: bool = True
    """Put the tree-sitter analysis of the final diff in ``info["analysis"]``."""
    tokenizer: Any = None
    """A tokenizer (anything with ``encode``) or a local model folder: ``info["usage"]`` then counts tokens too."""
    max_observation_tokens: int | None = None
    """Budget of observation tokens per episode (the intro included); needs ``tokenizer``. Past it: truncated."""
    max_wall_s: float | None = None
    """Budget of wall-clock seconds per episode, from reset; past it: truncated."""
    tools: list[str] | None = None
    """The tools this environment offers (None: every registered tool): the intro and ``info["tools"]`` list only
    these, and a call to another is an ``unknown_tool`` error observation."""

    def __post_init__(self):
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {self.max_turns}")
        if not 2 <= self.grading_cpu_shares <= 262144:  # docker's range for cpu_shares
            raise ConfigError(f"grading_cpu_shares must be within 2..262144, got {self.grading_cpu_shares}")
        if self.fork_pool_size < 0 or self.eval_pool_size < 0:
            raise ConfigError(f"pool sizes must be >= 0, got eval_pool_size={self.eval_pool_size}, "
                              f"fork_pool_size={self.fork_pool_size}")
        if self.max_observation_tokens is not None and self.tokenizer is None:
            raise ConfigError("max_observation_tokens needs a tokenizer to count with: set EnvConfig.tokenizer")
        for name in ("max_observation_tokens", "max_wall_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be > 0 or None, got {value}")
        if isinstance(self.reward, str):
            self.reward = RewardConfig.preset(self.reward)
        if self.sandbox not in (None, "docker", "local"):
            raise ConfigError(f"sandbox must be 'docker', 'local' or None, got {self.sandbox!r}")
        if self.tools is not None:
            unknown = [t for t in self.tools if t not in TOOLS]
            if unknown or not self.tools:
                raise ConfigError(f"tools: expected a non-empty list of {', '.join(TOOLS.names())}; "
                                  f"got {list(self.tools)}")


class RepoTaskEnv(gym.Env):
    """A multi-turn coding task over a real repository (see the module docstring)."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, task: str | Task | dict | None = None, suite: str = "builtin", sandbox: str | None = None,
                 max_turns: int | None = None, render_mode: str | None = None, config: EnvConfig | None = None,
                 tasks: list[Task] | None = None):
        config = config or EnvConfig()
        if sandbox is not None:
            config = replace(config, sandbox=sandbox)
        if max_turns is not None:
            config = replace(config, max_turns=max_turns)
        config.__post_init__()
        if render_mode not in (None, "ansi"):
            raise ConfigError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.config, self.render_mode = config, render_mode
        self._tokenizer = _load_tokenizer(config.tokenizer)
        self.backend = config.sandbox or default_backend()
        self.suite = suite
        self.tasks = self._task_list(task, suite, tasks)
        self.observation_space = AnyText()
        self.action_space = AnyText()
        self._sandbox = None
        self._sandbox_key: str | None = None
        self._pools: dict[tuple[str, str], SandboxPool] = {}  # by (environment, base)
        self._fork_pools: dict[str, SandboxPool] = {}
        self._owns_pools = True  # forks share their source's pools; only the source closes them
        self.fork_info: ForkInfo | None = None
        """Set on an environment :meth:`fork` made: its source's turn and what the fork could not copy."""
        self.task: Task | None = None
        self._done = True
        self._last_obs = ""

    # -- tasks ----------------------------------------------------------------------------------------
    def _task_list(self, task, suite, tasks) -> list[Task]:
        if tasks:
            return list(tasks)
        if isinstance(task, Task):
            return [task]
        if isinstance(task, dict):
            return [Task.from_dict(task, path="<task spec>")]
        if isinstance(task, str):
            return [find_task(task, suite)]
        if task is not None:
            raise ConfigError(f"task must be an id, a Task or a dict, got {type(task).__name__}")
        found = load_suite(suite)
        if not found:
            raise ConfigError(f"suite {suite!r} has no tasks")
        return found

    def _pick(self, options: dict | None) -> Task:
        task_id = (options or {}).get("task_id")
        if task_id is not None:
            for task in self.tasks:
                if task.instance_id == task_id:
                    return task
            return find_task(task_id, self.suite)
        if len(self.tasks) == 1:
            return self.tasks[0]
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    # -- sandboxes -------------------------------------------------------------------------------------
    def _factory(self, task: Task, grading: bool = False):
        config = self.config.sandbox_config
        # Docker only: its containers' weights count among containers; the local backend's cgroups sit at the
        # cgroup root beside the host's own work, where a low weight starves a grading against unrelated load (a busy
        # CI run: a local submit took 9-16 s instead of 1).
        if grading and self.backend == "docker":
            config = replace(config, cpu_shares=self.config.grading_cpu_shares)
        if self.backend == "local":  # the task's source repository holds history past the base
            config = replace(config, hidden_paths=config.hidden_paths + (str(repo_path(task)),))
        return sandbox_factory(self.backend, task.setup, config)

    def _agent_sandbox(self, task: Task):
        if self._sandbox is not None and (self._sandbox_key != task.env_key or self._sandbox.dirty_reason):
            self._sandbox.close()
            self._sandbox = None
        if self._sandbox is None:
            self._sandbox = self._factory(task)()
            self._sandbox_key = task.env_key
        return self._sandbox

    def _grading_pool(self, task: Task) -> SandboxPool:
        # Sandboxes health-checked and holding the task's base as they are pooled (evaluate.prepared): a grading starts
        # at the patch. One pool per task's base; the last task's pools go when the task changes (a fork still
        # grading one of them gets a sandbox started for it: a closed pool's acquire starts one).
        key = (task.env_key, snapshot(task).key)
        if key not in self._pools:
            spares: list[Sandbox] = []
            if self._owns_pools:
                for old in [k for k in self._pools if k != key]:
                    pool = self._pools.pop(old)
                    if old[0] == task.env_key:  # the same environment: its waiting sandboxes take this base instead
                        spares += pool.take_ready()
                    close_later(pool, timeout=0)  # a reset does not wait for containers' removal
            grading = prepared(self._factory(task, grading=True), task, spares)
            self._pools[key] = SandboxPool(grading, self.config.eval_pool_size, spares=spares)
        return self._pools[key]

    def _fork_pool(self, task: Task) -> SandboxPool:
        if task.env_key not in self._fork_pools:
            self._fork_pools[task.env_key] = SandboxPool(self._factory(task), self.config.fork_pool_size)
        return self._fork_pools[task.env_key]

    def _load(self, task: Task) -> int:
        """Load ``task`` into a clean sandbox; returns how many sandboxes had to be replaced on the way.

        A sandbox that fails to start, or one a left-over process of the last episode broke (killed, full
        disk), is replaced; after ``LOAD_ATTEMPTS`` tries the last infrastructure error is raised."""
        snap = snapshot(task)
        last: Exception | None = None
        for attempt in range(LOAD_ATTEMPTS):
            try:
                sandbox = self._agent_sandbox(task)
                if sandbox.snapshot_key == snap.key:
                    sandbox.reset()
                else:
                    sandbox.load(snap)
                if not sandbox.dirty_reason:
                    return attempt
            except (InfraError, SandboxRequestError, SandboxKilledByAgent) as exc:
                last = exc
            if self._sandbox is not None:
                self._sandbox.dirty_reason = self._sandbox.dirty_reason or "reset failed"
        if isinstance(last, InfraError):
            raise last
        raise SandboxError("env.reset", f"no clean sandbox after {LOAD_ATTEMPTS} tries: {last}")

    # -- gymnasium API --------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, StepInfo]:
        super().reset(seed=seed)
        self.task = self._pick(options)
        restarts = self._load(self.task)
        self._grading_pool(self.task)  # start warming grading sandboxes while the agent works
        if self.config.fork_pool_size:
            self._fork_pool(self.task)
        self.fork_info = None
        self.turn, self.well_formed, self._done = 0, 0, False
        self.ctx = ToolContext(self._sandbox, self.task, self.config.command_timeout, self.config.max_command_timeout)
        obs = self.intro(self.task)
        self._last_obs = obs
        self._usage = {"observation_chars": 0, "turns": 0, "wall_s": 0.0}
        if self._tokenizer is not None:
            self._usage["observation_tokens"] = 0
        self._started = time.monotonic()
        info: StepInfo = {
            "task_id": self.task.instance_id, "repo": self.task.repo, "difficulty": self.task.difficulty,
            "tools": self.tools_schema(), "max_turns": self.config.max_turns, "sandbox": self.backend,
            "horizon": self.task.extra.get("horizon", "short"), "usage": self._count(obs), "sandbox_restarts": restarts}
        return obs, info

    def step(self, action: Any) -> tuple[str, float, bool, bool, StepInfo]:
        if self._done:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        self.turn += 1
        self.ctx.episode.turn = self.turn
        start = time.monotonic()
        info: StepInfo = {"task_id": self.task.instance_id, "turn": self.turn, "tool": None, "exit_code": None,
                          "error": None}
        reward, terminated, truncated = 0.0, False, False
        try:
            call = parse_action(action)
            info["tool"] = call.name
            tool = self._tool(call.name)
            args = tool.check_arguments(call.arguments)
            self.well_formed += 1
            if tool.name == "submit":
                obs, reward = self._finish("submitted", info)
                terminated = True
            else:
                result = tool.run(self.ctx, args)
                obs, info["exit_code"], info["error"] = result.output, result.exit_code, result.error
                info.update(result.data)  # the tool's own facts (StepInfo lists the builtin tools')
                if tool.edits:
                    obs += self._note_edit(result.tree)
        except ToolError as exc:
            obs, info["error"] = f"error ({exc.kind}): {exc.message}", exc.kind
        except SandboxKilledByAgent as exc:
            # The agent's doing: graded as a failure (never excluded), and the sandbox is replaced on reset.
            self._sandbox.dirty_reason = self._sandbox.dirty_reason or str(exc)
            record = EvalRecord(self.task.instance_id, Status.UNRESOLVED, error=exc.record())
            _, reward = self._finish("the sandbox was killed from inside", info, record=record)
            obs = (f"error (sandbox_killed): {exc.message}. Nothing of this episode can be graded; the episode ends "
                   "unresolved (the tests score 0).")
            info["error"], terminated = "sandbox_killed", True
        except SandboxRefused as exc:
            # The agent's sandbox refused the harness (a full /repo, a locked .git or /tmp): its doing, an observation.
            obs, info["error"] = f"error (sandbox_refused): {exc.message}", "sandbox_refused"
        except SandboxRequestError as exc:  # the runner refused a request the agent's state made impossible
            obs, info["error"] = f"error (sandbox_refused): {exc}", "sandbox_refused"
        except InfraError as exc:
            obs = f"[infrastructure error in {exc.where}: {exc.message}; the episode ends]"
            info["infra_error"] = exc.record()
            info["eval"] = {"status": Status.INFRA_ERROR, "error": exc.record()}
            info["exclude"] = True
            reward, truncated = float("nan"), True
            if self._sandbox is not None:
                self._sandbox.dirty_reason = self._sandbox.dirty_reason or str(exc)
        except InternalError:  # a bug below, already reported (strict mode raises it): out of step as it is
            raise
        except Exception as exc:  # a bug of ours: excluded with a NaN reward, never an outcome the agent is taught by
            error = report_bug("env.step", exc)
            obs = (f"[internal error of repogym in {error.where} ({error.message}): not your doing; "
                   "the episode ends]")
            info["error"], info["internal_error"] = "internal_error", error.record()
            info["eval"] = {"status": Status.INTERNAL_ERROR, "error": error.record()}
            info["exclude"] = True
            reward, truncated = float("nan"), True
            if self._sandbox is not None:  # what the bug left half done is not trusted: a fresh sandbox on reset
                self._sandbox.dirty_reason = self._sandbox.dirty_reason or f"internal error: {error.message}"
        obs = truncate(clean_text(obs), self.config.observation_limit)
        measured = self._measure(obs)  # tokenized once; again only if a budget's note is appended below
        budget = None if terminated or truncated else self._over_budget(measured)
        if budget is not None:
            truncated = True
            info["truncation"] = budget
            if self.config.grade_on_truncation:
                _, reward = self._finish(budget["reason"].replace("_", " "), info)
            else:
                info["eval"] = {"status": Status.NOT_SUBMITTED}
            obs += f"\n[{budget['message']}; the episode ends]"
        if terminated or truncated:
            self._done = True
            info["well_formed_calls"] = self.well_formed
        info["duration_s"] = round(time.monotonic() - start, 4)
        info["usage"] = self._count(obs, None if budget else measured)
        if self.fork_info is not None and self.turn == self.fork_info["source_turn"] + 1:
            info["fork"] = self.fork_info
        self._last_obs = obs
        # Absent rather than None: vector envs stack info values by type, and None breaks that.
        return obs, float(reward), terminated, truncated, cast(StepInfo, {k: v for k, v in info.items() if v is not None})

    def _measure(self, obs: str) -> dict[str, int]:
        usage = {"observation_chars": len(obs)}
        if self._tokenizer is not None:
            usage["observation_tokens"] = len(self._tokenizer.encode(obs, add_special_tokens=False))
        return usage

    def _count(self, obs: str, measured: dict[str, int] | None = None) -> UsageInfo:
        """This observation's size (``measured`` when already known) and the episode's running totals
        (``info["usage"]``)."""
        usage = measured or self._measure(obs)
        for key, value in usage.items():
            self._usage[key] += value
        self._usage["turns"] = self.turn
        self._usage["wall_s"] = round(time.monotonic() - self._started, 3)
        return cast(UsageInfo, {**usage, "episode": dict(self._usage)})

    def _over_budget(self, measured: dict[str, int]) -> TruncationInfo | None:
        """The first budget this step's observation would end (turns, observation tokens, wall time), or None."""
        c = self.config
        if self.turn >= c.max_turns:
            return {"reason": "turn_limit", "limit": c.max_turns, "used": self.turn,
                    "message": f"turn limit of {c.max_turns} reached"}
        if c.max_observation_tokens is not None:
            used = self._usage["observation_tokens"] + measured["observation_tokens"]
            if used >= c.max_observation_tokens:
                return {"reason": "observation_token_budget", "limit": c.max_observation_tokens, "used": used,
                        "message": f"observation token budget of {c.max_observation_tokens} reached ({used})"}
        if c.max_wall_s is not None:
            used = time.monotonic() - self._started
            if used >= c.max_wall_s:
                return {"reason": "wall_time_budget", "limit": c.max_wall_s, "used": round(used, 3),
                        "message": f"wall-time budget of {c.max_wall_s:g}s reached ({used:.1f}s)"}
        return None

    def _note_edit(self, tree: str | None = None) -> str:
        """Record whether the repository's content changed (whatever tool did it, bash included; ``tree``: its id
        after the call, when the tool told it); returns a note for the observation when that cannot be told (a full
        disk, say)."""
        episode = self.ctx.episode
        try:
            tree = tree or self._sandbox.tree_id()
        except SandboxRequestError as exc:
            episode.last_edit_turn = self.turn
            return f"\n[note: git could not record the repository's state: {exc}]"
        if tree != (self._sandbox.base_tree if episode.tree_id is None else episode.tree_id):
            episode.last_edit_turn = self.turn
        episode.tree_id = tree
        return ""

    def _finish(self, why: str, info: StepInfo, record: EvalRecord | None = None) -> tuple[str, float]:
        """Grade the diff (or take ``record`` when nothing can be graded); fill ``info`` with eval, analysis
        and reward components; return (obs, reward)."""
        patch = ""
        if record is None:
            record, patch = self._grade_diff()
        analysis = None
        if self.config.analyze_final_diff or self.config.reward.needs_analysis:
            analysis, record = self._analyze(patch, record, info)
        self.last_patch, self.last_eval = patch, record
        info["eval"] = record.to_dict()
        if record.status is Status.INFRA_ERROR:
            info["infra_error"] = record.error
        elif record.status is Status.INTERNAL_ERROR:
            info["internal_error"] = record.error
        episode = self.ctx.episode
        facts = EpisodeFacts(eval=record, turns=self.turn, well_formed=self.well_formed, analysis=analysis,
                             tests_after_last_edit=tests_since_last_edit(episode),
                             changed_anything=bool(patch.strip()),
                             ran_tests_after_last_edit=ran_tests_since_last_edit(episode),
                             pass_to_pass=self.task.PASS_TO_PASS)
        reward, components = compute_reward(self.config.reward, facts)
        if components is not None:
            info["reward_components"] = components
        if excluded(record.status, reward):
            info["exclude"] = True  # infrastructure failed or a bug of ours (no components), or no reward: drop it
        summary = record.status.value
        if record.fail_to_pass:
            summary += (f" (FAIL_TO_PASS {record.fail_to_pass['passed']}/{record.fail_to_pass['total']}, "
                        f"PASS_TO_PASS {record.pass_to_pass['passed']}/{record.pass_to_pass['total']})")
        return f"[{why}; evaluation: {summary}]", reward

    def _analyze(self, patch: str, record: EvalRecord, info: StepInfo) -> tuple[DiffAnalysis | None, EvalRecord]:
        """The analysis of the final diff (``info["analysis"]``) and the record the reward is computed from.

        When the analysis cannot be had, ``info["analysis"]`` says why and the reward stands without it, unless
        the reward needs it: then the record becomes the failure's (``infra_error`` when the sandbox was lost from
        outside, ``internal_error`` for a bug of ours), excluded, since a reward computed without it would be
        wrong. What the agent's sandbox refused (its files, its kill) never excludes an episode."""
        from repogym.envs.analysis import DiffAnalysis
        try:
            analysis = analyze_sandbox(self._sandbox, self.task, patch) if patch.strip() else DiffAnalysis()
        except (SandboxRequestError, SandboxRefused, SandboxKilledByAgent) as exc:  # the agent's sandbox, its doing
            info["analysis"] = {"error": f"{type(exc).__name__}: {exc}"}
            return None, record
        except InfraError as exc:  # the sandbox lost from outside
            info["analysis"] = {"error": f"{type(exc).__name__}: {exc}"}
            if self.config.reward.needs_analysis and record.status is not Status.INTERNAL_ERROR:
                record = replace(record, status=Status.INFRA_ERROR, error=exc.record())
            return None, record
        except InternalError:  # a bug below, already reported (strict mode raises it)
            raise
        except Exception as exc:  # a bug of ours: never a reward computed as if the diff were clean
            error = report_bug("env.analysis", exc)
            info["analysis"] = {"error": error.message}
            if self.config.reward.needs_analysis:
                record = replace(record, status=Status.INTERNAL_ERROR, error=error.record())
            return None, record
        info["analysis"] = analysis.to_dict()
        return analysis, record

    def _grade_diff(self) -> tuple[EvalRecord, str]:
        """The evaluation of the agent's diff; never raises but for a bug of ours in strict mode. A diff that
        cannot be taken is the agent's doing (``unresolved``) unless the sandbox was lost from outside
        (``infra_error``); a bug of ours while grading is ``internal_error`` (excluded), never a 0."""
        try:
            patch = self._sandbox.diff()
        except (SandboxRequestError, SandboxKilledByAgent) as exc:
            self._sandbox.dirty_reason = self._sandbox.dirty_reason or f"diff failed: {exc}"
            where = exc.where if isinstance(exc, SandboxKilledByAgent) else "env.diff"
            return EvalRecord(self.task.instance_id, Status.UNRESOLVED, error={
                "where": where, "message": f"the diff could not be taken: {exc}"}), ""
        except InfraError as exc:
            self._sandbox.dirty_reason = self._sandbox.dirty_reason or str(exc)
            return EvalRecord(self.task.instance_id, Status.INFRA_ERROR, error=exc.record()), ""
        try:
            return grade(self.task, patch, self._grading_pool(self.task).acquire, timeout=self.config.eval_timeout,
                         checked=True), patch
        except InternalError:  # a bug below, already reported (strict mode raises it)
            raise
        except Exception as exc:  # grade turns every failure of the agent or the world into a record: this is ours
            error = report_bug("env.grade", exc)
            return EvalRecord(self.task.instance_id, Status.INTERNAL_ERROR, error=error.record()), patch

    # -- branching --------------------------------------------------------------------------------------
    def fork(self, n: int) -> list[RepoTaskEnv]:
        """``n`` new environments at this very step of this episode, each then going its own way.

        Each fork's sandbox holds the same repository (files and every git object), scratch folders and base
        (a reset in it goes back to the task's base commit) as this one now, and the fork has the same task,
        turn count, usage, wall-clock start and episode state (edits, test runs). This environment goes on
        unchanged. Running processes are not copied; neither are sockets, POSIX message queues or files the
        agent made unreadable: each fork's ``fork_info["not_copied"]`` lists those, and its next step's
        ``info["fork"]`` repeats ``fork_info``. Forks come from the warm pool (``EnvConfig.fork_pool_size``)
        and share this environment's pools; close each fork (before this environment) when done with it.

        Raises :class:`ForkRefused` when the episode's state cannot be copied (over ``EnvConfig.fork_max_bytes``,
        or the agent broke or killed its sandbox: its next step tells it so) and :class:`InfraError` when a
        sandbox fails from outside; no fork is left open then, and this environment goes on.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"fork: n must be an int >= 1, got {n!r}")
        if self._done or self.task is None or self._sandbox is None:
            raise RuntimeError("fork needs an episode in progress: call reset() first (a finished episode has "
                               "nothing left to branch)")
        start = time.monotonic()
        try:
            state = self._sandbox.export_state(self.config.fork_max_bytes)
        except SandboxRequestError as exc:
            raise ForkRefused(str(exc).removeprefix("ValueError: ")) from None
        except SandboxKilledByAgent as exc:
            self._sandbox.dirty_reason = self._sandbox.dirty_reason or str(exc)
            raise ForkRefused(f"the sandbox died by the agent's hand: {exc.message}") from None
        pool = self._fork_pool(self.task)
        forks = [self._branch() for _ in range(n)]

        def populate(child: RepoTaskEnv) -> None:
            child._sandbox = pool.acquire()
            child.ctx.sandbox = child._sandbox
            try:
                child._sandbox.import_state(state)
            except SandboxRequestError as exc:  # what the agent's files made impossible to write back
                raise ForkRefused(str(exc)) from None

        try:
            if n == 1:
                populate(forks[0])
            else:
                with ThreadPoolExecutor(max_workers=min(n, 16), thread_name_prefix="repogym-fork") as workers:
                    list(workers.map(populate, forks))
        except BaseException:
            for child in forks:
                child.close()
            raise
        info: ForkInfo = {"source_turn": self.turn, "forks": n, "not_copied": list(state.not_copied),
                          "processes": "not copied", "state_bytes": state.size,
                          "latency_s": round(time.monotonic() - start, 4)}
        for child in forks:
            child.fork_info = copy.deepcopy(info)
        return forks

    def _branch(self) -> RepoTaskEnv:
        """A copy of this environment's episode bookkeeping, with no sandbox of its own yet."""
        child = copy.copy(self)
        child._sandbox = None
        child._owns_pools = False
        child._np_random = copy.deepcopy(self._np_random)
        child._usage = dict(self._usage)
        episode = copy.deepcopy(self.ctx.episode)
        child.ctx = replace(self.ctx, sandbox=None, episode=episode)
        return child

    def render(self) -> str | None:
        return self._last_obs if self.render_mode == "ansi" else None

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
        if self._owns_pools:
            for pool in (*self._pools.values(), *self._fork_pools.values()):
                pool.close()
            self._pools.clear()
            self._fork_pools.clear()
            wait_closed()  # the graded sandboxes closing in the background: gone when close returns
        super().close()

    # -- helpers --------------------------------------------------------------------------------------
    def tools_schema(self) -> list[dict]:
        """The OpenAI tools JSON of this environment's tools."""
        return tools_schema(self._tool_names())

    def _tool_names(self) -> list[str]:
        return list(TOOLS) if self.config.tools is None else [t for t in TOOLS if t in self.config.tools]

    def _tool(self, name: str):
        if self.config.tools is not None and name not in self.config.tools:
            raise ToolError("unknown_tool", f"unknown tool {name!r}: expected one of {', '.join(self._tool_names())}")
        return get_tool(name)

    def intro(self, task: Task) -> str:
        """The first observation of an episode of ``task``: the issue, the tools, the turn budget. Before any
        reset (no sandbox yet) it names ``/repo``, where a docker sandbox holds the repository."""
        tools = "\n".join(f"- {t.name}({', '.join(t.parameters.get('properties', {}))}): {t.description}"
                          for t in map(TOOLS.resolve, self._tool_names()))
        # The prompt of a /repo sandbox stays byte for byte what it was (golden trajectories hold it).
        where = "/repo" if self._sandbox is None else self._sandbox.repo_dir
        where = "/repo" if where == "/repo" else f"{where} (also reachable as /repo)"
        return (f"You are fixing an issue in the repository {task.repo}, checked out at {where} "
                f"(the current directory).\n\n<issue>\n{task.problem_statement.strip()}\n</issue>\n\n"
                f"Tools:\n{tools}\n\nEach turn, {FORMAT_HINT}. You have {self.config.max_turns} turns. "
                "Your changes are graded by running the project's tests, including tests you cannot see; "
                "changes to test files are ignored. Call submit when you are done.")


def _load_tokenizer(tokenizer: Any):
    """``tokenizer`` itself, or the one in a local model folder (nothing downloaded)."""
    if tokenizer is None or hasattr(tokenizer, "encode"):
        return tokenizer
    if isinstance(tokenizer, str):
        from transformers import AutoTokenizer
        try:
            return AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
        except OSError as exc:
            raise ConfigError(f"no tokenizer in {tokenizer!r}: {exc}") from None
    raise ConfigError(f"tokenizer must have encode() or be a model folder path, got {type(tokenizer).__name__}")


def clean_text(text: str) -> str:
    """``text`` as valid Unicode: lone surrogates (from non-UTF-8 file names, say) become U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def truncate(text: str, limit: int) -> str:
    """``text`` cut in the middle to ``limit`` characters with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]}\n[... {len(text) - head - tail} characters truncated ...]\n{text[-tail:]}"
