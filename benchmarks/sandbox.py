"""Sandbox speed, measured side by side in one run (these machines are noisy; compare ratios).

1. Reset latency: our env's warm ``reset`` (the tree put back in a resident container, by the runner from the base
   it holds, or by git's reset + clean) versus a fresh
   container per episode, as SWE-bench-style harnesses do (``docker run`` + copy the repo in + commit).
2. Tool-step overhead: ``env.step`` of a ``bash`` call versus a raw ``docker exec`` of the same command
   in the same container; and an ``edit`` step, which changes a file, so its tree id is git's, not a cached one.

Where the time goes: each reset phase as the runner times it (process sweep, scratch folders, ``.git`` synced
back, the tree put back (``fast_tree``; ``git_reset_clean`` where git does it), metadata), and a step's parts (the channel's round trip, the command as the runner
runs it, the tree id an env step asks for).

3. Fork latency (issue 24): ``env.fork(n)`` for n = 1, 8, 32 mid-episode, the forks taken from a warm pool, beside
   the warm reset and the fresh container of (1).

Targets: warm reset p50 at least 5x faster than a fresh container; step overhead under 1.3x; 8 forks in under
300 ms p50 on docker. Run: ``python -m benchmarks.sandbox [--episodes 20] [--steps 30] [--forks 1,8,32]
[--fork-rounds 5] [--task ID]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import repogym.envs  # noqa: F401
from repogym.envs.repo_env import RepoTaskEnv
from repogym.envs.sandbox.docker import docker_client
from repogym.envs.sandbox.images import ensure_env_image
from repogym.envs.tasks.repos import snapshot
from repogym.envs.tasks.suites import find_task, load_suite


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def fresh_container_episode(client, image, snap) -> float:
    """Time until a brand-new container holds the repo at its base commit, ready for a command."""
    start = time.perf_counter()
    container = client.containers.run(image, ["sleep", "infinity"], detach=True, network_mode="none",
                                      labels={"repogym": "1", "repogym.run": "bench"}, user="agent")
    try:
        container.put_archive("/repo", snap.tar)
        code, _ = container.exec_run(["bash", "-c", "git init -q && git add -A && git -c user.name=b -c "
                                      "user.email=b@b commit -qm base"], workdir="/repo")
        if code != 0:
            raise RuntimeError(f"baseline setup failed: {_.decode(errors='replace')}")
        return time.perf_counter() - start
    finally:
        container.remove(force=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--task", default=None, help="task id (default: the first builtin task)")
    parser.add_argument("--forks", default="1,8,32", help="comma-separated fork counts n to time env.fork(n) for")
    parser.add_argument("--fork-rounds", type=int, default=5, help="forks timed per n")
    parser.add_argument("--json", action="store_true", help="also print the numbers as JSON")
    args = parser.parse_args()
    task = find_task(args.task) if args.task else load_suite("builtin")[0]
    client = docker_client()
    image = ensure_env_image(task.setup)
    snap = snapshot(task)

    env = RepoTaskEnv(task=task, sandbox="docker", max_turns=10_000)
    env.reset()
    edit = json.dumps({"name": "bash", "arguments": {"command": "echo x >> README.md; touch new.txt"}})
    ours, fresh = [], []
    for _ in range(args.episodes):  # interleaved, so both see the same machine load
        env.step(edit)
        start = time.perf_counter()
        env.reset()
        ours.append(time.perf_counter() - start)
        fresh.append(fresh_container_episode(client, image, snap))

    breakdown = reset_and_step_breakdown(env.unwrapped._sandbox, rounds=args.episodes)

    command = "cat README.md > /dev/null"
    step = json.dumps({"name": "bash", "arguments": {"command": command}})
    container = env.unwrapped._sandbox.container
    steps, raw, edits = [], [], []
    for _ in range(args.steps):
        start = time.perf_counter()
        env.step(step)
        steps.append(time.perf_counter() - start)
        start = time.perf_counter()
        container.exec_run(["bash", "-c", command], workdir="/repo", user="agent")
        raw.append(time.perf_counter() - start)
    # And each in a row of its own (an exec leaves docker's own clean-up running into the next step when they
    # alternate): blocks of ten, alternating, so both still see the same machine.
    steps_row, raw_row = [], []
    for block in range(2 * max(1, args.steps // 10)):
        for _ in range(10):
            start = time.perf_counter()
            if block % 2:
                container.exec_run(["bash", "-c", command], workdir="/repo", user="agent")
            else:
                env.step(step)
            (raw_row if block % 2 else steps_row).append(time.perf_counter() - start)
    # Editing steps, apart (an edit leaves the next step's tree id to git too): a file changes each time, so the
    # tree id is git's (staging, write-tree), not the cached one.
    env.step(json.dumps({"name": "create", "arguments": {"path": "notes.txt", "content": "0\n"}}))
    for i in range(args.steps):
        change = json.dumps({"name": "edit", "arguments": {"path": "notes.txt", "old": f"{i}\n", "new": f"{i + 1}\n"}})
        start = time.perf_counter()
        env.step(change)
        edits.append(time.perf_counter() - start)
    env.close()

    fork_times = time_forks(task, [int(n) for n in args.forks.split(",") if n.strip()], args.fork_rounds)

    r50, f50 = statistics.median(ours), statistics.median(fresh)
    s50, x50 = statistics.median(steps), statistics.median(raw)
    print(f"task {task.instance_id}, {args.episodes} episodes, {args.steps} steps, docker backend")
    print(f"{'':28}{'p50 ms':>10}{'p95 ms':>10}")
    print(f"{'warm reset (repogym)':28}{r50 * 1e3:>10.1f}{pct(ours, .95) * 1e3:>10.1f}")
    print(f"{'fresh container/episode':28}{f50 * 1e3:>10.1f}{pct(fresh, .95) * 1e3:>10.1f}")
    print(f"{'tool step (env.step bash)':28}{s50 * 1e3:>10.1f}{pct(steps, .95) * 1e3:>10.1f}")
    print(f"{'raw docker exec':28}{x50 * 1e3:>10.1f}{pct(raw, .95) * 1e3:>10.1f}")
    print(f"{'tool step, in a row':28}{statistics.median(steps_row) * 1e3:>10.1f}{pct(steps_row, .95) * 1e3:>10.1f}")
    print(f"{'raw docker exec, in a row':28}{statistics.median(raw_row) * 1e3:>10.1f}{pct(raw_row, .95) * 1e3:>10.1f}")
    print(f"{'tool step (env.step edit)':28}{statistics.median(edits) * 1e3:>10.1f}{pct(edits, .95) * 1e3:>10.1f}")
    for n, times in fork_times.items():
        print(f"{f'env.fork({n}), warm pool':28}{statistics.median(times) * 1e3:>10.1f}{pct(times, .95) * 1e3:>10.1f}")
    print("reset phases in the runner (p50 ms): " + ", ".join(f"{k} {v:.1f}" for k, v in breakdown["reset"].items()))
    print("step parts (p50 ms): " + ", ".join(f"{k} {v:.1f}" for k, v in breakdown["step"].items()))
    speedup, overhead = f50 / r50, s50 / x50
    print(f"reset speed-up (fresh p50 / warm p50): {speedup:.1f}x   target >= 5x   "
          f"{'OK' if speedup >= 5 else 'MISSED'}")
    print(f"step overhead (env.step p50 / raw exec p50): {overhead:.2f}x   target < 1.3x   "
          f"{'OK' if overhead < 1.3 else 'MISSED'}")
    row = statistics.median(raw_row) / statistics.median(steps_row)
    print(f"step speed-up over a raw docker exec (issue 43: >= 10x, step p50 <= 7 ms): alternating {x50 / s50:.1f}x, "
          f"in a row {row:.1f}x")
    fork8 = statistics.median(fork_times[8]) if 8 in fork_times else None
    if fork8 is not None:
        print(f"8 forks p50: {fork8 * 1e3:.0f} ms   target < 300 ms   {'OK' if fork8 < 0.3 else 'MISSED'}")
    if args.json:
        print(json.dumps({"reset_speedup": speedup, "step_overhead": overhead, "warm_reset_p50_s": r50,
                          "fresh_p50_s": f50, "step_p50_s": s50, "raw_exec_p50_s": x50,
                          "edit_step_p50_s": statistics.median(edits),
                          "fork_p50_s": {n: statistics.median(t) for n, t in fork_times.items()}}))
    return 0 if speedup >= 5 and overhead < 1.3 and (fork8 is None or fork8 < 0.3) else 1


def reset_and_step_breakdown(box, rounds: int) -> dict[str, dict[str, float]]:
    """Where a reset's and a step's time goes. Reset: each phase as the runner times it (after an edit, as
    episodes leave the tree). Step: the channel's round trip (``ping``), a command as the runner runs it (spawn to
    exit, output captured), the whole ``sandbox.run``, and the tree id an env step asks for (cached when no file
    changed)."""
    phases: dict[str, list[float]] = {}
    for _ in range(rounds):
        box.run("echo x >> README.md; touch new.txt")
        answer = box.request("reset", scratch=list(box.scratch_dirs), wait=60)
        for name, seconds in answer["phases"].items():
            phases.setdefault(name, []).append(seconds)
    parts: dict[str, list[float]] = {"ping": [], "command (runner)": [], "sandbox.run": [], "tree id": []}
    time.sleep(0.1)  # every file settled: the tree id comes from the runner's cache, as in a run of reads
    for _ in range(rounds):
        start = time.perf_counter()
        box.request("ping")
        parts["ping"].append(time.perf_counter() - start)
        start = time.perf_counter()
        result = box.run("cat README.md > /dev/null")
        parts["sandbox.run"].append(time.perf_counter() - start)
        parts["command (runner)"].append(result.duration_s)
        start = time.perf_counter()
        box.tree_id()
        parts["tree id"].append(time.perf_counter() - start)
    return {"reset": {k: statistics.median(v) * 1e3 for k, v in phases.items()},
            "step": {k: statistics.median(v) * 1e3 for k, v in parts.items()}}


def time_forks(task, counts: list[int], rounds: int) -> dict[int, list[float]]:
    """Seconds per ``env.fork(n)`` mid-episode (after an edit, a commit and a scratch file), the pool full first."""
    from repogym.envs.repo_env import EnvConfig

    out: dict[int, list[float]] = {}
    env = RepoTaskEnv(task=task, config=EnvConfig(sandbox="docker", max_turns=10_000, eval_pool_size=0,
                                                  fork_pool_size=max(counts, default=1)))
    try:
        env.reset()
        env.step(json.dumps({"name": "bash", "arguments": {"command": "echo x >> README.md && git commit -qam x && "
                                                                      "echo s > /tmp/s && touch new.txt"}}))
        pool = env._fork_pool(env.task)
        for n in counts:
            out[n] = []
            for _ in range(rounds):
                deadline = time.monotonic() + 300
                while pool._ready.qsize() < n and time.monotonic() < deadline:  # every fork from the warm pool
                    time.sleep(0.1)
                start = time.perf_counter()
                forks = env.fork(n)
                out[n].append(time.perf_counter() - start)
                for fork in forks:
                    fork.close()
    finally:
        env.close()
    return out


if __name__ == "__main__":
    sys.exit(main())
