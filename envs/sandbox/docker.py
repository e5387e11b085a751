"""The ``docker`` backend: one container per sandbox, driven through the docker SDK.

Isolates: network (``network_mode="none"``), memory, CPU and process count (cgroup limits), the user
(commands run as the unprivileged ``agent``, no capabilities, no new privileges), and the filesystem (the
container's own, read-only; the repository is copied in, never mounted; the writable places are
size-limited tmpfs, the repository's at ``repo_dir``: ``/repo``, or a dataset image's workdir, see
:mod:`repogym.envs.sandbox.prebuilt`). The container's main process runs as root and the runner as root
with an effective uid of ``agent`` (it drops to that uid for every command), so nothing the agent runs can signal either:
``kill -9 -1`` kills only the agent's own processes. Every container carries labels naming the run and
its owner so ``repogym gc`` can reap leftovers.

Speed: a resident runner per container (one ``exec`` with its socket kept open) serves every command,
file operation and reset, so a step costs a socket round trip rather than a new ``docker exec``.
Reset restores the repository in place (git reset + clean, strays killed, scratch folders emptied);
the root filesystem is read-only, so nothing else can have changed. A sandbox whose runner died or
failed a request is marked dirty, and its owner replaces it with a fresh container.
"""

from __future__ import annotations

import logging
import select
import socket
import struct
import time
import uuid

from repogym.envs.core.errors import RunnerExited, RunnerTimeout, SandboxError, SandboxRequestError, SandboxUnavailable
from repogym.envs.sandbox.bytecode import BYTECODE_MOUNT, docker_volume
from repogym.envs.sandbox.base import REPO_DIR, WRITABLE, RunnerClient, SandboxConfig
from repogym.envs.sandbox.cleanup import register_sandbox, unregister_sandbox
from repogym.envs.sandbox.docker_client import daemon_errors, docker_client
from repogym.envs.sandbox.images import ensure_env_image
from repogym.envs.sandbox.owner import owner_labels

log = logging.getLogger(__name__)

LABEL = "repogym"
AGENT_UID = 1000  # the image's `agent` user; owns the tmpfs folders
STAGE_DIR = "/run/repogym"  # inside/runner.py STAGE_ROOT


def container_labels(run_id: str) -> dict[str, str]:
    """The labels every container repogym starts carries (run, creation time, owner), so `repogym gc` can reap it."""
    return {LABEL: "1", f"{LABEL}.run": run_id, f"{LABEL}.created": str(int(time.time())), **owner_labels()}


def available() -> str | None:
    """``None`` when a daemon answers, else why not."""
    try:
        docker_client()
        return None
    except SandboxUnavailable as exc:
        return exc.message


class DockerSandbox(RunnerClient):
    """A container with a resident runner."""

    backend = "docker"
    inside_dir = "/opt/repogym"
    scratch_dirs = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/home/agent")

    def __init__(self, config: SandboxConfig | None = None, image: str | None = None, *, repo_dir: str = REPO_DIR,
                 python: str = "python3"):
        """``repo_dir``: where the repository lives (a dataset image's workdir); ``python``: the interpreter that
        runs the in-sandbox runner (see :mod:`repogym.envs.sandbox.prebuilt`)."""
        super().__init__(config)
        self.client = docker_client()
        self.image = image or self.config.image or ensure_env_image({})
        self.repo_dir = repo_dir
        writable = {repo_dir if path == REPO_DIR else path: size for path, size in WRITABLE.items()}
        self.name = f"repogym-{self.config.run_id}-{uuid.uuid4().hex[:8]}"
        labels = {**container_labels(self.config.run_id), **self.config.labels}
        self.container = None  # until the daemon made it
        self._stream = self._sock = None  # the exec's socket to the runner, once it is attached
        # Recorded before the daemon makes it: an exit at any moment from here on removes it (by name or owner label).
        register_sandbox(self, docker=True)
        try:
            volume = docker_volume(self.client, self.image, repo_dir, self.inside_dir)
            self.container = self.client.containers.run(
                self.image, ["sleep", "infinity"], name=self.name, detach=True, labels=labels,
                network_mode="none", mem_limit=self.config.memory, memswap_limit=self.config.memory,
                nano_cpus=int(self.config.cpus * 1e9), cpu_shares=self.config.cpu_shares, pids_limit=self.config.pids,
                user="root", working_dir=repo_dir, init=True, read_only=True,
                volumes={volume: {"bind": BYTECODE_MOUNT, "mode": "ro"}},
                tmpfs={**{path: f"rw,exec,size={size},uid={AGENT_UID},gid={AGENT_UID},mode=0755"
                          for path, size in writable.items()},
                       # Root's, where test runs are staged (inside/runner.py `stage`): the agent cannot fill or chmod it.
                       STAGE_DIR: f"rw,noexec,nosuid,nodev,size={WRITABLE['/tmp']},mode=0711"},
                # SETUID/SETGID only so the root runner can take the agent's uid; commands have no capability.
                cap_drop=["ALL"], cap_add=["SETUID", "SETGID"], security_opt=["no-new-privileges"],
                environment={"HOME": "/home/agent", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8",
                             **self.config.env})
            self.bytecode_prefix = BYTECODE_MOUNT
            api = self.client.api
            exec_id = api.exec_create(self.container.id, [python, "-I", f"{self.inside_dir}/runner.py", repo_dir],
                                      stdin=True, stdout=True, stderr=True, user="root",
                                      environment={"REPOGYM_AGENT_UID": str(AGENT_UID)})["Id"]
            stream = api.exec_start(exec_id, socket=True)
        except daemon_errors() as exc:  # the Docker daemon refused or failed the start: infrastructure
            self._remove()
            raise SandboxError("sandbox.docker.start", f"could not start a container from {self.image}: {exc}") from exc
        except BaseException:  # anything else (a bug of ours, an interrupt) goes on as it is, the container first removed
            self._remove()
            raise
        self._sock: socket.socket = getattr(stream, "_sock", stream)  # the docker SDK's wrapper, or the socket itself
        self._stream = stream
        self._frames = b""  # raw multiplexed bytes not yet parsed
        self._lines = b""   # the runner's stdout not yet split into lines
        self._stderr = b""  # the last of the runner's stderr
        try:
            self.nested_commands = bool(self.request("ping", wait=30).get("nested"))
        except BaseException as exc:  # nobody will hold this object: remove its container now, then let the error go on
            self.close()
            if isinstance(exc, SandboxRequestError):  # the runner answered, refusing a ping: it is not the runner we sent
                raise SandboxError("sandbox.docker.start", f"the runner in {self.name} did not start: {exc}") from exc
            raise

    # -- transport: docker multiplexes stdout/stderr in 8-byte-header frames ----------------------------
    def _send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def _recv_line(self, deadline: float) -> bytes:
        while b"\n" not in self._lines:
            while len(self._frames) >= 8:
                kind, size = struct.unpack(">BxxxL", self._frames[:8])
                if len(self._frames) < 8 + size:
                    break
                payload, self._frames = self._frames[8:8 + size], self._frames[8 + size:]
                if kind == 1:
                    self._lines += payload
                elif kind == 2:  # the runner's own stderr (a traceback, should it crash): kept for the error
                    self._stderr = (self._stderr + payload)[-2000:]
            if b"\n" in self._lines:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunnerTimeout("sandbox.docker", f"runner in {self.name} did not answer in time")
            ready, _, _ = select.select([self._sock], [], [], left)
            if ready:
                chunk = self._sock.recv(1 << 20)
                if not chunk:
                    said = self._stderr.decode(errors="replace").strip()
                    raise RunnerExited("sandbox.docker", f"runner in {self.name} exited ({self._container_state()})"
                                                         + (f": {said}" if said else ""))
                self._frames += chunk
        line, _, self._lines = self._lines.partition(b"\n")
        return line

    def _container_state(self) -> str:
        try:
            self.container.reload()
            state = self.container.attrs["State"]
            return f"container {state['Status']}, OOM killed: {state.get('OOMKilled')}"
        except daemon_errors() as exc:  # the Docker daemon: the container is gone, or the daemon with it
            return f"container gone: {exc}"

    def environment_id(self) -> str | None:
        image = (self.container.attrs or {}).get("Image") if self.container is not None else None
        return f"docker:{image}" if image else None

    def _outside_cause(self) -> str | None:
        try:
            return self._cause_in_docker()
        except daemon_errors() as exc:  # the Docker daemon does not answer about the container
            raise SandboxError("sandbox.docker", f"the Docker daemon does not answer about {self.name}: {exc}") from exc

    def _cause_in_docker(self) -> str | None:
        # The agent cannot signal PID 1 or the root runner, pause or stop its container: a container paused,
        # killed or stopped through the API (docker's own events say so), or forgotten by a restarted daemon
        # (its events no longer know the container's start), is the infrastructure's. Anything else (the
        # container still running, or dead with no such record) is what the agent's processes did.
        deadline = time.monotonic() + 3.0  # a container killed from outside closes the stream just before its state says so
        while True:
            self.container.reload()
            state = self.container.attrs["State"]
            if state.get("Paused"):
                return "its container was paused from outside"
            if state["Status"] != "running" or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        if state["Status"] == "running":
            return None
        actions = self._events()
        if "start" not in actions:
            return f"container {state['Status']}: the Docker daemon no longer knows its start (restarted)"
        outside = sorted(actions & {"kill", "stop", "pause", "destroy", "restart"})
        if outside:
            return f"container {state['Status']}, by docker {'/'.join(outside)} from outside"
        return None

    def _events(self) -> set[str]:
        """The actions docker recorded for this container since it was made (the daemon keeps recent ones)."""
        created = int(self.container.labels.get(f"{LABEL}.created", "0")) - 5
        found = set()
        for event in self.client.events(since=max(created, 0), until=int(time.time()) + 1, decode=True,
                                        filters={"container": self.container.id}):
            found.add(str(event.get("status") or event.get("Action") or "").split(":")[0])
        return found

    # -- lifecycle -----------------------------------------------------------------------------------
    def _shutdown(self) -> None:
        for stream in (self._stream, self._sock):
            try:
                if stream is not None:
                    stream.close()
            except OSError as exc:  # the connection to the daemon broke already; the container is removed next
                log.debug("closing the runner's stream of %s: %s", self.name, exc)
        self._remove()

    def _remove(self) -> None:
        """Remove the container (by name when its creation never returned); a failure is retried once, then
        left to the exit sweep and ``repogym gc``."""
        import docker.errors

        for attempt in range(2):
            try:
                container = self.container or self.client.containers.get(self.name)
                container.remove(force=True)
                break
            except docker.errors.NotFound:
                break
            except daemon_errors() as exc:  # the Docker daemon refused or failed: once more, then the sweep's and gc's
                log.log(logging.WARNING if attempt else logging.INFO, "could not remove container %s (%s): %s",
                        self.name, "left to the exit sweep and repogym gc" if attempt else "trying again", exc)
        unregister_sandbox(self)
