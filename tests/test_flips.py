"""Operator-flip tasks (envs/taskgen/flips.py): deterministic, held out as configured, the traceback in the problem
statement is the one pytest prints, and the gold patch resolves what the empty patch does not."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from repogym.envs.core.errors import ConfigError
from repogym.envs.taskgen.flips import NEGATED, FlipsConfig, build_flips, suite_files

SMALL = dict(train_projects=2, unseen_projects=1, modules=3, functions=4, heldout_modules=1, heldout_functions=1)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOGYM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _identifiers(repo: Path) -> set[str]:
    names = set()
    for path in (repo / repo.name).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                names |= {node.name, *(a.arg for a in node.args.args)}
        names.add(path.stem)
    return names - {"__init__"}


def test_negation_is_an_involution_that_negates():
    for op, negated in NEGATED.items():
        assert NEGATED[negated] == op
        for a in range(-2, 3):
            for b in range(-2, 3):
                assert eval(f"{a} {op} {b}") != eval(f"{a} {negated} {b}")  # noqa: S307 - our operators


def test_the_split_holds_out_functions_files_and_a_project_with_its_own_names(cache):
    train, heldout = build_flips(FlipsConfig(**SMALL))
    kinds = Counter(t.extra["heldout"] for t in heldout)
    # Per training project: 1 whole module of 4 functions, and 1 function of each of the 2 other modules.
    assert kinds == {"file": 2 * 4, "function": 2 * 2, "project": 3 * 4}
    assert len(train) == 2 * 2 * 3
    assert not {t.instance_id for t in train} & {t.instance_id for t in heldout}
    assert all("heldout" not in t.extra and t.extra["family"] == "flips" for t in train)
    # The unseen project shares no function, argument or module name with the training projects.
    root = Path(train[0].setup["source"].removeprefix("path:")).parent
    seen = _identifiers(root / "flips_p0") | _identifiers(root / "flips_p1")
    assert not seen & _identifiers(root / "flips_u0")
    # Held-out files are whole: no training task comes from a held-out module.
    held_files = {t.patch.splitlines()[0] for t in heldout if t.extra["heldout"] == "file"}
    assert not held_files & {t.patch.splitlines()[0] for t in train}


@pytest.mark.slow
def test_the_same_config_builds_the_same_suites(cache, tmp_path, monkeypatch):
    first = build_flips(FlipsConfig(**SMALL))
    assert build_flips(FlipsConfig(**SMALL)) == first  # read back from the cache
    monkeypatch.setenv("REPOGYM_CACHE", str(tmp_path / "elsewhere"))
    again = build_flips(FlipsConfig(**SMALL))
    strip = lambda tasks: [(t.instance_id, t.base_commit, t.patch, t.problem_statement) for t in tasks]  # noqa: E731
    assert strip(again[0]) == strip(first[0]) and strip(again[1]) == strip(first[1])
    other = build_flips(FlipsConfig(**{**SMALL, "seed": 1}))
    assert strip(other[0]) != strip(first[0])


def test_more_training_projects_without_a_larger_heldout_split(cache):
    train, heldout = build_flips(FlipsConfig(**{**SMALL, "train_projects": 3, "heldout_in_projects": 1}))
    assert Counter(t.extra["heldout"] for t in heldout) == {"file": 4, "function": 2, "project": 12}
    assert len(train) == 2 * 3 + 2 * (3 * 4)  # the split project gives 2 modules x 3; the others all 12
    with pytest.raises(ConfigError, match="heldout_modules"):
        FlipsConfig(modules=1, heldout_modules=1).check()


@pytest.mark.slow
def test_the_problem_statement_is_the_traceback_pytest_prints(cache, tmp_path):
    train, heldout = build_flips(FlipsConfig(**SMALL))
    for task in (train[0], heldout[-1]):
        repo = Path(task.setup["source"].removeprefix("path:"))
        work = tmp_path / task.instance_id
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(work), task.base_commit],
                       check=True)
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "--tb=short", "-p", "no:cacheprovider",
                              task.FAIL_TO_PASS[0]], cwd=work, capture_output=True, text=True).stdout
        # The statement's traceback lines appear in pytest's report, in order (pytest adds ^^^ markers between).
        expected = task.problem_statement.split(f"FAILED {task.FAIL_TO_PASS[0]}\n\n")[1].splitlines()
        lines = out.splitlines()
        positions = [lines.index(line) for line in expected]
        assert positions == sorted(positions), out
        flipped = expected[3]
        source_file, line_no = expected[2].split(":")[:2]
        assert (work / source_file).read_text().splitlines()[int(line_no) - 1] == flipped
        # The gold patch turns exactly that line back.
        op = flipped.split()[2]
        assert f"-{flipped}\n+{flipped.replace(f' {op} ', f' {NEGATED[op]} ', 1)}\n" in task.patch


@pytest.mark.slow
def test_flips_recipes_build_on_use_and_other_recipes_say_how(cache):
    from repogym.envs.taskgen.recipes import build, ensure_suites, load_recipe
    from repogym.envs.tasks.suites import load_suite

    source, config = load_recipe("flips")
    assert source == "flips" and isinstance(config, FlipsConfig) and config.name == "flips"
    ensure_suites(["flips-heldout", "builtin"])
    assert suite_files(config)[1].exists()
    assert {t.extra["heldout"] for t in load_suite("flips-heldout")} == {"function", "file", "project"}
    assert not [t for t in load_suite("flips") if "heldout" in t.extra]
    _, stats = build("flips")
    assert stats["tasks"] == len(load_suite("flips")) and stats["heldout"] == len(load_suite("flips-heldout"))
    with pytest.raises(ConfigError, match="repogym tasks build gen-idna"):
        ensure_suites(["gen-idna"])


@pytest.mark.slow
def test_gold_resolves_and_the_empty_patch_does_not_in_a_real_sandbox(cache):
    from repogym.envs.rewards.validate import validate_task
    from repogym.envs.sandbox import SandboxConfig, sandbox_factory

    train, heldout = build_flips(FlipsConfig(**SMALL))
    for task in (train[0], heldout[-1]):
        verdict = validate_task(task, sandbox_factory("local", task.setup, SandboxConfig(run_id="pytest")), runs=1)
        assert verdict.ok, (verdict.reasons, verdict.problems)


@pytest.mark.slow
def test_the_cli_builds_a_flips_suite_on_first_use(cache, capsys):
    from repogym.cli import main

    assert main(["tasks", "list", "--suite", "flips-heldout"]) == 0
    assert "repogym__flips_u0-" in capsys.readouterr().out
    assert main(["tasks", "recipes"]) == 0
    assert "flips\tflips\tseed=0\tsuites=flips,flips-heldout" in capsys.readouterr().out
