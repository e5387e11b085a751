"""benchmarks/gpu_check.py on the real vLLM's CPU build (in .venv-vllm): the code path the GPU check takes, run small.

In its own file so scripts/test.sh can run it beside the engine tests, not after the training run (the stage's tail)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm]


def test_the_gpu_check_runs_its_code_path_on_cpu(capsys):
    """benchmarks/gpu_check.py with a tiny model on CPU: vLLM generation, the FSDP2 learner (one gloo rank) and the
    weight sync, 3 GRPO steps, its numbers printed."""
    from benchmarks.gpu_check import main

    summary = main(["--size", "tiny", "--device", "cpu", "--prompts", "2", "--group-size", "2",
                    "--prompt-tokens", "32", "--new-tokens", "16", "--json"])
    assert len(summary["steps"]) == 3
    for row in summary["steps"]:
        assert row["generated_tokens"] > 0 and row["generation_tokens_per_s"] > 0
        assert row["weight_sync_gb"] > 0 and row["learner_step_s"] > 0
        # The engine (fp32) and the learner (bf16 compute) see the same tokens nearly alike.
        assert row["sampler_k3"] < 1e-3
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith('{"parameters"')]
    assert json.loads(printed[-1])["steps"] == summary["steps"]
