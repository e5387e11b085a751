"""Branching GRPO versus plain GRPO on CPU, side by side in one run, at the same episode budget.

A tiny model is warm-started once (SFT on the oracle, the tiny CPU config), then the same short GRPO run is
repeated with branching off and on (``branching.at``, ``branching.group``), with the local fleet and real
sandboxes. The budget is the same number of episodes: each task's group is ``group_size`` plain episodes, or
``group_size // group`` episodes branched into ``group`` continuations each (an episode that ends before its
branch point is one episode, so the branched run may play a few fewer); no refills. Printed per setting:
episodes, branch points, generated tokens (a branch point's shared prefix counted once) in all and per episode,
the training rollouts' success rate and mean reward, the success rate of a final evaluation on the training tasks,
and the wall time. One seed on a tiny model: read the tokens per episode as the measurement, the success rates
as what this one run gave, not as a finding about branching.

Run from the repository root:
``python -m benchmarks.branching [--steps 4] [--tasks-per-step 2] [--at turn:1] [--group 2] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from repogym.trainer.config import load_config
from repogym.trainer.train import Trainer

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "tiny-cpu.yaml"


def run(overrides: list[str], run_dir: Path) -> tuple[list[dict], float]:
    """Train with ``overrides`` on the tiny CPU config; the metrics lines (step 0 included) and the wall time."""
    start = time.monotonic()
    Trainer(load_config(CONFIG, overrides + [f"run_dir={run_dir}"]), progress=False).run()
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return lines, time.monotonic() - start


def summarise(lines: list[dict], seconds: float) -> dict:
    steps = [m for m in lines if m["step"] > 0 and "rollout/episodes" in m]
    valid = sum(m["rollout/episodes"] - m["rollout/infra_errors"] for m in steps)
    tokens = sum(m.get("rollout/generated_tokens", 0) for m in steps)
    weighted = lambda key: sum(m.get(key, 0.0) * (m["rollout/episodes"] - m["rollout/infra_errors"])
                               for m in steps) / max(1, valid)
    final = lines[-1]
    return {"steps": len(steps), "episodes": valid, "branch_points": sum(m.get("rollout/branch_points", 0) for m in steps),
            "unbranched_episodes": sum(m.get("rollout/unbranched_episodes", 0) for m in steps),
            "generated_tokens": tokens, "tokens_per_episode": tokens / max(1, valid),
            "train_success": weighted("rollout/success_rate"), "train_reward": weighted("rollout/reward_mean"),
            "learner_updates": sum("losses/loss" in m for m in steps),
            "eval_success": final.get("eval/success_rate", float("nan")), "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="RL steps per setting (default 4)")
    parser.add_argument("--tasks-per-step", type=int, default=2, help="task groups per step (default 2)")
    parser.add_argument("--group-size", type=int, default=4, help="GRPO episodes per task (default 4)")
    parser.add_argument("--at", default="turn:1", help="branching.at of the branched run (default turn:1)")
    parser.add_argument("--group", type=int, default=2, help="branching.group of the branched run (default 2)")
    parser.add_argument("--sft-steps", type=int, default=120, help="SFT warm-start updates (default 120)")
    parser.add_argument("--eval-samples", type=int, default=4, help="final evaluation episodes per task (default 4)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    local = ["fleet.backend=local", "fleet.save_trajectories=false"]
    with tempfile.TemporaryDirectory(prefix="repogym-bench-") as tmp:
        root = Path(tmp)
        print("warm start (SFT on the oracle) ...", file=sys.stderr)
        run(local + [f"sft.steps={args.sft_steps}", "train.steps=0", "train.eval_every=0"], root / "sft")
        common = local + [f"model.path={root / 'sft' / 'sft' / 'model'}", "sft.steps=0",
                          f"train.steps={args.steps}", f"train.tasks_per_step={args.tasks_per_step}",
                          "train.max_refills=0", "train.checkpoint_every=0", f"train.eval_every={args.steps}",
                          "train.eval_at_start=false", f"train.eval_samples={args.eval_samples}",
                          f"algorithm.options.group_size={args.group_size}"]
        settings = {"off": ["branching.at=off"], f"{args.at} x{args.group}": [f"branching.at={args.at}",
                                                                              f"branching.group={args.group}"]}
        results = {}
        for name, overrides in settings.items():
            print(f"GRPO, branching {name} ...", file=sys.stderr)
            results[name] = summarise(*run(common + overrides, root / name.replace(" ", "_").replace(":", "")))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    names = list(results)
    print(f"{'':24}" + "".join(f"{n:>16}" for n in names))
    for key in results[names[0]]:
        cells = [results[n][key] for n in names]
        print(f"{key:24}" + "".join(f"{c:>16.3f}" if isinstance(c, float) else f"{c:>16}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
