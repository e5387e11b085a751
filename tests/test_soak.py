"""The soak benchmark: its attribution and invariant checks (fast), the scripted attacker (fast), and short real
soaks with hostile episodes mixed in (local, no kills; docker, with kills)."""

import math

import pytest

from benchmarks.soak import (ATTACKS, IDLE, MARK, SECRET_VAR, Episode, Hostile, Kill, SoakReport, hostile_summary,
                              percentile, reachable, render, samples, soak)
from tests.conftest import require_backend


def _episode(env=0, start=0.0, end=1.0, status="resolved", agent="oracle", phase="load", first=False, **kw):
    kw.setdefault("reset_s", 0.01)
    return Episode(env, phase, agent, "t", start, end, status, turns=2,
                   steps=[("bash", 0.02), ("submit", 0.5)], first=first, **kw)


def _report(episodes, kills=(), **kw):
    fields = dict(run_id="soak-x", backend="docker", n_envs=2, minutes=1.0, kill_every_s=5.0, episodes=list(episodes),
                  kills=list(kills), load_s=60.0, rss_before_mb=100.0, rss_after_mb=101.0, rss_peak_mb=102.0,
                  fds_before=20, fds_after=20, leaked_containers=[], leaked_processes=[], leaked_threads=[],
                  leaked_dirs=[], hung_envs=[], close_errors=[])
    fields.update(kw)
    return SoakReport(**fields)


def test_percentile_is_nearest_rank_and_nan_when_empty():
    assert math.isnan(percentile([], 0.5))
    assert percentile([3.0], 0.95) == 3.0
    assert percentile([5, 1, 4, 2, 3], 0.5) == 3
    assert percentile(list(range(1, 101)), 0.95) == 95


def test_a_kill_reaches_the_episode_in_flight_and_the_next_of_its_env_only():
    env0 = [_episode(0, 0, 4), _episode(0, 4, 8), _episode(0, 8, 12), _episode(0, 12, 16)]
    env1 = [_episode(1, 0, 6), _episode(1, 6, 12)]
    hit = reachable(env0 + env1, [Kill(5.0, "repogym-soak-x-1", 0, True)])
    assert hit == {id(env0[1]), id(env0[2])}
    # A kill that names no env (a local bwrap) reaches every env; a failed kill reaches nothing.
    hit = reachable(env0 + env1, [Kill(11.0, "bwrap 1", None, True), Kill(1.0, "-", 0, False, "gone")])
    assert hit == {id(env0[2]), id(env0[3]), id(env1[1])}


def test_latency_samples_leave_out_cold_starts_and_infra_errors():
    eps = [_episode(first=True), _episode(), _episode(status="infra_error")]
    assert samples(eps, "tool step") == [0.02]
    assert samples(eps, "submit") == [0.5]
    assert samples(eps, "reset") == [0.01]
    assert samples(eps + [_episode(warm_reset=False, reset_s=0.05)], "reset with load") == [0.05]  # timed apart


def test_a_clean_report_has_no_problems_and_renders():
    eps = [_episode(IDLE, 0, 1, phase="idle", first=True), _episode(IDLE, 1, 2, phase="idle", agent="null",
                                                                    status="unresolved"),
           _episode(0, 3, 5), _episode(0, 5, 7, status="infra_error", error="sandbox.docker.run"),
           _episode(1, 3, 6, agent="null", status="unresolved")]
    report = _report(eps, [Kill(6.0, "repogym-soak-x-ab", 0, True)])
    assert report.problems() == []
    assert report.latency()["submit"]["load_n"] == 2
    text = render(report)
    assert "invariants: OK" in text and "infra_error rate: 33.3%" in text


@pytest.mark.parametrize("change, expected", [
    (dict(leaked_containers=["repogym-soak-x-1 (exited)"]), "leaked containers: 1"),
    (dict(leaked_processes=["123 bwrap (Z)"]), "leaked processes: 1"),
    (dict(hung_envs=[3]), "hung env threads"),
])
def test_leaks_are_problems(change, expected):
    report = _report([_episode()], **change)
    assert any(expected in p for p in report.problems())


@pytest.mark.parametrize("episodes, kills, expected", [
    ([_episode(0, 0, 2, status="infra_error")], [Kill(5.0, "c", 0, True)], "no kill could have caused"),
    ([_episode(0, 0, 2, status="infra_error")], [Kill(1.0, "c", 1, True)], "no kill could have caused"),
    ([_episode(IDLE, 0, 2, phase="idle", status="infra_error"), _episode()], [], "without any kill"),
    ([_episode(agent="null", status="resolved")], [], "null-agent episodes resolved"),
    ([_episode(status="unresolved")], [], "did not resolve"),
    ([_episode(status="crash", error="KeyError: 'x'")], [], "other than InfraError"),
    ([_episode(agent="null", status="internal_error", error="env.step")], [], "a bug of repogym's (internal_error)"),
    ([_episode(status="unresolved", blamed_on_agent=True)], [Kill(0.5, "c", 0, True)], "blamed on the agent"),
    ([], [], "no episode finished under load"),
])
def test_broken_invariants_are_problems(episodes, kills, expected):
    problems = _report(episodes, kills).problems()
    assert any(expected in p for p in problems), problems


def test_play_keeps_a_bug_of_ours_apart_from_an_infrastructure_failure(monkeypatch):
    from types import SimpleNamespace

    import benchmarks.soak as soak
    from repogym.agents.rollout import EpisodeResult
    from repogym.envs.core.status import Status

    nan = float("nan")
    results = iter([
        EpisodeResult("t", "oracle", Status.INTERNAL_ERROR, nan, 1, 0.1,
                      {"status": Status.INTERNAL_ERROR, "error": {"where": "env.step", "message": "KeyError: 'x'"}}),
        EpisodeResult("t", "null", Status.INFRA_ERROR, nan, 1, 0.1,
                      {"status": Status.INFRA_ERROR, "error": {"where": "sandbox.run", "message": "gone"}})])
    monkeypatch.setattr(soak, "run_episode", lambda *args, **kwargs: next(results))
    env, tasks = SimpleNamespace(reset_s=0.01, steps=[], warm=True), [SimpleNamespace(instance_id="t")]
    bug, infra = (soak.play(env, {"oracle": None, "null": None}, tasks, 0, j, 0, "load") for j in (0, 1))
    assert (bug.status, bug.error, bug.infra_error) == (Status.INTERNAL_ERROR, "env.step", False)
    assert (infra.status, infra.error, infra.infra_error) == (Status.INFRA_ERROR, "sandbox.run", True)
    assert any("internal_error" in p for p in _report([bug]).problems())


def test_an_oracle_episode_a_kill_reached_may_fail_to_resolve():
    report = _report([_episode(0, 0, 2, status="unresolved")], [Kill(1.0, "c", 0, True)])
    assert report.problems() == []


@pytest.mark.docker
@pytest.mark.slow
def test_short_soak_with_kills_leaks_nothing_and_keeps_the_invariants():
    require_backend("docker")
    from repogym.envs.sandbox.images import base_image_exists
    if not base_image_exists():
        pytest.fail("base image missing: run `repogym images build`")
    report = soak(n_envs=4, minutes=0.6, kill_every_s=4.0, backend="docker", seed=0, idle_episodes=4,
                  hostile_every=2)
    print(render(report))
    load, idle = report.phase("load"), report.phase("idle")
    assert report.leaked_containers == [] and report.leaked_processes == [] and report.leaked_threads == []
    assert report.hung_envs == [] and report.close_errors == []
    # Enough episodes for the invariants to mean something; how many fit in the time depends on the machine's load
    # (CI runs this beside other tests), which is not what this test is about.
    assert len(load) >= 4 and report.kills_done >= 4
    assert all(k.target.startswith(f"repogym-{report.run_id}-") for k in report.kills if k.ok)
    reached = report.reached()
    assert reached & {id(e) for e in load}, "no kill reached an episode: the kill attribution is broken"
    # The idle phase is a healthy run: nothing excluded, every oracle episode resolved.
    assert not any(e.infra_error for e in idle)
    assert all(e.status == "resolved" for e in idle if e.agent == "oracle")
    assert sum(e.infra_error for e in load) <= report.kills_done
    assert all(id(e) in reached for e in report.episodes if e.infra_error)
    assert not any(e.status == "resolved" for e in report.episodes if e.agent == "null")
    assert all(e.status == "resolved" for e in report.episodes if e.agent == "oracle" and id(e) not in reached)
    assert not any(e.status == "crash" or e.blamed_on_agent for e in report.episodes)
    _assert_every_hostile_episode_scored_0(report)  # an infra_error a kill reached is excused, as for the others
    assert report.problems() == []


def _hostile(attack="kill", status="unresolved", reward=0.0, **kw):
    return _episode(agent="hostile", status=status, reward=reward, attack=attack, **kw)


@pytest.mark.parametrize("episode, kills, expected", [
    (_hostile(status="resolved", reward=1.0), [], "not scored 0"),
    (_hostile(status="unresolved", reward=0.5), [], "not scored 0"),
    (_hostile("git_config", status="infra_error", reward=math.nan, error="rewards.health_check"), [], "git_config"),
    (_hostile(status="crash", reward=None, error="SandboxError: x"), [], "not scored 0"),
    (_hostile("env_dump", findings=[f"the host's {SECRET_VAR} is visible"]), [], "saw what they must not"),
])
def test_a_hostile_episode_that_earns_or_is_excluded_is_a_problem(episode, kills, expected):
    problems = _report([episode], kills, hostile_every=2).problems()
    assert any(expected in p for p in problems), problems
    # The generic infra_error invariant does not count it twice.
    assert not any("no kill could have caused" in p for p in problems)


def test_hostile_episodes_scored_0_are_fine_and_a_kill_excuses_an_exclusion():
    eps = [_hostile("kill", end=1.0), _hostile("fill", start=1, end=3, status="infra_error", reward=math.nan),
           _hostile("fill", start=3, end=4, status="infra_error", reward=None, error="reset: sandbox.docker.load")]
    report = _report(eps, [Kill(2.0, "c", 0, True), Kill(2.5, "c", 0, True)], hostile_every=1)
    assert report.problems() == []
    assert hostile_summary(report)["kill"] == {"episodes": 1, "scored_0": 1, "statuses": {"unresolved": 1},
                                               "findings": 0}
    assert "hostile kill" in render(report) and "hostile scored 0 / hostile" in render(report)
    assert samples(eps, "submit") == []  # attacks are not the latencies a policy sees
    assert any("no hostile episode finished" in p for p in _report([_episode()], hostile_every=3).problems())
    assert any("appeared on the host" in p for p in _report(eps[:1], host_files=["/usr/x"]).problems())


def test_the_hostile_agent_runs_its_attack_then_submits_and_reports_what_it_must_not_see():
    agent = Hostile("soak-x", secret="s3cret")
    agent.attack = "env_dump"
    agent.reset("task", {})
    actions = [agent.act("[no output, exit code 0]", {})]
    while '"submit"' not in actions[-1]:
        actions.append(agent.act("HOME=/tmp\nREPOGYM_SOAK_SECRET=s3cret" if len(actions) == 2 else "ok", {}))
    assert len(actions) == 1 + len(ATTACKS["env_dump"]) + 1 and agent.findings[0].startswith("the host's")
    agent.attack = "fill"
    agent.reset("task", {})
    assert MARK in agent.act("", {})  # the look for leftovers comes first
    first_attack = agent.act(f"{MARK}soak-x-fill", {})
    assert "/tmp/repogym-hostile-soak-x-fill" in first_attack and "{mark}" not in first_attack
    assert agent.findings == [f"files of an earlier episode survived the reset: {MARK}soak-x-fill"]


def _assert_every_hostile_episode_scored_0(report):
    hostile = report.hostile()
    assert hostile, "no hostile episode ran"
    failed = report.hostile_failures()
    assert failed == [], "\n".join(f"{e.attack} on {e.task_id}: {e.status}, reward {e.reward}, {e.error}, "
                                   f"reached by a kill: {id(e) in report.reached()}" for e in failed)
    assert [e.findings for e in hostile if e.findings] == []
    assert report.host_files == []


@pytest.mark.slow
def test_short_local_soak_with_hostile_episodes_scores_every_attack_0():
    """No kills, so nothing excuses a hostile episode: each must be ``unresolved`` with reward 0."""
    require_backend("local")
    # Each env starts half way round the attacks: 6 episodes each (3 hostile) run all of them, however slow the
    # machine (a loaded CI run once fit only 4 episodes an env in the 45 s).
    report = soak(n_envs=2, minutes=0.75, kill_every_s=None, backend="local", seed=0, idle_episodes=2,
                  hostile_every=2, min_episodes=6)
    print(render(report))
    assert {e.attack for e in report.hostile()} == set(ATTACKS)
    _assert_every_hostile_episode_scored_0(report)
    assert not any(e.infra_error or e.status == "crash" for e in report.episodes)
    assert all(e.status == "resolved" for e in report.episodes if e.agent == "oracle")
    assert report.problems() == []
