"""``repogym validate``: prove that each task's gold patch resolves it, the empty patch does not, and that a
fresh agent sandbox holds no way to the fix (the no-leak check); print the share of FAIL_TO_PASS tests that
grading guards with must-fail twins (``envs/rewards/twins.py``), and name the ones it cannot."""

from __future__ import annotations

import json
import os
import threading

from repogym.envs.sandbox import BACKENDS


def add_parser(sub) -> None:
    parser = sub.add_parser("validate", help="validate tasks in real sandboxes (gold resolves, empty does not, no flaky "
                                             "tests, no leak of the fix into the agent's sandbox)",
                            description="Prove each task in real sandboxes: its gold patch resolves it, the empty "
                                        "patch does not, no test is flaky, and a fresh agent sandbox holds no way to "
                                        "the fix. Exit status 1 when any task fails.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--suite", default=None, help="suite name or JSONL path (default: builtin)")
    group.add_argument("--tasks", default=None, help="a JSONL task file")
    parser.add_argument("--sandbox", choices=BACKENDS.names(), default=None,
                        help="backend (default: docker when a daemon answers, else local)")
    parser.add_argument("--task", action="append", default=[], help="only this task id (repeatable)")
    parser.add_argument("--workers", type=int, default=2, help="tasks validated at once (default 2)")
    parser.add_argument("--results", default=None, metavar="FILE",
                        help="append each verdict to this JSONL file as it lands, and skip the tasks it already "
                             "holds (resume a long run; the summary counts them); the tests failing for a cause "
                             "outside the patch and the leaks' remedies are in it, for `repogym tasks import "
                             "--drop-broken-tests FILE`")
    parser.add_argument("--gold-runs", type=int, default=1, metavar="N",
                        help="grade the gold patch N times, each in a fresh sandbox (default 1): a test whose outcome "
                             "changes between them is flaky, a reward that would flip on the same patch")
    parser.add_argument("--no-coverage", dest="coverage", action="store_false",
                        help="skip the coverage run: by default each valid task's suite runs once more under the "
                             "coverage probe, and the map of which tests run which functions is kept for "
                             "inspect_diff and the reward (its cost is printed beside the plain run's)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from repogym.envs.core.errors import ConfigError
    from repogym.envs.rewards.validate import validate_tasks
    from repogym.envs.sandbox import SandboxConfig, default_backend, sandbox_factory
    from repogym.envs.tasks.repos import repo_path
    from repogym.envs.tasks.schema import load_tasks
    from repogym.envs.tasks.suites import load_suite, select_tasks

    from repogym.envs.taskgen.recipes import ensure_suites

    # Arguments are checked before a suite is built or a sandbox started.
    if args.workers < 1:
        raise ConfigError(f"expected a positive --workers, got {args.workers}")
    if args.gold_runs < 1:
        raise ConfigError(f"expected a positive --gold-runs, got {args.gold_runs}")
    if args.results and not os.path.isdir(os.path.dirname(os.path.abspath(args.results))):
        raise ConfigError(f"expected --results in an existing folder, got {args.results!r} (no folder "
                          f"{os.path.dirname(os.path.abspath(args.results))!r})")
    if not args.tasks:
        ensure_suites([args.suite or "builtin"])
    tasks = load_tasks(args.tasks) if args.tasks else load_suite(args.suite or "builtin")
    if args.task:
        tasks = select_tasks(tasks, args.task, args.tasks or args.suite or "builtin")
    done = read_results(args.results) if args.results else {}
    if args.results and os.path.exists(args.results) and os.path.getsize(args.results):
        with open(args.results, "rb+") as fh:  # end a torn last line, so the next verdict starts a line
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
    total = len(tasks)
    tasks = [t for t in tasks if t.instance_id not in done]
    backend = args.sandbox or default_backend()
    lock = threading.Lock()
    factories = {}

    def factory_for(task, agent=False):
        with lock:
            if (task.env_key, agent) not in factories:
                config = SandboxConfig()
                if agent and backend == "local":  # as an episode's sandbox: the task's source repository hidden
                    config = SandboxConfig(hidden_paths=(str(repo_path(task)),))
                factories[task.env_key, agent] = sandbox_factory(backend, task.setup, config)
            return factories[task.env_key, agent]

    def show(v):
        with lock:
            done[v.instance_id] = {"instance_id": v.instance_id, "ok": v.ok, "reasons": v.reasons,
                                   "problems": v.problems, "infra_errors": v.infra_errors,
                                   "fail_to_pass": v.fail_to_pass, "unprotected": v.unprotected,
                                   "causes": v.causes, "remedies": v.remedies, "coverage": v.coverage}
            if args.results:
                with open(args.results, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(done[v.instance_id]) + "\n")
            mark = "ok  " if v.ok else ("INFRA" if v.infra_errors else "FAIL")
            twinned = f"twins {v.fail_to_pass - len(v.unprotected)}/{v.fail_to_pass} F2P, " if v.fail_to_pass else ""
            print(f"[{len(done)}/{total}] {mark} {v.instance_id} ({twinned}{v.duration_s:.1f}s)", flush=True)
            for line in v.problems + [f"flaky: {t}" for t in v.flaky] + v.infra_errors + [
                    f"no twin (unprotected): {t}" for t in v.unprotected] + [
                    f"remedy: setup.{k} = {json.dumps(x)}" for k, x in v.remedies.items()] + (
                    [v.coverage] if v.coverage else []):
                print(f"     {line}", flush=True)

    skipped = f" ({total - len(tasks)} already in {args.results})" if total > len(tasks) else ""
    print(f"validating {len(tasks)} task(s) on the {backend} sandbox{skipped}")
    verdicts = validate_tasks(tasks, factory_for, workers=args.workers, on_result=show,
                              agent_factory_for=lambda task: factory_for(task, agent=True), coverage=args.coverage,
                              gold_runs=args.gold_runs)
    flaky = sum(len(v.flaky) for v in verdicts)
    print(f"{sum(r['ok'] for r in done.values())}/{len(done)} tasks valid; {flaky} flaky test(s) this run")
    print(twin_share(done.values()))
    _print_table(done)
    return 1 if any(not r["ok"] for r in done.values()) else 0


def twin_share(results) -> str:
    """How much of the suite's FAIL_TO_PASS stands guarded by twins (tasks graded without the share are left out)."""
    counted = [r for r in results if r.get("fail_to_pass")]
    total = sum(r["fail_to_pass"] for r in counted)
    bare = sum(len(r.get("unprotected", [])) for r in counted)
    if not total:
        return "twins: no FAIL_TO_PASS test graded"
    tasks = sum(bool(r.get("unprotected")) for r in counted)
    return (f"twins: {total - bare}/{total} FAIL_TO_PASS tests ({100 * (total - bare) / total:.1f}%) have a must-fail "
            f"twin; {bare} unprotected in {tasks} task(s)")


def read_results(path: str) -> dict[str, dict]:
    """The verdicts already in a results file (a torn last line, from a killed run, is ignored)."""
    found: dict[str, dict] = {}
    if not os.path.exists(path):  # a first run: nothing validated yet
        return found
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                record = json.loads(line)
                found[record["instance_id"]] = record
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return found


def _print_table(results: dict[str, dict]) -> None:
    """Verdicts by outcome: valid, then each failed check with its count and a first example."""
    from repogym.envs.rewards.validate import REASONS
    rows = [("valid", sum(r["ok"] for r in results.values()), "")]
    for reason in REASONS:
        hits = [r for r in results.values() if reason in r.get("reasons", [])]
        if hits:
            example = (hits[0].get("problems") or hits[0].get("infra_errors") or [""])[0]
            rows.append((reason, len(hits), f"{hits[0]['instance_id']}: {example}"[:110]))
    width = max(len(name) for name, _, _ in rows)
    for name, count, example in rows:
        print(f"  {name:<{width}}  {count:>5}  {example}")
