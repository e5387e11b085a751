"""``repogym demo``: run agents over a suite and print a results table (the README's main job)."""

from __future__ import annotations

import math
from pathlib import Path

from repogym.agents import AGENTS
from repogym.envs.core.errors import ConfigError
from repogym.envs.core.status import excluded
from repogym.envs.sandbox import BACKENDS


def add_parser(sub) -> None:
    parser = sub.add_parser("demo", help="run agents (default: oracle and null) over a suite; print a results table",
                            description="Run each agent once over every task of a suite, one episode at a time, "
                                        "writing trajectories, and print a table of resolved tasks by difficulty. "
                                        "For K samples, resuming and a results database, use repogym bench.")
    parser.add_argument("--suite", default="builtin", help="suite name or JSONL path (default: builtin)")
    parser.add_argument("--agents", default="oracle,null",
                        help=f"comma-separated agent names, of {', '.join(AGENTS.names())} (default: oracle,null)")
    parser.add_argument("--sandbox", choices=BACKENDS.names(), default=None,
                        help="backend (default: docker when a daemon answers, else local)")
    parser.add_argument("--task", action="append", default=[], metavar="ID",
                        help="only this task id (repeatable; see `repogym tasks list`)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks (of those --task picks)")
    parser.add_argument("--max-turns", type=int, default=30, help="turn limit per episode (default 30)")
    parser.add_argument("--out", default="runs/demo", help="folder for trajectories (default: runs/demo)")
    parser.set_defaults(func=run)


def run(args) -> int:
    import gymnasium as gym

    import repogym.envs  # noqa: F401  (registers the env id)
    from repogym.agents import make_agent
    from repogym.agents.rollout import run_episode
    from repogym.envs.tasks.suites import load_suite, select_tasks

    # Every argument is checked before a model, a sandbox or a folder is made.
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"expected a positive --limit, got {args.limit}")
    if args.max_turns < 1:
        raise ConfigError(f"expected a positive --max-turns, got {args.max_turns}")
    names = [n.strip() for n in args.agents.split(",") if n.strip()]
    if not names:
        raise ConfigError(f"expected --agents to name at least one of {', '.join(AGENTS.names())}, got {args.agents!r}")
    for name in names:
        AGENTS.resolve(name)  # an unknown name lists the valid ones
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise ConfigError(f"expected --out to be a folder, got {args.out!r}: a file")
    tasks = load_suite(args.suite)
    if args.task:
        tasks = select_tasks(tasks, args.task, args.suite)
    tasks = tasks[: args.limit]
    agents = {n: make_agent(n, suite=args.suite) if n == "oracle" else make_agent(n) for n in names}
    env = gym.make("repogym/RepoTask-v0", suite=args.suite, tasks=tasks, sandbox=args.sandbox,
                   max_turns=args.max_turns)
    print(f"{len(tasks)} tasks x {len(names)} agents on the {env.unwrapped.backend} sandbox")
    results = []
    try:
        for name, agent in agents.items():
            out = Path(args.out) / name
            out.mkdir(parents=True, exist_ok=True)
            for task in tasks:
                result = run_episode(env, agent, task_id=task.instance_id, agent_name=name,
                                     trajectory=out / f"{task.instance_id}.jsonl")
                results.append((task, result))
                print(f"  {name:<8} {task.instance_id:<48} {result.status:<13} reward={result.reward:g} "
                      f"turns={result.turns} {result.duration_s:.1f}s", flush=True)
    finally:
        env.close()
    print()
    print(results_table(results, names))
    print(f"\ntrajectories in {args.out}/")
    return 0


def results_table(results, names) -> str:
    """Markdown table: per agent and difficulty, resolved / tasks, excluded episodes (infrastructure failures and
    bugs of repogym's, left out of the rate), mean seconds."""
    levels = sorted({t.difficulty for t, _ in results})
    header = "| agent | " + " | ".join(f"difficulty {d}" for d in levels) + " | resolved | excluded | s/episode |"
    lines = [header, "|" + "---|" * (len(levels) + 4)]
    for name in names:
        mine = [(t, r) for t, r in results if r.agent == name]
        cells = []
        for level in levels:
            at = [r for t, r in mine if t.difficulty == level]
            cells.append(f"{sum(r.resolved for r in at)}/{len(at)}")
        resolved = sum(r.resolved for _, r in mine)
        infra = sum(excluded(r.status, r.reward) for _, r in mine)
        valid = len(mine) - infra
        rate = f"{resolved}/{len(mine)} ({100 * resolved / valid:.0f}%)" if valid else "n/a"
        mean = sum(r.duration_s for _, r in mine) / len(mine) if mine else math.nan
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {rate} | {infra} | {mean:.2f} |")
    return "\n".join(lines)
