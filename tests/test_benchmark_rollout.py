"""benchmarks/rollout.py --llm against a scripted OpenAI-compatible server (the real-model run is vLLM's: the
README's number comes from `.venv-vllm/bin/python -m benchmarks.rollout --llm`)."""

from __future__ import annotations

import json

import pytest

from test_llm_agent import FakeServer, tool_call_reply


@pytest.mark.slow
def test_llm_throughput_plays_the_first_tasks_against_a_server_and_prints_episodes_per_minute(capsys):
    from benchmarks.rollout import main

    fake = FakeServer()
    try:
        fake.script = [tool_call_reply("submit", {}, f"call_{i}", (10, 5)) for i in range(2)]
        assert main(["--llm", "--base-url", fake.base_url, "--model", "served-name", "--limit", "2",
                     "--concurrency", "1", "--sandbox", "local", "--max-tokens", "32", "--json"]) == 0
    finally:
        fake.close()
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 2 and result["infra_errors"] == 0 and result["server_start_s"] == 0
    assert result["episodes_per_min"] > 0 and result["mean_turns"] == 1 and result["mean_tokens"] == 15
    assert result["resolved_rate"] == 0  # submitted at once: the empty patch, graded
    assert len(fake.requests) == 2
    assert all(r["model"] == "served-name" and r["max_tokens"] == 32 for r in fake.requests)
