"""Rollout throughput, measured side by side in one run: sync versus async, 1 versus N workers.

A tiny model is warm-started once (SFT on the oracle, so episodes vary and the learner really updates),
then the same short GRPO run is repeated under each fleet setting on a local Ray cluster with real
sandboxes. Printed per setting: episodes per minute over whole RL steps (rollout + learner), and the
environment-idle share (time an episode's sandbox waits on the model / episode time). Ratios are what to
read (machines here are noisy): async/sync and N/1 workers.

Run from the repository root:
``python -m benchmarks.rollout [--workers 2] [--steps 3] [--tasks-per-step 2] [--json]``.

``--oracle``: instead, the number users plan rollouts with: episodes per minute, and per minute per core, of the
whole builtin suite played by the oracle (gold patch, submit: every episode ends in a real grading) and by the null
agent (submit at once), ``repogym bench`` at ``--concurrency`` envs on ``--sandbox`` (default: the default backend).
``python -m benchmarks.rollout --oracle [--concurrency 2] [--sandbox docker] [--limit N]``.

``--llm``: the same number with a real model: the ``llm`` agent against vLLM's OpenAI server, started here from
this interpreter (run it with ``.venv-vllm/bin/python``, scripts/setup_vllm.sh) on ``--model`` (default
SmolLM2-135M-Instruct, the model shipped in a wheel; a name of ``repogym models`` or a folder), on the CPU build
where there is no GPU; or against a server already running (``--base-url``, ``--model`` its served name). Printed:
episodes per minute (and per core), turns and tokens per episode, and the server's start apart from the episodes.
``python -m benchmarks.rollout --llm [--concurrency 2] [--limit 8] [--max-turns 8] [--sandbox local]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from repogym.trainer.config import load_config
from repogym.trainer.train import Trainer

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "tiny-cpu.yaml"


def run(overrides: list[str], run_dir: Path) -> list[dict]:
    """Train with ``overrides`` on top of the tiny CPU config; the metrics lines of the RL steps."""
    Trainer(load_config(CONFIG, overrides + [f"run_dir={run_dir}"]), progress=False).run()
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [m for m in lines if m["step"] > 0]


def summarise(steps: list[dict]) -> dict:
    seconds = sum(m["charts/step_s"] for m in steps)
    return {"episodes": sum(m["rollout/episodes"] for m in steps), "seconds": seconds,
            "episodes_per_min": 60.0 * sum(m["rollout/episodes"] for m in steps) / seconds,
            "env_idle_share": statistics.fmean(m.get("rollout/env_idle_share", 0.0) for m in steps),
            "learner_share": sum(m["charts/learner_s"] for m in steps) / seconds,
            "staleness_mean": statistics.fmean(m.get("rollout/staleness_mean", 0.0) for m in steps)}


def timed_bench(config) -> tuple[Any, dict]:
    """Run ``config`` (a :class:`~repogym.bench.runner.BenchConfig`); its summary, and its episodes, seconds and
    episodes per minute (and per minute per core)."""
    import os
    import time

    from repogym.bench.runner import run_bench

    cores = len(os.sched_getaffinity(0))
    start = time.monotonic()
    report = run_bench(config)
    seconds = time.monotonic() - start
    return report.summaries[0], {"episodes": report.written, "seconds": seconds,
                                 "episodes_per_min": 60 * report.written / seconds,
                                 "episodes_per_min_per_core": 60 * report.written / seconds / cores, "cores": cores}


def oracle_throughput(concurrency: int, sandbox: str | None, limit: int | None) -> dict[str, dict]:
    """Episodes per minute (and per minute per core) of the builtin suite under the oracle and the null agent."""
    from repogym.bench.runner import BenchConfig

    results = {}
    with tempfile.TemporaryDirectory(prefix="repogym-rollout-") as tmp:
        for agent in ("oracle", "null"):
            summary, rates = timed_bench(BenchConfig(agent=agent, db=Path(tmp) / "bench.db", concurrency=concurrency,
                                                     sandbox=sandbox, limit=limit, progress=False))
            results[agent] = {**rates, "resolved_rate": summary.resolved_rate}
    return results


def llm_throughput(concurrency: int, sandbox: str | None, limit: int | None, max_turns: int, model: str,
                   base_url: str | None, max_tokens: int) -> dict:
    """Episodes per minute of the first ``limit`` builtin tasks played by the ``llm`` agent on a real model served
    by vLLM (started here unless ``base_url`` names a server)."""
    import contextlib
    import time

    from repogym.bench.runner import BenchConfig

    with tempfile.TemporaryDirectory(prefix="repogym-rollout-") as tmp, contextlib.ExitStack() as stack:
        start_s = 0.0
        if base_url is None:
            from repogym.agents.models import resolve_model
            from repogym.trainer.inference.vllm_server import VLLMServer

            model = resolve_model(model)
            started = time.monotonic()
            print(f"starting vLLM's server on {model} (a minute or more on CPU) ...", file=sys.stderr)
            server = stack.enter_context(VLLMServer(model, Path(tmp) / "server.log")).ready()
            start_s, base_url = time.monotonic() - started, server.base_url
        summary, rates = timed_bench(BenchConfig(
            agent="llm", db=Path(tmp) / "bench.db", concurrency=concurrency, sandbox=sandbox, limit=limit,
            max_turns=max_turns, progress=False,
            agent_options={"base_url": base_url, "model": model, "temperature": 1.0, "max_tokens": max_tokens}))
    return {"model": model, **rates, "server_start_s": start_s, "resolved_rate": summary.resolved_rate,
            "mean_turns": summary.mean_turns, "mean_tokens": summary.mean_tokens,
            "infra_errors": summary.infra_errors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="N, the larger fleet (default 2)")
    parser.add_argument("--steps", type=int, default=3, help="RL steps per setting (default 3)")
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--oracle", action="store_true", help="episodes/min of the builtin suite: oracle and null")
    parser.add_argument("--llm", action="store_true", help="episodes/min of the llm agent on a real model (vLLM)")
    parser.add_argument("--concurrency", type=int, default=2, help="--oracle, --llm: envs at once (default 2)")
    parser.add_argument("--sandbox", default=None, help="--oracle, --llm: the backend (default: the default one)")
    parser.add_argument("--limit", type=int, default=None,
                        help="--oracle, --llm: the first N tasks only (--llm default 8)")
    parser.add_argument("--model", default="smollm2-135m-instruct",
                        help="--llm: a model name of `repogym models` or a folder; with --base-url, the served name")
    parser.add_argument("--base-url", default=None, help="--llm: an OpenAI-compatible server's /v1 root to use")
    parser.add_argument("--max-turns", type=int, default=8, help="--llm: turns per episode (default 8)")
    parser.add_argument("--max-tokens", type=int, default=256, help="--llm: tokens per turn (default 256)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if args.llm:
        r = llm_throughput(args.concurrency, args.sandbox, args.limit or 8, args.max_turns, args.model,
                           args.base_url, args.max_tokens)
        if args.json:
            print(json.dumps(r, indent=2))
            return 0
        print(f"llm agent on {r['model']}: {r['episodes']} episodes of the builtin suite, {args.concurrency} envs, "
              f"{r['cores']} cores (server start {r['server_start_s']:.0f} s, not counted)")
        print(f"{r['episodes_per_min']:.2f} episodes/min ({r['episodes_per_min_per_core']:.2f} per core), "
              f"{r['mean_turns']:.1f} turns and {r['mean_tokens']:.0f} tokens per episode, resolved "
              f"{r['resolved_rate']:.0%}, {r['infra_errors']} infra errors")
        return 0
    if args.oracle:
        results = oracle_throughput(args.concurrency, args.sandbox, args.limit)
        if args.json:
            print(json.dumps(results, indent=2))
            return 0
        print(f"builtin suite, {args.concurrency} envs, {results['oracle']['cores']} cores")
        print(f"{'agent':<8} {'episodes':>8} {'resolved':>9} {'eps/min':>8} {'eps/min/core':>13}")
        for agent, r in results.items():
            print(f"{agent:<8} {r['episodes']:>8} {r['resolved_rate']:>9.0%} {r['episodes_per_min']:>8.1f} "
                  f"{r['episodes_per_min_per_core']:>13.1f}")
        return 0
    import ray

    ray.init(num_cpus=max(2, args.workers), include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory(prefix="repogym-bench-") as tmp:
        root = Path(tmp)
        print("warm start (SFT on the oracle) ...", file=sys.stderr)
        Trainer(load_config(CONFIG, [f"run_dir={root / 'sft'}", "train.steps=0", "train.eval_every=0"]),
                progress=False).run()
        # The warm-started policy (RUN_DIR/sft/model); RUN_DIR/model is the untrained one it started from.
        common = [f"model.path={root / 'sft' / 'sft' / 'model'}", "sft.steps=0", "train.eval_every=0",
                  "train.checkpoint_every=0", f"train.steps={args.steps}",
                  f"train.tasks_per_step={args.tasks_per_step}", "train.max_refills=0",
                  "fleet.save_trajectories=false", "fleet.max_staleness=1"]
        results = {}
        for mode in ("sync", "async"):
            for workers in (1, args.workers):
                name = f"{mode}/{workers}w"
                print(f"{name} ...", file=sys.stderr)
                steps = run(common + [f"fleet.mode={mode}", f"fleet.workers={workers}"], root / name.replace("/", "-"))
                results[name] = summarise(steps)
    ray.shutdown()
    n = args.workers
    ratios = {f"async/sync ({n}w)": results[f"async/{n}w"]["episodes_per_min"] / results[f"sync/{n}w"]["episodes_per_min"],
              "async/sync (1w)": results["async/1w"]["episodes_per_min"] / results["sync/1w"]["episodes_per_min"],
              f"{n}w/1w (sync)": results[f"sync/{n}w"]["episodes_per_min"] / results["sync/1w"]["episodes_per_min"],
              f"{n}w/1w (async)": results[f"async/{n}w"]["episodes_per_min"] / results["async/1w"]["episodes_per_min"]}
    if args.json:
        print(json.dumps({"settings": results, "ratios": ratios}, indent=2))
        return 0
    print(f"{'setting':<12} {'episodes':>8} {'eps/min':>8} {'env idle':>9} {'learner':>8} {'staleness':>9}")
    for name, r in results.items():
        print(f"{name:<12} {r['episodes']:>8} {r['episodes_per_min']:>8.1f} {r['env_idle_share']:>9.1%} "
              f"{r['learner_share']:>8.1%} {r['staleness_mean']:>9.2f}")
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
