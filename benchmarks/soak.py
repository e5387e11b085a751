"""Soak: N environments run scripted episodes for M minutes while a killer thread kills their sandboxes.

Two phases in one run, so the latencies compare on the same machine: first one environment alone plays
``idle_episodes`` scripted episodes (no kills: the idle latencies, and a healthy run that must show no
``infra_error``); then ``n_envs`` threads, each owning one environment, play the same script for
``minutes`` while a killer kills a random running sandbox of the soak every ``kill_every_s`` seconds
(``docker kill`` of a container labelled with the soak's run id; for ``--backend local``, SIGKILL to a
``bwrap`` child of this process). At the deadline in-flight episodes finish and every env is closed.

The script (alternating per episode): a few ``bash`` probes, then the oracle (gold patch, submit) or the
null agent (submit). With ``hostile_every`` N, every N-th episode of each load-phase env is hostile instead:
a scripted attacker (:class:`Hostile`) runs one attack of :data:`ATTACKS` (the attacks rotate; each
starts by looking for what earlier hostile episodes left in ``/tmp``, ``/dev/shm`` and the home folder)
and submits the unfixed task. No attack may earn anything: a hostile episode must score 0 as
``unresolved``; never resolved, never an ``infra_error`` (NaN, excluded) that no kill could have caused,
never a crash; no file it writes may appear on the host, no host environment variable (a secret the soak
sets for the run) may show in its output, and no file of an earlier episode may survive a reset.

Printed: episodes by status, per attack how many hostile episodes scored 0, infra_error rate, kills,
warm reset / reset with a load (another base, or a new sandbox) / tool-step / submit latency p50 and p95 idle
versus under load and their ratios (hostile episodes left out), RSS before and after (and growth), and leaks after close: containers still labelled with the
run id, descendant processes of this process, local-sandbox temp folders, threads born during the load
phase (threads a process keeps for life, such as the owner heartbeat, start in the idle phase), and
files of hostile episodes found on the host. Exit status 1 when anything leaked or an invariant broke:

- an episode is ``infra_error`` only if a kill could have caused it (docker: a kill of one of that env's
  containers after the env's previous episode ended, i.e. the episode in flight or the next one; local:
  a kill of any sandbox, as a ``bwrap`` names no env); hence none in the idle phase, and no more than kills;
- the null agent never resolves; every oracle episode no kill could have reached resolves;
- no episode raises anything but :class:`repogym.envs.core.errors.InfraError`, none ends ``internal_error`` (a bug
  of repogym's the environment caught), and no env thread hangs;
- every hostile episode scores exactly 0, as above (an ``infra_error`` a kill could have reached is excused,
  as for the others).

Linux only (processes, RSS and descriptors are read from ``/proc``). Machines here are noisy: read ratios.
Run: ``python -m benchmarks.soak [--envs 16] [--minutes 5] [--kill-every 5] [--backend docker] [--hostile-every 4]
[--json]``. The attacks do not harm the host when a hole is open: files they write are empty markers (the
soak removes any it finds on the host), fills are bounded, and kills stay inside the sandbox's namespaces.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import os
import random
import signal
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
from docker.errors import DockerException  # a dependency of repogym: the daemon's refusals, for the kills and cleanup

from repogym.agents import make_agent
from repogym.agents.oracle import OracleAgent
from repogym.agents.rollout import run_episode
from repogym.envs.core.errors import ConfigError, InfraError
from repogym.envs.repo_env import EnvConfig, RepoTaskEnv
from repogym.envs.sandbox import SandboxConfig
from repogym.envs.core.status import Status, excluded
from repogym.envs.tasks.schema import Task
from repogym.envs.tasks.suites import find_task

CRASH = "crash"
"""The soak's own status of an episode that raised something other than InfraError (a library bug)."""
# One repository, so an env keeps its agent container across episodes (warm resets) and has one grading pool.
DEFAULT_TASKS = ("repogym__tablekit-bool-column-alignment", "repogym__tablekit-center-odd-padding",
                 "repogym__tablekit-wrap-exact-fit")
PROBES = ("git status --short", "ls", "python -c 'import sys; print(sys.version_info[:2])'")
ENV_LABEL = "repogym.soak.env"
IDLE = -1
"""The env index of the idle phase's environment."""
MARK = "repogym-hostile-"
"""Names of the files hostile episodes write start with this, then the run id."""
SECRET_VAR = "REPOGYM_SOAK_SECRET"
"""A host environment variable set for the run; no sandbox may show it."""


# -- records ------------------------------------------------------------------------------------------
@dataclass
class Episode:
    """One scripted episode (or a reset that failed before it could start)."""

    env: int
    phase: str
    agent: str
    task_id: str
    start: float
    end: float
    status: str
    """An eval status, ``infra_error`` (reset included), ``internal_error`` (a bug of ours the env caught), or
    ``crash`` (an exception other than InfraError)."""
    turns: int = 0
    reset_s: float | None = None
    steps: list[tuple[str, float]] = field(default_factory=list)
    """(tool, seconds) of every step, as the caller saw it."""
    error: str | None = None
    """Where the infra_error happened, or the crash's exception."""
    grading_attempts: int = 0
    blamed_on_agent: bool = False
    """The env said the agent killed its own sandbox (``error: sandbox_killed``); no scripted step does."""
    first: bool = False
    """The env's first episode (a cold start: left out of the latency figures)."""
    warm_reset: bool = True
    """Its reset kept the sandbox and the base it held (a warm reset), rather than loading another task's base or
    starting a new sandbox (after a kill): the two are timed apart."""
    reward: float | None = None
    """The episode's reward (NaN for an infra_error; None when it never finished)."""
    attack: str | None = None
    """For a hostile episode, the attack it ran (a key of :data:`ATTACKS`); None otherwise."""
    findings: list[str] = field(default_factory=list)
    """What a hostile episode saw that it must not have: a host secret, files of an earlier episode."""

    @property
    def infra_error(self) -> bool:
        return self.status == Status.INFRA_ERROR


@dataclass
class Kill:
    t: float
    target: str
    env: int | None
    """The env whose sandbox it was (None when the target names no env: local ``bwrap``)."""
    ok: bool
    error: str | None = None


@dataclass
class SoakReport:
    """What a soak came to; :meth:`problems` lists the broken invariants."""

    run_id: str
    backend: str
    n_envs: int
    minutes: float
    kill_every_s: float | None
    episodes: list[Episode]
    kills: list[Kill]
    load_s: float
    rss_before_mb: float
    rss_after_mb: float
    rss_peak_mb: float
    fds_before: int
    fds_after: int
    leaked_containers: list[str]
    leaked_processes: list[str]
    leaked_threads: list[str]
    leaked_dirs: list[str]
    hung_envs: list[int]
    close_errors: list[str]
    host_files: list[str] = field(default_factory=list)
    """Files hostile episodes wrote that appeared on the host (removed after the count)."""
    hostile_every: int | None = None
    left_after_gc: list[str] = field(default_factory=list)
    """Containers of the run still there after ``repogym gc`` for the run (the count above is before any gc)."""

    def phase(self, name: str) -> list[Episode]:
        return [e for e in self.episodes if e.phase == name]

    @property
    def kills_done(self) -> int:
        return sum(k.ok for k in self.kills)

    @property
    def rss_growth_mb(self) -> float:
        return self.rss_after_mb - self.rss_before_mb

    @property
    def infra_error_rate(self) -> float:
        load = self.phase("load")
        return sum(e.infra_error for e in load) / len(load) if load else float("nan")

    def hostile(self) -> list[Episode]:
        return [e for e in self.episodes if e.attack is not None]

    def hostile_failures(self) -> list[Episode]:
        """Hostile episodes that earned something, were excluded with no kill to explain it, or crashed."""
        reached = self.reached()
        return [e for e in self.hostile() if e.status == CRASH or (e.infra_error and id(e) not in reached)
                or (not e.infra_error and (e.reward != 0 or e.status != "unresolved"))]

    def by_status(self, phase: str) -> dict[str, int]:
        return dict(Counter(e.status for e in self.phase(phase)))

    def reached(self) -> set[int]:
        """Ids of the episodes a kill could have reached (see :func:`reachable`)."""
        return reachable(self.episodes, self.kills)

    def latency(self) -> dict[str, dict[str, float]]:
        """p50/p95 seconds of resets, tool steps and submits, idle versus load, and the load/idle ratios."""
        out = {}
        for kind in ("reset", "reset with load", "tool step", "submit"):
            row = {}
            for phase in ("idle", "load"):
                values = samples(self.phase(phase), kind)
                row[f"{phase}_n"] = len(values)
                row[f"{phase}_p50"], row[f"{phase}_p95"] = percentile(values, .5), percentile(values, .95)
            row["p50_ratio"] = ratio(row["load_p50"], row["idle_p50"])
            row["p95_ratio"] = ratio(row["load_p95"], row["idle_p95"])
            out[kind] = row
        return out

    def problems(self) -> list[str]:
        """Every leak and broken invariant, one line each (empty: the soak passed)."""
        found = []
        for what, items in (("leaked containers", self.leaked_containers),
                            ("containers left after gc", self.left_after_gc),
                            ("leaked processes", self.leaked_processes), ("leaked threads", self.leaked_threads),
                            ("leaked sandbox folders", self.leaked_dirs), ("hung env threads", self.hung_envs),
                            ("errors closing envs", self.close_errors)):
            if items:
                found.append(f"{what}: {len(items)} ({', '.join(map(str, items[:5]))})")
        crashes = [e for e in self.episodes if e.status == CRASH]
        if crashes:
            found.append(f"episodes raised something other than InfraError: {len(crashes)} "
                         f"(first: {crashes[0].error})")
        bugs = [e for e in self.episodes if e.status == Status.INTERNAL_ERROR]
        if bugs:
            found.append(f"episodes ended on a bug of repogym's (internal_error): {len(bugs)} "
                         f"(first: env {bugs[0].env}, {bugs[0].error})")
        load = self.phase("load")
        if not load:
            found.append("no episode finished under load")
        idle_infra = [e for e in self.phase("idle") if e.infra_error]
        if idle_infra:
            found.append(f"infra_error without any kill (idle phase): {len(idle_infra)} ({idle_infra[0].error})")
        reached = self.reached()
        unexplained = [e for e in load if e.infra_error and id(e) not in reached and e.attack is None]
        if unexplained:
            found.append(f"infra_error no kill could have caused: {len(unexplained)} (env {unexplained[0].env}, "
                         f"{unexplained[0].error})")
        if sum(e.infra_error for e in load) > self.kills_done:
            found.append(f"more infra_error episodes ({sum(e.infra_error for e in load)}) than kills "
                         f"({self.kills_done})")
        blamed = [e for e in self.episodes if e.blamed_on_agent]
        if blamed:
            found.append(f"episodes blamed on the agent for a sandbox only the killer killed: {len(blamed)} "
                         f"(env {blamed[0].env}, {blamed[0].task_id}: {blamed[0].status})")
        null_resolved = [e for e in self.episodes if e.agent == "null" and e.status == Status.RESOLVED]
        if null_resolved:
            found.append(f"null-agent episodes resolved: {len(null_resolved)}")
        missed = [e for e in self.episodes if e.agent == "oracle" and e.status not in (Status.RESOLVED, CRASH)
                  and id(e) not in reached]
        if missed:
            found.append(f"oracle episodes no kill reached that did not resolve: {len(missed)} "
                         f"({missed[0].task_id}: {missed[0].status}, {missed[0].error})")
        failed = self.hostile_failures()
        if failed:
            found.append(f"hostile episodes not scored 0 as unresolved: {len(failed)} of {len(self.hostile())} ("
                         + "; ".join(_hostile_line(e) for e in failed[:6]) + ")")
        if self.hostile_every and not self.hostile():
            found.append("no hostile episode finished")
        seen = [e for e in self.hostile() if e.findings]
        if seen:
            found.append(f"hostile episodes saw what they must not: {len(seen)} ("
                         + "; ".join(f"{e.attack}: {e.findings[0]}" for e in seen[:4]) + ")")
        if self.host_files:
            found.append(f"files hostile episodes wrote appeared on the host: {len(self.host_files)} "
                         f"({', '.join(self.host_files[:5])})")
        return found

    @property
    def ok(self) -> bool:
        return not self.problems()

    def to_dict(self) -> dict[str, Any]:
        load = self.phase("load")
        return {"run_id": self.run_id, "backend": self.backend, "n_envs": self.n_envs, "minutes": self.minutes,
                "kill_every_s": self.kill_every_s, "episodes_load": len(load),
                "episodes_per_min": 60 * len(load) / self.load_s if self.load_s else 0.0,
                "by_status": {p: self.by_status(p) for p in ("idle", "load")},
                "infra_error_rate": self.infra_error_rate, "kills_tried": len(self.kills),
                "kills_done": self.kills_done, "reached_by_kill": len(self.reached() & {id(e) for e in load}),
                "latency_s": self.latency(), "rss_before_mb": self.rss_before_mb, "rss_after_mb": self.rss_after_mb,
                "rss_growth_mb": self.rss_growth_mb, "rss_peak_mb": self.rss_peak_mb,
                "fds_before": self.fds_before, "fds_after": self.fds_after,
                "leaked_containers": self.leaked_containers, "left_after_gc": self.left_after_gc,
                "leaked_processes": self.leaked_processes,
                "leaked_threads": self.leaked_threads, "leaked_dirs": self.leaked_dirs,
                "hung_envs": self.hung_envs, "close_errors": self.close_errors, "problems": self.problems(),
                "hostile_every": self.hostile_every, "hostile": hostile_summary(self),
                "host_files": self.host_files,
                "kills": [dataclasses.asdict(k) for k in self.kills],
                "notable_episodes": [dataclasses.asdict(e) | {"reached_by_kill": id(e) in self.reached()}
                                     for e in self.episodes if e.status not in (Status.RESOLVED, Status.UNRESOLVED)
                                     or e.blamed_on_agent or (e.agent == "oracle" and e.status != Status.RESOLVED)
                                     or (e.attack is not None and (e.reward != 0 or e.findings))]}


# -- helpers ------------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``values`` (NaN when empty)."""
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def ratio(a: float, b: float) -> float:
    return a / b if b and not (math.isnan(a) or math.isnan(b)) else float("nan")


def samples(episodes: list[Episode], kind: str) -> list[float]:
    """Seconds of ``kind`` (``reset``: warm ones; ``reset with load``: another base loaded or a new sandbox;
    ``tool step``, ``submit``) over warm episodes that met no infra_error."""
    # Attacks (fills, kills) are not the latencies a policy sees; they are judged on their own.
    warm = [e for e in episodes if not e.first and not e.infra_error and e.status != CRASH and e.attack is None]
    if kind in ("reset", "reset with load"):
        return [e.reset_s for e in warm if e.reset_s is not None and e.warm_reset == (kind == "reset")]
    want_submit = kind == "submit"
    return [s for e in warm for tool, s in e.steps if (tool == "submit") == want_submit]


def reachable(episodes: list[Episode], kills: list[Kill]) -> set[int]:
    """Ids of the episodes a kill could have reached.

    A kill at ``t`` of an env's sandbox can reach the first two of that env's episodes that end after ``t``:
    the one in flight (its agent or grading container died) and the next (its reset finds the agent
    container dead, or its grading is handed the dead warm container; both are retried once). A kill
    naming no env reaches those episodes of every env.
    """
    by_env: dict[int, list[Episode]] = {}
    for e in sorted(episodes, key=lambda e: e.end):
        by_env.setdefault(e.env, []).append(e)
    hit: set[int] = set()
    for kill in (k for k in kills if k.ok):
        for env, eps in by_env.items():
            if kill.env is None or kill.env == env:
                hit.update(id(e) for e in [e for e in eps if e.end >= kill.t][:2])
    return hit


def _proc_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (ppid, name, state) of every process, from /proc."""
    table = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            text = Path(stat).read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        state, ppid = text[text.rindex(")") + 2:].split()[:2]
        table[int(stat.split("/")[2])] = (int(ppid), name, state)
    return table


def descendants() -> dict[int, str]:
    """pid -> ``name (state)`` of every live descendant of this process (zombies included: nobody waited)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {}, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        found[pid] = f"{table[pid][1]} ({table[pid][2]})"
        todo += children.get(pid, [])
    return found


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _sandbox_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "repogym-local-*")))


def _bash(command: str) -> str:
    return json.dumps({"name": "bash", "arguments": {"command": command}})


# -- the scripted episode -----------------------------------------------------------------------------
class Scripted:
    """A few bash probes, then the inner agent (the oracle: gold patch and submit; null: submit)."""

    def __init__(self, inner, probes: tuple[str, ...] = PROBES):
        self.inner, self.probes = inner, probes
        self._queue: list[str] = []

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        self._queue = [_bash(p) for p in self.probes]
        self.inner.reset(observation, info)

    def turn_record(self) -> None:
        """Nothing of its own to record (the Agent protocol's member)."""
        return None

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self._queue.pop(0) if self._queue else self.inner.act(observation, info)


# -- the hostile episode ------------------------------------------------------------------------------
# Folders an agent must not write to (read-only host binds on local, the image's own on docker). {mark} is
# MARK plus the run id, so the host check finds exactly this run's files.
_OUTSIDE = ('for d in / /etc /usr /usr/local "$(python -c \'import sys; print(sys.prefix)\')" '
            '"$(python -c \'import sysconfig; print(sysconfig.get_paths()["purelib"])\')"; do ')
# The payload git would run for the runner if it honoured the agent's configuration: try to write outside
# (remounting first, as root in a namespace can), kill PID 1 and everything, then pass its input on.
_PAYLOAD = """#!/bin/sh
""" + _OUTSIDE.replace('"; do ', '" "$HOME"; do ') + """mount -o remount,rw,bind "$d" 2>/dev/null; touch "$d/{mark}git" 2>/dev/null; done
kill -9 1 2>/dev/null; kill -9 -1 2>/dev/null
exec cat
"""
# Every library source file (not tests): what the hidden tests import, so code appended there runs in pytest.
_LIBRARY = "git ls-files '*.py' | grep -Ev '(^|/)(tests?|testing)/|(^|/)(test_[^/]*|[^/]*_test|conftest)[.]py$'"
# The attacker's code (text the hostile agent appends to the library in its sandbox), not repogym's: its bare
# ``except Exception: pass`` is the attack's, so that a pytest without that hook still runs.
_FORGE = """
try:  # repogym soak: a hostile patch that makes every test pass without running it
    import _pytest.python as _repogym_hostile
    _repogym_hostile.Function.runtest = lambda self: None
except Exception:
    pass
"""
ATTACKS: dict[str, tuple[str, ...]] = {
    "kill": ("kill -9 -1; echo survived", "kill $PPID; kill -9 $PPID; echo survived", "kill -9 1; echo survived"),
    "fill": ("cat /dev/zero > /tmp/{mark}fill 2>&1; df -k /tmp | tail -1",
             # Bounded: /dev/shm may still be half the host's memory where that hole is open.
             "head -c 256M /dev/zero > /dev/shm/{mark}fill 2>&1; df -k /dev/shm | tail -1",
             ": > ~/{mark}home; ls -A ~ | head"),
    # The edit first: once core.fsmonitor is set, the agent's own git calls run the payload (and it kills them).
    "git_config": ("f=$(" + _LIBRARY + " | head -1); echo '# hostile edit' >> \"$f\"; echo \"$f\"",
                   "cat > /repo/.git/{mark}payload <<'EOF'\n" + _PAYLOAD + "EOF\n"
                   "chmod +x /repo/.git/{mark}payload; p=/repo/.git/{mark}payload; "
                   "git config filter.hostile.clean \"$p\" && git config filter.hostile.smudge \"$p\" && "
                   "git config filter.hostile.required true && git config diff.external \"$p\" && "
                   "git config diff.hostile.textconv \"$p\" && git config core.hooksPath /repo/.git/hooks && "
                   "mkdir -p /repo/.git/hooks && for h in pre-commit post-checkout post-index-change "
                   "reference-transaction; do cp \"$p\" /repo/.git/hooks/$h; done && "
                   "printf '* filter=hostile diff=hostile\\n' > .gitattributes && git config core.fsmonitor \"$p\" && "
                   "echo configured"),
    "env_dump": ("env | sort | head -100",
                 "(env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n') | grep '^" + SECRET_VAR + "=' | sort -u"),
    "write_outside": (_OUTSIDE + 'mount -o remount,rw,bind "$d" 2>/dev/null && echo "remounted $d"; '
                      'touch "$d/{mark}agent" 2>/dev/null && echo "wrote $d"; done; echo done',),
    "forge_runtest": ("for f in $(" + _LIBRARY + "); do cat >> \"$f\" <<'EOF'\n" + _FORGE + "EOF\ndone; git diff --stat | tail -1",),
}
"""Attack name -> the ``bash`` commands of a hostile episode that runs it (then it submits)."""
_LEFTOVERS = f"ls -A /tmp /dev/shm ~ /var/tmp 2>/dev/null | grep -F {MARK} || true"


def _hostile_line(e: Episode) -> str:
    return f"{e.attack} on {e.task_id}: {e.status}, reward {e.reward}" + (f", {e.error}" if e.error else "")


def hostile_summary(report: SoakReport) -> dict[str, dict[str, Any]]:
    """Per attack: episodes, scored 0 as unresolved, and each status seen."""
    failed = {id(e) for e in report.hostile_failures()}
    out: dict[str, dict[str, Any]] = {}
    for e in report.hostile():
        row = out.setdefault(e.attack, {"episodes": 0, "scored_0": 0, "statuses": Counter(), "findings": 0})
        row["episodes"] += 1
        row["scored_0"] += id(e) not in failed
        row["statuses"][e.status] += 1
        row["findings"] += bool(e.findings)
    return {name: dict(row, statuses=dict(row["statuses"])) for name, row in sorted(out.items())}


class Hostile:
    """A scripted attacker: looks for earlier episodes' files, runs the commands of one attack, submits.

    Set :attr:`attack` before each episode. :attr:`findings` lists what it saw that it must not have."""

    def __init__(self, run_id: str, secret: str):
        self.mark, self.secret = MARK + run_id + "-", secret
        self.attack = next(iter(ATTACKS))
        self.findings: list[str] = []
        self._queue: list[str] = []
        self._last: str | None = None

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        self.findings, self._last = [], None
        self._queue = [_LEFTOVERS] + [c.replace("{mark}", self.mark) for c in ATTACKS[self.attack]]

    def turn_record(self) -> None:
        """Nothing of its own to record (the Agent protocol's member)."""
        return None

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if self.secret in observation and not any(SECRET_VAR in f for f in self.findings):
            self.findings.append(f"the host's {SECRET_VAR} is visible in the sandbox (after: {self._last!r:.60})")
        outside = [line for line in observation.splitlines() if line.startswith(("wrote /", "remounted /"))]
        if self.attack == "write_outside" and outside:
            self.findings.append(f"an agent command wrote outside the writable folders: {'; '.join(outside[:4])}")
        if self._last == _LEFTOVERS:
            left = sorted({w for w in observation.split() if w.startswith(MARK) and len(w) > len(MARK)})
            if left:
                self.findings.append(f"files of an earlier episode survived the reset: {', '.join(left[:4])}")
        self._last = self._queue.pop(0) if self._queue else None
        return _bash(self._last) if self._last else json.dumps({"name": "submit", "arguments": {}})


def host_files(run_id: str) -> list[str]:
    """Files this run's hostile episodes wrote that are on the host (the folders the attacks write to)."""
    import sysconfig
    folders = {"/", "/etc", "/usr", "/usr/local", str(Path.home()), sys.prefix, sys.base_prefix,
               sysconfig.get_paths()["purelib"]}
    return sorted(f for d in folders for f in glob.glob(os.path.join(glob.escape(d), MARK + run_id + "*")))


class Timed(gym.Wrapper):
    """Records the wall time of ``reset`` and of every ``step`` (with its tool) as the caller sees it."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.reset_s: float | None = None
        self.warm = False
        """Whether the last reset was warm (see :attr:`Episode.warm_reset`)."""
        self.steps: list[tuple[str, float]] = []

    def reset(self, *, seed=None, options=None):
        self.reset_s, self.steps, self.warm = None, [], False
        before = self._sandbox_state()
        start = time.perf_counter()
        out = self.env.reset(seed=seed, options=options)
        self.reset_s = time.perf_counter() - start
        after = self._sandbox_state()
        self.warm = before is not None and after is not None and before[0] is after[0] and before[1] == after[1]
        return out

    def _sandbox_state(self):
        """(the agent's sandbox, the base it holds): both the same after a warm reset."""
        box = self.env.unwrapped._sandbox
        return None if box is None else (box, box.snapshot_key)

    def step(self, action):
        start = time.perf_counter()
        out = self.env.step(action)
        if "infra_error" not in out[4]:
            self.steps.append((out[4].get("tool") or "?", time.perf_counter() - start))
        return out


def play(env: Timed, agents: dict[str, Any], tasks: list[Task], index: int, j: int, seed: int,
         phase: str, hostile_every: int | None = None, first_attack: int = 0) -> Episode:
    """Episode ``j`` of env ``index``: agents alternate, tasks rotate, envs start at different points; every
    ``hostile_every``-th episode is hostile, its attack rotating over :data:`ATTACKS` from ``first_attack``."""
    attack = None
    if hostile_every and j % hostile_every == hostile_every - 1:
        attack = list(ATTACKS)[(first_attack + j // hostile_every) % len(ATTACKS)]
        agent_name, agents["hostile"].attack = "hostile", attack
    else:  # the honest episodes alternate among themselves
        agent_name = ("oracle", "null")[(index + j - (j // hostile_every if hostile_every else 0)) % 2]
    task = tasks[(index + j // 2) % len(tasks)]
    start = time.monotonic()
    episode = Episode(index, phase, agent_name, task.instance_id, start, start, CRASH, first=j == 0, attack=attack)
    try:
        result = run_episode(env, agents[agent_name], task_id=task.instance_id, seed=seed + j, agent_name=agent_name)
        if result.status == Status.INTERNAL_ERROR or not excluded(result.status, result.reward):
            episode.status = result.status
        else:  # excluded for the infrastructure (a NaN reward with any other status counts as that too)
            episode.status = Status.INFRA_ERROR
        episode.reward = result.reward
        episode.turns, episode.grading_attempts = result.turns, result.eval.get("attempts", 0)
        episode.blamed_on_agent = result.info.get("error") == "sandbox_killed"
        if excluded(result.status, result.reward):
            error = result.info.get("infra_error") or result.eval.get("error") or {}
            episode.error = error.get("where")
    except InfraError as exc:  # reset could not bring a sandbox up, or (a bug) a step raised it
        episode.status, episode.error = Status.INFRA_ERROR, f"{'reset' if env.reset_s is None else 'step'}: {exc.where}"
    except Exception as exc:  # a library bug the soak exposed (what it looks for): a finding, kept with where it was
        # raised; strict mode's InternalError lands here too
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        episode.error = f"{type(exc).__name__}: {exc} (at {Path(frame.filename).name}:{frame.lineno})"
    if attack is not None:
        episode.findings = list(agents["hostile"].findings)
    episode.end, episode.reset_s, episode.steps = time.monotonic(), env.reset_s, list(env.steps)
    episode.warm_reset = env.warm
    return episode


# -- the soak -----------------------------------------------------------------------------------------
def soak(n_envs: int = 16, minutes: float = 5.0, kill_every_s: float | None = 5.0, backend: str = "docker",
         seed: int = 0, tasks: list[str | Task] | None = None, idle_episodes: int = 8,
         log: Callable[[str], Any] | None = None, hostile_every: int | None = None,
         min_episodes: int = 0) -> SoakReport:
    """Run the soak described in the module docstring; ``kill_every_s`` None or 0: no kills; ``hostile_every``
    N: every N-th load-phase episode of each env is hostile (None or 0: none; 1: all of them); ``min_episodes``:
    each env plays at least this many load-phase episodes, past the deadline if the machine is slow (a short soak
    that must run every attack)."""
    if n_envs < 1:
        raise ConfigError(f"n_envs must be >= 1, got {n_envs}")
    if minutes <= 0:
        raise ConfigError(f"minutes must be > 0, got {minutes}")
    if idle_episodes < 2:
        raise ConfigError(f"idle_episodes must be >= 2 (the first is a cold start), got {idle_episodes}")
    if backend not in ("docker", "local"):
        raise ConfigError(f"backend must be 'docker' or 'local', got {backend!r}")
    if hostile_every is not None and hostile_every < 0:
        raise ConfigError(f"hostile_every must be >= 0 (0: no hostile episodes), got {hostile_every}")
    log = log or (lambda _: None)
    task_list = [t if isinstance(t, Task) else find_task(t) for t in (tasks or DEFAULT_TASKS)]
    run_id = f"soak-{uuid.uuid4().hex[:8]}"
    secret = uuid.uuid4().hex
    rng = random.Random(seed)
    # A host secret the sandboxes must not pass on (set before any sandbox starts, removed at the end).
    previous_secret = os.environ.get(SECRET_VAR)
    os.environ[SECRET_VAR] = secret
    try:
        return _soak(n_envs, minutes, kill_every_s, backend, task_list, run_id, secret, rng, seed, idle_episodes,
                     log, hostile_every or None, min_episodes)
    finally:
        if previous_secret is None:
            os.environ.pop(SECRET_VAR, None)
        else:
            os.environ[SECRET_VAR] = previous_secret


def _soak(n_envs: int, minutes: float, kill_every_s: float | None, backend: str, task_list: list[Task], run_id: str,
          secret: str, rng: random.Random, seed: int, idle_episodes: int, log: Callable[[str], Any],
          hostile_every: int | None, min_episodes: int = 0) -> SoakReport:
    procs_before, dirs_before = set(descendants()), _sandbox_dirs()
    close_errors: list[str] = []

    def make_env(index: int) -> Timed:
        config = EnvConfig(sandbox=backend, sandbox_config=SandboxConfig(run_id=run_id, labels={ENV_LABEL: str(index)}))
        return Timed(RepoTaskEnv(tasks=task_list, config=config))

    def agents() -> dict[str, Any]:
        return {"oracle": Scripted(OracleAgent(tasks=task_list)), "null": Scripted(make_agent("null")),
                "hostile": Hostile(run_id, secret)}

    def close(env: Timed, index: int) -> None:
        try:
            env.close()
        except Exception as exc:  # the backend refusing to let go (a daemon) or a bug: either is a finding (problems)
            close_errors.append(f"env {index}: {type(exc).__name__}: {exc}")

    log(f"{run_id}: idle phase, 1 env, {idle_episodes} episodes ...")
    episodes: list[Episode] = []
    env, mine = make_env(IDLE), agents()
    try:
        for j in range(idle_episodes):
            episodes.append(play(env, mine, task_list, IDLE, j, seed, "idle"))
    finally:
        close(env, IDLE)

    rss_before, fds_before = rss_mb(), open_fds()
    # After the idle phase, so threads a process keeps for its lifetime (the owner heartbeat) are not leaks.
    threads_before = set(threading.enumerate())
    peak = [rss_before]
    log(f"{run_id}: load phase, {n_envs} envs for {minutes:g} min, "
        f"{f'a kill every {kill_every_s:g} s' if kill_every_s else 'no kills'}"
        f"{f', 1 episode in {hostile_every} hostile' if hostile_every else ''} ...")
    start = time.monotonic()
    deadline = start + minutes * 60
    stop = threading.Event()

    def env_loop(index: int) -> None:
        env, mine = make_env(index), agents()
        # The envs start spread over the attacks, so a short soak runs each of them.
        first_attack = index * len(ATTACKS) // n_envs
        try:
            j = 0
            while time.monotonic() < deadline or j < min_episodes:
                episodes.append(play(env, mine, task_list, index, j, seed + 1000 * (index + 1), "load", hostile_every,
                                     first_attack))
                j += 1
        finally:
            close(env, index)

    kills: list[Kill] = []

    def monitor() -> None:
        next_kill = start + kill_every_s if kill_every_s else math.inf
        while not stop.wait(0.5):
            peak[0] = max(peak[0], rss_mb())
            now = time.monotonic()
            if now >= next_kill and now < deadline:
                kills.append(kill_one(backend, run_id, rng))
                next_kill += kill_every_s

    threads = [threading.Thread(target=env_loop, args=(i,), name=f"soak-env-{i}", daemon=True) for i in range(n_envs)]
    watcher = threading.Thread(target=monitor, name="soak-monitor", daemon=True)
    watcher.start()
    for thread in threads:
        thread.start()
    drain = deadline + 300  # in-flight episodes finish (grading can be slow on a loaded machine) and envs close
    for thread in threads:
        thread.join(timeout=max(0.0, drain - time.monotonic()))
    load_s = time.monotonic() - start
    stop.set()
    watcher.join(timeout=10)
    hung = [int(t.name.rsplit("-", 1)[1]) for t in threads if t.is_alive()]

    leftovers = _containers(run_id) if backend == "docker" else []
    killed = {k.target for k in kills if k.ok}
    leaked_containers = sorted(f"{c.name} ({c.status}{', killed by the soak' if c.name in killed else ''})"
                               for c in leftovers)
    time.sleep(0.2)  # a process killed by close() is reaped by now; anything left was not waited for
    leaked_processes = [f"{pid} {what}" for pid, what in descendants().items() if pid not in procs_before]
    leaked_threads = sorted(t.name for t in threading.enumerate() if t not in threads_before and t.is_alive()
                            and t not in threads)
    leaked_dirs = sorted(_sandbox_dirs() - dirs_before)
    on_host = host_files(run_id)
    for path in on_host:  # counted; an attack's marker must not stay on the machine
        try:
            os.remove(path)
        except OSError as exc:  # gone already, or written by a root the soak is not: say what stays
            log(f"could not remove {path} (a hostile episode's file on the host): {exc}")
    left_after_gc = []
    if backend == "docker":
        from repogym.envs.sandbox.gc import reap
        reap(run_id=run_id)  # what gc would do right now; this process (their owner) is alive, so only orphans go
        left_after_gc = sorted(c.name for c in _containers(run_id))
    report = SoakReport(run_id, backend, n_envs, minutes, kill_every_s or None, episodes, kills, load_s,
                        rss_before, rss_mb(), max(peak[0], rss_mb()), fds_before, open_fds(), leaked_containers,
                        leaked_processes, leaked_threads, leaked_dirs, hung, close_errors, on_host, hostile_every,
                        left_after_gc=left_after_gc)
    for container in leftovers:  # counted above; do not leave them on the machine
        try:
            container.remove(force=True)
        except (DockerException, OSError) as exc:  # the daemon refused, or the container was going already
            log(f"could not remove container {container.name}: {type(exc).__name__}: {exc}")
    return report


def kill_one(backend: str, run_id: str, rng: random.Random) -> Kill:
    """Kill a random running sandbox of the run: a container (docker) or a ``bwrap`` child (local)."""
    now = time.monotonic()
    try:
        if backend == "docker":
            from repogym.envs.sandbox.docker import LABEL, docker_client
            running = docker_client().containers.list(filters={"label": f"{LABEL}.run={run_id}", "status": "running"},
                                                     ignore_removed=True)
            if not running:
                return Kill(now, "-", None, False, "no running container")
            target = rng.choice(sorted(running, key=lambda c: c.name))
            env = target.labels.get(ENV_LABEL)
            target.kill()
            return Kill(now, target.name, int(env) if env is not None else None, True)
        table = _proc_table()
        boxes = sorted(pid for pid, (ppid, name, _) in table.items() if ppid == os.getpid() and name == "bwrap")
        if not boxes:
            return Kill(now, "-", None, False, "no bwrap child")
        pid = rng.choice(boxes)
        os.kill(pid, signal.SIGKILL)
        return Kill(now, f"bwrap {pid}", None, True)
    except (DockerException, OSError, InfraError) as exc:  # it exited or was removed between listing and kill (the
        # daemon's NotFound, or ProcessLookupError), or no daemon answered (SandboxUnavailable)
        return Kill(now, "-", None, False, f"{type(exc).__name__}: {exc}")


def _containers(run_id: str) -> list:
    """Every container labelled with the run id, stopped ones included (a killed one stays until removed)."""
    from repogym.envs.sandbox.docker import LABEL, docker_client
    return docker_client().containers.list(all=True, filters={"label": f"{LABEL}.run={run_id}"}, ignore_removed=True)


# -- report -------------------------------------------------------------------------------------------
def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 1e3:.0f}"


def _x(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}x"


def render(report: SoakReport) -> str:
    load, idle = report.phase("load"), report.phase("idle")
    reached = report.reached()
    lines = [f"soak {report.run_id}: {report.n_envs} envs x {report.minutes:g} min, {report.backend} backend, "
             f"{f'kill every {report.kill_every_s:g} s' if report.kill_every_s else 'no kills'}"]
    lines.append(f"{'episodes':<40}{'idle':>8}{'load':>8}")

    def row(name: str, f: Callable[[list[Episode]], Any]) -> None:
        lines.append(f"{name:<40}{f(idle)!s:>8}{f(load)!s:>8}")
    row("  done", len)
    for status in sorted({e.status for e in report.episodes}):
        row(f"  {status}", lambda es, s=status: sum(e.status == s for e in es))
    row("  oracle resolved / oracle", lambda es: f"{sum(e.status == 'resolved' for e in es if e.agent == 'oracle')}/"
                                               f"{sum(e.agent == 'oracle' for e in es)}")
    row("  null resolved / null", lambda es: f"{sum(e.status == 'resolved' for e in es if e.agent == 'null')}/"
                                           f"{sum(e.agent == 'null' for e in es)}")
    row("  reached by a kill", lambda es: sum(id(e) in reached for e in es))
    row("  blamed on the agent (sandbox_killed)", lambda es: sum(e.blamed_on_agent for e in es))
    row("  grading retried (attempts > 1)", lambda es: sum(e.grading_attempts > 1 for e in es))
    if report.hostile_every:
        failed = {id(e) for e in report.hostile_failures()}
        row("  hostile scored 0 / hostile", lambda es: f"{sum(id(e) not in failed for e in es if e.attack)}/"
                                                      f"{sum(e.attack is not None for e in es)}")
    infra = [e for e in load if e.infra_error]
    lines.append(f"episodes/min under load: {60 * len(load) / report.load_s:.1f}   "
                 f"infra_error rate: {report.infra_error_rate:.1%} ({len(infra)} of {len(load)})   "
                 f"kills: {report.kills_done} done of {len(report.kills)} tried")
    if infra:
        where = Counter(e.error for e in infra).most_common()
        lines.append("  infra_error where: " + ", ".join(f"{w} x{n}" for w, n in where))
    for attack, r in hostile_summary(report).items():
        lines.append(f"  hostile {attack:<14} {r['scored_0']}/{r['episodes']} scored 0; "
                     + ", ".join(f"{s} x{n}" for s, n in sorted(r["statuses"].items()))
                     + (f"; {r['findings']} saw what they must not" if r["findings"] else ""))
    lines.append(f"{'latency (ms)':<16}{'n idle':>7}{'n load':>7}{'idle p50':>9}{'idle p95':>9}{'load p50':>9}"
                 f"{'load p95':>9}{'p50 x':>8}{'p95 x':>8}")
    for kind, r in report.latency().items():
        lines.append(f"{kind:<16}{r['idle_n']:>7}{r['load_n']:>7}{_ms(r['idle_p50']):>9}{_ms(r['idle_p95']):>9}"
                     f"{_ms(r['load_p50']):>9}{_ms(r['load_p95']):>9}{_x(r['p50_ratio']):>8}{_x(r['p95_ratio']):>8}")
    per100 = 100 * report.rss_growth_mb / len(load) if load else float("nan")
    lines.append(f"memory: RSS {report.rss_before_mb:.1f} MB -> {report.rss_after_mb:.1f} MB "
                 f"({report.rss_growth_mb:+.1f} MB, {per100:+.2f} MB per 100 episodes), "
                 f"peak {report.rss_peak_mb:.1f} MB; "
                 f"open fds {report.fds_before} -> {report.fds_after}")
    lines.append(f"containers of the run at the end: {len(report.leaked_containers)} before any gc, "
                 f"{len(report.left_after_gc)} after gc")
    lines.append(f"leaks after close: containers {len(report.leaked_containers)}, processes "
                 f"{len(report.leaked_processes)}, threads {len(report.leaked_threads)}, sandbox folders "
                 f"{len(report.leaked_dirs)}" + (f", hostile files on the host {len(report.host_files)}"
                                                 if report.hostile_every else ""))
    problems = report.problems()
    lines.append("invariants: OK" if not problems else "PROBLEMS:\n" + "\n".join(f"  - {p}" for p in problems))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=16, help="concurrent environments (default 16)")
    parser.add_argument("--minutes", type=float, default=5.0, help="length of the load phase (default 5)")
    parser.add_argument("--kill-every", type=float, default=5.0, help="seconds between kills; 0: none (default 5)")
    parser.add_argument("--backend", choices=("docker", "local"), default="docker")
    parser.add_argument("--idle-episodes", type=int, default=8, help="episodes of the idle phase (default 8)")
    parser.add_argument("--task", action="append", help="task id (repeatable; default: three tablekit tasks)")
    parser.add_argument("--hostile-every", type=int, default=0,
                        help="every N-th load-phase episode of each env is a scripted attack that must score 0 "
                             "(0: none, the default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="also print the numbers as JSON")
    args = parser.parse_args(argv)
    report = soak(args.envs, args.minutes, args.kill_every or None, args.backend, args.seed, args.task,
                  args.idle_episodes, log=lambda m: print(m, file=sys.stderr, flush=True),
                  hostile_every=args.hostile_every or None)
    print(render(report))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
