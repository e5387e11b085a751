"""Each reward component on hand-made episode facts, the facts from an episode's state, presets,
registration, statuses, infra and internal errors, an evaluation record's round trip through ``info``."""

import json
import math
from dataclasses import replace

import pytest

from repogym.envs.analysis import DiffAnalysis
from repogym.envs.core.episode_state import EpisodeState, TestRunRecord
from repogym.envs.core.errors import ConfigError
from repogym.envs.core.registry import Registry
from repogym.envs.rewards import facts as episode_facts  # its tests_since_last_edit would be collected as a test
from repogym.envs.rewards.components import (PRESETS, EpisodeFacts, RewardConfig, compute_reward, register_component,
                                             register_preset)
from repogym.envs.rewards.evaluate import EvalRecord
from repogym.envs.core.status import Status, excluded

COVER = DiffAnalysis(tests=[{"name": "t.a", "file": "tests/t.py", "line": 1, "test_id": "tests/t.py::test_a"},
                            {"name": "t.b", "file": "tests/t.py", "line": 5, "test_id": "tests/t.py::test_b"}],
                     changed=[{"name": "pkg.f"}])


def record(status="resolved", tests=None, f2p=(1, 1), p2p=(2, 2)):
    return EvalRecord("x", status, tests=tests or {}, fail_to_pass={"passed": f2p[0], "total": f2p[1]},
                      pass_to_pass={"passed": p2p[0], "total": p2p[1]})


def facts(**kw):
    base = dict(eval=record(), turns=4, well_formed=3, analysis=COVER, changed_anything=True)
    base.update(kw)
    return EpisodeFacts(**base)


def test_default_is_tests_only_and_stays_one_or_zero():
    config = RewardConfig()
    assert compute_reward(config, facts()) == (1.0, {"tests": 1.0})
    assert compute_reward(config, facts(eval=record("unresolved", f2p=(0, 1)))) == (0.0, {"tests": 0.0})


def test_tests_fraction_option():
    config = RewardConfig(weights={"tests": 1.0}, options={"tests": {"fraction": True}})
    assert compute_reward(config, facts(eval=record("unresolved", f2p=(1, 4))))[0] == 0.25
    assert compute_reward(config, facts(eval=record("unresolved", f2p=(4, 4), p2p=(1, 2))))[0] == 0.0


def test_dependents_checked_counts_covering_tests_run_after_the_last_edit():
    config = RewardConfig(weights={"dependents_checked": 1.0})
    one = facts(tests_after_last_edit={"tests/t.py::test_a": "passed", "tests/other.py::x": "passed"})
    assert compute_reward(config, one)[1] == {"dependents_checked": 0.5}
    both = facts(tests_after_last_edit={"tests/t.py::test_a": "passed", "tests/t.py::test_b": "failed"})
    assert compute_reward(config, both)[1]["dependents_checked"] == 1.0
    assert compute_reward(config, facts(changed_anything=False))[1]["dependents_checked"] == 0.0
    nothing_covers = replace(COVER, tests=[])
    assert compute_reward(config, facts(analysis=nothing_covers, ran_tests_after_last_edit=True))[0] == 1.0
    assert compute_reward(config, facts(analysis=nothing_covers))[0] == 0.0


def test_dependents_broken_penalises_failing_covering_pass_to_pass():
    config = RewardConfig(weights={"dependents_broken": 1.0})
    graded = record("unresolved", tests={"tests/t.py::test_a": "failed", "tests/t.py::test_b": "passed"})
    value = compute_reward(config, facts(eval=graded, pass_to_pass=["tests/t.py::test_a", "tests/t.py::test_b"]))
    assert value[1] == {"dependents_broken": -0.5}
    assert compute_reward(config, facts(eval=graded, pass_to_pass=[]))[0] == 0.0


def test_syntax_format_steps():
    config = RewardConfig(weights={"syntax": 1.0, "format": 1.0, "steps": 0.01})
    broken = replace(COVER, syntax_errors=[{"file": "pkg/a.py", "line": 3, "message": "ERROR"}])
    total, parts = compute_reward(config, facts(analysis=broken))
    assert parts == {"syntax": -1.0, "format": 0.75, "steps": -4.0}
    assert total == pytest.approx(-1.0 + 0.75 - 0.04)
    assert compute_reward(config, facts(analysis=None))[1]["syntax"] == 0.0  # no analysis ran: no penalty


def test_process_preset_mirrors_the_design():
    config = RewardConfig.preset("process")
    assert config.weights == {"tests": 1.0, "dependents_checked": 0.3, "format": 0.1}
    total, parts = compute_reward(config, facts(tests_after_last_edit={"tests/t.py::test_a": "passed",
                                                                       "tests/t.py::test_b": "passed"}))
    assert total == pytest.approx(1.0 + 0.3 + 0.1 * 0.75)
    with pytest.raises(ConfigError, match="process"):
        RewardConfig.preset("nope")


def test_presets_are_a_registry_whose_miss_lists_the_names():
    assert isinstance(PRESETS, Registry) and PRESETS.names()[:3] == ["default", "process", "shaped"]
    with pytest.raises(ConfigError, match="unknown reward preset 'nope': expected one of default, process, shaped"):
        RewardConfig.preset("nope")
    register_preset("checked", {"tests": 1.0, "dependents_checked": 0.5})
    config = RewardConfig.preset("checked")
    assert config.weights == {"tests": 1.0, "dependents_checked": 0.5}
    config.weights["tests"] = 9.0  # a config's weights are its own copy
    assert RewardConfig.preset("checked").weights["tests"] == 1.0


@pytest.mark.parametrize("status", [Status.INFRA_ERROR, Status.INTERNAL_ERROR])
def test_infra_and_internal_errors_get_no_components(status):
    total, parts = compute_reward(RewardConfig.preset("process"), facts(eval=record(status)))
    assert math.isnan(total) and parts is None and excluded(status, total)
    total, parts = compute_reward(RewardConfig.preset("process"), facts(eval=record("unresolved")))
    assert parts is not None and not excluded(Status.UNRESOLVED, total)


def test_an_eval_record_status_is_a_status_and_its_json_a_plain_string():
    graded = record("resolved")
    assert graded.status is Status.RESOLVED and graded.resolved
    assert json.loads(json.dumps(graded.to_dict()))["status"] == "resolved"
    assert record(Status.PATCH_FAILED).status is Status.PATCH_FAILED and not record(Status.PATCH_FAILED).resolved
    with pytest.raises(ValueError, match="expected a status in .*'resolved'.*, got 'solved'"):
        record("solved")


def test_an_eval_record_comes_back_from_its_dict():
    graded = EvalRecord("x", "unresolved", tests={"t::a": "failed"}, fail_to_pass={"passed": 0, "total": 1},
                        error={"where": "rewards.report", "message": "no report"}, guards={"twin": "ok"}, attempts=2)
    text = json.loads(json.dumps(graded.to_dict()))  # as a trajectory holds it
    back = EvalRecord.from_dict(text)
    assert back == graded and back.status is Status.UNRESOLVED
    text["tests"]["t::a"] = "passed"
    assert back.tests == {"t::a": "failed"}  # its own copy
    # info["eval"] of an episode never graded holds only its status (and error); the task id comes from the caller
    ended = EvalRecord.from_dict({"status": "internal_error", "error": {"where": "env.step", "message": "KeyError"}},
                                 instance_id="task-1")
    assert (ended.instance_id, ended.status, ended.error["where"], ended.tests) == (
        "task-1", Status.INTERNAL_ERROR, "env.step", {})
    with pytest.raises(ValueError, match="expected the fields of an EvalRecord .*got \\['statuss'\\]"):
        EvalRecord.from_dict({"status": "resolved", "statuss": "resolved"})
    with pytest.raises(ValueError, match="status"):
        EvalRecord.from_dict({"instance_id": "x"})


def test_tests_since_last_edit_reads_the_episode_state():
    state = EpisodeState(turn=6, last_edit_turn=3, test_runs=[
        TestRunRecord(2, [], {"t::a": "failed", "t::c": "passed"}),  # before the last edit: does not count
        TestRunRecord(4, ["t"], {"t::a": "passed", "t::b": "failed"}),
        TestRunRecord(5, ["t::b"], {"t::b": "passed"}),  # later runs win
    ])
    assert [run.turn for run in episode_facts.runs_since_last_edit(state)] == [4, 5]
    assert episode_facts.tests_since_last_edit(state) == {"t::a": "passed", "t::b": "passed"}
    assert episode_facts.ran_tests_since_last_edit(state)
    state.last_edit_turn = 5  # a run on the edit's own turn cannot have seen it (one call per turn)
    assert episode_facts.tests_since_last_edit(state) == {} and not episode_facts.ran_tests_since_last_edit(state)
    fresh = EpisodeState()
    assert episode_facts.tests_since_last_edit(fresh) == {} and not episode_facts.ran_tests_since_last_edit(fresh)


def test_users_register_their_own_component():
    register_component("short_patch", lambda f, limit=10: 1.0 if f.turns <= limit else 0.0)
    config = RewardConfig(weights={"tests": 1.0, "short_patch": 0.5}, options={"short_patch": {"limit": 3}})
    assert compute_reward(config, facts()) == (1.0, {"tests": 1.0, "short_patch": 0.0})
    with pytest.raises(ConfigError, match="short_patch"):
        RewardConfig(weights={"shortpatch": 1.0})


SOURCED = DiffAnalysis(tests=[{"name": "t.a", "file": "tests/t.py", "line": 1, "test_id": "tests/t.py::test_a",
                               "source": "measured"},
                              {"name": "t.b", "file": "tests/t.py", "line": 5, "test_id": "tests/t.py::test_b",
                               "source": "static"}],
                       changed=[{"name": "pkg.f"}])


def test_covering_tests_by_source_and_any_parameter_of_a_covering_test_counts():
    ran = {"tests/t.py::test_a[1-x]": "passed", "tests/t.py::test_a[2-y]": "passed"}
    every = RewardConfig(weights={"dependents_checked": 1.0})
    measured = RewardConfig(weights={"dependents_checked": 1.0},
                            options={"dependents_checked": {"sources": ("measured",)}})
    assert compute_reward(every, facts(analysis=SOURCED, tests_after_last_edit=ran))[0] == 0.5
    assert compute_reward(measured, facts(analysis=SOURCED, tests_after_last_edit=ran))[0] == 1.0
    broken = RewardConfig(weights={"dependents_broken": 1.0})
    graded = record("unresolved", tests={"tests/t.py::test_a[1-x]": "failed", "tests/t.py::test_a[2-y]": "passed",
                                         "tests/t.py::test_c": "failed"})
    p2p = ["tests/t.py::test_a[1-x]", "tests/t.py::test_a[2-y]", "tests/t.py::test_c"]
    assert compute_reward(broken, facts(analysis=SOURCED, eval=graded, pass_to_pass=p2p))[0] == -0.5
