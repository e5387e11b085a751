"""``repogym tasks list | suites | recipes | generate | build | build-builtin | import``: the task suites."""

from __future__ import annotations

import json
import os

from repogym.envs.sandbox import BACKENDS
from repogym.envs.tasks.datasets import DATASET_KINDS, ENVIRONMENT_CHOICES


def add_parser(sub) -> None:
    parser = sub.add_parser("tasks", help="list, generate and build task suites",
                            description="Task suites: list a suite's tasks, the suites and the recipes; generate "
                                        "validated bug-fix tasks from a real project; build a suite from its recipe.")
    tsub = parser.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    ls = tsub.add_parser("list", help="list tasks (id, repo, difficulty, F2P/P2P counts)",
                         description="List the tasks of a suite: id, repository, difficulty, and the counts of "
                                     "FAIL_TO_PASS and PASS_TO_PASS tests (or every full record with --json).")
    ls.add_argument("--suite", default="builtin", help="suite name or JSONL path (default: builtin)")
    ls.add_argument("--json", action="store_true", help="print a JSON array of the full task records")
    ls.add_argument("--skip-no-f2p", action="store_true",
                    help="leave out tasks with no FAIL_TO_PASS test, saying how many (default: such a task is an "
                         "error, since no patch can fail it)")
    ls.set_defaults(func=run_list)
    build = tsub.add_parser("build-builtin", help="rebuild task_repos/builtin.jsonl from task_repos/*/ (developers)",
                            description="Rebuild the builtin suite's task file from the task repositories in "
                                        "task_repos/*/ (for repogym's developers).")
    build.add_argument("--out", default=None, help="output path (default: task_repos/builtin.jsonl)")
    build.set_defaults(func=run_build)
    suites = tsub.add_parser("suites", help="list the suite names and their files",
                             description="List the suites known by name and the JSONL file of each.")
    suites.set_defaults(func=run_suites)
    gen = tsub.add_parser("generate", help="generate validated bug-fix tasks from a real project by mutation",
                          description="Generate bug-fix tasks from a real project: mutate its code, keep the "
                                      "mutations its own tests catch, and (by default) validate each task as "
                                      "repogym validate does.")
    gen.add_argument("--source", required=True, help="a folder, a git URL, or pypi:NAME==VERSION")
    gen.add_argument("--out", required=True, help="output JSONL file")
    gen.add_argument("--max-tasks", type=int, default=20, help="tasks to keep (default 20)")
    gen.add_argument("--seed", type=int, default=0, help="seed of the candidate order (default 0)")
    gen.add_argument("--max-candidates", type=int, default=400, help="mutations to try at most (default 400)")
    gen.add_argument("--pip", action="append", default=[], help="extra package the image needs (repeatable)")
    gen.add_argument("--sandbox", choices=BACKENDS.names(), default=None,
                     help="backend (default: docker when a daemon answers, else local)")
    gen.add_argument("--no-validate", dest="validate", action="store_false",
                     help="keep tasks without repogym validate's checks (gold resolves, empty fails, no leak); "
                          "faster, for experiments")
    gen.add_argument("--horizon", choices=["any", "long"], default="any",
                     help="long: keep only bugs 3+ calls away from every test they break, in another file than "
                          "the code those tests call (marked horizon: long, with min_turns); default any")
    gen.set_defaults(func=run_generate)
    build = tsub.add_parser("build", help="build a generated suite from its recipe in task_repos/recipes/",
                            description="Build a generated suite from its recipe in task_repos/recipes/ (source "
                                        "project and generation settings), then validate it with repogym validate.")
    build.add_argument("suite", help="recipe name (see `repogym tasks recipes`)")
    build.add_argument("--sandbox", choices=BACKENDS.names(), default=None,
                       help="backend (default: docker when a daemon answers, else local)")
    build.set_defaults(func=run_build_recipe)
    recipes = tsub.add_parser("recipes", help="list the suite recipes",
                              description="List the suite recipes: name, source project, seed and task count.")
    recipes.set_defaults(func=run_recipes)
    imp = tsub.add_parser("import", help="convert a dataset file (SWE-bench, SWE-smith, R2E-Gym...) into a suite",
                          description="Convert a dataset file (.jsonl, .json or .parquet) into a repogym task file: "
                                      "each row's dataset is detected from its fields (SWE-bench, SWE-bench Verified, "
                                      "SWE-Gym, SWE-rebench, SWE-smith, R2E-Gym; see docs/datasets.md), fields repogym "
                                      "has no place for are kept. Parquet needs pip install 'repogym[datasets]'.")
    imp.add_argument("file", metavar="DATASET_FILE", help="the dataset file (.jsonl, .json or .parquet)")
    imp.add_argument("--out", required=True, help="output JSONL task file (a suite for --tasks / --suite)")
    imp.add_argument("--dataset", choices=DATASET_KINDS, default=None,
                     help="read every row as this dataset instead of detecting it (swe-gym: SWE-Gym's image names)")
    imp.add_argument("--limit", type=int, default=None, help="import the first N rows only")
    imp.add_argument("--environments", choices=ENVIRONMENT_CHOICES, default="builtin",
                     help="builtin (default): SWE-bench rows whose repo and version the built-in table knows get that "
                          "environment, others one inferred from their repository at the base commit when a mirror "
                          "(--mirrors, REPOGYM_MIRRORS) holds it, else their dataset's image; infer: every row "
                          "inferred, the table off (cloning where no mirror has it); images: every row its dataset's "
                          "image (docs/environments.md)")
    imp.add_argument("--mirrors", default=None, metavar="DIR",
                     help="a folder of git repositories named OWNER__NAME: check that each task's repo and base "
                          "commit are there (REPOGYM_MIRRORS for later commands)")
    imp.add_argument("--drop-broken-tests", default=None, metavar="RESULTS",
                     help="apply a `repogym validate --results` file of an earlier import: drop the PASS_TO_PASS tests "
                          "it found failing for a cause outside the patch (needs_network, missing_dependency), and "
                          "hide the leaking vendored copies it found (setup.hide_vendored), with a note in each task "
                          "changed; FAIL_TO_PASS tests are never dropped")
    imp.add_argument("--skip-invalid", action="store_true",
                     help="skip rows that do not convert, counting them by field, instead of stopping at the first")
    imp.set_defaults(func=run_import)


def run_list(args) -> int:
    from repogym.envs.taskgen.recipes import ensure_suites
    from repogym.envs.tasks.suites import load_suite

    ensure_suites([args.suite])
    tasks = load_suite(args.suite, skip_no_f2p=args.skip_no_f2p)
    if args.json:
        print(json.dumps([t.to_dict() for t in tasks], indent=1))
        return 0
    width = max((len(t.instance_id) for t in tasks), default=10)
    print(f"{'instance_id':<{width}}  {'repo':<18} diff  F2P  P2P")
    for t in tasks:
        print(f"{t.instance_id:<{width}}  {t.repo:<18} {t.difficulty:>4}  {len(t.FAIL_TO_PASS):>3}  {len(t.PASS_TO_PASS):>3}")
    print(f"{len(tasks)} tasks")
    return 0


def _check_out_folder(path: str | None, option: str = "--out") -> None:
    """Refuse an output file whose folder does not exist, before the work that would end in writing it."""
    from pathlib import Path

    from repogym.envs.core.errors import ConfigError
    if path is not None and not Path(path).absolute().parent.is_dir():
        raise ConfigError(f"expected {option} in an existing folder, got {path!r} "
                          f"(no folder {str(Path(path).absolute().parent)!r})")


def _check_positive(value: int | None, option: str) -> None:
    from repogym.envs.core.errors import ConfigError
    if value is not None and value < 1:
        raise ConfigError(f"expected a positive {option}, got {value}")


def run_build(args) -> int:
    from repogym.envs.tasks.builtin import build_suite
    _check_out_folder(args.out)
    tasks = build_suite(args.out)
    print(f"wrote {len(tasks)} tasks")
    return 0


def run_suites(args) -> int:
    from repogym.envs.tasks.suites import list_suites
    for name, path in list_suites().items():
        print(f"{name}\t{path}")
    return 0


def progress_bar(source: str, kept: int, wanted: int, invalid: dict[str, int] | None = None, *,
                 unit: str = "tasks") -> None:
    """A one-line progress bar on stderr, with the tasks validation dropped so far."""
    import sys
    width = 30
    filled = int(width * min(kept, wanted) / max(1, wanted))
    dropped = f", dropped: {_by_reason(invalid)}" if invalid else ""
    sys.stderr.write(f"\r{source[:40]:<40} [{'#' * filled}{'.' * (width - filled)}] {kept}/{wanted} {unit}{dropped}\033[K")
    sys.stderr.flush()


def _by_reason(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items()))


def _print_stats(stats: dict) -> None:
    import sys
    sys.stderr.write("\n")
    print(f"{stats['kept']} tasks kept of {stats['tried']} mutations tried "
          f"({stats['candidates']} candidates; baseline: {stats.get('baseline_passing', 0)} passing tests, "
          f"{stats.get('flaky', 0)} flaky excluded) on the {stats['backend']} sandbox")
    if "not_long" in stats:
        print(f"{stats['not_long']} dropped as not long-horizon (a failing test near the bug, calling into its "
              f"file, or not linked to it in the call graph)")
    if "validated" in stats:
        dropped = len(stats["invalid_tasks"])
        print(f"validation ({stats['validate_s']:.0f}s): {stats['validated'] - dropped}/{stats['validated']} tasks "
              f"passed" + (f"; dropped by reason: {_by_reason(stats['invalid'])}" if dropped else ""))
        for rejected in stats["invalid_tasks"]:
            print(f"  dropped {rejected['instance_id']} ({', '.join(rejected['reasons'])}): "
                  f"{rejected['problems'][0][:200] if rejected['problems'] else ''}")
    else:
        print("not validated: prove the tasks with repogym validate before using them")


def run_generate(args) -> int:
    from repogym.envs.taskgen.generate import GenerateConfig, generate
    from repogym.envs.tasks.schema import save_tasks
    # Checked before the project is fetched and mutated (minutes), not when the tasks are written.
    _check_positive(args.max_tasks, "--max-tasks")
    _check_positive(args.max_candidates, "--max-candidates")
    _check_out_folder(args.out)
    config = GenerateConfig(max_tasks=args.max_tasks, seed=args.seed, max_candidates=args.max_candidates,
                            pip=args.pip, sandbox=args.sandbox, horizon=args.horizon, validate=args.validate)
    tasks, stats = generate(args.source, config, progress_bar)
    save_tasks(tasks, args.out)
    _print_stats(stats)
    print(f"wrote {args.out} ({'validated' if config.validate else 'not validated'}; "
          f"again, with 3 baseline runs: repogym validate --tasks {args.out})")
    return 0 if tasks else 1


def run_build_recipe(args) -> int:
    from repogym.envs.taskgen.recipes import build
    out, stats = build(args.suite, args.sandbox, progress_bar)
    if stats.get("family") == "flips":
        print(f"{stats['tasks']} training tasks; {stats['heldout']} held-out tasks in {stats['heldout_file']}")
    else:
        _print_stats(stats)
    print(f"wrote {out}; validate with: repogym validate --suite {args.suite}")
    return 0


def run_recipes(args) -> int:
    from repogym.envs.taskgen.flips import FlipsConfig
    from repogym.envs.taskgen.recipes import list_recipes, load_recipe
    for name in list_recipes():
        source, config = load_recipe(name)
        size = f"suites={name},{name}-heldout" if isinstance(config, FlipsConfig) else f"max_tasks={config.max_tasks}"
        print(f"{name}\t{source}\tseed={config.seed}\t{size}")
    return 0


def run_import(args) -> int:
    """Convert a dataset file into a task file; a bad row stops it with its line and field (exit status 2)."""
    import sys
    from collections import Counter
    from pathlib import Path

    from repogym.envs.core.errors import ConfigError, TaskFileError
    from repogym.envs.tasks.datasets import load_dataset
    from repogym.envs.tasks.schema import save_tasks
    _check_positive(args.limit, "--limit")
    _check_out_folder(args.out)
    if args.mirrors and not Path(args.mirrors).is_dir():  # checked before the dataset is read, not after
        raise ConfigError(f"expected --mirrors to be a folder of git repositories, got {args.mirrors!r}: no such "
                          f"folder")
    if args.mirrors:  # before the rows are read: inference reads each repository through its mirror
        os.environ["REPOGYM_MIRRORS"] = args.mirrors
    verdicts = _read_verdicts(args.drop_broken_tests) if args.drop_broken_tests else None
    shown = []  # the bar is drawn only for files long enough to wait on

    def progress(rows: int, total: int) -> None:
        if total >= 1000:
            shown.append(True)
            progress_bar(Path(args.file).name, rows, total, unit="rows")

    skipped: list[TaskFileError] = []
    try:
        tasks = load_dataset(args.file, dataset=args.dataset, limit=args.limit, progress=progress,
                             environments=args.environments, on_error=skipped.append if args.skip_invalid else None)
    finally:
        if shown:
            sys.stderr.write("\n")
    if verdicts is not None:
        tasks = _drop_broken_tests(tasks, verdicts, args.drop_broken_tests)
    save_tasks(tasks, args.out)
    counts = Counter(t.extra.get("dataset", "repogym") for t in tasks)
    print(f"imported {len(tasks)} tasks from {args.file}: "
          + (", ".join(f"{kind} {n}" for kind, n in sorted(counts.items())) or "the file has no rows"))
    inferred = sum(1 for t in tasks if "image" not in t.setup and "setup_inferred" in t.extra)
    builtin = sum(1 for t in tasks if "image" not in t.setup) - inferred
    print(f"environments: {builtin} built-in, {inferred} inferred, {len(tasks) - builtin - inferred} from the "
          f"dataset's images")
    if skipped:
        by_field = Counter(e.field or "row" for e in skipped)
        print(f"skipped {len(skipped)} invalid rows, by field: "
              + ", ".join(f"{f} {n}" for f, n in by_field.most_common()) + f"; first: {skipped[0]}")
    if args.mirrors:
        _check_mirrors(tasks, args.mirrors)
    print(f"wrote {args.out}")
    return 0 if tasks else 1


def _read_verdicts(path: str) -> dict[str, dict]:
    """The verdicts of a ``repogym validate --results`` file, by task id; a missing or empty file is an error."""
    from pathlib import Path

    from repogym.cli.validate import read_results
    from repogym.envs.core.errors import ConfigError
    if not Path(path).is_file():
        raise ConfigError(f"expected --drop-broken-tests to name a `repogym validate --results` file, got {path!r}: "
                          "no such file")
    verdicts = read_results(path)
    if not verdicts:
        raise ConfigError(f"--drop-broken-tests: {path} holds no verdict (expected the JSONL that `repogym validate "
                          "--results` writes)")
    return verdicts


def _drop_broken_tests(tasks, verdicts: dict[str, dict], path: str) -> list:
    """The tasks with their verdicts' remedies applied (:func:`repogym.envs.rewards.validate.prune_task`), and a
    summary of what changed."""
    from collections import Counter

    from repogym.envs.rewards.validate import prune_task
    totals, changed, pruned, causes = Counter(), 0, [], Counter()
    for task in tasks:
        verdict = verdicts.get(task.instance_id)
        if verdict is None:
            pruned.append(task)
            continue
        new, counts = prune_task(task, verdict)
        totals.update(counts)
        changed += new is not task
        causes.update(c for t, c in (verdict.get("causes") or {}).items() if t in task.PASS_TO_PASS)
        pruned.append(new)
    matched = sum(t.instance_id in verdicts for t in tasks)
    print(f"--drop-broken-tests: {matched} of {len(tasks)} tasks have a verdict in {path}; {changed} changed: "
          f"{totals['dropped']} PASS_TO_PASS test(s) dropped"
          + (f" ({_by_reason(causes)})" if causes else "")
          + f", {totals['remedied']} image(s) hiding a vendored copy")
    broken = [t.instance_id for t in tasks if verdicts.get(t.instance_id) and any(
        x in (verdicts[t.instance_id].get("causes") or {}) for x in t.FAIL_TO_PASS)]
    if broken:
        print(f"  {len(broken)} task(s) keep a FAIL_TO_PASS test that fails for a cause outside the patch (never "
              f"dropped; still invalid): {', '.join(broken[:5])}")
    return pruned


def _check_mirrors(tasks, mirrors: str) -> None:
    """Say which tasks' repository or base commit the mirror folder lacks (by repo)."""
    from collections import Counter

    from repogym.envs.tasks.repos import find_mirror, has_commit
    os.environ["REPOGYM_MIRRORS"] = mirrors
    missing_repo, missing_commit = Counter(), Counter()
    for task in tasks:
        mirror = find_mirror(task.repo)
        if mirror is None:
            missing_repo[task.repo] += 1
        elif not has_commit(mirror, task.base_commit):
            missing_commit[task.repo] += 1
    found = len(tasks) - sum(missing_repo.values()) - sum(missing_commit.values())
    print(f"mirrors: {found} of {len(tasks)} tasks have their repository and base commit in {mirrors}")
    for what, counts in (("no mirror", missing_repo), ("base commit missing", missing_commit)):
        if counts:
            print(f"  {what}: " + ", ".join(f"{repo} {n}" for repo, n in counts.most_common()))
