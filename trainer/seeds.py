"""One config over several seeds: each seed its own run folder, then the curves with their spread.

``repogym train --config C --seeds 3`` trains ``RUN_DIR/seed-0``, ``seed-1``, ``seed-2`` (seeds ``seed``,
``seed+1``, ...; each resumes like any run) and writes ``RUN_DIR/seeds.json``: for every evaluated step, the
mean, standard deviation, min and max over seeds of each curve (``eval/*`` and ``eval_heldout/*`` success rates,
``rollout/success_rate``, ``rollout/reward_mean``).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

from repogym.trainer.config import TrainConfig

CURVES = ("eval/success_rate", "eval_heldout/success_rate", "eval/pass@1", "eval_heldout/pass@1",
          "rollout/success_rate", "rollout/reward_mean")


def seed_configs(config: TrainConfig, seeds: int) -> list[TrainConfig]:
    """``seeds`` copies of ``config``: seed ``config.seed + i`` in ``RUN_DIR/seed-i`` (curriculum seeded alike)."""
    root = Path(config.run_dir)
    return [dataclasses.replace(config, seed=config.seed + i, run_dir=str(root / f"seed-{i}"),
                                curriculum=dataclasses.replace(config.curriculum, seed=config.curriculum.seed + i))
            for i in range(seeds)]


def spread(runs: list[list[dict[str, Any]]], curves: tuple[str, ...] = CURVES) -> dict[str, dict[int, dict]]:
    """Per curve, per step: mean, std (0 for one seed), min, max and n over the runs that logged it."""
    out: dict[str, dict[int, dict]] = {}
    for curve in curves:
        by_step: dict[int, list[float]] = {}
        for lines in runs:
            for m in lines:
                if isinstance(m.get(curve), (int, float)):
                    by_step.setdefault(int(m["step"]), []).append(float(m[curve]))
        if by_step:
            out[curve] = {step: {"mean": statistics.fmean(v), "std": statistics.stdev(v) if len(v) > 1 else 0.0,
                                 "min": min(v), "max": max(v), "n": len(v)} for step, v in sorted(by_step.items())}
    return out


def spread_table(summary: dict[str, dict[int, dict]]) -> str:
    """The curves as text: one row per step, ``mean ± std`` per curve."""
    curves = list(summary)
    steps = sorted({step for c in curves for step in summary[c]})
    rows = [["step", *curves]]
    for step in steps:
        rows.append([str(step)] + [f"{summary[c][step]['mean']:.3f} ± {summary[c][step]['std']:.3f}"
                                   if step in summary[c] else "" for c in curves])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows)


def run_seeds(config: TrainConfig, seeds: int, progress: bool = True) -> dict[str, dict[int, dict]]:
    """Train ``config`` over ``seeds`` seeds, one after another; write and return the spread of the curves."""
    from repogym.trainer.train import train

    runs = []
    for seeded in seed_configs(config, seeds):
        train(seeded, progress=progress)
        runs.append([json.loads(line) for line in (Path(seeded.run_dir) / "metrics.jsonl").read_text().splitlines()])
    summary = spread(runs)
    path = Path(config.run_dir) / "seeds.json"
    path.write_text(json.dumps({"seeds": seeds, "base_seed": config.seed, "curves": summary}, indent=1))
    return summary


__all__ = ["CURVES", "run_seeds", "seed_configs", "spread", "spread_table"]
