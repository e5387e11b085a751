"""``repogym validate``: prove that each task's gold patch resolves it, the empty patch does not, and that a
fresh agent sandbox holds no way to the fix (the no-leak check)."""

from __future__ import annotations

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
    parser.set_defaults(func=run)


def run(args) -> int:
    from repogym.envs.errors import ConfigError
    from repogym.envs.rewards.validate import validate_tasks
    from repogym.envs.sandbox import SandboxConfig, default_backend, sandbox_factory
    from repogym.envs.tasks.repos import repo_path
    from repogym.envs.tasks.schema import load_tasks
    from repogym.envs.tasks.suites import load_suite

    tasks = load_tasks(args.tasks) if args.tasks else load_suite(args.suite or "builtin")
    if args.task:
        unknown = set(args.task) - {t.instance_id for t in tasks}
        if unknown:
            raise ConfigError(f"no such task(s): {sorted(unknown)}")
        tasks = [t for t in tasks if t.instance_id in args.task]
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
            mark = "ok  " if v.ok else ("INFRA" if v.infra_errors else "FAIL")
            print(f"{mark} {v.instance_id} ({v.duration_s:.1f}s)", flush=True)
            for line in v.problems + [f"flaky: {t}" for t in v.flaky] + v.infra_errors:
                print(f"     {line}", flush=True)

    print(f"validating {len(tasks)} task(s) on the {backend} sandbox")
    verdicts = validate_tasks(tasks, factory_for, workers=args.workers, on_result=show,
                              agent_factory_for=lambda task: factory_for(task, agent=True))
    bad = [v for v in verdicts if not v.ok]
    flaky = sum(len(v.flaky) for v in verdicts)
    print(f"{len(verdicts) - len(bad)}/{len(verdicts)} tasks valid; {flaky} flaky test(s); "
          f"{sum(bool(v.infra_errors) for v in verdicts)} with infrastructure errors")
    return 1 if bad else 0
