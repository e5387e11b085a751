"""A new user's first hour with ``repogym train`` (issue 42): progress in every long phase, Ctrl-C that keeps the
last finished step and says how to resume, a W&B logger beside TensorBoard, and config typos caught (with the
closest key) before anything is built or written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from repogym.envs.core.errors import ConfigError
from repogym.trainer import progress
from repogym.trainer.config import TrainConfig, from_dict, load_config

TASKS = ["repogym__tablekit-center-odd-padding", "repogym__tablekit-zero-header-label"]


def _tiny(run_dir: Path, **sections) -> dict:
    """The smallest real run: a tiny model built in the run folder, short episodes, the in-process fleet."""
    data = {
        "seed": 0, "run_dir": str(run_dir),
        "model": {"tiny": {"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64, "num_layers": 1,
                           "num_heads": 2, "num_kv_heads": 1, "max_position_embeddings": 2048}},
        "env": {"sandbox": "local", "max_turns": 3, "reward": "process", "eval_timeout": 120, "command_timeout": 30,
                "analyze_final_diff": False},
        "curriculum": {"suites": {"builtin": 1.0}, "task_ids": TASKS},
        "agent": {"temperature": 1.0, "max_new_tokens": 16, "tools": ["edit", "submit"]},
        "algorithm": {"name": "grpo", "options": {"group_size": 2}},
        "sft": {"steps": 0},
        "learner": {"lr": 5e-4, "micro_batch_size": 8},
        "fleet": {"backend": "local", "save_trajectories": False},
        "train": {"steps": 1000, "tasks_per_step": 1, "max_refills": 0, "checkpoint_every": 1000, "eval_every": 0},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values} if isinstance(values, dict) else values
    return data


# -- config errors, before anything is built or written ----------------------------------------------------
@pytest.mark.parametrize("override, message", [
    ("sed=1", r"TrainConfig: unknown key 'sed' \(did you mean 'seed'\?\); valid: .*run_dir"),
    ("train.eval_evry=2", r"train: unknown key 'eval_evry' \(did you mean 'eval_every'\?\); valid: .*eval_samples"),
    ("fleet.wrokers=2", r"fleet: unknown key 'wrokers' \(did you mean 'workers'\?\)"),
    ("model.tiny.hiden_size=8", r"model\.tiny: unknown key 'hiden_size' \(did you mean 'hidden_size'\?\)"),
    ("env.max_turn=3", r"env: unknown key 'max_turn' \(did you mean 'max_turns'\?\)"),
    ("agent.temprature=1.0", r"agent: unknown key 'temprature' \(did you mean 'temperature'\?\); valid: .*top_p"),
    ("algorithm.options.group_sise=4", r"unknown option 'group_sise' \(did you mean 'group_size'\?\)"),
    ("sft.agent_options.stlye=edit",
     r"sft\.agent_options \(agent 'oracle'\) has no option 'stlye' \(did you mean 'style'\?\); its options: .*context"),
    ("sft.agent_variants=[{styl: patch}]", r"sft\.agent_variants\[0\] \(agent 'oracle'\) has no option 'styl'"),
    ("sft.agent=orcle", r"sft\.agent: unknown agent 'orcle' \(did you mean 'oracle'\?\); valid: oracle, null"),
    ("logging.wandb={projcet: x}", r"logging\.wandb: unknown key 'projcet' \(did you mean 'project'\?\)"),
    ("algorithm.options.temperature=0.5", r"algorithm\.options\.temperature \(0\.5\) must equal agent\.temperature"),
])
def test_a_typo_in_any_section_names_the_closest_key_and_the_valid_ones(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["sft.steps=10", override])  # the SFT agent's options are checked when SFT collects
    assert load_config(None, ['sft.agent="null"']).sft.agent == "null"  # no SFT: its defaults are no error


def test_config_errors_come_before_the_model_and_the_run_folder(tmp_path):
    from repogym.trainer.train import Trainer

    for sections in ({"agent": {"temperature": 0.7}},  # the algorithm samples at 1.0: checked before any model
                     {"curriculum": {"suites": {"builtin": 1.0}, "task_ids": ["repogym__tablekit-center-odd-pading"]}},
                     {"heldout": {"suites": {"builtin": 1.0}, "task_ids": ["repogym__tablekit-zero-header-lable"]}}):
        run_dir = tmp_path / "run"
        with pytest.raises(ConfigError) as error:
            Trainer(from_dict(TrainConfig, _tiny(run_dir, **sections)), progress=False)
        assert not run_dir.exists(), sections
        if "task_ids" in str(sections):
            assert "unknown task id" in str(error.value) and "(closest: repogym__tablekit-" in str(error.value)


# -- progress --------------------------------------------------------------------------------------------
def test_a_phase_is_redrawn_while_nothing_finishes_and_is_silent_without_progress(monkeypatch, capsys):
    monkeypatch.setattr(progress, "TICK_S", 0.02)
    with progress.phase(True, "eval (step 0)", total=4) as bar:
        time.sleep(0.4)  # one long episode: the elapsed time still moves
        bar.update(1)
    err = capsys.readouterr().err
    assert err.count("eval (step 0)") >= 5 and "1/4" in err
    with progress.phase(False, "eval (step 0)", total=4) as bar:
        time.sleep(0.1)
        bar.update(1)
    assert capsys.readouterr().err == ""


class _ScriptedFleet:
    """A fleet whose episodes end at once, unresolved: the trainer's loop without sandboxes or a model."""

    restarts = 0

    def __init__(self):
        self.queue = []

    @property
    def in_flight(self) -> int:
        return len(self.queue)

    def submit(self, requests) -> None:
        self.queue.extend(requests)

    def wait(self, timeout=None):
        from repogym.envs.core.status import Status
        from repogym.trainer.fleet import EpisodeOutcome

        request = self.queue.pop(0)
        return [EpisodeOutcome(request.task_id, "hf", Status.UNRESOLVED, 0.0, 1, 0.1, request=request)]

    def push_weights(self, state_dict, version: int) -> None:
        pass

    def close(self) -> None:
        self.queue.clear()


def _fake_wandb(monkeypatch) -> list:
    """A stand-in ``wandb`` module that records what a run is given (``init`` kwargs, ``log`` calls, ``finish``)."""
    import importlib.machinery
    import types

    calls: list = []

    class Run:
        def log(self, data, step):
            calls.append(("log", step, data))

        def finish(self):
            calls.append(("finish",))

    module = types.ModuleType("wandb")
    module.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    module.init = lambda **kwargs: calls.append(("init", kwargs)) or Run()
    monkeypatch.setitem(sys.modules, "wandb", module)
    return calls


@pytest.mark.slow  # a tiny model's tokenizer and weights: ~10 s
def test_a_run_shows_each_phase_and_logs_the_same_metrics_to_wandb(tmp_path, monkeypatch, capsys):
    from repogym.trainer.tiny import TinyModelConfig, build_tiny
    from repogym.trainer.train import Trainer

    calls = _fake_wandb(monkeypatch)
    model = build_tiny(tmp_path / "model", ["a tiny corpus: no episode is generated here"] * 4,
                       TinyModelConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                                       num_kv_heads=1))
    config = from_dict(TrainConfig, _tiny(tmp_path / "run", model={"path": str(model)},
                                          train={"steps": 1, "eval_every": 1, "eval_samples": 1},
                                          logging={"wandb": {"project": "p", "mode": "offline", "tags": ["t"]}}))
    trainer = Trainer(config, progress=True)
    monkeypatch.setattr(trainer, "_make_fleet", lambda spec: _ScriptedFleet())
    trainer.run()
    err = capsys.readouterr().err
    for bar in ("loading the model", "starting the rollout fleet (local, 2 worker(s))", "eval (step 0)",
                "eval (step 1)", "train:"):
        assert bar in err, bar
    (_, init), *logged, finish = calls
    assert (init["project"], init["mode"], init["tags"], init["name"]) == ("p", "offline", ["t"], "run")
    assert init["config"]["logging"]["wandb"]["project"] == "p" and finish == ("finish",)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [step for _, step, _ in logged] == [line["step"] for line in lines] == [0, 1]
    for (_, _, data), line in zip(logged, lines):  # the same names and values, but for non-numbers
        assert data == {k: v for k, v in line.items() if k != "step" and isinstance(v, (int, float))
                        and not isinstance(v, bool)}
        assert "eval/success_rate" in data


# -- Ctrl-C ------------------------------------------------------------------------------------------------
def test_the_first_interrupt_says_what_it_stops_and_keeps_and_a_second_exits_at_once(monkeypatch, capsys):
    from repogym.trainer import interrupts

    guard = interrupts.Interrupts()
    guard.doing, guard.finished = "step 4's rollouts", {"step": 3}
    with pytest.raises(KeyboardInterrupt):  # rollouts are not waited for
        guard(signal.SIGINT, None)
    assert "interrupted: stopping step 4's rollouts; saving a checkpoint of step 3... (Ctrl-C again exits at once" \
        in capsys.readouterr().err

    def exit_now(code):
        raise SystemExit(code)

    monkeypatch.setattr(interrupts.os, "_exit", exit_now)
    with pytest.raises(SystemExit) as exited:
        guard(signal.SIGINT, None)
    assert exited.value.code == 130 and "interrupted again: exiting now" in capsys.readouterr().err

    guard = interrupts.Interrupts()
    guard.finished, guard.updating = {"step": 3}, True
    guard(signal.SIGINT, None)  # mid-update: no raise, the update finishes first
    assert "finishing step 4's learner update, then saving a checkpoint of it" in capsys.readouterr().err
    with pytest.raises(KeyboardInterrupt):
        guard.check()
    guard = interrupts.Interrupts()
    with pytest.raises(KeyboardInterrupt):
        guard(signal.SIGINT, None)
    assert "no step has finished: nothing to save" in capsys.readouterr().err


# -- the real thing, in a subprocess: progress, Ctrl-C, resume ---------------------------------------------
def _start(config: Path, run_dir: Path, log: Path, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}  # SIGABRT dumps every thread's stack
    return subprocess.Popen([sys.executable, "-m", "repogym.cli", "train", "--config", str(config), "--run-dir",
                             str(run_dir), *overrides], stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


def _exit_status(proc: subprocess.Popen, log: Path, timeout: float = 120) -> int:
    """``proc``'s exit status; one that has not exited in ``timeout`` s fails the test with every thread's stack."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # faulthandler (PYTHONFAULTHANDLER) writes the stacks into the log
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        pytest.fail(f"the run did not exit {timeout:g} s after Ctrl-C; its output:\n{log.read_text()[-12000:]}")


def _wait_for(condition, what: str, proc: subprocess.Popen, log: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"waiting for {what}; output:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def _steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_ctrl_c_keeps_the_last_finished_step_and_says_how_to_resume(tmp_path):
    run_dir, config = tmp_path / "run dir", tmp_path / "tiny.yaml"  # a space: the resume command quotes it
    config.write_text(yaml.safe_dump(_tiny(run_dir, sft={"steps": 3, "batch_size": 2, "agent": "oracle",
                                                         "agent_options": {"style": "edit"}})))
    log = tmp_path / "first.log"
    proc = _start(config, run_dir, log)
    _wait_for(lambda: [s for s in _steps(run_dir) if s >= 1], "a finished step", proc, log)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    assert _exit_status(proc, log) == 130
    out = log.read_text()
    assert time.monotonic() - sent < 60, out
    # Every long phase drew its bar; the interrupt said at once what it does, then what it kept and how to resume.
    for phase_bar in ("sft: collecting oracle (style=edit) 1/1", "sft: training", "starting the rollout fleet",
                      "train:"):
        assert phase_bar in out, phase_bar
    assert "interrupted: " in out and "Traceback" not in out
    last = max(_steps(run_dir))
    kept = run_dir / "checkpoints" / f"step-{last:06d}.pt"
    assert kept.exists(), out  # no step lost, though checkpoint_every is 1000
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == kept.name
    assert f"kept: {kept} (step {last} of 1000)" in out
    resume = f"resume with: repogym train --config {config} --run-dir '{run_dir}'"
    assert resume in out, out

    # The printed command resumes from that step (no SFT again) and goes on.
    log = tmp_path / "second.log"
    proc = _start(config, run_dir, log)
    _wait_for(lambda: last + 1 in _steps(run_dir), "the resumed run's next step", proc, log)
    proc.send_signal(signal.SIGINT)
    assert _exit_status(proc, log) == 130
    out = log.read_text()
    assert f"resuming {run_dir} from {kept.name}" in out and "sft: training" not in out
    steps = _steps(run_dir)
    assert steps == list(range(1, max(steps) + 1)) and max(steps) > last  # one line per step: none lost or repeated


# -- Weights & Biases ------------------------------------------------------------------------------------
def test_wandb_missing_is_a_config_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    with pytest.raises(ConfigError, match=r'logging\.wandb needs the wandb package.*pip install "repogym\[wandb\]"'):
        load_config(None, ["logging.wandb={project: p, mode: offline}"])
    with pytest.raises(ConfigError, match="logging.wandb.mode must be one of online, offline, disabled"):
        load_config(None, ["logging.wandb={mode: sometimes}"])
    assert load_config(None).logging.wandb is None  # off by default: wandb is never imported


def _wandb_history(run_file: Path) -> list[dict]:
    """The ``history`` records of an offline W&B run file (a LevelDB-style log of protobuf records)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, chunks, records = run_file.read_bytes(), 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if pos + 7 + length > len(data):  # still being written
            break
        chunks += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or a fragmented one's last piece
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            chunks = b""
            if record.WhichOneof("record_type") == "history":
                records.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                for item in record.history.item})
    return records


@pytest.mark.slow
def test_wandb_offline_gets_the_same_metrics_as_the_jsonl_file(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from repogym.trainer.config import WandbConfig
    from repogym.trainer.metrics import MetricsLogger

    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = MetricsLogger(tmp_path / "run", tensorboard=False, wandb=WandbConfig(project="t", mode="offline"),
                           config={"seed": 3})
    logger.log(1, {"rollout/reward_mean": 0.5, "eval/success_rate": float("nan"), "losses/skipped": 1})
    logger.log(2, {"rollout/reward_mean": 0.75})
    logger.close()
    [run_file] = (tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb")
    deadline = time.monotonic() + 60
    while len(history := _wandb_history(run_file)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)  # W&B's service process writes the file after finish() returns
    assert [(h["_step"], h["rollout/reward_mean"]) for h in history] == [(1, 0.5), (2, 0.75)]
    assert history[0]["losses/skipped"] == 1 and "eval/success_rate" not in history[0]  # NaN: left out, as in TB
    run_id = (tmp_path / "run" / "wandb_run_id").read_text().strip()
    assert run_file.name == f"run-{run_id}.wandb"  # a resumed run logs to the same W&B run
