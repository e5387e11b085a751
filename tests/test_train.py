"""Training runs end to end on real sandboxes: config handling, exact resume, worker loss, async staleness."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from repogym.envs.core.errors import ConfigError
from repogym.trainer.config import TrainConfig, from_dict, load_config, to_dict
from repogym.trainer.train import Trainer

CONFIGS = Path(__file__).parent.parent / "configs"
TASKS = ["repogym__tablekit-center-odd-padding", "repogym__tablekit-zero-header-label"]


def _config(run_dir: Path, **sections) -> TrainConfig:
    data = {
        "seed": 0, "run_dir": str(run_dir),
        "model": {"tiny": {"vocab_size": 2048, "hidden_size": 128, "intermediate_size": 256, "num_layers": 2,
                           "num_heads": 4, "num_kv_heads": 2, "max_position_embeddings": 4096}},
        "env": {"sandbox": "local", "max_turns": 3, "reward": "process", "eval_timeout": 300, "command_timeout": 30,
                "analyze_final_diff": False},
        "curriculum": {"suites": {"builtin": 1.0}, "task_ids": TASKS},
        "agent": {"temperature": 1.0, "max_new_tokens": 160, "tools": ["edit", "submit"]},
        "algorithm": {"name": "grpo", "options": {"group_size": 4}},
        "sft": {"steps": 0},
        "learner": {"lr": 5e-4, "micro_batch_size": 8},
        "fleet": {"backend": "local"},
        "train": {"steps": 2, "tasks_per_step": 1, "max_refills": 2, "checkpoint_every": 1, "eval_every": 0},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values} if isinstance(values, dict) else values
    return from_dict(TrainConfig, data).check()


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# -- configs and the CLI (fast) -------------------------------------------------------------------------
def test_every_config_file_loads():
    for path in CONFIGS.glob("*.yaml"):
        load_config(path)


def test_config_errors_name_the_bad_key_and_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"train: unknown key .stepz. \(did you mean .steps.\?\); valid: .*tasks_per_step"):
        load_config(CONFIGS / "tiny-cpu.yaml", ["train.stepz=3"])
    with pytest.raises(ConfigError, match="fleet.mode"):
        load_config(None, ["fleet.mode=sometimes"])
    with pytest.raises(ConfigError, match="fleet.backend: ray"):
        load_config(None, ["inference.engine=vllm", "fleet.backend=local"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"learner\.lr: expected a number, got 'fast'"):
        load_config(None, ["learner.lr=fast"])
    config = load_config(CONFIGS / "tiny-cpu.yaml", ["train.steps=3", "learner.lr=1e-4", "fleet.workers=1"])
    assert (config.train.steps, config.learner.lr, config.fleet.workers) == (3, 1e-4, 1)


def test_the_learner_holds_ray_resources_whenever_an_engine_could_land_on_its_gpu():
    from repogym.trainer.train import learner_on_ray

    vllm = ["inference.engine=vllm", "fleet.backend=ray"]
    assert not learner_on_ray(load_config(None), cuda=True)  # hf engines live in the rollout workers
    assert not learner_on_ray(load_config(None, vllm), cuda=False)
    assert learner_on_ray(load_config(None, vllm), cuda=True)
    assert not learner_on_ray(load_config(None, vllm + ["learner.device=cpu"]), cuda=True)
    assert learner_on_ray(load_config(None, ["fleet.backend=ray", "learner.world_size=2"]), cuda=False)
    with pytest.raises(ConfigError, match="world_size > 1 runs"):
        load_config(None, ["learner.world_size=2", "fleet.backend=local"])
    with pytest.raises(ConfigError, match="gpus_per_rank"):
        load_config(None, vllm + ["learner.gpus_per_rank=0"])


def test_the_env_section_is_the_envs_own_config_with_its_defaults(tmp_path):
    from repogym.envs.repo_env import EnvConfig
    from repogym.envs.rewards.components import RewardConfig
    from repogym.envs.sandbox import SandboxConfig

    assert TrainConfig().env == EnvConfig() and load_config(None).env == EnvConfig()
    assert load_config(None, ["env.max_turns=4"]).env == EnvConfig(max_turns=4)
    with pytest.raises(ConfigError, match=r"env: unknown key 'max_turnz' \(did you mean 'max_turns'\?\); valid: .*max_turns"):
        load_config(None, ["env.max_turnz=4"])
    with pytest.raises(ConfigError, match=r"env\.sandbox_config: unknown key 'memroy' \(did you mean"):
        load_config(None, ["env.sandbox_config.memroy=4g"])
    with pytest.raises(ConfigError, match=r"env: max_turns must be >= 1, got 0"):
        load_config(None, ["env.max_turns=0"])
    # Non-scalar fields: a nested dataclass, a tuple, a preset name or a mapping for the reward.
    env = load_config(None, ["env.sandbox_config.memory=4g", "env.sandbox_config.hidden_paths=[/a, /b]",
                             "env.reward=process", "env.eval_timeout=1e2"]).env
    assert env.sandbox_config == SandboxConfig(memory="4g", hidden_paths=("/a", "/b"))
    assert env.reward == RewardConfig.preset("process") and env.eval_timeout == 100.0
    env = load_config(None, ["env.reward={weights: {tests: 1.0, format: 0.5}}"]).env
    assert env.reward == RewardConfig(weights={"tests": 1.0, "format": 0.5})
    # A token budget counts with the policy's tokenizer, which the rollout workers fill in.
    assert load_config(None, ["env.max_observation_tokens=500"]).env.tokenizer == "policy"
    # The run folder's config.yaml (plain data) loads back to the same config.
    config = load_config(CONFIGS / "tiny-cpu.yaml", ["env.reward=process"])
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump(to_dict(config), sort_keys=False))
    assert load_config(saved) == config


def test_shipped_configs_say_what_they_change_from_the_env_defaults():
    tiny = load_config(CONFIGS / "tiny-cpu.yaml").env
    assert (tiny.sandbox, tiny.max_turns, tiny.eval_timeout, tiny.command_timeout, tiny.analyze_final_diff) == (
        "local", 3, 120, 30, False)


def test_the_fleets_and_worker_specs_are_typed(tmp_path):
    from repogym.envs.repo_env import EnvConfig
    from repogym.envs.tasks.suites import find_task
    from repogym.trainer.fleet import Fleet, LocalFleet, RayFleet, WorkerSpec

    task = find_task(TASKS[0], "builtin")
    with pytest.raises(TypeError, match="expected an EnvConfig, got dict"):
        WorkerSpec(tasks=[task], env={"sandbox": "local"})
    fleet = LocalFleet(WorkerSpec(tasks=[task], env=EnvConfig(sandbox="local", max_turns=4), agent="null"))
    assert isinstance(fleet, Fleet) and fleet.restarts == 0
    env = fleet.worker._env()
    try:
        assert env.config.max_turns == 4 and env.config.tokenizer is None  # no policy: characters only
    finally:
        env.close()
    for member in ("restarts", "in_flight", "submit", "wait", "push_weights", "close"):
        assert hasattr(RayFleet, member), member


def test_a_fleet_backend_is_found_by_name_and_a_typo_lists_the_backends(tmp_path):
    from repogym.trainer.fleet import FLEETS, LocalFleet, WorkerSpec, make_fleet

    assert FLEETS.names() == ["local", "ray"]
    with pytest.raises(ConfigError, match="unknown fleet backend 'rya': expected one of local, ray"):
        make_fleet(WorkerSpec(tasks=[]), "rya")
    assert isinstance(make_fleet(WorkerSpec(tasks=[], agent="null"), "local", workers=4), LocalFleet)
    with pytest.raises(ConfigError, match="fleet.backend: unknown fleet backend 'rya': expected one of local, ray"):
        load_config(None, ["fleet.backend=rya"])


def test_the_weight_mover_is_chosen_by_engine_name_and_a_miss_lists_the_engines():
    from repogym.trainer.inference.weights import (
        WEIGHT_MOVERS, HFWeights, InferenceConfig, VLLMWeights, WeightMover, make_weight_mover)
    from repogym.trainer.learner import LearnerConfig

    assert WEIGHT_MOVERS.names() == ["hf", "vllm"]
    assert (HFWeights.engine_actors, VLLMWeights.engine_actors) == (False, True)
    with pytest.raises(ConfigError, match="unknown inference engine 'vlm': expected one of hf, vllm"):
        make_weight_mover(InferenceConfig(engine="vlm"), LearnerConfig(), "/m", 0)
    with pytest.raises(ConfigError, match="inference.engine: unknown inference engine 'vlm': expected one of hf, vllm"):
        load_config(None, ["inference.engine=vlm"])

    # hf: the learner's state goes to the fleet's in-process engines; no engine actors, nothing to start.
    class Fleet:
        pushed: list = []

        def push_weights(self, state, version):
            self.pushed.append((state, version))

    class Learner:
        def policy_state(self):
            return {"w": torch.ones(2)}

    mover = make_weight_mover(InferenceConfig(), LearnerConfig(), "/m", 0)
    assert isinstance(mover, HFWeights) and isinstance(mover, WeightMover)
    assert mover.engine_handles() == [] and mover.engine_pool() is None
    fleet = Fleet()
    metrics = mover.push(Learner(), fleet, 3)
    assert list(metrics) == ["weight_sync/seconds"] and fleet.pushed[0][1] == 3
    assert torch.equal(fleet.pushed[0][0]["w"], torch.ones(2))
    mover.close()


def test_an_algorithm_option_typo_stops_the_run_before_any_model_or_run_folder(tmp_path):
    from repogym.trainer.config import AlgorithmConfig

    with pytest.raises(ConfigError, match=r"unknown option 'group_sise' \(did you mean 'group_size'\?\)"):
        Trainer(TrainConfig(run_dir=str(tmp_path / "run"), algorithm=AlgorithmConfig("grpo", {"group_sise": 4})))
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match=r"valid options: .*group_size"):
        load_config(None, ["algorithm.options.group_sise=4"])
    with pytest.raises(ConfigError, match="algorithm sft is the warm start"):
        load_config(None, ["algorithm.name=sft"])
    with pytest.raises(ConfigError, match=r"train.max_internal_error_rate must be in \[0, 1\]"):
        load_config(None, ["train.max_internal_error_rate=2"])


class _ScriptedFleet:
    """A :class:`~repogym.trainer.fleet.Fleet` whose episodes end as scripted (``statuses``, in order; then
    ``unresolved``), each at once: the trainer's loop without sandboxes or a model."""

    restarts = 0

    def __init__(self, statuses):
        self.statuses, self.queue, self.versions = list(statuses), [], []

    @property
    def in_flight(self) -> int:
        return len(self.queue)

    def submit(self, requests) -> None:
        self.queue.extend(requests)

    def wait(self, timeout=None):
        from repogym.envs.core.status import Status
        from repogym.trainer.fleet import EpisodeOutcome

        if not self.queue:
            return []
        request = self.queue.pop(0)
        status = self.statuses.pop(0) if self.statuses else Status.UNRESOLVED
        if status == Status.INTERNAL_ERROR:
            return [EpisodeOutcome.failed(request, status, {"where": "env.step", "message": "KeyError: 'eval'"},
                                          agent="hf", worker=0)]
        return [EpisodeOutcome(request.task_id, "hf", status, 0.0, 1, 0.1, request=request)]

    def push_weights(self, state_dict, version: int) -> None:
        self.versions.append(version)

    def close(self) -> None:
        self.queue.clear()


def test_the_run_counts_internal_errors_and_stops_past_the_rate(tmp_path, monkeypatch):
    """``charts/internal_errors`` counts episodes that ended in ``internal_error`` over the run; once they are more
    than ``train.max_internal_error_rate`` of the episodes finished so far, the run stops with an error naming the
    count, the rate and where the tracebacks are."""
    from repogym.envs.core.errors import InternalError
    from repogym.envs.core.status import Status

    from repogym.trainer.tiny import TinyModelConfig, build_tiny

    model = str(build_tiny(tmp_path / "model", ["a tiny corpus: no episode is generated here"] * 4,
                           TinyModelConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=1,
                                           num_heads=2, num_kv_heads=1, copy_steps=0)))
    U, bug = Status.UNRESOLVED, Status.INTERNAL_ERROR
    # Steps of one group of 4 (no refills): 4 fine; 3 fine and a bug (1 of 8 <= 20%); then a bug (2 of 9 > 20%).
    fleet = _ScriptedFleet([U, U, U, U, U, U, U, bug, bug])
    config = _config(tmp_path / "run", model={"path": model},
                     train={"steps": 3, "tasks_per_step": 1, "max_refills": 0, "checkpoint_every": 0,
                            "max_internal_error_rate": 0.2})
    trainer = Trainer(config, progress=False)
    monkeypatch.setattr(trainer, "_make_fleet", lambda spec: fleet)
    with pytest.raises(InternalError) as stop:
        trainer.run()
    message = str(stop.value)
    assert "2 of 9 episodes ended in internal_error (22.2%, more than train.max_internal_error_rate 20.0%)" in message
    assert "'repogym.bugs'" in message and "env.step: KeyError: 'eval'" in message
    steps = _metrics(tmp_path / "run")
    assert [(m["step"], m["charts/internal_errors"]) for m in steps] == [(1, 0), (2, 1)]
    assert steps[1]["rollout/infra_errors"] == 1  # excluded from the group, never trained on
    assert fleet.versions == [0]  # the first push; no step had signal to train on

    # The default rate, 1%: the first bug in the first 100 episodes stops the run.
    default = _config(tmp_path / "default", model={"path": model},
                      train={"steps": 1, "tasks_per_step": 1, "max_refills": 0, "checkpoint_every": 0})
    assert default.train.max_internal_error_rate == 0.01
    trainer = Trainer(default, progress=False)
    monkeypatch.setattr(trainer, "_make_fleet", lambda spec: _ScriptedFleet([U, bug]))
    with pytest.raises(InternalError, match="1 of 2 episodes"):
        trainer.run()


def test_train_cli_reports_a_bad_config_without_a_traceback(tmp_path, capsys):
    from repogym.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: {name: grpo}\nlearner: {lrr: 1}\n")
    code = main(["train", "--config", str(bad), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code != 0 and "lrr" in err and "Traceback" not in err


# -- real runs (slow) ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sft_model(tmp_path_factory) -> Path:
    """A tiny model warm-started on the oracle's trajectories of TASKS (so some episodes succeed), trained once per
    session: xdist's workers (the Ray tests run on one, the others on another) share the folder their own temporary
    folders sit in, and the first to ask trains it under a lock while the others wait for it."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's folder, never older ones
    run_dir, model = root / "shared-sft-run", root / "shared-sft-run" / "sft" / "model"
    with open(root / "shared-sft-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (model / "config.json").exists():
            config = _config(run_dir, sft={"steps": 60, "batch_size": 2, "lr": 0.003, "agent": "oracle",
                                           "agent_options": {"style": "edit"}}, train={"steps": 0})
            Trainer(config, progress=False).run()
        assert (model / "config.json").exists()
    return model


@pytest.mark.slow
def test_resuming_a_run_reproduces_the_next_step_exactly(sft_model, tmp_path):
    straight = _config(tmp_path / "straight", model={"path": str(sft_model)})
    Trainer(straight, progress=False).run()
    interrupted = _config(tmp_path / "resumed", model={"path": str(sft_model)}, train={"steps": 1})
    Trainer(interrupted, progress=False).run()
    resumed = _config(tmp_path / "resumed", model={"path": str(sft_model)})
    Trainer(resumed, progress=False).run()
    a, b = _metrics(tmp_path / "straight"), _metrics(tmp_path / "resumed")
    assert [m["step"] for m in b] == [1, 2]
    assert "losses/loss" in a[1], "step 2 trained nothing: the comparison would be empty"
    for key in ("losses/loss", "losses/grad_norm", "rollout/reward_mean", "rollout/episodes", "curriculum/level"):
        assert a[1][key] == b[1][key], key


@pytest.mark.ray
@pytest.mark.slow
def test_a_killed_rollout_worker_is_replaced_and_training_goes_on(sft_model, tmp_path):
    import ray

    config = _config(tmp_path / "run", model={"path": str(sft_model)}, fleet={"backend": "ray", "workers": 2},
                     ray={"num_cpus": 2}, train={"steps": 2, "tasks_per_step": 1, "max_refills": 0})
    trainer = Trainer(config, progress=False)
    killed = []

    def kill_one():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            fleet = trainer.fleet
            if fleet is not None and getattr(fleet, "in_flight", 0) >= 2:
                ray.kill(fleet.workers[0])
                killed.append(True)
                return
            time.sleep(0.2)

    thread = threading.Thread(target=kill_one, daemon=True)
    thread.start()
    try:
        last = trainer.run()
    finally:
        ray.shutdown()
    assert killed and last["step"] == 2
    steps = _metrics(tmp_path / "run")
    assert max(m["charts/worker_restarts"] for m in steps) >= 1
    assert all(m["rollout/episodes"] >= 4 for m in steps)  # every group of 4 came back, reruns included


@pytest.mark.ray
@pytest.mark.slow
def test_async_mode_never_trains_on_samples_older_than_the_bound(sft_model, tmp_path):
    import ray

    config = _config(tmp_path / "run", model={"path": str(sft_model)}, ray={"num_cpus": 2},
                     fleet={"backend": "ray", "workers": 2, "mode": "async", "max_staleness": 0},
                     train={"steps": 3, "tasks_per_step": 1, "max_refills": 4})
    try:
        Trainer(config, progress=False).run()
    finally:
        ray.shutdown()
    steps = _metrics(tmp_path / "run")
    assert len(steps) == 3
    assert all(m.get("rollout/staleness_max", 0) <= 0 for m in steps)
    # Groups kept generating through the learner's updates, so some were too old and were dropped.
    assert sum(m["rollout/dropped_stale_groups"] for m in steps) > 0


@pytest.mark.ray
@pytest.mark.slow
def test_a_learner_sharded_over_two_ray_ranks_trains_checkpoints_and_resumes(sft_model, tmp_path):
    """learner.world_size 2: two Ray actors (gloo on CPU) hold the FSDP2-sharded policy; the rollout worker gets
    the gathered weights, and a checkpoint of the full state resumes the run on two fresh ranks."""
    import ray

    sections = dict(model={"path": str(sft_model)}, ray={"num_cpus": 3}, fleet={"backend": "ray", "workers": 1},
                    learner={"lr": 5e-4, "micro_batch_size": 2, "world_size": 2})
    try:
        # Refills enough that a step almost never ends with every group's rewards equal (then nothing trains).
        Trainer(_config(tmp_path / "run", train={"steps": 1, "max_refills": 8}, **sections), progress=False).run()
        Trainer(_config(tmp_path / "run", train={"max_refills": 8}, **sections), progress=False).run()
    finally:
        ray.shutdown()
    steps = _metrics(tmp_path / "run")
    assert [m["step"] for m in steps] == [1, 2]
    assert all("losses/loss" in m and m["charts/policy_version"] == m["step"] for m in steps)
    # The second run resumed from step 1's checkpoint: its model is not the one it was given.
    from repogym.trainer.checkpoint import latest_checkpoint, load_checkpoint

    state = load_checkpoint(latest_checkpoint(tmp_path / "run"))["learner"]
    from transformers import AutoModelForCausalLM

    start = AutoModelForCausalLM.from_pretrained(sft_model).state_dict()
    assert set(state["model"]) == set(start)
    assert any(not torch.equal(state["model"][k].float(), start[k].float()) for k in start)


# -- held-out evaluation and controls (issue 21) ----------------------------------------------------------
HELDOUT = "repogym__tablekit-zero-header-label"


def test_the_shuffled_reward_control_permutes_the_rewards():
    from repogym.trainer.train import shuffled_rewards

    rewards = [i / 10 for i in range(10)]
    moved = shuffled_rewards(rewards, seed=3)
    assert sorted(moved) == rewards and moved != rewards
    assert shuffled_rewards(rewards, seed=3) == moved  # seeded: a rerun shuffles alike
    with pytest.raises(ConfigError, match="train.control"):
        load_config(None, ["train.control=shuffle"])
    with pytest.raises(ConfigError, match="sft_continue"):
        load_config(None, ["train.control=sft_continue", "sft.steps=0"])
    # From a warm-started model (model.path), continued SFT needs no warm start of its own.
    assert load_config(None, ["train.control=sft_continue", "sft.steps=0", f"model.path={Path(__file__).parent}"])
    from repogym.trainer.config import HeldoutConfig
    from repogym.trainer.train import heldout_tasks

    with pytest.raises(ConfigError, match="heldout.task_ids"):
        heldout_tasks(HeldoutConfig(suites={"builtin": 1.0}, task_ids=["nope"]))
    assert [t.instance_id for t in heldout_tasks(HeldoutConfig({"builtin": 1.0}, [HELDOUT]))] == [HELDOUT]
    assert heldout_tasks(HeldoutConfig()) == []


@pytest.mark.slow
def test_held_out_tasks_are_evaluated_and_never_reach_the_learner(sft_model, tmp_path, monkeypatch):
    """The held-out task is listed in the training curriculum too: the split takes it out. Every batch the learner
    gets is free of it, and each evaluation reports both splits with intervals and pass@k."""
    config = _config(tmp_path / "run", model={"path": str(sft_model)},
                     curriculum={"task_ids": TASKS},  # HELDOUT is one of them
                     heldout={"suites": {"builtin": 1.0}, "task_ids": [HELDOUT]},
                     train={"steps": 2, "eval_every": 1, "eval_samples": 2, "control": "shuffled_rewards"})
    trainer = Trainer(config, progress=False)
    assert HELDOUT not in {t.instance_id for t in trainer.tasks}
    seen: list[str] = []
    original = trainer.learner.train_step

    def spy(samples, algorithm):
        seen.extend(s.task_id for s in samples)
        return original(samples, algorithm)

    monkeypatch.setattr(trainer.learner, "train_step", spy)
    trainer.run()
    assert seen and HELDOUT not in seen
    steps = _metrics(tmp_path / "run")
    for m in steps:  # steps 0 (before RL), 1 and 2
        for split, tasks in (("eval", 1), ("eval_heldout", 1)):
            assert m[f"{split}/episodes"] == 2 * tasks
            assert m[f"{split}/success_low"] <= m[f"{split}/success_rate"] <= m[f"{split}/success_high"]
            assert 0 <= m[f"{split}/pass@1"] <= m[f"{split}/pass@2"] <= 1
    assert all("control/rewards_moved" in m for m in steps if m["step"] > 0)


@pytest.mark.slow
def test_the_sft_continue_control_makes_each_step_an_sft_update(tmp_path):
    config = _config(tmp_path / "run", sft={"steps": 4, "batch_size": 2, "lr": 0.003, "agent": "oracle",
                                            "agent_options": {"style": "edit"}},
                     train={"steps": 2, "control": "sft_continue", "eval_every": 0})
    Trainer(config, progress=False).run()
    steps = _metrics(tmp_path / "run")
    assert [m["step"] for m in steps] == [1, 2]
    assert all("sft/loss" in m and "rollout/episodes" not in m and m["charts/policy_version"] == m["step"]
               for m in steps)


def test_the_study_runs_each_condition_from_one_warm_start_per_seed_and_pools_them(tmp_path):
    """Arms from the seed's SFT export, a control each, evaluated once at the end; finished arms are not rerun; the
    summary pools each condition's episodes over seeds with a Wilson interval."""
    from repogym.trainer.study import CONDITIONS, condition_configs, run_study

    config = _config(tmp_path / "study", sft={"steps": 5}, train={"steps": 3, "eval_every": 0})
    arms = condition_configs(config)
    warm = arms["sft_only"]
    assert (warm.train.steps, warm.sft.steps, warm.train.eval_at_start) == (0, 5, True) and warm.train.eval_every
    for name, control in (("rl", "none"), ("sft_continue", "sft_continue"), ("shuffled_rewards", "shuffled_rewards")):
        arm = arms[name]
        assert arm.model.path == str(tmp_path / "study" / "sft" / "sft" / "model") and arm.sft.steps == 0
        assert (arm.train.control, arm.train.steps, arm.train.eval_every, arm.train.eval_at_start) == (control, 3, 3,
                                                                                                        False)
        arm.check()
    held_out = {"sft_only": 2, "rl": 6, "sft_continue": 3, "shuffled_rewards": 2}  # successes of 10, per seed
    ran: list[str] = []
    seen_paths: list[str | None] = []
    demonstrations: list[str | None] = []

    def fake_train(run):
        ran.append(run.run_dir)
        seen_paths.append(run.model.path)
        demonstrations.append(run.sft.trajectories)
        if Path(run.run_dir).name == "sft":  # the oracle's demonstrations, as the warm start leaves them
            (Path(run.run_dir) / "trajectories" / "sft").mkdir(parents=True, exist_ok=True)
            (Path(run.run_dir) / "trajectories" / "sft" / "t.jsonl").write_text("{}\n")
        name = Path(run.run_dir).name
        arm = {"sft": "sft_only"}.get(name, name)
        wins = held_out[arm] + run.seed  # seed 1 does one better
        line = {"step": run.train.steps, "eval_heldout/episodes": 10, "eval_heldout/infra_errors": 0,
                "eval_heldout/success_rate": wins / 10, "eval/episodes": 4, "eval/success_rate": 0.5}
        Path(run.run_dir).mkdir(parents=True, exist_ok=True)
        (Path(run.run_dir) / "metrics.jsonl").write_text(json.dumps(line) + "\n")

    summary = run_study(config, seeds=2, train_fn=fake_train)
    assert len(ran) == 8 and list(summary) == list(CONDITIONS)
    assert Path(ran[4]).name == "sft" and seen_paths[4] == str(tmp_path / "study" / "seed-0" / "sft" / "model")
    # Demonstrations are collected once (the first warm start) and read back by every later run.
    assert demonstrations[0] is None
    assert set(demonstrations[1:]) == {str(tmp_path / "study" / "seed-0" / "sft" / "trajectories" / "sft" / "*.jsonl")}
    rl = summary["rl"]["eval_heldout"]
    assert (rl["successes"], rl["episodes"], rl["per_seed"]) == (13, 20, [0.6, 0.7])
    assert rl["low"] < 0.65 < rl["high"] and rl["std"] == pytest.approx(0.0707, abs=1e-3)
    table = (tmp_path / "study" / "study.md").read_text()
    assert "| rl | 0.650 [" in table and "(13/20)" in table
    assert json.loads((tmp_path / "study" / "study.json").read_text())["conditions"]["sft_only"]["seeds"] == 2
    run_study(config, seeds=2, train_fn=fake_train)  # every arm holds its final evaluation: nothing reruns
    assert len(ran) == 8
    with pytest.raises(ConfigError, match="train.steps"):
        condition_configs(_config(tmp_path / "x", sft={"steps": 5}, train={"steps": 0}))


def test_held_out_success_is_split_by_why_the_task_is_held_out(tmp_path):
    from repogym.trainer.study import heldout_by_kind

    folder = tmp_path / "run" / "trajectories" / "eval_heldout"
    folder.mkdir(parents=True)
    for name, status in (("a.s1", "resolved"), ("a.s2", "unresolved"), ("b.s1", "resolved"), ("c.s1", "infra_error"),
                         ("d.s1", "resolved")):
        (folder / f"{name}.jsonl").write_text(json.dumps({"type": "header"}) + "\n"
                                              + json.dumps({"type": "end", "status": status}) + "\n")
    kinds = {"a": "function", "b": "project", "c": "project"}  # d: not a held-out task of these suites
    assert heldout_by_kind([tmp_path / "run"], kinds) == {"function": {"successes": 1, "episodes": 2},
                                                          "project": {"successes": 1, "episodes": 1}}


@pytest.mark.slow
def test_sft_continue_from_a_warm_model_collects_its_demonstrations_before_the_policy_fleet(sft_model, tmp_path,
                                                                                              monkeypatch):
    """The study's control arm (model.path, no warm start of its own): the demonstrations' rollout workers must run
    before the policy's fleet takes the cluster's CPUs, or on a full Ray cluster they wait forever."""
    config = _config(tmp_path / "run", model={"path": str(sft_model)},
                     sft={"steps": 0, "batch_size": 2, "agent": "oracle", "agent_options": {"style": "edit"}},
                     train={"steps": 1, "control": "sft_continue", "eval_every": 0})
    trainer = Trainer(config, progress=False)
    order: list[str] = []
    make_fleet, collect = trainer._make_fleet, trainer.sft_samples

    def spy_fleet(spec):
        order.append("oracle fleet" if spec.agent == "oracle" else "policy fleet")
        return make_fleet(spec)

    def spy_collect():
        order.append("collect")
        return collect()

    monkeypatch.setattr(trainer, "_make_fleet", spy_fleet)
    monkeypatch.setattr(trainer, "sft_samples", spy_collect)
    trainer.run()
    assert order == ["collect", "oracle fleet", "policy fleet"]
    assert "sft/loss" in _metrics(tmp_path / "run")[-1]


def test_seed_runs_differ_in_seed_and_folder_and_their_curves_get_a_spread(tmp_path):
    from repogym.trainer.seeds import seed_configs, spread, spread_table

    configs = seed_configs(_config(tmp_path / "run"), 3)
    assert [c.seed for c in configs] == [0, 1, 2] and [c.curriculum.seed for c in configs] == [0, 1, 2]
    assert [Path(c.run_dir).name for c in configs] == ["seed-0", "seed-1", "seed-2"]
    runs = [[{"step": 0, "eval/success_rate": 0.25}, {"step": 1, "eval/success_rate": r}] for r in (0.5, 0.7, 0.9)]
    curve = spread(runs)["eval/success_rate"]
    assert curve[0] == {"mean": 0.25, "std": 0.0, "min": 0.25, "max": 0.25, "n": 3}
    assert curve[1]["mean"] == pytest.approx(0.7) and curve[1]["std"] == pytest.approx(0.2)
    assert "0.700 ± 0.200" in spread_table(spread(runs))


@pytest.mark.slow
def test_train_cli_over_seeds_prints_the_curves_spread(sft_model, tmp_path, capsys):
    from repogym.cli import main

    path = tmp_path / "config.yaml"
    config = _config(tmp_path / "run", model={"path": str(sft_model)},
                     train={"steps": 1, "eval_every": 1, "eval_samples": 1, "checkpoint_every": 0})
    path.write_text(yaml.safe_dump(to_dict(config)))
    assert main(["train", "--config", str(path), "--seeds", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "eval/success_rate" in out and "±" in out
    saved = json.loads((tmp_path / "run" / "seeds.json").read_text())
    assert saved["seeds"] == 2 and saved["curves"]["eval/success_rate"]["1"]["n"] == 2
    assert (tmp_path / "run" / "seed-1" / "metrics.jsonl").exists()
