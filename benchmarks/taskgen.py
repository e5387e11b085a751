"""Task generation throughput: validated tasks per minute per core, and the share of mutations kept.

Generates tasks from one source with one worker (one sandbox, so one core of test running); generation
itself keeps only tasks that validate (gold resolves, empty does not, no leak). Each kept task is then
re-validated independently (3 baseline runs) as a check, which the rate does not count.
Run: ``python -m benchmarks.taskgen [--source pypi:toolz==1.0.0] [--max-tasks 10] [--sandbox docker]``.
"""

from __future__ import annotations

import argparse
import time

from repogym.envs.rewards.validate import validate_task
from repogym.envs.sandbox import SandboxConfig, sandbox_factory
from repogym.envs.taskgen.generate import GenerateConfig, generate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="pypi:toolz==1.0.0")
    parser.add_argument("--max-tasks", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sandbox", choices=["docker", "local"], default=None)
    args = parser.parse_args()

    start = time.perf_counter()
    tasks, stats = generate(args.source, GenerateConfig(max_tasks=args.max_tasks, seed=args.seed, sandbox=args.sandbox))
    generated = time.perf_counter() - start
    factory = sandbox_factory(stats["backend"], tasks[0].setup if tasks else {}, SandboxConfig(run_id="bench"))
    start = time.perf_counter()
    valid = sum(validate_task(task, factory).ok for task in tasks)
    validated = time.perf_counter() - start
    minutes = generated / 60
    print(f"source {args.source} on the {stats['backend']} sandbox, one worker")
    print(f"candidates {stats['candidates']}, tried {stats['tried']}, kept {stats['kept']} "
          f"({100 * stats['kept'] / max(1, stats['tried']):.0f}% of tried mutations kept)")
    print(f"generation {generated:.1f} s ({generated / max(1, stats['tried']):.2f} s per tried mutation; "
          f"{stats.get('validate_s', 0.0):.1f} s of it validating, {sum(stats.get('invalid', {}).values())} dropped), "
          f"independent re-check {validated:.1f} s ({validated / max(1, len(tasks)):.2f} s per task)")
    print(f"validated tasks: {valid}/{len(tasks)}; {valid / minutes:.1f} validated tasks per minute per core")
    return 0 if valid == len(tasks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
