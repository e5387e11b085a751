"""``repogym tasks list | build-builtin``."""

from __future__ import annotations

import json


def add_parser(sub) -> None:
    parser = sub.add_parser("tasks", help="list the tasks of a suite")
    tsub = parser.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    ls = tsub.add_parser("list", help="list tasks (id, repo, difficulty, F2P/P2P counts)")
    ls.add_argument("--suite", default="builtin", help="suite name or JSONL path (default: builtin)")
    ls.add_argument("--json", action="store_true", help="print a JSON array of the full task records")
    ls.set_defaults(func=run_list)
    build = tsub.add_parser("build-builtin", help="rebuild task_repos/builtin.jsonl from task_repos/*/ (developers)")
    build.add_argument("--out", default=None, help="output path (default: task_repos/builtin.jsonl)")
    build.set_defaults(func=run_build)
    suites = tsub.add_parser("suites", help="list the suite names and their files")
    suites.set_defaults(func=run_suites)


def run_list(args) -> int:
    from envs.tasks.suites import load_suite
    tasks = load_suite(args.suite)
    if args.json:
        print(json.dumps([t.to_dict() for t in tasks], indent=1))
        return 0
    width = max((len(t.instance_id) for t in tasks), default=10)
    print(f"{'instance_id':<{width}}  {'repo':<18} diff  F2P  P2P")
    for t in tasks:
        print(f"{t.instance_id:<{width}}  {t.repo:<18} {t.difficulty:>4}  {len(t.FAIL_TO_PASS):>3}  {len(t.PASS_TO_PASS):>3}")
    print(f"{len(tasks)} tasks")
    return 0


def run_build(args) -> int:
    from envs.tasks.builtin import build_suite
    tasks = build_suite(args.out)
    print(f"wrote {len(tasks)} tasks")
    return 0


def run_suites(args) -> int:
    from envs.tasks.suites import list_suites
    for name, path in list_suites().items():
        print(f"{name}\t{path}")
    return 0
