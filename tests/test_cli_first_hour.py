"""What a new user meets in the first hour with the ``repogym`` command (issue 42): ``--version``, listings piped
into ``head``, an unknown task id answered with the closest ones, ``demo --task``, and arguments refused before
anything is built or written. The command runs as a real process where the process matters (the installed
entry point, a real pipe)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest

from repogym.cli import main
from repogym.cli import tasks as tasks_command
from repogym.envs.tasks.suites import load_suite

REPOGYM = str(Path(sys.executable).with_name("repogym"))  # the entry point pip installed beside this Python
TASK = "repogym__tablekit-wrap-long-word-order"


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([REPOGYM, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_the_installed_packages_version(flag):
    done = _cli(flag)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"repogym {version('repogym')}\n", "")


# -- a closed pipe ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["tasks", "list"], ["tasks", "suites"], ["models", "list"]])
def test_a_reader_gone_before_the_output_ends_quietly(args):
    # The reader closes its end before a byte is written: every write the command makes meets a closed pipe.
    proc = subprocess.Popen([REPOGYM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 1
    assert err == "", err


def test_head_dash_1_on_a_long_listing_ends_quietly():
    # `repogym tasks list --json | head -1`: the JSON (hundreds of kB) outgrows the pipe's buffer, so the command
    # is still writing when the reader takes its one line and goes.
    proc = subprocess.Popen([REPOGYM, "tasks", "list", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "[\n"
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err and err == "", err


def test_a_broken_pipe_that_is_not_stdouts_keeps_its_traceback(monkeypatch):
    def talks_to_a_dead_daemon(args):
        raise BrokenPipeError(32, "Broken pipe")  # a socket or subprocess of ours, not the reader of our output

    monkeypatch.setattr(tasks_command, "run_list", talks_to_a_dead_daemon)
    with pytest.raises(BrokenPipeError):
        main(["tasks", "list"])


# -- unknown task ids ---------------------------------------------------------------------------------------------

def test_an_unknown_task_id_names_the_closest_ids_the_suite_and_how_to_list_them():
    done = _cli("validate", "--task", "tablekit-wrap-long-word", "--sandbox", "local")
    assert done.returncode == 2 and done.stdout == ""
    err = done.stderr.strip()
    assert err.startswith(f"repogym: error: no task 'tablekit-wrap-long-word' in suite 'builtin' ({len(load_suite())} "
                          f"tasks; closest: {TASK}")  # the typed tail, matched against each id's part after __
    assert err.endswith("; list its ids with `repogym tasks list --suite builtin`") and "\n" not in err


def test_validate_names_every_unknown_id_of_a_task_file(tmp_path, capsys, tiny_task):
    import json
    path = tmp_path / "tiny.jsonl"
    path.write_text(json.dumps(tiny_task.to_dict()) + "\n")
    assert main(["validate", "--tasks", str(path), "--task", "tiny__calc-2", "--task", "zzz",
                 "--sandbox", "local"]) == 2
    err = capsys.readouterr().err
    assert f"no tasks 'tiny__calc-2', 'zzz' in suite {str(path)!r} (1 tasks)" in err
    assert "'tiny__calc-2' (closest: tiny__calc-1)" in err and "'zzz' (no close match)" in err
    assert f"`repogym tasks list --suite {path}`" in err


# -- demo --task --------------------------------------------------------------------------------------------------

class _NothingMayStart:
    """Stands in for what builds a model, an environment or a sandbox: any call fails the test."""

    def __init__(self, what: str):
        self.what = what

    def __call__(self, *args, **kwargs):
        raise AssertionError(f"{self.what} was called before the arguments were checked")


@pytest.fixture
def nothing_starts(monkeypatch):
    import gymnasium

    import repogym.agents
    import repogym.envs.taskgen.recipes
    monkeypatch.setattr(gymnasium, "make", _NothingMayStart("gymnasium.make"))
    monkeypatch.setattr(repogym.agents, "make_agent", _NothingMayStart("make_agent"))
    monkeypatch.setattr(repogym.envs.taskgen.recipes, "ensure_suites", _NothingMayStart("ensure_suites"))


@pytest.mark.parametrize("args, words", [
    (["--task", "tablekit-wrap-long-word"], f"no task 'tablekit-wrap-long-word' in suite 'builtin' ("),
    (["--task", TASK, "--task", "nope"], "no task 'nope' in suite 'builtin' ("),
    (["--limit", "0"], "expected a positive --limit, got 0"),
    (["--limit", "-1"], "expected a positive --limit, got -1"),
    (["--max-turns", "0"], "expected a positive --max-turns, got 0"),
    (["--agents", "oracle,nul"], "unknown agent 'nul': expected one of oracle, null"),
    (["--agents", ","], "expected --agents to name at least one of oracle, null"),
    (["--out", __file__], f"expected --out to be a folder, got {__file__!r}: a file"),
])
def test_demo_refuses_bad_arguments_before_anything_starts(tmp_path, capsys, nothing_starts, args, words):
    out = tmp_path / "demo"
    assert main(["demo", "--sandbox", "local", "--out", str(out), *args]) == 2
    assert words in capsys.readouterr().err
    assert not out.exists()


def test_demo_runs_only_the_tasks_named(tmp_path, capsys, monkeypatch):
    import gymnasium

    import repogym.agents.rollout
    made = {}

    def make(env_id, **kwargs):
        made.update(kwargs)
        return SimpleNamespace(unwrapped=SimpleNamespace(backend="local"), close=lambda: None)

    def run_episode(env, agent, *, task_id, agent_name, trajectory):
        return SimpleNamespace(agent=agent_name, status="resolved", reward=1.0, resolved=True, turns=2,
                               duration_s=0.1)

    monkeypatch.setattr(gymnasium, "make", make)
    monkeypatch.setattr(repogym.agents.rollout, "run_episode", run_episode)
    ids = [t.instance_id for t in load_suite("builtin")]
    wanted = [ids[5], ids[0]]
    assert main(["demo", "--task", wanted[0], "--task", wanted[1], "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert [t.instance_id for t in made["tasks"]] == [ids[0], ids[5]]  # the suite's order
    assert out.startswith("2 tasks x 2 agents") and "| oracle |" in out and "2/2 (100%)" in out
    ran = {line.split()[1] for line in out.splitlines() if line.startswith("  oracle")}
    assert ran == set(wanted)
    # --limit cuts the tasks --task picked.
    assert main(["demo", "--task", wanted[0], "--task", wanted[1], "--limit", "1", "--agents", "null",
                 "--out", str(tmp_path)]) == 0
    assert [t.instance_id for t in made["tasks"]] == [ids[0]]


@pytest.mark.slow
def test_demo_task_runs_one_real_episode(tmp_path):
    done = _cli("demo", "--task", TASK, "--agents", "oracle", "--sandbox", "local", "--out", str(tmp_path),
                timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1 tasks x 1 agents") and "| oracle |" in done.stdout
    assert [p.name for p in (tmp_path / "oracle").iterdir()] == [f"{TASK}.jsonl"]


# -- arguments checked before anything is built or written -------------------------------------------------------

def test_validate_refuses_bad_arguments_before_a_suite_is_built(tmp_path, capsys, nothing_starts):
    assert main(["validate", "--workers", "0"]) == 2
    assert "expected a positive --workers, got 0" in capsys.readouterr().err
    results = tmp_path / "no-such-folder" / "verdicts.jsonl"
    assert main(["validate", "--results", str(results)]) == 2
    assert f"expected --results in an existing folder, got {str(results)!r}" in capsys.readouterr().err


def test_tasks_generate_and_import_refuse_bad_arguments_before_the_work(tmp_path, capsys, monkeypatch):
    import repogym.envs.taskgen.generate
    import repogym.envs.tasks.datasets
    monkeypatch.setattr(repogym.envs.taskgen.generate, "generate", _NothingMayStart("generate"))
    monkeypatch.setattr(repogym.envs.tasks.datasets, "load_dataset", _NothingMayStart("load_dataset"))
    nowhere = tmp_path / "missing" / "out.jsonl"
    assert main(["tasks", "generate", "--source", str(tmp_path), "--out", str(nowhere)]) == 2
    assert f"expected --out in an existing folder, got {str(nowhere)!r}" in capsys.readouterr().err
    assert main(["tasks", "generate", "--source", str(tmp_path), "--out", str(tmp_path / "o.jsonl"),
                 "--max-candidates", "0"]) == 2
    assert "expected a positive --max-candidates, got 0" in capsys.readouterr().err
    data = tmp_path / "rows.jsonl"
    data.write_text("")
    assert main(["tasks", "import", str(data), "--out", str(tmp_path / "o.jsonl"),
                 "--mirrors", str(tmp_path / "no-mirrors")]) == 2
    assert "expected --mirrors to be a folder of git repositories" in capsys.readouterr().err
    assert main(["tasks", "import", str(data), "--out", str(nowhere)]) == 2
    assert "expected --out in an existing folder" in capsys.readouterr().err


def test_analyze_gc_and_export_refuse_bad_arguments_up_front(tmp_path, capsys, monkeypatch):
    import importlib.util

    import repogym.agents.export
    import repogym.envs.analysis
    import repogym.envs.sandbox.gc
    monkeypatch.setattr(repogym.envs.analysis.RepoIndex, "from_folder", _NothingMayStart("RepoIndex.from_folder"))
    monkeypatch.setattr(repogym.envs.analysis, "diff_between_revs", _NothingMayStart("diff_between_revs"))
    assert main(["analyze", "--repo", str(tmp_path), "--diff", str(tmp_path / "none.diff")]) == 2
    assert "expected --diff to be a diff file (or - for stdin)" in capsys.readouterr().err
    assert main(["analyze", "--repo", str(tmp_path), "--depth", "0"]) == 2
    assert "expected --depth >= 1, got 0" in capsys.readouterr().err

    monkeypatch.setattr(repogym.envs.sandbox.gc, "reap", _NothingMayStart("reap"))
    assert main(["gc", "--stale-after", "0", "--dry-run"]) == 2  # would take every live sandbox for a dead one's
    assert "expected --stale-after > 0, got 0" in capsys.readouterr().err
    assert main(["gc", "--older-than", "-5"]) == 2
    assert "expected --older-than >= 0, got -5" in capsys.readouterr().err

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else find_spec(name, *a))
    monkeypatch.setattr(repogym.agents.export, "export_trajectories", _NothingMayStart("export_trajectories"))
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "rows.parquet")]) == 2
    assert "as Parquet needs pyarrow: pip install 'repogym[datasets]'" in capsys.readouterr().err
    assert main(["export", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert f"expected --out to be a file (.jsonl or .parquet), got {str(tmp_path)!r}: a folder" in capsys.readouterr().err


def test_show_given_a_task_id_says_what_it_takes_and_finds_the_tasks_trajectories(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["show", TASK]) == 2
    err = capsys.readouterr().err
    assert f"got {TASK!r}: show takes the file an episode wrote" in err and f"none for {TASK!r} under runs/" in err
    (tmp_path / "runs" / "demo" / "oracle").mkdir(parents=True)
    (tmp_path / "runs" / "demo" / "oracle" / f"{TASK}.jsonl").write_text("")
    assert main(["show", TASK]) == 2
    assert f"found: runs/demo/oracle/{TASK}.jsonl" in capsys.readouterr().err
    assert main(["show", "missing.jsonl"]) == 2  # a path: the viewer's own message
    assert "expected a trajectory file, got 'missing.jsonl': no such file" in capsys.readouterr().err


def test_demo_sh_passes_its_arguments_to_repogym_demo(tmp_path):
    # scripts/demo.sh as shipped, in a tree whose set-up is a no-op and whose repogym prints its arguments.
    root = Path(__file__).resolve().parents[1]
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "demo.sh").write_text((root / "scripts" / "demo.sh").read_text())
    (tmp_path / "scripts" / "setup.sh").write_text("true\n")
    (tmp_path / "scripts" / "venvs.sh").write_text(f'MAIN_VENV={tmp_path}/venv\nVENV_DIR={tmp_path}/venv\n'
                                                   'checkout_writable() { true; }\n')
    fake = tmp_path / "venv" / "bin" / "repogym"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    fake.chmod(0o755)
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "demo.sh"), "--task", TASK, "--task", "b", "--limit",
                           "1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == ["demo", "--suite", "builtin", "--agents", "oracle,null", "--out",
                                            "runs/demo", "--task", TASK, "--task", "b", "--limit", "1"]
