"""Reaping leftovers: what a crashed repogym process created and did not remove.

What counts as a leftover (and nothing else is ever touched):
- **containers** and **volumes** labelled ``repogym`` whose ``repogym.owner`` is not alive (see
  :mod:`repogym.envs.sandbox.owner`); one without an owner label (made before owners existed) when it is at
  least ``older_than_s`` old. Anything without the ``repogym`` label is never looked at.
- **tempdirs** ``repogym-local-*`` directly in ``tempfile.gettempdir()``, owned by this user, holding a
  ``.repogym-owner`` marker whose owner is not alive. A folder without the marker is never touched.
- **cgroups**: directories named ``repogym-*`` under ``/sys/fs/cgroup`` (any v1 controller or the v2
  tree) whose ``cgroup.procs`` is empty and that are at least ``stale_after_s`` old (a younger one may
  belong to a sandbox being set up). A cgroup cannot hold an owner marker, so emptiness is the test.
- **heartbeats**: heartbeat files of owners that are not alive.

``older_than_s`` applies to every kind (nothing younger is reaped). ``run_id`` restricts containers
and volumes to that run (label ``repogym.run``), tempdirs to markers naming that run (``run=`` line) and
cgroups to the local backend's names for it (``repogym-<run id>-<8 hex digits>``); heartbeats belong to
no run, so they are left alone when ``run_id`` is given.

When Docker is unreachable, the other kinds are still reaped and the report says why Docker was skipped.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Literal

from repogym.envs.core.errors import ConfigError, SandboxUnavailable
from repogym.envs.sandbox import cgroups
from repogym.envs.sandbox.docker import LABEL
from repogym.envs.sandbox.docker_client import daemon_errors, docker_client
from repogym.envs.sandbox.owner import (HEARTBEAT_INTERVAL_S, MARKER_NAME, OWNER_LABEL, heartbeat_dir, owner_status,
                                read_owner_marker)

log = logging.getLogger(__name__)

Kind = Literal["container", "volume", "tempdir", "cgroup", "heartbeat"]
KINDS: tuple[Kind, ...] = ("container", "volume", "tempdir", "cgroup", "heartbeat")
RUN_LABEL = f"{LABEL}.run"
CREATED_LABEL = f"{LABEL}.created"
TEMPDIR_PREFIX = "repogym-local-"
CGROUP_PREFIX, CGROUP_ROOT = cgroups.PREFIX, cgroups.ROOT
CGROUP_MAX_DEPTH = 8  # deep enough for a delegated v2 subtree, bounded so a walk stays cheap
DEFAULT_STALE_AFTER_S = 120.0
# Below this a live owner on another host, between two heartbeats, could look dead.
MIN_STALE_AFTER_S = 2 * HEARTBEAT_INTERVAL_S


@dataclass
class Leftover:
    """One thing a dead owner left behind."""

    kind: Kind
    """``container``, ``volume``, ``tempdir``, ``cgroup`` or ``heartbeat``."""
    name: str
    """Container or volume name, or the path of the folder or file."""
    reason: str
    """Why it is a leftover: owner dead, heartbeat stale, age."""
    removed: bool = False
    """Set by :func:`reap` once it is gone."""
    error: str | None = None
    """Why :func:`reap` could not remove it."""
    remove: Callable[[], None] = field(default=lambda: None, repr=False, compare=False)
    """Removes it (used by :func:`reap`)."""


@dataclass
class GcReport:
    """What a gc pass found (and, unless a dry run, removed), and the parts it had to skip."""

    leftovers: list[Leftover] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    """Part (``docker``, ``cgroup``, ...) -> why it was not looked at."""


def _verdict(owner: str | None, age_s: float, older_than_s: float, stale_after_s: float) -> str | None:
    """Why a thing of ``owner`` and ``age_s`` is a leftover, or ``None`` if it must stay."""
    if age_s < older_than_s:
        return None
    if owner is None:
        return f"no owner, {age_s:.0f} s old"
    alive, why = owner_status(owner, stale_after_s)
    return None if alive else why


def _age_from_label(labels: dict, now: float) -> float:
    try:
        return now - float(labels.get(CREATED_LABEL) or 0)
    except ValueError:
        return now  # unknown age counts as old, as a missing label always has


def _age_from_docker_time(text: str | None, now: float) -> float:
    # Docker writes RFC 3339, sometimes with nanoseconds, which fromisoformat does not take.
    try:
        return now - datetime.fromisoformat(re.sub(r"\.\d+", "", text or "").replace("Z", "+00:00")).timestamp()
    except ValueError:
        return now


def _containers(client, run_id, older_than_s, stale_after_s, now) -> list[Leftover]:
    filters = {"label": [LABEL] + ([f"{RUN_LABEL}={run_id}"] if run_id else [])}
    found = []
    # ignore_removed: the SDK inspects each listed container, and one may go (its owner closed it) meanwhile.
    for container in client.containers.list(all=True, filters=filters, ignore_removed=True):
        labels = container.labels or {}
        if LABEL not in labels or (run_id and labels.get(RUN_LABEL) != run_id):
            continue  # the filter should have done this; never trust it with a removal
        reason = _verdict(labels.get(OWNER_LABEL), _age_from_label(labels, now), older_than_s, stale_after_s)
        if reason:
            found.append(Leftover("container", container.name, reason,
                                  remove=lambda c=container: c.remove(force=True)))
    return found


def _volumes(client, run_id, older_than_s, stale_after_s, now) -> list[Leftover]:
    filters = {"label": [LABEL] + ([f"{RUN_LABEL}={run_id}"] if run_id else [])}
    found = []
    for volume in client.volumes.list(filters=filters):
        labels = volume.attrs.get("Labels") or {}
        if LABEL not in labels or (run_id and labels.get(RUN_LABEL) != run_id):
            continue
        age = (_age_from_label(labels, now) if CREATED_LABEL in labels
               else _age_from_docker_time(volume.attrs.get("CreatedAt"), now))
        reason = _verdict(labels.get(OWNER_LABEL), age, older_than_s, stale_after_s)
        if reason:
            found.append(Leftover("volume", volume.name, reason, remove=lambda v=volume: v.remove(force=True)))
    return found


def _tempdirs(run_id, older_than_s, stale_after_s, now) -> list[Leftover]:
    found = []
    try:
        entries = [e for e in os.scandir(tempfile.gettempdir()) if e.name.startswith(TEMPDIR_PREFIX)]
    except OSError:
        return found
    for entry in entries:
        path = Path(entry.path)
        try:
            info = path.lstat()
        except OSError:
            continue
        # A symlink or file is not a sandbox folder; another user's folder is not ours to judge.
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            continue
        marker = read_owner_marker(path)
        if marker is None:
            continue
        owner, run = marker
        if run_id and run != run_id:
            continue
        try:
            age = now - (path / MARKER_NAME).stat().st_mtime
        except OSError:
            continue
        reason = _verdict(owner, age, older_than_s, stale_after_s)
        if reason:
            found.append(Leftover("tempdir", str(path), reason, remove=lambda p=path: shutil.rmtree(p)))
    return found


def _cgroups(root: Path, run_id, older_than_s, stale_after_s, now) -> list[Leftover]:
    # The local backend names a sandbox's cgroup repogym-<run id>-<uuid4 hex[:8]>; a cgroup holds no labels.
    of_run = re.compile(rf"{re.escape(CGROUP_PREFIX + run_id)}-[0-9a-f]{{8}}") if run_id else None
    candidates = []
    for dirpath, dirnames, _ in os.walk(root, onerror=lambda exc: None):  # unreadable parts: skip
        if len(Path(dirpath).relative_to(root).parts) >= CGROUP_MAX_DEPTH:
            dirnames.clear()
        candidates += [Path(dirpath) / d for d in dirnames
                       if d.startswith(CGROUP_PREFIX) and (of_run is None or of_run.fullmatch(d))]
    found = []
    # Deepest first, so a nested repogym cgroup goes before its parent.
    for path in sorted(candidates, key=lambda p: len(p.parts), reverse=True):
        try:
            if path.is_symlink() or (path / "cgroup.procs").read_text().strip():
                continue  # a process still runs in it, or it is not a cgroup
            age = now - path.stat().st_mtime
        except OSError:
            continue
        if age < max(older_than_s, stale_after_s):
            continue
        found.append(Leftover("cgroup", str(path), f"empty cgroup, {age:.0f} s old",
                              remove=lambda p=path: os.rmdir(p)))
    return found


def _heartbeats(older_than_s, stale_after_s, now) -> list[Leftover]:
    found = []
    try:
        files = [p for p in heartbeat_dir().iterdir() if p.is_file() and not p.is_symlink()]
    except OSError:
        return found
    for path in files:
        try:
            owner = path.read_text(errors="replace").strip()
            age = now - path.stat().st_mtime
        except OSError:
            continue
        if age < max(older_than_s, stale_after_s):
            continue
        reason = _verdict(owner, age, older_than_s, stale_after_s)
        if reason:
            found.append(Leftover("heartbeat", str(path), reason, remove=lambda p=path: p.unlink()))
    return found


def survey(run_id: str | None = None, older_than_s: float = 0.0,
           stale_after_s: float = DEFAULT_STALE_AFTER_S) -> GcReport:
    """Find leftovers without removing anything; the report also says which parts were skipped."""
    if older_than_s < 0:
        raise ConfigError(f"expected older_than_s >= 0, got {older_than_s}")
    if stale_after_s < MIN_STALE_AFTER_S:
        raise ConfigError(f"expected stale_after_s (--stale-after) >= {MIN_STALE_AFTER_S:.0f} "
                          f"(twice the heartbeat interval), got {stale_after_s}")
    report = GcReport()
    now = time.time()
    try:
        client = docker_client()
    except SandboxUnavailable as exc:  # no SDK, no daemon
        report.skipped["docker"] = exc.message
        client = None
    if client is not None:
        for kind, scan in (("container", _containers), ("volume", _volumes)):
            try:
                report.leftovers += scan(client, run_id, older_than_s, stale_after_s, now)
            except daemon_errors() as exc:  # the Docker daemon went away or refused mid-way
                report.skipped[kind] = f"{type(exc).__name__}: {exc}"
    report.leftovers += _tempdirs(run_id, older_than_s, stale_after_s, now)
    if CGROUP_ROOT.is_dir():
        report.leftovers += _cgroups(CGROUP_ROOT, run_id, older_than_s, stale_after_s, now)
    else:
        report.skipped["cgroup"] = f"no {CGROUP_ROOT}"
    if run_id:
        report.skipped["heartbeat"] = "not per run"
    else:
        report.leftovers += _heartbeats(older_than_s, stale_after_s, now)
    return report


def find_leftovers(run_id: str | None = None, older_than_s: float = 0.0,
                   stale_after_s: float = DEFAULT_STALE_AFTER_S) -> list[Leftover]:
    """The leftovers :func:`reap` would remove (skipped parts are logged)."""
    report = survey(run_id, older_than_s, stale_after_s)
    for part, why in report.skipped.items():
        log.info("gc skipped %s: %s", part, why)
    return report.leftovers


def reap(run_id: str | None = None, older_than_s: float = 0.0, stale_after_s: float = DEFAULT_STALE_AFTER_S,
         dry_run: bool = False) -> GcReport:
    """Remove the leftovers :func:`survey` finds; a failure is recorded on the item, not raised.

    Containers go before volumes, so a volume they held is free by then.
    """
    report = survey(run_id, older_than_s, stale_after_s)
    if dry_run:
        return report
    for item in report.leftovers:
        _remove(item)
    return report


def _remove(item: Leftover) -> None:
    """Remove one leftover; a failure is recorded on it (and logged), so one failure does not stop the rest."""
    try:
        item.remove()
        item.removed = True
    except daemon_errors() as exc:  # the Docker daemon (already gone, busy) or the file system (permission): outside
        item.error = f"{type(exc).__name__}: {exc}"
        log.info("gc could not remove %s %s: %s", item.kind, item.name, item.error)


def reap_dead_owners_here(run_id: str | None = None) -> GcReport:
    """Remove at once what owners on this host that are provably gone (their pid no longer runs with the recorded
    start time) left behind; nothing of an owner on another host or of unknown owner is touched, whatever its
    heartbeat. Run by a new rollout worker and by the driver when it replaces a dead one."""
    report = survey(run_id)
    report.leftovers = [item for item in report.leftovers
                        if item.kind in ("container", "volume", "tempdir") and item.reason.startswith("owner dead")]
    for item in report.leftovers:
        _remove(item)
    return report
