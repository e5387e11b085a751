"""How the ``repogym`` command reports failures: a user's mistake as one line, a bug of ours with its traceback;
and the demo table leaves excluded episodes (infrastructure failures, bugs of ours) out of the rate."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from repogym.cli import main
from repogym.cli import tasks as tasks_command
from repogym.cli.demo import results_table
from repogym.envs.core.errors import InternalError, SandboxUnavailable
from repogym.envs.core.status import Status


def test_an_infrastructure_failure_is_one_line_and_a_bug_of_ours_keeps_its_traceback(monkeypatch, capsys):
    def unavailable(args):
        raise SandboxUnavailable("sandbox.docker", "no Docker daemon answers")

    monkeypatch.setattr(tasks_command, "run_list", unavailable)
    assert main(["tasks", "list"]) == 2
    assert capsys.readouterr().err.strip() == "repogym: error: [sandbox.docker] no Docker daemon answers"

    def buggy(args):
        raise InternalError("cli.tasks", "KeyError: 'x'")

    monkeypatch.setattr(tasks_command, "run_list", buggy)
    with pytest.raises(InternalError, match="KeyError"):
        main(["tasks", "list"])


def test_the_demo_table_counts_excluded_episodes_apart_from_the_rate():
    task = SimpleNamespace(difficulty=1)
    nan = float("nan")

    def result(status, reward):
        return task, SimpleNamespace(agent="oracle", status=status, reward=reward, resolved=status == Status.RESOLVED,
                                     duration_s=1.0)

    table = results_table([result(Status.RESOLVED, 1.0), result(Status.INTERNAL_ERROR, nan),
                           result(Status.INFRA_ERROR, nan), result(Status.UNRESOLVED, 0.0)], ["oracle"])
    header, _, row = table.splitlines()
    assert "| excluded |" in header
    assert "| 1/4 (50%) | 2 |" in row  # resolved over the two episodes that were not excluded
