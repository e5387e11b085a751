"""``repogym train``: run (or resume) a training run from a config file. Ctrl-C checkpoints the last finished step
and prints the command that resumes it."""

from __future__ import annotations

import shlex
import sys


def add_parser(sub) -> None:
    parser = sub.add_parser("train", help="train a policy with RL (GRPO/PPO, SFT warm start) from a config file",
                            description="Train from a YAML config (see configs/). A run folder that holds a "
                                        "checkpoint is resumed. Metrics: RUN_DIR/metrics.jsonl and RUN_DIR/tb (and "
                                        "W&B with logging.wandb). Ctrl-C saves a checkpoint of the last finished "
                                        "step and prints the command that resumes the run; a second Ctrl-C exits "
                                        "at once.")
    parser.add_argument("--config", required=True, help="YAML config file (e.g. configs/tiny-cpu.yaml)")
    parser.add_argument("--run-dir", default=None, help="run folder (default: the config's run_dir)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--seeds", type=int, default=1,
                        help="train the config over this many seeds (RUN_DIR/seed-I, seed+I each) and print the "
                             "curves' mean ± std over them; written to RUN_DIR/seeds.json")
    parser.add_argument("--controls", action="store_true",
                        help="the transfer study: per seed, the SFT warm start alone, then RL and the sft_continue "
                             "and shuffled_rewards controls from it; prints held-out success per condition with "
                             "95%% intervals (RUN_DIR/study.md, study.json; see docs/training.md)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="config overrides, e.g. train.steps=5 fleet.workers=1 learner.lr=1e-4")
    parser.set_defaults(func=run)


def resume_command(args, run_dir: str) -> str:
    """The command line that resumes what ``args`` started in ``run_dir`` (the same config and overrides)."""
    words = ["repogym", "train", "--config", args.config, "--run-dir", run_dir]
    if args.seeds != 1:
        words += ["--seeds", str(args.seeds)]
    if args.controls:
        words.append("--controls")
    return shlex.join(words + list(args.overrides))


def run(args) -> int:
    from repogym.trainer.config import load_config
    from repogym.trainer.train import TrainingInterrupted

    overrides = list(args.overrides)
    if args.run_dir:
        overrides.append(f"run_dir={args.run_dir}")
    config = load_config(args.config, overrides)
    try:
        return _train(args, config)
    except TrainingInterrupted as stop:
        what = f"step {stop.step} of {config.train.steps}" + (": the SFT warm start" if stop.step == 0 else "")
        kept = (f"kept: {stop.checkpoint} ({what})" if stop.checkpoint is not None
                else "kept: nothing (no step had finished)")
        print(f"{kept}\nresume with: {resume_command(args, config.run_dir)}", file=sys.stderr)
        return 130


def _train(args, config) -> int:
    from repogym.envs.core.errors import ConfigError
    from repogym.trainer.checkpoint import latest_checkpoint
    from repogym.trainer.train import train

    if args.seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {args.seeds}")
    if args.controls:
        from repogym.trainer.study import run_study, study_table

        print(study_table(run_study(config, args.seeds, progress=not args.no_progress)))
        print(f"written to {config.run_dir}/study.md and study.json; runs: {config.run_dir}/seed-*/<condition>")
        return 0
    if args.seeds > 1:
        from repogym.trainer.seeds import run_seeds, spread_table

        summary = run_seeds(config, args.seeds, progress=not args.no_progress)
        print(spread_table(summary))
        print(f"curves over {args.seeds} seeds: {config.run_dir}/seeds.json; runs: {config.run_dir}/seed-*")
        return 0
    previous = latest_checkpoint(config.run_dir)
    if previous:
        print(f"resuming {config.run_dir} from {previous.name}")
    last = train(config, progress=not args.no_progress)
    shown = {k: last[k] for k in ("step", "rollout/success_rate", "rollout/reward_mean", "eval/success_rate")
             if k in last}
    print("finished:", ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()))
    print(f"metrics: {config.run_dir}/metrics.jsonl, TensorBoard: {config.run_dir}/tb")
    return 0
