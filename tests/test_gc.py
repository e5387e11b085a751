"""``repogym gc``: owners, heartbeats, and reaping only what dead repogym owners left behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from repogym.envs.core.errors import ConfigError, SandboxUnavailable
from repogym.envs.sandbox import gc, owner
from repogym.envs.sandbox.owner import (MARKER_NAME, OWNER_LABEL, heartbeat_path, owner_alive, owner_id, owner_labels,
                                owner_status, write_owner_marker)
from repogym.cli import main
from tests.conftest import require_backend

ROOT = Path(__file__).resolve().parents[1]
OLD = time.time() - 3600  # an mtime well past any stale_after_s used here


def _no_docker():
    raise SandboxUnavailable("sandbox.docker", "no Docker daemon answers: (test)")


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A private heartbeat folder, temp dir and cgroup root; Docker unreachable unless a test says so."""
    monkeypatch.setenv("REPOGYM_HEARTBEAT_DIR", str(tmp_path / "heartbeats"))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(gc, "CGROUP_ROOT", tmp_path / "no-cgroups")
    monkeypatch.setattr(gc, "docker_client", _no_docker)
    return tmp


def _dead_owner() -> str:
    """The owner id of a real process on this host that has since exited."""
    proc = subprocess.Popen(["sleep", "30"])
    start = owner._start_time(proc.pid)
    proc.kill()
    proc.wait()
    return f"{socket.gethostname()}:{proc.pid}:{start}"


def _sandbox_dir(tmp: Path, marker: str | None, run: str | None = None) -> Path:
    path = Path(tempfile.mkdtemp(prefix="repogym-local-", dir=tmp))
    (path / "repo").mkdir()
    if marker is not None:
        (path / MARKER_NAME).write_text(marker + "\n" + (f"run={run}\n" if run else ""))
    return path


def _age(path: Path) -> None:
    os.utime(path, (OLD, OLD))


# --- owner ids and heartbeats ---------------------------------------------------------------------------

def test_owner_id_names_host_pid_and_start_time(world):
    host, pid, start = owner_id().rsplit(":", 2)
    assert (host, int(pid)) == (socket.gethostname(), os.getpid())
    assert start == Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]
    labels = owner_labels()
    assert labels == {OWNER_LABEL: owner_id()}
    beat = heartbeat_path(owner_id())
    assert beat.read_text().strip() == owner_id()
    assert any(t.name == "repogym-heartbeat" and t.daemon for t in threading.enumerate())
    assert owner_alive(owner_id(), 120)


def test_heartbeat_starts_again_in_a_forked_child(world):
    owner_labels()
    parent = owner_id()
    child = os.fork()
    if child == 0:  # the child: its own owner id, its own heartbeat thread
        try:
            owner_labels()
            ok = heartbeat_path(owner_id()).exists() and any(
                t.name == "repogym-heartbeat" for t in threading.enumerate())
            os._exit(0 if ok and owner_id() != parent else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(child, 0)
    assert os.WEXITSTATUS(status) == 0


def test_owner_alive_by_pid_start_time_and_heartbeat(world):
    dead = _dead_owner()
    assert owner_status(dead, 120) == (False, f"owner dead (pid {dead.split(':')[1]} gone)")
    reused = f"{socket.gethostname()}:{os.getpid()}:1"  # our pid, another start time
    assert owner_status(reused, 120)[0] is False and "reused" in owner_status(reused, 120)[1]
    foreign = "some-other-host:4242:777"
    assert owner_status(foreign, 120) == (False, "owner on another host (some-other-host), no heartbeat")
    beat = heartbeat_path(foreign)
    beat.parent.mkdir(parents=True, exist_ok=True)
    beat.write_text(foreign)
    assert owner_alive(foreign, 120)
    _age(beat)
    alive, why = owner_status(foreign, 120)
    assert not alive and why.startswith("heartbeat stale")
    assert owner_status("", 120) == (False, "unparseable owner ''")
    assert owner_alive("not an owner", 120) is False


def test_a_dead_owner_on_this_host_is_dead_at_once_whatever_its_heartbeat(world):
    dead = _dead_owner()
    beat = heartbeat_path(dead)
    beat.parent.mkdir(parents=True, exist_ok=True)
    beat.write_text(dead)  # it beat a moment before it died
    assert owner_status(dead, 120) == (False, f"owner dead (pid {dead.split(':')[1]} gone)")


# A child that starts its heartbeat the way a sandbox start does (owner_labels), forks a grandchild that starts its
# own and exits normally, checks its own heartbeat survived that, then ends as argv[1] says.
ENDING_CHILD = """
import os, sys
from repogym.envs.sandbox.owner import heartbeat_path, owner_id, owner_labels
owner_labels()
print(owner_id(), flush=True)
child = os.fork()
if child == 0:
    owner_labels()
    print(owner_id(), flush=True)
    sys.exit(0)  # a normal exit: its atexit hooks run, the inherited one included
os.waitpid(child, 0)
print("kept" if heartbeat_path(owner_id()).exists() else "lost", flush=True)
if sys.argv[1] == "exception":
    raise RuntimeError("the program failed")
"""


@pytest.mark.parametrize("ending", ["normal", "exception"])
def test_a_process_that_ends_normally_leaves_no_heartbeat_and_gc_finds_nothing(world, ending, capsys):
    ran = subprocess.run([sys.executable, "-c", ENDING_CHILD, ending], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == (0 if ending == "normal" else 1), ran.stderr
    parent, child, kept = ran.stdout.split()
    assert parent != child and kept == "kept", ran.stdout  # the forked child removed its own heartbeat only
    assert not heartbeat_path(parent).exists() and not heartbeat_path(child).exists()
    assert [p.name for p in heartbeat_path(parent).parent.iterdir()] == []
    assert main(["gc", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "would remove 0 leftover(s)"


def test_stop_heartbeat_removes_the_file_and_a_later_start_beats_again(world):
    owner_labels()
    beat = heartbeat_path(owner_id())
    assert beat.exists()
    owner.stop_heartbeat()
    assert not beat.exists() and not any(t.name == "repogym-heartbeat" for t in threading.enumerate())
    owner.stop_heartbeat()  # nothing running: nothing to do
    owner_labels()  # a sandbox started after close_all (tests do) beats again
    assert beat.exists()


def test_gc_never_counts_the_heartbeat_of_a_live_owner(world):
    owner_labels()
    ours = heartbeat_path(owner_id())
    _age(ours)  # old, as a live owner's never is; but its pid runs with the recorded start time
    dead = _dead_owner()
    theirs = heartbeat_path(dead)
    theirs.write_text(dead)
    _age(theirs)
    assert [(x.kind, x.name) for x in gc.find_leftovers()] == [("heartbeat", str(theirs))]


# --- temp dirs, cgroups, heartbeats without Docker ------------------------------------------------------

def test_tempdirs_of_dead_owners_go_live_and_unmarked_ones_stay(world):
    # A real process marks its folder, dies without cleaning up (os._exit: no atexit hook runs), and its last
    # heartbeat goes stale.
    code = ("import os, tempfile, sys; from repogym.envs.sandbox.owner import write_owner_marker, owner_id; "
            "d = tempfile.mkdtemp(prefix='repogym-local-', dir=sys.argv[1]); write_owner_marker(d); "
            "print(d, owner_id(), flush=True); os._exit(0)")
    out = subprocess.run([sys.executable, "-c", code, str(world)], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.split()
    crashed, crashed_owner = Path(out[0]), out[1]
    _age(heartbeat_path(crashed_owner))
    live = _sandbox_dir(world, None)
    write_owner_marker(live)
    unmarked = _sandbox_dir(world, None)
    _age(unmarked)
    not_ours = world / "somebody-else"
    not_ours.mkdir()
    (not_ours / MARKER_NAME).write_text(_dead_owner())
    stray_file = world / "repogym-local-file"
    stray_file.write_text(_dead_owner())
    foreign_fresh = _sandbox_dir(world, "other-host:1:1")
    heartbeat_path("other-host:1:1").write_text("other-host:1:1")
    foreign_stale = _sandbox_dir(world, "other-host:2:2")
    heartbeat_path("other-host:2:2").write_text("other-host:2:2")
    _age(heartbeat_path("other-host:2:2"))

    report = gc.reap(dry_run=True)
    found = {Path(x.name): x.reason for x in report.leftovers if x.kind == "tempdir"}
    assert set(found) == {crashed, foreign_stale}
    assert found[crashed].startswith("owner dead") and found[foreign_stale].startswith("heartbeat stale")
    assert crashed.exists() and foreign_stale.exists()  # a dry run removes nothing
    assert report.skipped["docker"].startswith("no Docker daemon answers")

    report = gc.reap()
    assert all(x.removed for x in report.leftovers if x.kind == "tempdir")
    assert not crashed.exists() and not foreign_stale.exists()
    for kept in (live, unmarked, not_ours, stray_file, foreign_fresh):
        assert kept.exists(), kept
    # The crashed owner's stale heartbeat went too; our own fresh one stays.
    assert not heartbeat_path(crashed_owner).exists() and heartbeat_path(owner_id()).exists()


def test_run_restricts_tempdirs_and_cgroups(world, monkeypatch, tmp_path):
    dead = _dead_owner()
    of_a, of_b, of_none = (_sandbox_dir(world, dead, run) for run in ("a", "b", None))
    root = tmp_path / "cgroup"
    monkeypatch.setattr(gc, "CGROUP_ROOT", root)
    for name in ("repogym-a-0123abcd", "repogym-a-b-0123abcd", "repogym-b-0123abcd", "repogym-a-x"):
        (root / "pids" / name).mkdir(parents=True)
        (root / "pids" / name / "cgroup.procs").write_text("")
        _age(root / "pids" / name)
    found = gc.find_leftovers(run_id="a")
    assert {(x.kind, x.name) for x in found} == {("tempdir", str(of_a)),
                                                 ("cgroup", str(root / "pids" / "repogym-a-0123abcd"))}
    report = gc.reap(run_id="a")
    assert not of_a.exists() and of_b.exists() and of_none.exists()
    assert report.skipped["heartbeat"] == "not per run"


def test_only_old_enough_leftovers_with_older_than(world):
    fresh = _sandbox_dir(world, _dead_owner())
    assert gc.find_leftovers(older_than_s=600) == []
    _age(fresh / MARKER_NAME)
    assert [x.name for x in gc.find_leftovers(older_than_s=600)] == [str(fresh)]


def test_cgroups_only_empty_old_repogym_ones(world, monkeypatch, tmp_path):
    root = tmp_path / "cgroup"
    monkeypatch.setattr(gc, "CGROUP_ROOT", root)

    def cgroup(rel: str, procs: str | None = "", old: bool = True) -> Path:
        path = root / rel
        path.mkdir(parents=True)
        if procs is not None:
            (path / "cgroup.procs").write_text(procs)
        if old:
            _age(path)
        return path

    empty_v1 = cgroup("pids/repogym-a")
    empty_v2 = cgroup("unified/user.slice/repogym-b")
    cgroup("pids/repogym-busy", procs="1234\n")
    cgroup("memory/repogym-young", old=False)  # may be a sandbox being set up
    cgroup("memory/other-empty")
    cgroup("memory/repogym-not-a-cgroup", procs=None)
    found = {x.name: x.reason for x in gc.find_leftovers() if x.kind == "cgroup"}
    assert set(found) == {str(empty_v1), str(empty_v2)}
    assert found[str(empty_v1)].startswith("empty cgroup")
    # A real cgroupfs lets rmdir take a folder with its control files; this fake one does not, and an
    # error is recorded, not raised.
    report = gc.reap()
    failed = [x for x in report.leftovers if x.kind == "cgroup"]
    assert failed and all(x.error and not x.removed for x in failed)


def test_missing_cgroup_root_is_skipped_not_fatal(world):
    report = gc.reap()
    assert report.leftovers == [] and report.skipped["cgroup"].startswith("no ")


def _writable_cgroup_controller() -> Path | None:
    for name in ("pids", "memory", "unified"):
        path = Path("/sys/fs/cgroup") / name
        if (path / "cgroup.procs").exists() and os.access(path, os.W_OK):
            return path
    return None


def test_real_empty_cgroup_is_removed_busy_and_foreign_stay(world, monkeypatch):
    controller = _writable_cgroup_controller()
    if controller is None:
        pytest.skip("no writable cgroup v1 controller here (needs root)")
    parent = controller / f"pytest-gc-{uuid.uuid4().hex[:8]}"
    empty, busy, other = parent / "repogym-empty", parent / "repogym-busy", parent / "other-empty"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        for path in (parent, empty, busy, other):
            path.mkdir()
        (busy / "cgroup.procs").write_text(str(sleeper.pid))
        for path in (empty, busy, other):
            _age(path)
        monkeypatch.setattr(gc, "CGROUP_ROOT", parent)
        report = gc.reap()
        assert [(x.name, x.removed) for x in report.leftovers] == [(str(empty), True)]
        assert not empty.exists() and busy.exists() and other.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
        for path in (empty, busy, other, parent):
            if path.exists():
                path.rmdir()


def test_stale_after_below_two_heartbeats_is_refused(world):
    with pytest.raises(ConfigError, match="expected stale_after_s"):
        gc.reap(stale_after_s=5)
    with pytest.raises(ConfigError, match="expected older_than_s >= 0"):
        gc.reap(older_than_s=-1)


def test_cli_prints_kinds_and_reasons_and_dry_run_keeps(world, capsys):
    crashed = _sandbox_dir(world, _dead_owner())
    assert main(["gc", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "would remove 1 leftover(s)"
    assert "tempdir (1):" in out and f"  {crashed}  owner dead (pid" in out
    assert "skipped docker: no Docker daemon answers" in out
    assert crashed.exists()
    assert main(["gc"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "removed 1 leftover(s)" and str(crashed) in out
    assert not crashed.exists()


# --- Docker ---------------------------------------------------------------------------------------------

@pytest.fixture
def docker_world(world, monkeypatch):
    """``world`` with the real Docker daemon; yields a fresh run id and removes what a test leaves."""
    require_backend("docker")
    from repogym.envs.sandbox.docker_client import docker_client
    from repogym.envs.sandbox.images import base_image_exists
    if not base_image_exists():
        pytest.fail("base image missing: run `repogym images build`")
    monkeypatch.setattr(gc, "docker_client", docker_client)
    client = docker_client()
    run = f"pytest-gc-{uuid.uuid4().hex[:8]}"
    yield client, run
    for container in client.containers.list(all=True, filters={"label": f"repogym.run={run}"}):
        container.remove(force=True)
    for volume in client.volumes.list(filters={"label": f"repogym.run={run}"}):
        volume.remove(force=True)


def _container(client, labels: dict) -> str:
    return client.containers.run("repogym/base:bookworm", ["sleep", "infinity"], detach=True, labels=labels,
                                 network_mode="none").name


def _repogym_labels(run: str) -> dict:
    return {"repogym": "1", "repogym.run": run, "repogym.created": str(int(time.time()))}


@pytest.mark.docker
def test_containers_of_dead_owners_go_live_and_unlabelled_ones_stay(docker_world):
    client, run = docker_world
    # A real process creates a container the way docker.py does, then dies without removing it.
    code = ("import os, sys, time, docker; from repogym.envs.sandbox.owner import owner_labels, owner_id; "
            "labels = {'repogym': '1', 'repogym.run': sys.argv[1], 'repogym.created': str(int(time.time())), "
            "**owner_labels()}; "
            "c = docker.from_env().containers.run('repogym/base:bookworm', ['sleep', 'infinity'], detach=True, "
            "labels=labels, network_mode='none'); print(c.name, owner_id(), flush=True); os._exit(0)")
    out = subprocess.run([sys.executable, "-c", code, run], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.split()
    crashed, crashed_owner = out
    _age(heartbeat_path(crashed_owner))
    live = _container(client, {**_repogym_labels(run), **owner_labels()})
    # Labels that look like repogym's but lack the `repogym` label itself: never repogym's.
    foreign = _container(client, {"repogym.run": run, "repogym.owner": _dead_owner(), "repogym.created": "0",
                                  "other.app": "1"})

    everywhere = [x.name for x in gc.find_leftovers()]  # a look across the whole daemon, removing nothing
    assert crashed in everywhere and live not in everywhere and foreign not in everywhere
    report = gc.reap(run_id=run, dry_run=True)
    assert [(x.kind, x.name) for x in report.leftovers] == [("container", crashed)]
    assert report.leftovers[0].reason.startswith("owner dead")
    assert client.containers.get(crashed)  # dry run: still there

    report = gc.reap(run_id=run, older_than_s=0)
    assert [(x.name, x.removed) for x in report.leftovers] == [(crashed, True)]
    names = {c.name for c in client.containers.list(all=True, filters={"label": f"repogym.run={run}"})}
    assert names == {live, foreign}


@pytest.mark.docker
def test_volumes_of_dead_owners_go_unlabelled_ones_stay(docker_world):
    client, run = docker_world
    dead = client.volumes.create(name=f"{run}-dead", labels={**_repogym_labels(run), OWNER_LABEL: _dead_owner()})
    live = client.volumes.create(name=f"{run}-live", labels={**_repogym_labels(run), **owner_labels()})
    unlabelled = client.volumes.create(name=f"{run}-other", labels={"repogym.run": run})
    report = gc.reap(run_id=run)
    assert [(x.kind, x.name, x.removed) for x in report.leftovers] == [("volume", dead.name, True)]
    assert report.leftovers[0].reason.startswith("owner dead")
    left = {v.name for v in client.volumes.list(filters={"label": f"repogym.run={run}"})}
    assert left == {live.name, unlabelled.name}


@pytest.mark.docker
def test_gc_reaps_the_sandbox_of_a_crashed_run(docker_world, capsys):
    client, run = docker_world
    # A real docker sandbox whose process dies without closing it.
    code = ("import os, sys; from repogym.envs.sandbox import SandboxConfig, make_sandbox; "
            "box = make_sandbox('docker', SandboxConfig(run_id=sys.argv[1])); print(box.name, flush=True); "
            "os._exit(0)")
    name = subprocess.run([sys.executable, "-c", code, run], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    labels = client.containers.get(name).labels
    if OWNER_LABEL in labels:  # once docker.py labels owners, the dead owner's last heartbeat must go stale
        _age(heartbeat_path(labels[OWNER_LABEL]))
    assert [x.name for x in gc.find_leftovers(run_id=run)] == [name]
    assert main(["gc", "--run", run]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["removed 1 leftover(s)", "container (1):"] and lines[2].startswith(f"  {name}  ")
    assert gc.find_leftovers(run_id=run) == []


@pytest.mark.docker
def test_a_run_that_ends_normally_leaves_gc_nothing(docker_world):
    client, run = docker_world
    code = ("import sys; from repogym.envs.sandbox import SandboxConfig, make_sandbox; "
            "from repogym.envs.sandbox.owner import owner_id; "
            "box = make_sandbox('docker', SandboxConfig(run_id=sys.argv[1])); print(box.name, owner_id())")
    ran = subprocess.run([sys.executable, "-c", code, run], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    name, its_owner = ran.stdout.split()
    assert client.containers.list(all=True, filters={"name": name}) == []
    assert not heartbeat_path(its_owner).exists()
    assert gc.find_leftovers(run_id=run) == []
    assert [x for x in gc.find_leftovers() if x.kind == "heartbeat"] == []


@pytest.mark.docker
def test_containers_of_a_dead_owner_here_go_at_once_and_others_stay(world, monkeypatch):
    from repogym.envs.sandbox.docker import container_labels
    from repogym.envs.sandbox.docker_client import docker_client
    from repogym.envs.sandbox.gc import reap_dead_owners_here
    from repogym.envs.sandbox.images import ensure_env_image
    from repogym.envs.sandbox.owner import OWNER_LABEL

    require_backend("docker")
    client = docker_client()
    monkeypatch.setattr(gc, "docker_client", docker_client)
    run = f"gc-here-{os.getpid()}"
    owners = {"dead": _dead_owner(), "foreign": "some-other-host:4242:777"}
    made = {}
    for who, owner in owners.items():
        labels = {**container_labels(run), OWNER_LABEL: owner}
        made[who] = client.containers.create(ensure_env_image({}), ["sleep", "1"], labels=labels).name
    try:
        report = reap_dead_owners_here(run)
        assert [item.name for item in report.leftovers if item.removed] == [made["dead"]]
        names = {c.name for c in client.containers.list(all=True, filters={"label": f"repogym.run={run}"})}
        assert names == {made["foreign"]}  # another host's owner waits for its heartbeat to go stale
    finally:
        for name in made.values():
            try:
                client.containers.get(name).remove(force=True)
            except Exception:
                pass
