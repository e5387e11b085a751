"""The benchmark runner: K episodes per task of a suite for one agent, stored in a results database.

Guarantees:
- Every finished episode is written to the database at once, in its own transaction, by the main thread
  (workers hand results over a queue). A run killed at any moment (``kill -9`` included) keeps every
  episode that finished; only the episodes in flight are lost.
- Re-running the same benchmark (same agent name, checkpoint, suite) runs only the episodes whose key
  (:func:`repogym.bench.db.episode_key`) is not in the database yet, with the same seeds: the seed of sample s of
  the task at index i of the suite is ``i * SEED_STRIDE + s`` (``task_ids`` picks tasks but keeps their index).
- With ``retry_errors``, the episodes stored as ``infra_error`` or ``internal_error`` run again: each new row
  replaces the old one in one transaction (never a second row), and until it is stored the old row and its
  trajectory stay (a retry writes the trajectory file the old row does not name, and the old file is removed only
  once its row is replaced). Without it, the start line says how many stored episodes are errors.
- Nothing is written (no database file, no sandbox) before the configuration is checked: the task ids, then, when
  there is something to run, the first agent is built (its options checked, :func:`repogym.agents.make_agent`)
  and an :class:`repogym.agents.llm.LLMAgent` asks its server whether it answers
  (:meth:`~repogym.agents.llm.LLMAgent.check_server`): no server is one error naming the URL, not an infra error
  per episode.
- Ctrl-C stops at once: nothing more is written, episodes in flight are dropped (their trajectory files
  stay, unreferenced, and are overwritten on resume). Local sandboxes die with the process; Docker
  containers left over are labelled for ``repogym gc``.
- Infrastructure failures, the agent's included (:class:`repogym.envs.core.errors.InfraError` from ``act`` or from
  loading the task), are stored as ``infra_error`` rows (:class:`repogym.envs.core.status.Status`) with ``where``
  and ``message`` and no reward, never as reward 0; so is any episode :func:`repogym.envs.core.status.excluded`
  leaves out (a NaN reward).
- An episode a bug of repogym's ended (the environment caught it: ``internal_error``) is stored as an
  ``internal_error`` row, counted apart from infra errors, and the run ends with a loud line naming how many
  there were (their tracebacks are in the log, :mod:`repogym.envs.core.bugs`).
  Any other exception (a bug in the runner or the agent's code) stops the run and propagates.

With ``best_of`` > 1 the runner runs best-of-n trials instead (:mod:`repogym.bench.best_of_n`), one per task and
sample, resumable the same way; they are stored in their own table and summarized apart from pass@1.

Not guaranteed: trajectory files of the same agent name at another checkpoint share a folder and
overwrite each other (give each checkpoint its own ``label``).
"""

from __future__ import annotations

import difflib
import logging
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from repogym.agents.rollout import EpisodeResult, run_episode
from repogym.agents.trajectory import Trajectory
from repogym.bench.best_of_n import BestOfNResult, run_best_of_n
from repogym.bench.best_of_n import branch_path
from repogym.bench.db import BestOfNRow, EpisodeRow, ResultsDB, best_of_n_key, episode_key
from repogym.bench.metrics import BestOfNSummary, Summary, summarize, summarize_best_of_n
from repogym.envs.core.errors import ConfigError, InfraError
from repogym.envs.core.status import Status
from repogym.envs.tasks.schema import Task

SEED_STRIDE = 1000
"""Seeds of different tasks never collide while K <= SEED_STRIDE."""
MAX_BEST_OF = 64
"""Most branches of a best-of-n trial."""
RETRY_SUFFIX = ".retry"
"""A retried episode whose old row names ``X.jsonl`` writes ``X.retry.jsonl`` (and the other way round)."""

log = logging.getLogger(__name__)


@dataclass
class BenchConfig:
    """One benchmark run: an agent over a suite."""

    agent: str
    """Registry name of the agent (:data:`repogym.agents.AGENTS`)."""
    suite: str = "builtin"
    """Suite name or JSONL path (stored as given)."""
    db: str | Path = "runs/bench.db"
    """The results database file."""
    agent_options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of :func:`repogym.agents.make_agent`."""
    k: int = 1
    """Episodes (samples) per task."""
    concurrency: int = 1
    """Environments (worker threads) running at once, each with its own agent."""
    sandbox: str | None = None
    """``docker`` or ``local``; None picks docker when a daemon answers."""
    max_turns: int = 30
    """Turn limit per episode."""
    limit: int | None = None
    """Only the first N tasks of the suite."""
    task_ids: list[str] | None = None
    """Only these tasks (instance ids, each kept at its index in the suite, so its seeds do not change); None: all
    (or the first ``limit``). An id the suite lacks is a :class:`ConfigError` naming the closest ones."""
    retry_errors: bool = False
    """Run again the episodes stored as ``infra_error`` or ``internal_error``, replacing their rows."""
    label: str | None = None
    """The agent's name in the database and on the leaderboard (default: ``agent``)."""
    out: str | Path | None = None
    """Trajectory folder (default: ``<db stem>-trajectories`` next to the database)."""
    progress: bool = True
    """A progress bar on stderr."""
    best_of: int = 1
    """Best-of-n at test time (:mod:`repogym.bench.best_of_n`): 1 runs plain episodes (pass@1); N >= 2 runs, per
    task and sample, one trial whose episode is forked into N branches after reset, each driven by its own agent
    from the factory, the branch the visible tests score best graded. Stored apart (``best_of_n`` table), never as
    pass@1."""
    run_id: str | None = None
    """Label of the run's sandboxes (``repogym gc --run ID``); None: the sandboxes' default."""
    skip_no_f2p: bool = False
    """Leave out the suite's tasks with no FAIL_TO_PASS test (counted in a warning) instead of refusing the suite."""

    def __post_init__(self):
        if not 1 <= self.k <= SEED_STRIDE:
            raise ConfigError(f"k must be in 1..{SEED_STRIDE}, got {self.k}")
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {self.concurrency}")
        if not 1 <= self.best_of <= MAX_BEST_OF:
            raise ConfigError(f"best_of must be in 1..{MAX_BEST_OF}, got {self.best_of}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit must be >= 1, got {self.limit}")
        if self.task_ids is not None:
            if isinstance(self.task_ids, str) or not self.task_ids:
                raise ConfigError(f"task_ids must be a non-empty list of task ids, got {self.task_ids!r}")
            if self.limit is not None:
                raise ConfigError("expected task ids or a limit, not both (--task picks tasks; --limit the first N)")
            self.task_ids = list(dict.fromkeys(self.task_ids))  # each once, in the order given
        if not isinstance(self.agent_options, dict):
            raise ConfigError(f"agent options must be a mapping, got {type(self.agent_options).__name__}")

    @property
    def name(self) -> str:
        """The agent's name as stored."""
        return self.label or self.agent

    @property
    def checkpoint(self) -> str:
        """What the agent runs: its ``path`` (hf) or ``model`` (llm) option, else ''."""
        return str(self.agent_options.get("path") or self.agent_options.get("model") or "")

    @property
    def trajectory_dir(self) -> Path:
        db = Path(self.db)
        base = Path(self.out) if self.out else db.with_name(f"{db.stem}-trajectories")
        return base / self.name.replace("/", "_")


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to run."""

    task: Task
    sample: int
    seed: int
    trajectory: Path
    retry: bool = False
    """The episode is stored as an error and runs again: its row replaces that one."""
    superseded: tuple[Path, ...] = ()
    """Trajectory files of the stored error row, removed once its replacement is stored."""


@dataclass
class BenchReport:
    """What a run did."""

    planned: int
    """Episodes of the benchmark (tasks x k)."""
    skipped: int
    """Already in the database before this run (and not run again)."""
    written: int = 0
    """Stored by this run (retries included)."""
    stored_errors: int = 0
    """Episodes of this benchmark stored as errors (infra, internal) before this run."""
    retried: int = 0
    """Episodes stored as errors that this run ran again and replaced."""
    interrupted: bool = False
    summaries: list[Summary] = field(default_factory=list)
    """This agent on this suite, over everything in the database."""
    best_of_n: list[BestOfNSummary] = field(default_factory=list)
    """This agent's best-of-n trials on this suite (every n stored), apart from ``summaries``."""
    internal_errors: int = 0
    """Episodes (trials) of this run a bug of repogym's ended: stored as ``internal_error``, excluded."""


AgentFactory = Callable[[], Any]


def run_bench(config: BenchConfig, agent_factory: AgentFactory | None = None) -> BenchReport:
    """Run the episodes of ``config`` not yet in its database; see the module docstring.

    ``agent_factory`` builds one agent per worker (default: :func:`repogym.agents.make_agent` with the config's
    options, the suite's tasks given to ``oracle``).
    """
    from repogym.envs.tasks.suites import load_suite

    tasks = load_suite(config.suite, skip_no_f2p=config.skip_no_f2p)[: config.limit]
    if not tasks:
        raise ConfigError(f"suite {config.suite!r} has no tasks")
    check_task_ids(config, tasks)
    factory = agent_factory or registry_factory(config, tasks)
    done, errors = stored_keys(config)
    todo = plan(config, tasks, done, errors if config.retry_errors else None)
    keys = [episode_key_of(config, task, sample) for _, task in selected_tasks(config, tasks)
            for sample in range(config.k)]
    report = BenchReport(planned=len(keys), skipped=len(keys) - len(todo),
                         stored_errors=sum(key in errors for key in keys))
    print(start_line(config, len(keys) // config.k, sum(key in done for key in keys), report, len(todo)),
          file=sys.stderr, flush=True)
    first = None
    if todo:  # only now: a finished benchmark builds no agent (an hf model is not loaded to print a table)
        first = factory()  # a wrong option is a ConfigError here, before the database or a sandbox exists
        check_server(first)
    with ResultsDB(config.db) as db:
        if todo:
            _run(config, tasks, todo, factory, first, db, report)
        report.summaries = summarize(db.episodes(agent=config.name, suite=config.suite))
        report.best_of_n = summarize_best_of_n(db.best_of_n(agent=config.name, suite=config.suite))
    return report


def start_line(config: BenchConfig, tasks: int, stored: int, report: BenchReport, to_run: int) -> str:
    """What the run is about to do: the benchmark's size, how much is stored (errors named), what runs."""
    kind = f"best-of-{config.best_of} trials" if config.best_of > 1 else "episodes"
    line = (f"{config.name} on {config.suite}: {tasks} tasks x {config.k} = {report.planned} {kind}, "
            f"{stored} already in {config.db}")
    if report.stored_errors and config.retry_errors:
        return line + f", {to_run} to run ({report.stored_errors} of them stored as errors, run again)"
    if report.stored_errors:
        line += (f" ({report.stored_errors} of them infra or internal errors: --retry-errors runs them again, "
                 "replacing their rows)")
    return line + f", {to_run} to run"


def check_task_ids(config: BenchConfig, tasks: list[Task]) -> None:
    """Every id of ``config.task_ids`` names a task of ``tasks``; else a :class:`ConfigError` with the closest ids."""
    known = [t.instance_id for t in tasks]
    for task_id in config.task_ids or ():
        if task_id not in known:
            close = difflib.get_close_matches(task_id, known, n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(map(repr, close))}?" if close else f"e.g. {', '.join(known[:5])}"
            raise ConfigError(f"no task {task_id!r} in suite {config.suite!r} ({len(known)} tasks; {hint}); "
                              f"`repogym tasks list --suite {config.suite}` lists them")


def selected_tasks(config: BenchConfig, tasks: list[Task]) -> list[tuple[int, Task]]:
    """(index in the suite, task) of the benchmark's tasks: ``config.task_ids`` when given, else all of ``tasks``."""
    wanted = set(config.task_ids) if config.task_ids else None
    return [(i, t) for i, t in enumerate(tasks) if wanted is None or t.instance_id in wanted]


def episode_key_of(config: BenchConfig, task: Task, sample: int) -> str:
    """The stored key of sample ``sample`` of ``task`` (a best-of-n trial's when ``config.best_of`` > 1)."""
    n = config.best_of
    return (best_of_n_key(config.name, config.checkpoint, config.suite, task.instance_id, sample, n) if n > 1
            else episode_key(config.name, config.checkpoint, config.suite, task.instance_id, sample))


def stored_keys(config: BenchConfig) -> tuple[set[str], dict[str, str | None]]:
    """(every stored key, key -> trajectory of the rows stored as errors) of the table this run writes, read
    without creating the database when it is not there yet."""
    if not Path(config.db).exists():
        return set(), {}
    with ResultsDB(config.db) as db:
        if config.best_of > 1:
            return db.best_of_n_keys(), db.best_of_n_error_keys()
        return db.done_keys(), db.error_keys()


def check_server(agent: Any) -> None:
    """An :class:`repogym.agents.llm.LLMAgent` asks its server whether it answers (raising
    :class:`repogym.agents.errors.LLMServerUnreachable` when not) and the run says which server it uses; other
    agents have no server to check."""
    from repogym.agents.llm import LLMAgent

    if isinstance(agent, LLMAgent):
        models = agent.check_server()
        listed = f" (it lists {', '.join(models[:5])})" if models else ""
        print(f"llm agent: server {agent.config.base_url} answers{listed}; model {agent.config.model!r}",
              file=sys.stderr, flush=True)


def registry_factory(config: BenchConfig, tasks: list[Task]) -> AgentFactory:
    """Builds agents by registry name; bad options become a :class:`ConfigError` on the first build (which
    :func:`run_bench` makes before it opens the database)."""
    from repogym.agents import AGENTS, make_agent

    if config.agent not in AGENTS:  # checked now: with nothing left to run, no agent is ever built (or imported)
        AGENTS.resolve(config.agent)  # raises, listing the agents
    options = dict(config.agent_options)
    if config.agent == "oracle":
        options.setdefault("tasks", tasks)
    return lambda: make_agent(config.agent, **options)


def plan(config: BenchConfig, tasks: list[Task], done: set[str],
         retry: dict[str, str | None] | None = None) -> list[EpisodeSpec]:
    """The episodes (best-of-n trials when ``config.best_of`` > 1) of the benchmark whose key is not in ``done``,
    task by task (only ``config.task_ids`` when given), and those whose key is in ``retry`` (key -> the trajectory
    its stored error row names), to run again."""
    specs = []
    n = config.best_of
    retry = retry or {}
    for index, task in selected_tasks(config, tasks):
        for sample in range(config.k):
            key = episode_key_of(config, task, sample)
            seed = index * SEED_STRIDE + sample
            # A trial's branches write <name>.b<i>.jsonl (repogym.bench.best_of_n.branch_path).
            path = (config.trajectory_dir / (f"{task.instance_id}.s{sample}" + (f".best{n}" if n > 1 else "")
                                             + ".jsonl")).resolve()
            if key in retry:
                old, new = _retry_paths(path, retry[key])
                files = tuple(branch_path(old, i) for i in range(n)) if n > 1 else (old,)
                specs.append(EpisodeSpec(task, sample, seed, new, retry=True, superseded=files))
            elif key not in done:
                specs.append(EpisodeSpec(task, sample, seed, path))
    return specs


def _retry_paths(path: Path, stored: str | None) -> tuple[Path, Path]:
    """(the trajectory base the stored error row used, the one its retry writes): of ``X.jsonl`` and
    ``X.retry.jsonl``, the retry takes the one the stored row does not name, so that row keeps its file."""
    other = path.with_name(path.stem + RETRY_SUFFIX + path.suffix)
    used_other = stored is not None and Path(stored).name.startswith(other.stem + ".")
    return (other, path) if used_other else (path, other)


# -- running -----------------------------------------------------------------------------------------
def _run(config: BenchConfig, tasks: list[Task], todo: list[EpisodeSpec], factory: AgentFactory, first: Any,
         db: ResultsDB, report: BenchReport) -> None:
    """Run ``todo`` on ``config.concurrency`` workers, storing rows as they come; ``first`` is an agent already
    built (it goes to the first worker)."""
    import gymnasium as gym
    from tqdm import tqdm

    import repogym.envs  # noqa: F401  (registers the env id)
    from repogym.envs.repo_env import EnvConfig
    from repogym.envs.sandbox import SandboxConfig

    pending: queue.Queue[EpisodeSpec] = queue.Queue()
    for spec in todo:
        pending.put(spec)
    finished: queue.Queue[tuple[EpisodeSpec, EpisodeRow | BestOfNRow] | BaseException] = queue.Queue()
    stop = threading.Event()
    workers = min(config.concurrency, len(todo))
    best = config.best_of > 1  # then each worker has one agent per branch, and forks ready in a warm pool
    env_fields: dict[str, Any] = {"fork_pool_size": config.best_of - 1} if best else {}
    if config.run_id:
        env_fields["sandbox_config"] = SandboxConfig(run_id=config.run_id)
    env_config = EnvConfig(**env_fields) if env_fields else None
    agents = [[first if w == 0 and b == 0 else factory() for b in range(config.best_of)] for w in range(workers)]
    pairs = [(gym.make("repogym/RepoTask-v0", suite=config.suite, tasks=tasks, sandbox=config.sandbox,
                       max_turns=config.max_turns, config=env_config),
              branch_agents if best else branch_agents[0]) for branch_agents in agents]
    for env, agent in pairs:
        threading.Thread(target=_work, args=(env, agent, config, pending, finished, stop), daemon=True).start()
    bar = tqdm(total=len(todo), file=sys.stderr, disable=not config.progress, desc=config.name, unit="ep")
    done = resolved = valid = 0
    try:
        while done < len(todo):
            got = finished.get()
            if isinstance(got, BaseException):  # a worker hit a bug: stop the run, raise it here
                raise got
            spec, item = got
            store = db.add_best_of_n if isinstance(item, BestOfNRow) else db.add_episode
            if store(item, replace_error=spec.retry):
                report.written += 1
                if spec.retry:
                    report.retried += 1
                    _remove(spec.superseded)
            done += 1
            valid += not item.excluded
            resolved += item.resolved
            report.internal_errors += item.internal_error
            bar.update()
            bar.set_postfix_str(f"pass {resolved}/{valid}" + (f" = {100 * resolved / valid:.0f}%" if valid else ""))
    except KeyboardInterrupt:
        report.interrupted = True
        kept = (" (the errors not run again yet keep their rows; add --retry-errors again to retry them)"
                if config.retry_errors else "")
        print(f"\ninterrupted: {len(todo) - done} episodes not stored{kept}; re-run the same command to resume",
              file=sys.stderr)
    finally:
        stop.set()
        bar.close()
        if report.internal_errors:
            print(f"\nINTERNAL ERRORS: {report.internal_errors} of {done} episodes ended in a bug of repogym's (not the "
                  "agent's, not the infrastructure's); they are stored as internal_error and left out of every rate. "
                  "The log (logger repogym.bugs) holds each kind's traceback: please report it.",
                  file=sys.stderr, flush=True)


def _work(env, agent, config: BenchConfig, pending: queue.Queue, finished: queue.Queue,
          stop: threading.Event) -> None:
    """A worker: run episodes from ``pending`` until it is empty or ``stop`` is set; hand rows over."""
    try:
        while not stop.is_set():
            try:
                spec = pending.get_nowait()
            except queue.Empty:
                return
            if config.best_of > 1:
                result = run_best_of_n(env, agent, task_id=spec.task.instance_id, seed=spec.seed, n=config.best_of,
                                       agent_name=config.name, trajectory=spec.trajectory)
                row = best_of_n_row(config, spec, result)
            else:
                row = episode_row(config, spec, _episode(env, agent, config.name, spec))
            if not stop.is_set():
                finished.put((spec, row))
    except BaseException as exc:  # a bug: the main thread stops the run and raises it
        finished.put(exc)
    finally:
        env.close()


def _episode(env, agent, name: str, spec: EpisodeSpec) -> EpisodeResult:
    """One episode; a task that cannot even be loaded (an InfraError in reset) is an infra_error too."""
    start = time.monotonic()
    try:
        return run_episode(env, agent, task_id=spec.task.instance_id, seed=spec.seed, agent_name=name,
                           trajectory=spec.trajectory)
    except InfraError as exc:
        record = {"status": Status.INFRA_ERROR, "error": exc.record()}
        return EpisodeResult(spec.task.instance_id, name, Status.INFRA_ERROR, float("nan"), 0,
                             time.monotonic() - start, record, trajectory=Trajectory({}, [], None))


def _remove(paths: tuple[Path, ...]) -> None:
    """Remove the trajectory files of a replaced error row; one that cannot be removed is only logged."""
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:  # the filesystem's refusal (permissions, a read-only mount): the row is replaced anyway
            log.warning("could not remove the replaced trajectory %s: %s", path, exc)


# -- rows ----------------------------------------------------------------------------------------------
def episode_row(config: BenchConfig, spec: EpisodeSpec, result: EpisodeResult) -> EpisodeRow:
    """The database row of one finished episode."""
    steps = result.trajectory.steps if result.trajectory else []
    prompt, completion = token_counts(steps)
    task = spec.task
    return EpisodeRow(
        agent=config.name, suite=config.suite, task_id=task.instance_id, sample=spec.sample, seed=spec.seed,
        status=stored_status(result.status, result.excluded), reward=None if result.excluded else float(result.reward),
        turns=result.turns, wall_s=round(result.duration_s, 3), checkpoint=config.checkpoint,
        difficulty=task.difficulty, long_horizon=is_long_horizon(task),
        components=result.components, tool_calls=len(steps),
        tool_errors=sum(bool(s["info"].get("error")) for s in steps),
        well_formed=int(result.info.get("well_formed_calls", 0)),
        self_corrected=result.resolved and failed_tests_before(steps),
        prompt_tokens=prompt, completion_tokens=completion, trajectory=str(spec.trajectory),
        error=result.error if result.excluded else None)


def best_of_n_row(config: BenchConfig, spec: EpisodeSpec, result: BestOfNResult) -> BestOfNRow:
    """The database row of one finished best-of-n trial."""
    infra = result.excluded
    return BestOfNRow(
        agent=config.name, suite=config.suite, task_id=spec.task.instance_id, sample=spec.sample, seed=spec.seed,
        n=result.n, branches=result.branches, chosen=result.chosen,
        status=stored_status(result.status, infra), reward=None if infra else float(result.reward),
        turns=result.turns, wall_s=round(result.duration_s, 3), checkpoint=config.checkpoint,
        difficulty=spec.task.difficulty, fallback=result.fallback, scores=result.scores, trajectory=result.trajectory,
        error=result.error if infra else None)


def stored_status(status: Status | str, excluded: bool) -> Status | str:
    """The status a row stores: an excluded episode is ``infra_error`` (a NaN reward says nothing of the agent)
    unless a bug of repogym's ended it (``internal_error``, kept apart)."""
    if not excluded or status == Status.INTERNAL_ERROR:
        return status
    return Status.INFRA_ERROR


def is_long_horizon(task: Task) -> bool:
    """The task is marked long (``horizon: long``) or needs 10+ turns (``min_turns``)."""
    return task.extra.get("horizon") == "long" or int(task.extra.get("min_turns") or 0) >= 10


def failed_tests_before(steps: list[dict[str, Any]]) -> bool:
    """Some ``run_tests`` call reported failing (or no) tests: its exit code was non-zero."""
    return any(s["info"].get("tool") == "run_tests" and s["info"].get("exit_code") not in (None, 0)
               for s in steps)


def token_counts(steps: list[dict[str, Any]]) -> tuple[int, int]:
    """(prompt, completion) tokens of an episode from what the agent recorded per turn.

    API agents (llm) record the server's ``usage``; token-level agents (hf) the ids fed and generated.
    Agents that record neither used no tokens.
    """
    prompt = completion = 0
    for step in steps:
        turn = step.get("agent") or {}
        if "usage" in turn:
            prompt += int(turn["usage"].get("prompt_tokens") or 0)
            completion += int(turn["usage"].get("completion_tokens") or 0)
        elif turn.get("tokens"):
            prompt += len(turn["tokens"]["prompt"])
            completion += len(turn["tokens"]["completion"])
    return prompt, completion


def load_agent_options(path: str | Path | None) -> dict[str, Any]:
    """Agent options from a YAML or JSON file (a mapping); {} without a file."""
    if path is None:
        return {}
    import yaml

    try:
        options = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read agent config {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"agent config {path} is not valid YAML or JSON: {exc}") from exc
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ConfigError(f"agent config {path}: expected a mapping of options, got {type(options).__name__}")
    return options


__all__ = ["BenchConfig", "BenchReport", "EpisodeSpec", "MAX_BEST_OF", "SEED_STRIDE", "best_of_n_row", "check_server",
           "check_task_ids", "episode_row", "load_agent_options", "plan", "run_bench"]
