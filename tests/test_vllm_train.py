"""A training run on the real vLLM (its CPU build, in .venv-vllm): engines as Ray actors, the weights streamed to
them after every update over the sync group, and rollout workers that never receive weights."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.ray]

from repogym.trainer.config import TrainConfig  # noqa: E402
from repogym.trainer.train import Trainer  # noqa: E402
from test_train import _config as _train_config, _metrics  # noqa: E402

TASKS = ["repogym__tablekit-center-odd-padding"]


def _config(run_dir: Path, steps: int) -> TrainConfig:
    """test_train's tiny run (head_dim 32: vLLM's CPU attention kernels refuse 16) on one task, served by vLLM."""
    return _train_config(run_dir, env={"max_turns": 2}, curriculum={"task_ids": TASKS},
                         agent={"max_new_tokens": 24}, algorithm={"name": "grpo", "options": {"group_size": 2}},
                         learner={"lr": 1e-3, "micro_batch_size": 4, "device": "cpu"},
                         inference={"engine": "vllm", "num_engines": 1, "dtype": "float32"},
                         fleet={"backend": "ray", "workers": 1, "envs_per_worker": 2}, ray={"num_cpus": 3},
                         # max_refills -1: groups without signal are trained on too (a random policy has none)
                         train={"steps": steps, "max_refills": -1, "checkpoint_every": 0, "eval_every": 0})


def test_a_grpo_run_streams_each_update_to_the_engine_and_a_dead_engine_is_replaced(tmp_path: Path):
    """A GRPO run on vLLM streams each update to the engine, and the rollout workers never receive weights. The
    engine actor is killed once step 1 is done, during the last step's rollouts: the rollout worker's call is retried
    on a replacement from the pool, the next weight sync is made over a new group, and the run finishes on the new
    engine."""
    import threading
    import time

    import ray

    run_dir = tmp_path / "run"
    trainer = Trainer(_config(run_dir, 2), progress=False)
    killed = []

    def kill_after_the_first_step():
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if (run_dir / "metrics.jsonl").exists() and (run_dir / "metrics.jsonl").read_text().strip():
                engine = trainer.weights.engine_handles()[0]
                killed.append(engine._actor_id.hex())
                ray.kill(engine, no_restart=True)
                return
            time.sleep(0.2)

    threading.Thread(target=kill_after_the_first_step, daemon=True).start()
    try:
        trainer.run()
        engine = trainer.weights.engine_handles()[0]
        engine_version = ray.get(engine.get_version.remote())
        pushed_to_workers = trainer.fleet._weights  # what a restarted rollout worker would be given
    finally:
        ray.shutdown()
    steps = _metrics(run_dir)
    assert killed and [m["step"] for m in steps] == [1, 2]
    assert engine._actor_id.hex() != killed[0]
    assert steps[-1]["charts/engine_restarts"] == 1
    # The replacement started at version 0 and was synced since.
    assert engine_version == 2 == steps[-1]["charts/policy_version"]
    assert all(m["rollout/infra_errors"] == 0 for m in steps)  # the lost call was retried, not dropped
    # Every update went to the engine as bf16 buckets: two bytes per parameter of the tiny model.
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run_dir / "model")
    elements = sum(v.numel() for v in model.state_dict().values())
    assert all(m["weight_sync/bytes"] == 2 * elements for m in steps)
    assert all(m["weight_sync/seconds"] > 0 for m in steps)
    assert pushed_to_workers is None  # the rollout workers only call the engine: no weights went to them
