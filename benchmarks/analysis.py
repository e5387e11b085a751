"""Benchmark envs.analysis on pip's own source (the copy inside this virtualenv, >50k lines).

Prints lines indexed, the full single-process index time, then for 20 random single-function edits
(a statement appended to the function's body) the incremental ``update_file`` time next to a full
re-index of the same content: p50/p95 and their ratio. Targets: full index of 50k lines < 3 s on one
core (scaled to the lines indexed), incremental update < 50 ms (p95). Run: python -m benchmarks.analysis
"""

from __future__ import annotations

import os
import random
import statistics
import time
from pathlib import Path

import pip

from repogym.envs.analysis import RepoIndex

FULL_TARGET_S_PER_50K = 3.0
UPDATE_TARGET_S = 0.050
EDITS = 20


def _pin_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def main() -> int:
    _pin_one_core()
    root = Path(pip.__file__).parent.parent
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted((root / "pip").rglob("*.py"))}
    lines = sum(s.count(b"\n") for s in files.values())
    start = time.perf_counter()
    index = RepoIndex.from_files(files)
    full_s = time.perf_counter() - start
    print(f"indexed {len(files)} files, {lines} lines, {len(index.symbols)} symbols in {full_s:.2f} s "
          f"({full_s * 50_000 / lines:.2f} s per 50k lines)")

    rng = random.Random(0)
    functions = []
    for symbol in index.symbols.values():
        if symbol.kind not in ("function", "method") or symbol.end_line <= symbol.line:
            continue
        facts, i = index._defs[symbol.name]
        line_start = facts.source.rfind(b"\n", 0, facts.defs[i].body_start) + 1
        indent = facts.source[line_start:facts.defs[i].body_start]
        if indent and not indent.strip():  # the body starts on its own line: we know its indentation
            functions.append((symbol, indent))
    incremental, rebuild = [], []
    for symbol, indent in rng.sample(functions, EDITS):
        body_lines = index._files[symbol.file].source.split(b"\n")
        body_lines.insert(symbol.end_line, indent + b"_benchmark_probe = len(())")
        new = b"\n".join(body_lines)
        copy = index.copy()
        start = time.perf_counter()
        copy.update_file(symbol.file, new)
        incremental.append(time.perf_counter() - start)
        start = time.perf_counter()
        RepoIndex.from_files({**files, symbol.file: new})
        rebuild.append(time.perf_counter() - start)
    inc50, inc95, full50, full95 = _p(incremental, 50), _p(incremental, 95), _p(rebuild, 50), _p(rebuild, 95)
    print(f"{EDITS} single-function edits     p50        p95")
    print(f"  incremental update_file  {inc50 * 1000:7.2f} ms {inc95 * 1000:7.2f} ms")
    print(f"  full re-index            {full50 * 1000:7.0f} ms {full95 * 1000:7.0f} ms")
    print(f"  ratio (full/incremental) {full50 / inc50:7.0f}x   {full95 / inc95:7.0f}x")
    full_ok = full_s * 50_000 / lines < FULL_TARGET_S_PER_50K
    inc_ok = inc95 < UPDATE_TARGET_S
    print(f"full index  < {FULL_TARGET_S_PER_50K:.0f} s / 50k lines: {'OK' if full_ok else 'MISSED'}")
    print(f"incremental < {UPDATE_TARGET_S * 1000:.0f} ms (p95):      {'OK' if inc_ok else 'MISSED'}")
    return 0 if full_ok and inc_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
