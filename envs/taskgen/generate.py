"""Bug-fix tasks from a real project: mutate, keep what the tests catch, record SWE-bench tasks.

Pipeline: materialise the source (:mod:`.sources`), detect how its tests run (:mod:`.layout`), run the
baseline suite ``baseline_runs`` times in a sandbox (tests that change status are flaky and excluded),
index the code with tree-sitter, enumerate mutations (:mod:`.mutations`) in functions that some passing
test reaches, and try them in a seeded order. A mutation is kept only when it applies, still parses and
makes at least one baseline-passing test fail; a second full run then fixes FAIL_TO_PASS (the tests
it breaks) and PASS_TO_PASS (the other passing tests). Harder tasks pair a mutation with a second one in
a caller or in another file. The mutated tree is committed in the source repository as the base commit,
a root commit with no parent (the unmutated code is never part of a base commit's history); the gold
patch is the reverse diff. Last, each task is put through ``repogym validate``'s checks
(:func:`repogym.envs.rewards.validate.validate_task`: the gold patch resolves, the empty patch fails, no test
flips, and the no-leak check finds no way to the fix in a sandbox made as an episode's, say a verbatim
copy of a standard-library function whose line the gold patch restores); a task that fails one is
dropped, and the drops are counted by reason in ``stats["invalid"]`` and listed in ``stats["invalid_tasks"]``.

``horizon="long"`` keeps only long-horizon tasks (:mod:`.horizon`): mutations at least ``long_min_distance``
calls from every test they break, outside the files those tests call into directly; kept tasks are marked
``horizon: long`` with a ``min_turns`` estimate and a difficulty of at least 3.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from repogym.envs.core.errors import ConfigError, MutantTimeout, MutationNotLongHorizon, SourceNotUsable, TestRunTimeout
from repogym.envs.sandbox import Sandbox, SandboxConfig, default_backend, sandbox_factory
from repogym.envs.sandbox.testrun import run_tests
from repogym.envs.tasks.fixed_git import fixed_git
from repogym.envs.tasks.repos import snapshot_of
from repogym.envs.tasks.schema import Task
from repogym.envs.taskgen import horizon
from repogym.envs.taskgen.layout import Layout, detect_layout
from repogym.envs.taskgen.sources import SourceRepo, git, materialize

if TYPE_CHECKING:
    from repogym.envs.analysis import RepoIndex


HORIZONS = ("any", "long")


@dataclass
class GenerateConfig:
    """Settings of :func:`generate`."""

    max_tasks: int = 20
    """Stop after this many kept tasks."""
    seed: int = 0
    """Seed of the candidate order (same seed, same tasks)."""
    max_candidates: int = 400
    """Give up after trying this many candidates."""
    pair_every: int = 4
    """Every n-th attempt pairs two mutations (a caller, or another file) for a harder task; 0: never."""
    baseline_runs: int = 3
    """Baseline suite runs; a test whose status changes is flaky and excluded."""
    test_timeout: float = 600.0
    """Seconds a baseline run may take."""
    mutant_timeout_factor: float = 5.0
    """A mutant's test run may take this many times the slowest baseline run (at least ``mutant_timeout_min``);
    past that the mutation (an endless loop, say) is dropped."""
    mutant_timeout_min: float = 30.0
    """Floor of a mutant's test-run timeout, in seconds."""
    sandbox: str | None = None
    """Backend; ``None``: docker when a daemon answers, else local (the host's python must have the deps)."""
    max_file_bytes: int = 512 * 1024
    """Files larger than this are not mutated (every candidate re-parses its file)."""
    max_numbers_per_file: int = 5000
    """Files with more numeric literals than this are data tables (e.g. idna's uts46data.py), not mutated:
    bugs in data are not the tasks we want, and each literal would be a candidate."""
    operators: tuple[str, ...] | None = None
    """Mutation operators to use (default: all of :data:`repogym.envs.taskgen.mutations.OPERATORS`)."""
    pip: list[str] = field(default_factory=list)
    """Extra packages the image needs (beyond the declared requirements), e.g. test-only dependencies."""
    rewrite_problem: Callable[[Task, str], str] | None = None
    """Hook to rewrite the generated problem statement (e.g. with an LLM): ``(task, text) -> text``."""
    horizon: str = "any"
    """``"long"``: keep only long-horizon tasks (see :mod:`repogym.envs.taskgen.horizon`); ``"any"``: no such filter."""
    long_min_distance: int = 3
    """With ``horizon="long"``: fewest calls between a failing test and a mutated function."""
    validate: bool = True
    """Keep only tasks that pass ``repogym validate``'s checks (gold resolves, empty fails, no leak); ``False``
    skips them (faster, for experiments: validate the suite before training on it)."""
    validate_runs: int = 1
    """Empty-patch gradings per validated task (``repogym validate`` does 3; the generator's own baseline
    already ran ``baseline_runs`` times to find flaky tests)."""

    def __post_init__(self) -> None:
        if self.horizon not in HORIZONS:
            raise ConfigError(f"horizon: expected one of {HORIZONS}, got {self.horizon!r}")
        if self.long_min_distance < 1:
            raise ConfigError(f"long_min_distance: expected an integer >= 1, got {self.long_min_distance!r}")
        if self.validate_runs < 1:
            raise ConfigError(f"validate_runs: expected an integer >= 1, got {self.validate_runs!r}")


def generate(source: str, config: GenerateConfig | None = None,
             progress: Callable[[str, int, int, dict[str, int]], None] | None = None) -> tuple[list[Task], dict]:
    """Generate tasks from ``source``; returns ``(tasks, stats)``.

    ``progress(source, kept, wanted, invalid)`` is called after each tried mutation; ``invalid`` counts the
    tasks validation dropped so far, by reason (keys of :data:`repogym.envs.rewards.validate.REASONS`).
    ``stats``: counts of each stage (``tried``, ``kept``, ``no_failure``, ``timeouts``, ...), and with
    ``config.validate``: ``validated``, ``invalid`` (drops by reason; a task failing two checks counts under
    both), ``invalid_tasks`` (per dropped task: ``instance_id``, ``functions``, ``reasons``, ``problems``)
    and ``validate_s``."""
    from repogym.envs.analysis import RepoIndex
    from repogym.envs.taskgen.mutations import OPERATORS, dedupe, find_mutations, sample_mutations

    config = config or GenerateConfig()
    repo = materialize(source)
    layout = detect_layout(repo.path)
    if layout is None:
        raise SourceNotUsable(f"{source}: no tests found (looked for tests/, test/, testing/, test_*.py)")
    setup = {"source": f"path:{repo.path}", "pip": sorted(set(layout.requirements + config.pip))}
    if not setup["pip"]:
        del setup["pip"]
    backend = config.sandbox or default_backend()
    sandbox_config = SandboxConfig(run_id="taskgen", hidden_paths=(str(repo.path),))
    # One factory (one image) for the generator's sandbox and the validation's: it hides the source
    # repository, as an episode's sandbox does, so the no-leak check sees what an agent would.
    factory = sandbox_factory(backend, setup, sandbox_config)
    sandbox = factory()
    stats = {"source": source, "backend": backend, "candidates": 0, "tried": 0, "kept": 0, "no_failure": 0}
    if config.horizon == "long":
        stats["not_long"] = 0
    if config.validate:
        stats.update(validated=0, invalid={}, invalid_tasks=[], validate_s=0.0)
    try:
        sandbox.load(snapshot_of(str(repo.path), repo.head))
        passing, flaky, slowest = baseline(sandbox, layout, config)
        mutant_timeout = max(config.mutant_timeout_min, config.mutant_timeout_factor * slowest)
        stats.update(baseline_passing=len(passing), flaky=len(flaky), baseline_s=round(slowest, 2), timeouts=0)
        index = RepoIndex.from_folder(repo.path)
        sources = {s.file: (repo.path / s.file).read_bytes() for s in index.symbols.values()
                   if s.kind == "module" and not _is_test_file(s.file)}
        sources = {path: text for path, text in sources.items() if not _is_data_table(text, config)}
        all_mutations = dedupe([m for path, text in sorted(sources.items())
                                for m in find_mutations(path, text, config.operators or OPERATORS, index.module_of(path))])
        if config.horizon == "long":
            # Only a function some test reaches from afar can make a long task; the rest would cost a test run each.
            far = {f for f in {m.function for m in all_mutations}
                   if horizon.reaches_from_afar(index, f, config.long_min_distance)}
            all_mutations = [m for m in all_mutations if m.function in far]
        covering = {}
        for mutation in all_mutations:
            if mutation.function not in covering:
                reached = {t.test_id for t in index.tests_reaching([mutation.function])} & passing
                # No statically known test (say, reached through a star import): every passing test is a
                # candidate, so the quick run is the whole suite.
                covering[mutation.function] = reached or set(passing)
        context = _AttemptContext(repo, layout, setup, sandbox, sources, passing, covering, index, config, mutant_timeout)
        order = sample_mutations(all_mutations, config.max_candidates, config.seed)
        stats["candidates"] = len(order)
        tasks: list[Task] = []
        seen_functions: set[tuple] = set()
        for attempt, first in enumerate(order):
            if len(tasks) >= config.max_tasks or stats["tried"] >= config.max_candidates:
                break
            mutations = [first]
            if config.pair_every and attempt % config.pair_every == config.pair_every - 1:
                partner = _partner(first, order, index)
                if partner is not None:
                    mutations.append(partner)
            key = tuple(sorted(m.function for m in mutations))
            if key in seen_functions:
                continue  # one task per function set keeps the suite varied
            stats["tried"] += 1
            try:
                task = _try(context, mutations)
            except MutantTimeout:
                stats["timeouts"] += 1
                continue
            except MutationNotLongHorizon:
                stats["not_long"] += 1
                continue
            if task is None:
                stats["no_failure"] += 1
            elif not config.validate or _valid(task, factory, config, stats):
                seen_functions.add(key)
                tasks.append(task)
            if progress:
                progress(source, len(tasks), config.max_tasks, dict(stats.get("invalid", {})))
        stats["kept"] = len(tasks)
        return tasks, stats
    finally:
        sandbox.close()


def _valid(task: Task, factory, config: GenerateConfig, stats: dict) -> bool:
    """``repogym validate``'s verdict on ``task``, counted in ``stats``: ``True`` keeps it."""
    from repogym.envs.rewards.validate import validate_task
    verdict = validate_task(task, factory, runs=config.validate_runs)
    stats["validated"] += 1
    stats["validate_s"] = round(stats["validate_s"] + verdict.duration_s, 2)
    if verdict.ok:
        return True
    for reason in verdict.reasons:
        stats["invalid"][reason] = stats["invalid"].get(reason, 0) + 1
    stats["invalid_tasks"].append({"instance_id": task.instance_id, "functions": task.extra["taskgen"]["functions"],
                                   "reasons": list(verdict.reasons),
                                   "problems": [p[:500] for p in verdict.problems + verdict.infra_errors]
                                   + [f"flaky: {t}" for t in verdict.flaky]})
    return False


def baseline(sandbox, layout: Layout, config: GenerateConfig) -> tuple[set[str], set[str], float]:
    """Tests passing in every baseline run, flaky ones, and the slowest run's seconds.

    Raises :class:`SourceNotUsable` when no test passes."""
    runs, log, slowest = [], "", 0.0
    for _ in range(config.baseline_runs):
        start = time.monotonic()
        outcomes, log = run_tests(sandbox, layout.test_command, layout.test_paths, timeout=config.test_timeout)
        slowest = max(slowest, time.monotonic() - start)
        runs.append(outcomes)
    every = set().union(*runs)
    flaky = {t for t in every if len({r.get(t) for r in runs}) > 1}
    passing = {t for t in every if all(r.get(t) == "passed" for r in runs)}
    if not passing:
        raise SourceNotUsable("the baseline test suite does not run: " + explain_failure(log))
    return passing, flaky, slowest


def explain_failure(log: str) -> str:
    """The reason a test run produced nothing, read from pytest's output."""
    for pattern, label in ((r"(ModuleNotFoundError: No module named '[^']+')", "missing dependency"),
                           (r"(ImportError: [^\n]+)", "import error"),
                           (r"ERROR collecting ([^\n]+)", "collection error in"),
                           (r"(error: [^\n]+)", "pytest error"),
                           (r"(command not found[^\n]*)", "no python/pytest")):
        match = re.search(pattern, log)
        if match:
            return f"{label}: {match.group(1).strip()}"
    tail = log.strip().splitlines()[-3:]
    return "no test passed" + (f" (last output: {' | '.join(tail)})" if tail else "")


def _partner(first, order, index):
    callers = {s.name for s, _ in index.dependents([first.function], max_depth=1)}
    for other in order:
        if other.function in callers:
            return other
    for other in order:
        if other.file != first.file:
            return other
    return None


@dataclass
class _AttemptContext:
    """What every mutation tried in one :func:`generate` run shares: the pristine project and its baseline."""

    repo: SourceRepo
    layout: Layout
    setup: dict
    """The tasks' ``setup`` (source, pip)."""
    sandbox: Sandbox
    """Loaded with the pristine project; reset after each attempt."""
    sources: dict[str, bytes]
    """Pristine text of each file that may be mutated."""
    passing: set[str]
    """Tests passing in every baseline run."""
    covering: dict[str, set[str]]
    """Function -> the passing tests that reach it (the quick run's tests)."""
    index: RepoIndex
    """The pristine project's code index."""
    config: GenerateConfig
    timeout: float
    """Seconds a mutant's test run may take."""


def _try(context: _AttemptContext, mutations) -> Task | None:
    """The task ``mutations`` make, or ``None`` when they do not apply, parse, or break a passing test.

    Raises :class:`MutantTimeout` or :class:`MutationNotLongHorizon` when the mutation is dropped for that."""
    from repogym.envs.taskgen.mutations import combine, parses_cleanly
    repo, layout, setup, sandbox = context.repo, context.layout, context.setup, context.sandbox
    sources, passing, covering, index = context.sources, context.passing, context.covering, context.index
    config, timeout = context.config, context.timeout
    try:
        mutated = combine({m.file: sources[m.file] for m in mutations}, mutations)
    except ValueError:
        return None
    if not all(parses_cleanly(text) for text in mutated.values()):
        return None
    try:
        for path, text in mutated.items():
            sandbox.write_file(path, text)
        targeted = sorted(set().union(*(covering[m.function] for m in mutations)))
        try:
            quick, _ = run_tests(sandbox, layout.test_command, sorted({t.split("::")[0] for t in targeted}),
                                 timeout=timeout)
            if all(quick.get(t) == "passed" for t in targeted):
                return None
            full, log = run_tests(sandbox, layout.test_command, layout.test_paths, timeout=timeout)
        except TestRunTimeout as exc:
            raise MutantTimeout() from exc
        f2p = sorted(t for t in passing if full.get(t) != "passed")
        p2p = sorted(t for t in passing if full.get(t) == "passed")
        if not f2p or not full:
            return None
        verdict = None
        if config.horizon == "long":
            verdict = horizon.judge(index, repo.path, mutations, f2p, config.long_min_distance, _is_test_file)
            if not verdict.long:
                raise MutationNotLongHorizon(verdict.reason)
        statement = problem_statement(sandbox, layout, f2p, timeout)
    finally:
        sandbox.reset()
    base = _commit_mutation(repo, mutated, mutations)
    gold = git(repo.path, "diff", "--binary", base, repo.head)
    digest = hashlib.sha256("".join(m.file + m.replacement + str(m.start_byte) for m in mutations).encode()).hexdigest()
    name = f"{repo.name}-{repo.version}" if repo.version else repo.name
    task = Task(instance_id=f"{name}__taskgen-{digest[:10]}", repo=f"taskgen/{name}", base_commit=base,
                problem_statement=statement, patch=gold, test_patch="", FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p,
                difficulty=difficulty(mutations, f2p, index), setup=dict(setup), test_command=layout.test_command,
                extra={"taskgen": {"operators": [m.operator for m in mutations],
                                   "functions": [m.function for m in mutations], "seed": config.seed}})
    if verdict is not None:
        task.difficulty = max(task.difficulty, 3)
        task.extra["taskgen"]["test_distance"] = verdict.distance
        task.extra.update(horizon="long", min_turns=horizon.min_turns(verdict.distance, config.long_min_distance))
    if config.rewrite_problem:
        task.problem_statement = config.rewrite_problem(task, task.problem_statement)
    return task


def problem_statement(sandbox, layout: Layout, f2p: list[str], timeout: float) -> str:
    """From the failing tests only: their names and assertion messages (never the code that broke)."""
    shown = f2p[:8]
    result = sandbox.run(f"{layout.test_command} --tb=line -rN " + " ".join(_quote(t) for t in shown),
                         timeout=timeout, output_limit=64 * 1024)
    messages = []
    for line in (result.stdout + result.stderr).splitlines():
        line = line.strip()
        if re.match(r"^(E\s+|\S+\.py:\d+: )", line) and len(messages) < 12:
            # "--tb=line" gives "path:line: Error"; keep only lines in test files, and the messages.
            if line.startswith("E") or re.search(r"(^|/)test[^/]*\.py:\d+", line):
                messages.append(line[:300])
    text = ["Some tests fail after recent changes and need a fix in the library code (not in the tests).", "",
            "Failing tests:"]
    text += [f"- `{t}`" for t in shown] + ([f"- ... and {len(f2p) - len(shown)} more"] if len(f2p) > len(shown) else [])
    if messages:
        text += ["", "What they report:", "```", *messages, "```"]
    return "\n".join(text) + "\n"


def difficulty(mutations, f2p: list[str], index) -> int:
    """1..5 from the number of changed symbols and files, FAIL_TO_PASS count, and dependency distance."""
    functions = {m.function for m in mutations}
    files = {m.file for m in mutations}
    score = 1 + (len(functions) - 1) + (len(files) - 1) + (len(f2p) > 5)
    if len(functions) > 1:
        first, *rest = sorted(functions)
        distances = {s.name: d for s, d in index.dependents([first], max_depth=3)}
        if any(distances.get(r, 9) > 1 for r in rest):
            score += 1
    return max(1, min(5, score))


def _quote(text: str) -> str:
    import shlex
    return shlex.quote(text)


def _is_data_table(text: bytes, config: GenerateConfig) -> bool:
    return len(text) > config.max_file_bytes or len(_NUMBER.findall(text)) > config.max_numbers_per_file


_NUMBER = re.compile(rb"\b(?:0[xX][0-9a-fA-F]+|\d+)\b")


def _is_test_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
            or any(part in ("tests", "test", "testing") for part in path.split("/")[:-1]))


def _commit_mutation(repo: SourceRepo, mutated: dict[str, bytes], mutations) -> str:
    """Commit HEAD's tree with the mutated files as a parentless commit, without touching the work tree.

    No parent: a parent would be the unmutated code, one ``git show`` away from the fix for anything that
    ever sees the base commit with its history (plumbing, fixed dates)."""
    with tempfile.TemporaryDirectory() as tmp:
        index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}

        def run(*args, input=None):
            return fixed_git(repo.path, *args, input=input, where="taskgen.commit", env=index).strip()

        run("read-tree", repo.head)
        for path, text in mutated.items():
            blob = run("hash-object", "-w", "--stdin", input=text)
            run("update-index", "--cacheinfo", f"100644,{blob},{path}")
        tree = run("write-tree")
        message = "taskgen: " + ", ".join(f"{m.operator} in {m.function}" for m in mutations)
        commit = run("commit-tree", tree, "-m", message)
        run("update-ref", f"refs/taskgen/{commit}", commit)  # keep it reachable for gc and clones
        return commit
