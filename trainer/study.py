"""The transfer study: held-out success after SFT only, after SFT + RL, and after the two controls, over seeds.

``repogym train --config C --seeds 3 --controls`` runs, for each seed ``i`` (seed ``seed + i``; all from one base
model: ``model.path``, or the tiny model the first seed builds):

- ``RUN_DIR/seed-i/sft``: the SFT warm start alone (``train.steps`` 0), evaluated once: **sft_only**;
- ``RUN_DIR/seed-i/{rl,sft_continue,shuffled_rewards}``: ``train.steps`` steps from that warm-started model
  (``model.path``, no second warm start) with ``train.control`` none, sft_continue or shuffled_rewards, evaluated
  after the last step.

Each condition's success on the held-out split (``eval_heldout/``) and on the training tasks (``eval/``) is then
pooled over the seeds with its 95% Wilson interval, beside the mean ± std of the per-seed rates; printed, and
written to ``RUN_DIR/study.json`` and ``RUN_DIR/study.md``. A condition whose run already holds its final
evaluation is not run again, so an interrupted study resumes.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any, Callable

from repogym.envs.core.errors import ConfigError
from repogym.envs.core.rates import wilson
from repogym.trainer.config import TrainConfig
from repogym.trainer.seeds import seed_configs

CONDITIONS = ("sft_only", "rl", "sft_continue", "shuffled_rewards")
"""The study's arms, in the order they are reported."""
SPLITS = ("eval_heldout", "eval")
_CONTROL = {"rl": "none", "sft_continue": "sft_continue", "shuffled_rewards": "shuffled_rewards"}


def condition_configs(seeded: TrainConfig) -> dict[str, TrainConfig]:
    """The four runs of one seed (``seeded`` from :func:`~repogym.trainer.seeds.seed_configs`), keyed by condition."""
    root, steps = Path(seeded.run_dir), seeded.train.steps
    if steps < 1:
        raise ConfigError("the study compares training runs: set train.steps >= 1")
    if seeded.sft.steps < 1:
        raise ConfigError("the study starts every arm from an SFT warm start (of model.path, or of the tiny "
                          "model): set sft.steps >= 1")
    warm = dataclasses.replace(seeded, run_dir=str(root / "sft"),
                               train=dataclasses.replace(seeded.train, steps=0, eval_every=1, eval_at_start=True))
    out = {"sft_only": warm}
    for name, control in _CONTROL.items():
        out[name] = dataclasses.replace(
            seeded, run_dir=str(root / name),
            model=dataclasses.replace(seeded.model, path=str(Path(warm.run_dir) / "sft" / "model")),
            sft=dataclasses.replace(seeded.sft, steps=0),
            train=dataclasses.replace(seeded.train, control=control, eval_every=steps, eval_at_start=False))
    return out


def final_eval(run_dir: str | Path, step: int) -> dict[str, Any] | None:
    """The evaluation a run logged at ``step`` (its last one), or None when it has not got there."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return None
    found = None
    for line in path.read_text().splitlines():
        m = json.loads(line)
        if m.get("step") == step and any(f"{split}/episodes" in m for split in SPLITS):
            found = m
    return found


def heldout_by_kind(run_dirs: list[str | Path], kinds: dict[str, str]) -> dict[str, dict[str, int]]:
    """Held-out successes and episodes per kind of held-out task (``kinds``: task id -> ``extra["heldout"]``), read
    from the runs' held-out evaluation trajectories (each arm evaluates its split once); infra errors left out."""
    out: dict[str, dict[str, int]] = {}
    for run_dir in run_dirs:
        for path in sorted((Path(run_dir) / "trajectories" / "eval_heldout").glob("*.jsonl")):
            lines = path.read_text().splitlines()
            end = json.loads(lines[-1]) if lines else {}
            kind = kinds.get(path.name.rsplit(".s", 1)[0])
            if end.get("type") != "end" or kind is None or end.get("status") == "infra_error":
                continue
            cell = out.setdefault(kind, {"successes": 0, "episodes": 0})
            cell["successes"] += end.get("status") == "resolved"
            cell["episodes"] += 1
    return out


def summarize(finals: dict[str, list[dict[str, Any]]], by_kind: dict[str, dict[str, dict[str, int]]] | None = None
              ) -> dict[str, dict[str, Any]]:
    """Per condition and split: successes and episodes pooled over seeds with the Wilson interval, and the per-seed
    rates' mean and std; ``by_kind`` (condition -> :func:`heldout_by_kind`) is carried along."""
    out: dict[str, dict[str, Any]] = {}
    for condition, runs in finals.items():
        out[condition] = {"seeds": len(runs)}
        if by_kind and by_kind.get(condition):
            out[condition]["heldout_by_kind"] = by_kind[condition]
        for split in SPLITS:
            rates, wins, n = [], 0, 0
            for m in runs:
                if f"{split}/success_rate" not in m:
                    continue
                valid = int(m[f"{split}/episodes"] - m.get(f"{split}/infra_errors", 0))
                rates.append(m[f"{split}/success_rate"])
                wins, n = wins + round(m[f"{split}/success_rate"] * valid), n + valid
            if not rates:
                continue
            low, high = wilson(wins, n)
            out[condition][split] = {
                "successes": wins, "episodes": n, "rate": wins / n if n else 0.0, "low": low, "high": high,
                "per_seed": rates, "mean": statistics.fmean(rates),
                "std": statistics.stdev(rates) if len(rates) > 1 else 0.0}
    return out


def study_table(summary: dict[str, dict[str, Any]]) -> str:
    """The summary as a markdown table: one row per condition."""
    kinds = sorted({k for cell in summary.values() for k in cell.get("heldout_by_kind", {})})
    rows = ["| condition | held-out success, pooled [95% CI] | held-out per seed (mean ± std) | "
            + "".join(f"held-out {k} | " for k in kinds) + "training-task success [95% CI] |",
            "|---|---|---|" + "---|" * len(kinds) + "---|"]
    for condition in [c for c in CONDITIONS if c in summary]:
        cells = [condition]
        held, train = summary[condition].get("eval_heldout"), summary[condition].get("eval")
        cells.append(_rate(held))
        cells.append(f"{', '.join(f'{r:.2f}' for r in held['per_seed'])} ({held['mean']:.3f} ± {held['std']:.3f})"
                     if held else "–")
        for kind in kinds:
            cell = summary[condition].get("heldout_by_kind", {}).get(kind)
            cells.append(f"{cell['successes']}/{cell['episodes']}" if cell else "–")
        cells.append(_rate(train))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _rate(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "–"
    return f"{cell['rate']:.3f} [{cell['low']:.3f}, {cell['high']:.3f}] ({cell['successes']}/{cell['episodes']})"


def run_study(config: TrainConfig, seeds: int, progress: bool = True,
              train_fn: Callable[[TrainConfig], Any] | None = None) -> dict[str, dict[str, Any]]:
    """Run every condition over ``seeds`` seeds (see the module doc); write and return the summary."""
    if train_fn is None:
        from repogym.trainer.train import train

        def train_fn(c: TrainConfig) -> Any:
            return train(c, progress=progress)

    finals: dict[str, list[dict[str, Any]]] = {c: [] for c in CONDITIONS}
    runs: dict[str, list[str]] = {c: [] for c in CONDITIONS}
    base: str | None = config.model.path
    demonstrations = config.sft.trajectories
    for seeded in seed_configs(config, seeds):
        if base is not None:
            seeded = dataclasses.replace(seeded, model=dataclasses.replace(seeded.model, path=base))
        if demonstrations is not None:
            seeded = dataclasses.replace(seeded, sft=dataclasses.replace(seeded.sft, trajectories=demonstrations))
        for condition in CONDITIONS:
            run = condition_configs(seeded)[condition]  # after sft_only, the arms read its demonstrations
            step = run.train.steps
            if final_eval(run.run_dir, step) is None:
                print(f"study: seed {seeded.seed}, {condition} -> {run.run_dir}", flush=True)
                train_fn(run)
            final = final_eval(run.run_dir, step)
            if final is None:
                raise RuntimeError(f"study: {run.run_dir} finished without its evaluation at step {step}")
            finals[condition].append(final)
            runs[condition].append(run.run_dir)
            if condition == "sft_only" and demonstrations is None:
                # The SFT data is the same for every arm and seed: collected once, read back from its trajectories.
                collected = Path(run.run_dir) / "trajectories" / "sft"
                if any(collected.glob("*.jsonl")):
                    demonstrations = str(collected / "*.jsonl")
                    seeded = dataclasses.replace(seeded, sft=dataclasses.replace(seeded.sft, trajectories=demonstrations))
        # Every seed starts from the same base model, as runs from one pretrained model.path do: the tiny model
        # the first seed built (before its SFT) is the others' model.path.
        base = base or str(Path(seeded.run_dir) / "sft" / "model")
    from repogym.envs.tasks.suites import load_suite

    kinds = {t.instance_id: t.extra["heldout"] for name in config.heldout.suites for t in load_suite(name)
             if "heldout" in t.extra}
    summary = summarize(finals, {c: heldout_by_kind(dirs, kinds) for c, dirs in runs.items()})
    root = Path(config.run_dir)
    (root / "study.json").write_text(json.dumps({"seeds": seeds, "base_seed": config.seed,
                                                 "steps": config.train.steps, "conditions": summary}, indent=1))
    (root / "study.md").write_text(study_table(summary) + "\n")
    return summary


__all__ = ["CONDITIONS", "condition_configs", "final_eval", "heldout_by_kind", "run_study", "study_table", "summarize"]
