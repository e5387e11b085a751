"""Grading cost, phase by phase, beside the floor: a bare ``python -m pytest`` of the same tests.

For each task (default: the first two tasks of each bundled repository) and each round, the gold patch is
graded as ``submit`` grades it: a sandbox from a warm pool of ones health-checked and holding the base (as the
env's ``eval_pool_size`` keeps one), the patch applied, the tamper revert, the ``test_patch``, the twins planted, the
launcher's run and the report read. Every sandbox call is timed through a recording proxy and put under its
phase, so the sum of the phases is the grading. Beside it, in the same rounds: the floor, a bare
``python -m pytest -p no:cacheprovider <the files of the FAIL_TO_PASS + PASS_TO_PASS ids>`` (what grading runs) in a sandbox that already holds
the gold tree (what the tests themselves cost, with nothing of the harness).

What the pool does ahead, while the agent works (start, health check, base load, and the warm test interpreter
that imports pytest before the patch arrives), is not in the grading: it is printed apart, and so is the floor
less pytest's own start-up (``python -c 'import pytest'`` in the same sandbox), the part of the floor a warm
interpreter takes out of the grading.

Goal (issue 43): grading p50 <= 1.3x the floor, with every guard on. Run:
``python -m benchmarks.grading [--backend docker] [--rounds 2] [--tasks ID,ID]``.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

import repogym.envs.rewards.evaluate as evaluate
from repogym.envs.rewards import grade
from repogym.envs.rewards.evaluate import prepared, run_targets
from repogym.envs.sandbox import SandboxConfig, make_sandbox
from repogym.envs.sandbox.pool import SandboxPool
from repogym.envs.tasks.repos import repo_path, snapshot
from repogym.envs.tasks.suites import load_suite


def phase_of(method: str, what: str) -> str:
    """The grading phase a sandbox call belongs to, read from the call itself."""
    if method != "run":
        return {"load": "base load", "write_file": "writes", "read_file": "reads",
                "staging_folder": "stage launcher"}.get(method, method)
    for needle, phase in (("import pytest", "health check"), ("import sys", "health check"), ("true", "health check"),
                          (".repogym-agent.patch", "patch apply"), ("git add -A -f", "tamper list"),
                          ("git checkout repogym-base", "tamper revert"), (".repogym-test.patch", "test_patch"),
                          ("/key)", "stage launcher"), ("launch_", "test run"), ("cat ", "report read")):
        if what.startswith(needle) or (needle in what and needle not in ("true",)):
            return phase
    return "other: " + what[:40]


def cpu_seconds(sandbox: Any) -> float | None:
    """CPU seconds every process of a docker sandbox used so far (its container's cgroup, v1 or v2); None elsewhere."""
    container = getattr(getattr(sandbox, "container", None), "id", None)
    if container is None:
        return None
    for path, scale in ((f"/sys/fs/cgroup/cpuacct/docker/{container}/cpuacct.usage", 1e-9),
                        (f"/sys/fs/cgroup/system.slice/docker-{container}.scope/cpu.stat", 1e-6)):
        try:
            text = open(path).read()
        except OSError:
            continue
        if path.endswith("cpu.stat"):
            text = next(line.split()[1] for line in text.splitlines() if line.startswith("usage_usec"))
        return int(text) * scale
    return None


class Recording:
    """A sandbox whose calls are timed into ``phases`` (seconds per phase), and whose CPU use from the moment it was
    handed out to its close is added to ``cpu`` (docker): a measure the machine's load does not move."""

    def __init__(self, inner: Any, phases: dict[str, float], cpu: list[float]):
        self._inner, self._phases, self._cpu = inner, phases, cpu
        self._cpu_start = cpu_seconds(inner)

    def close(self) -> None:
        end = cpu_seconds(self._inner)
        if end is not None and self._cpu_start is not None:
            self._cpu.append(end - self._cpu_start)
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in ("run", "load", "write_file", "read_file", "staging_folder") or not callable(attr):
            return attr

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                what = str(args[0]) if args and name == "run" else ""
                self._phases[phase_of(name, what)] += time.perf_counter() - start
        return timed


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def pick_tasks(ids: list[str] | None, per_repo: int = 2):
    tasks = load_suite("builtin")
    if ids:
        wanted = {t.instance_id: t for t in tasks}
        missing = [i for i in ids if i not in wanted]
        if missing:
            raise SystemExit(f"unknown task id(s): {missing}")
        return [wanted[i] for i in ids]
    picked, seen = [], defaultdict(int)
    for task in tasks:
        repo = task.instance_id.split("__")[1].split("-")[0]
        if seen[repo] < per_repo:
            seen[repo] += 1
            picked.append(task)
    return picked


def bare_run(sandbox, task) -> float:
    """Seconds for a bare pytest of what grading runs (the files of the graded ids), in a sandbox holding the gold
    tree and the hidden tests."""
    targets = " ".join(shlex.quote(t) for t in run_targets(task))
    start, cpu = time.perf_counter(), cpu_seconds(sandbox)
    result = sandbox.run(f"python -m pytest -q -p no:cacheprovider {targets}", timeout=600)
    seconds = time.perf_counter() - start
    if not result.ok:
        raise SystemExit(f"{task.instance_id}: the bare run failed:\n{result.stdout[-2000:]}{result.stderr[-1000:]}")
    if cpu is not None:
        BARE_CPU.append(cpu_seconds(sandbox) - cpu)
    return seconds


BARE_CPU: list[float] = []


def start_up(sandbox) -> float:
    """Seconds for pytest's start-up alone (the interpreter and ``import pytest``), as the bare run pays it."""
    start = time.perf_counter()
    assert sandbox.run("python -c 'import pytest'", timeout=120).ok
    return time.perf_counter() - start


def timed(function, into: list[float]):
    """``function`` that appends each call's seconds to ``into``."""
    def call(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            into.append(time.perf_counter() - start)
    return call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="docker", choices=["docker", "local"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tasks", default="", help="comma-separated task ids (default: two per bundled repository)")
    args = parser.parse_args(argv)
    tasks = pick_tasks([t for t in args.tasks.split(",") if t] or None)
    grades, floors, grade_cpu, start_ups, ahead, warm_starts = [], [], [], [], [], []
    phases_all: dict[str, list[float]] = defaultdict(list)
    evaluate.start_warm = timed(evaluate.start_warm, warm_starts)  # (to print what the pool does ahead)
    for task in tasks:
        hidden = (str(repo_path(task)),) if args.backend == "local" else ()
        config = SandboxConfig(run_id="bench-grading", hidden_paths=hidden)
        kwargs = {"image": _image(task)} if args.backend == "docker" else {}
        make = prepared(lambda: make_sandbox(args.backend, config, **kwargs), task)
        pool = SandboxPool(timed(make, ahead), size=1)
        floor_box = make_sandbox(args.backend, config, **kwargs)
        try:
            floor_box.load(snapshot(task))
            for patch in (task.patch, task.test_patch):
                floor_box.write_file(".p", patch.encode())
                assert floor_box.run("git apply .p && rm .p").ok
            bare_run(floor_box, task)  # warm the page cache and bytecode alike for both sides
            if BARE_CPU:
                BARE_CPU.pop()
            for _ in range(args.rounds):
                time.sleep(0.5)  # the pool refills, as it does while an agent works
                phases: dict[str, float] = defaultdict(float)
                acquire_s = []

                def acquire():
                    start = time.perf_counter()
                    box = pool.acquire()
                    acquire_s.append(time.perf_counter() - start)
                    return Recording(box, phases, grade_cpu)
                start = time.perf_counter()
                record = grade(task, task.patch, acquire, checked=True)
                total = time.perf_counter() - start
                if not record.resolved:
                    raise SystemExit(f"{task.instance_id}: gold graded {record.status}: {record.error}")
                phases["pool acquire"] += sum(acquire_s)
                phases["host (filter, twins, checks)"] += total - sum(phases.values())
                grades.append(total)
                floors.append(bare_run(floor_box, task))
                start_ups.append(start_up(floor_box))
                for name, seconds in phases.items():
                    phases_all[name].append(seconds)
        finally:
            floor_box.close()
            pool.close()
        print(f"  {task.instance_id}: grade {grades[-1] * 1000:.0f} ms, bare {floors[-1] * 1000:.0f} ms, "
              f"targets {run_targets(task)}", file=sys.stderr)
    n = len(grades)
    time.sleep(2)  # the last sandboxes close in the background (their CPU is read at close)
    print(f"grading on {args.backend}: {len(tasks)} tasks x {args.rounds} rounds")
    print(f"  grade p50 {pct(grades, .5) * 1000:7.0f} ms   p90 {pct(grades, .9) * 1000:7.0f} ms")
    print(f"  bare  p50 {pct(floors, .5) * 1000:7.0f} ms   p90 {pct(floors, .9) * 1000:7.0f} ms")
    ratios = [g / f for g, f in zip(grades, floors)]
    print(f"  ratio p50 {statistics.median(ratios):.2f}x (goal <= 1.3x)")
    less = [g / (f - s) for g, f, s in zip(grades, floors, start_ups)]
    print(f"  the floor less pytest's start-up (p50 {pct(start_ups, .5) * 1000:.0f} ms): ratio p50 "
          f"{statistics.median(less):.2f}x")
    print(f"  ahead, in the pool while the agent works: p50 {pct(ahead, .5) * 1000:.0f} ms a sandbox (start, check, "
          f"load), of which the warm test interpreter p50 {pct(warm_starts, .5) * 1000:.0f} ms")
    if grade_cpu and BARE_CPU:
        print(f"  CPU   grade p50 {pct(grade_cpu, .5) * 1000:5.0f} ms, bare p50 {pct(BARE_CPU, .5) * 1000:5.0f} ms: "
              f"{pct(grade_cpu, .5) / pct(BARE_CPU, .5):.2f}x (every process in the sandbox; the machine's load "
              "does not move it)")
    print("  phases (mean ms per grading):")
    for name, values in sorted(phases_all.items(), key=lambda kv: -sum(kv[1])):
        print(f"    {name:<30} {sum(values) / n * 1000:7.1f}")
    return 0


def _image(task) -> str:
    from repogym.envs.sandbox.images import ensure_env_image
    return ensure_env_image(task.setup)


if __name__ == "__main__":
    sys.exit(main())
