"""Long contexts, measured side by side in one run.

1. Learner: time and peak memory of one GRPO step of the tiny model versus sequence length (1k to 8k
   tokens), with and without gradient checkpointing; each length in a fresh process so peaks are its own
   (on GPU, when there is one: ``torch.cuda.max_memory_allocated``; on CPU: the process's peak RSS above
   its level after loading the model).
2. Context policies: on recorded trajectories of the builtin long-horizon tasks (a scripted explorer
   reads the files the fix touches, searches, runs the tests, then applies the gold patch and submits),
   the prompt tokens of every turn under ``full``, ``window`` and ``summary``, summed over the episode (the
   cost without a prefix cache) and at the last turn (the context needed), as ratios to ``full``. The
   summary is a stand-in of fixed size (``--summary-tokens``), as no model writes it here.

Run from the repository root:
``python -m benchmarks.long_context [--lengths 1024 2048 4096 8192] [--tasks N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

CORPUS = ["def clamp(x, low, high):\n    return max(low, min(x, high))\n", "<tool_call>{\"name\": \"bash\"}</tool_call>",
          "error (parse_error): invalid JSON", "FAILED tests/test_ops.py::test_clamp - assert 0 == 10"] * 20


def _tokenizer():
    from repogym.trainer.tiny import build_tokenizer
    return build_tokenizer(CORPUS, 512)


# -- 1. learner step versus length ----------------------------------------------------------------------

def _learner_point(length: int, checkpointing: bool, queue) -> None:
    import torch

    from repogym.trainer.algorithms.common import Sample
    from repogym.trainer.algorithms.grpo import GRPO, GRPOConfig
    from repogym.trainer.learner import Learner, LearnerConfig
    from repogym.trainer.tiny import TinyModelConfig, build_tiny_model

    tokenizer = _tokenizer()
    model = build_tiny_model(tokenizer, TinyModelConfig(vocab_size=512, max_position_embeddings=8192))
    learner = Learner(model, LearnerConfig(lr=1e-4, micro_batch_size=2, gradient_checkpointing=checkpointing),
                      pad_id=tokenizer.pad_token_id or 0)
    gen = torch.Generator().manual_seed(length)
    ids = torch.randint(5, len(tokenizer), (2, length), generator=gen).tolist()
    # A long prompt and a generated tail of a quarter of it: the shape of a late turn of a long episode.
    mask = [0] * (length - length // 4) + [1] * (length // 4)
    samples = [Sample(i, mask, [-1.0 if m else 0.0 for m in mask], reward=r, meta={"episode": k})
               for k, (i, r) in enumerate(zip(ids, (1.0, 0.0)))]
    algorithm = GRPO(GRPOConfig())
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        learner.train_step(algorithm.prepare([list(samples)]), algorithm)
        times.append(time.perf_counter() - start)
    peak = (torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available()
            else (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)
    queue.put({"length": length, "checkpointing": checkpointing, "step_s": statistics.median(times),
               "peak_mib": peak, "device": "cuda" if torch.cuda.is_available() else "cpu"})


def learner_curve(lengths: list[int]) -> list[dict]:
    """One point per (length, checkpointing), each measured in a fresh process."""
    ctx = mp.get_context("spawn")
    points = []
    for length in lengths:
        for checkpointing in (False, True):
            queue = ctx.Queue()
            proc = ctx.Process(target=_learner_point, args=(length, checkpointing, queue))
            proc.start()
            points.append(queue.get(timeout=1800))
            proc.join()
    return points


# -- 2. prompt tokens under each context policy ---------------------------------------------------------

def explorer_actions(task) -> list[str]:
    """A scripted explorer's calls for ``task``: read what the fix touches and its tests, search, run the tests,
    look again, then apply the gold patch, test and submit (a long, output-heavy but honest episode)."""
    from repogym.envs.tasks.patches import touched_paths

    def call(name, **arguments):
        return json.dumps({"name": name, "arguments": arguments})

    files = [p for p in touched_paths(task.patch) if p]
    tests = sorted({t.split("::")[0] for t in task.PASS_TO_PASS})[:3]
    names = re.findall(r"^[-+ ].*?def (\w+)", task.patch, re.M)[:3] or ["def "]
    actions = [call("bash", command="ls -R | head -80"), call("bash", command="cat README.md 2>/dev/null | head -60")]
    actions += [call("view", path=p) for p in files + tests]
    actions += [call("search", pattern=n) for n in names]
    actions += [call("run_tests", tests=tests), call("bash", command="git log --oneline | head")]
    actions += [call("view", path=p) for p in files]
    return actions + [call("apply_patch", patch=task.patch), call("run_tests", tests=tests), call("submit")]


def record_trajectories(tasks, out: Path, sandbox: str) -> list[Path]:
    from repogym.agents.replay import ReplayAgent
    from repogym.agents.rollout import run_episode
    from repogym.envs.repo_env import EnvConfig, RepoTaskEnv

    paths = []
    env = RepoTaskEnv(tasks=tasks, sandbox=sandbox, config=EnvConfig(max_turns=60, eval_pool_size=0))
    try:
        for task in tasks:
            path = out / f"{task.instance_id}.jsonl"
            run_episode(env, ReplayAgent(explorer_actions(task)), task_id=task.instance_id, trajectory=path)
            paths.append(path)
    finally:
        env.close()
    return paths


def history_of(trajectory) -> list[dict]:
    """The chat history an agent would have kept for a trajectory (tool calls answered by tool messages)."""
    history = [{"role": "system", "content": "You are a software engineer."},
               {"role": "user", "content": trajectory.header["observation"]}]
    for t, step in enumerate(trajectory.steps):
        action = json.loads(step["action"])
        history.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{t}", "type": "function",
                        "function": {"name": action["name"], "arguments": json.dumps(action["arguments"])}}]})
        history.append({"role": "tool", "tool_call_id": f"c{t}", "content": step["observation"]})
    return history


def policy_tokens(history: list[dict], policy, count) -> list[int]:
    """Prompt tokens of every turn's prompt under ``policy``."""
    policy.reset()
    stand_in = "s " * SUMMARY_TOKENS[0]
    return [count(policy.view(history[:2 + 2 * t], summarize=lambda msgs: stand_in).messages)
            for t in range((len(history) - 2) // 2)]


SUMMARY_TOKENS = [200]


def policy_savings(paths: list[Path], keep_last: int) -> dict:
    from repogym.agents.context import FullPolicy, SummaryPolicy, WindowPolicy
    from repogym.agents.trajectory import read_trajectory

    tokenizer = _tokenizer()

    def count(messages):
        return sum(len(tokenizer.encode(str(m.get("content") or "") + json.dumps(m.get("tool_calls") or ""),
                                        add_special_tokens=False)) + 4 for m in messages)

    policies = {"full": FullPolicy(), "window": WindowPolicy(keep_last=keep_last),
                "summary": SummaryPolicy(keep_last=keep_last)}
    per_policy = {name: {"total": 0, "last": 0} for name in policies}
    turns = []
    for path in paths:
        history = history_of(read_trajectory(path))
        turns.append((len(history) - 2) // 2)
        for name, policy in policies.items():
            tokens = policy_tokens(history, policy, count)
            per_policy[name]["total"] += sum(tokens)
            per_policy[name]["last"] += tokens[-1]
    full = per_policy["full"]
    return {"episodes": len(paths), "mean_turns": statistics.fmean(turns), "keep_last": keep_last,
            "policies": {name: {**v, "total_vs_full": v["total"] / full["total"], "last_vs_full": v["last"] / full["last"]}
                         for name, v in per_policy.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--tasks", type=int, default=8, help="long-horizon builtin tasks to record (at most)")
    parser.add_argument("--keep-last", type=int, default=4, help="turns the window/summary policies keep whole")
    parser.add_argument("--summary-tokens", type=int, default=200, help="size of the stand-in summary")
    parser.add_argument("--sandbox", default="local")
    parser.add_argument("--skip-learner", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    SUMMARY_TOKENS[0] = args.summary_tokens

    from repogym.bench.runner import is_long_horizon
    from repogym.envs.tasks.suites import load_suite
    tasks = [t for t in load_suite("builtin") if is_long_horizon(t)][:args.tasks]
    if not tasks:
        print("no long-horizon task in the builtin suite", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        savings = policy_savings(record_trajectories(tasks, Path(tmp), args.sandbox), args.keep_last)
    curve = [] if args.skip_learner else learner_curve(args.lengths)
    if args.json:
        print(json.dumps({"learner": curve, "context": savings}, indent=2))
        return 0
    if curve:
        print(f"learner step, tiny model, batch of 2 sequences ({curve[0]['device']}):")
        print("  length  checkpointing  step_s  peak_MiB")
        for p in curve:
            print(f"  {p['length']:6d}  {str(p['checkpointing']):>13}  {p['step_s']:6.2f}  {p['peak_mib']:8.0f}")
        by = {(p["length"], p["checkpointing"]): p for p in curve}
        lo, hi = min(args.lengths), max(args.lengths)
        print(f"  ratios {hi}/{lo} tokens: step time {by[hi, False]['step_s'] / by[lo, False]['step_s']:.1f}x, "
              f"peak memory {by[hi, False]['peak_mib'] / max(by[lo, False]['peak_mib'], 1):.1f}x; "
              f"checkpointing at {hi}: memory {by[hi, True]['peak_mib'] / max(by[hi, False]['peak_mib'], 1):.2f}x, "
              f"time {by[hi, True]['step_s'] / by[hi, False]['step_s']:.2f}x")
    s = savings
    print(f"\nprompt tokens over {s['episodes']} long-horizon episodes ({s['mean_turns']:.1f} turns on average), "
          f"keep_last={s['keep_last']}, stand-in summary of {args.summary_tokens} tokens:")
    print("  policy   all turns  vs full   last turn  vs full")
    for name, v in s["policies"].items():
        print(f"  {name:8s} {v['total']:10d}  {v['total_vs_full']:6.2f}  {v['last']:10d}  {v['last_vs_full']:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
