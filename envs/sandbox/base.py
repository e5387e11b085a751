"""The ``Sandbox`` protocol, its result type, and the shared client of the in-sandbox runner.

Both backends start one resident runner (``inside/runner.py``) per sandbox and talk JSON lines to it;
they differ only in how the runner is started (``docker exec`` with an attached socket, or ``bwrap``
with pipes). What a sandbox isolates is the backend's business and is documented there.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from repogym.envs.core.errors import InstallFailed, RunnerExited, RunnerTimeout, SandboxError, SandboxKilledByAgent, SandboxRequestError
from repogym.envs.core.ticker import ticking
import repogym.envs.sandbox.install_cache as install_cache
from repogym.envs.sandbox.snapshot import RepoSnapshot

log = logging.getLogger(__name__)

INSIDE_DIR = Path(__file__).resolve().parent / "inside"
REPO_DIR = "/repo"
DEFAULT_OUTPUT_LIMIT = 64 * 1024
INSTALL_TIMEOUT = 900.0  # the runner's own limit for a task's install steps (inside/runner.py)
TREE_WAIT = 150.0  # seconds a tree id may take the runner (git write-tree of a large repository the agent filled)
# The only writable places in a sandbox, each a size-limited tmpfs emptied or restored by reset.
WRITABLE = {"/repo": "1g", "/tmp": "512m", "/home/agent": "256m", "/var/tmp": "256m"}


@dataclass
class CommandResult:
    """What one command did."""

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    duration_s: float
    truncated: bool = False
    """Output went past the limit and was cut."""
    tree: str | None = None
    """The working tree's id after the command (:meth:`Sandbox.tree_id`), when ``run`` was asked for it and could
    tell it."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass
class SandboxConfig:
    """Settings shared by every backend."""

    memory: str = "2g"
    """Memory limit (docker ``mem_limit`` syntax)."""
    cpus: float = 1.0
    """CPU limit in cores."""
    cpu_shares: int = 1024
    """CPU weight against other sandboxes when the cores are contended (docker's ``cpu_shares``; the local backend's
    cgroup ``cpu.shares``, or ``cpu.weight`` scaled to it, where it has a cgroup): 1024 is the default everyone has."""
    pids: int = 256
    """Maximum number of processes."""
    default_timeout: float = 60.0
    """Seconds a command may run when the caller gives no timeout."""
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    """Bytes of stdout (and of stderr) kept per command; the rest is counted and cut."""
    image: str | None = None
    """Docker image to run; ``None`` builds or reuses the environment image for the task's setup."""
    run_id: str = "default"
    """Label on every container of this run, so ``repogym gc --run`` can reap them."""
    labels: dict[str, str] = field(default_factory=dict)
    """Extra container labels."""
    hidden_paths: tuple[str, ...] = ()
    """Host paths the local backend hides from the sandbox (e.g. a task's source repository)."""
    answer_slack: float = 30.0
    """Seconds past a command's own timeout to wait for the runner's answer before calling it hung."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables set in every sandbox; nothing of the host's environment is passed in."""


@runtime_checkable
class Sandbox(Protocol):
    """An isolated copy of one repository at a base commit, where commands run."""

    repo_dir: str
    """Where the repository lives inside the sandbox (:data:`REPO_DIR` unless a task's image keeps it elsewhere);
    tools and checks take paths relative to it."""
    inside_dir: str
    """Where the harness's own files (``inside/``: the runner, the test launcher, the report plugins) are inside the
    sandbox, read-only."""
    snapshot_key: str | None
    """:attr:`RepoSnapshot.key` of what was loaded (or imported), ``None`` before: a sandbox holding the wanted key
    can be reset instead of loaded again."""
    base_tree: str | None
    """:meth:`tree_id` of the base commit (set by :meth:`load` and :meth:`import_state`), ``None`` before."""
    bytecode_prefix: str | None
    """A read-only folder of bytecode compiled from the sandbox interpreter's own files (never the repository's), that
    test runs use as their ``PYTHONPYCACHEPREFIX`` (:mod:`repogym.envs.sandbox.bytecode`); ``None`` when there is
    none (yet): each run then starts from an empty prefix of its own."""
    nested_commands: bool
    """Each command runs in a PID namespace of its own (the runner's answer at start): what it leaves running ends
    with it (the local backend, where bubblewrap nests)."""
    warm_interpreter: tuple[str, str] | None
    """``(test command, name)`` of a warm test interpreter started here for the next run of that command
    (:func:`repogym.envs.sandbox.testrun.start_warm`), or ``None``; a run takes it, a :meth:`load` ends it."""
    dirty_reason: str | None
    """Why a reset can no longer be trusted to restore this sandbox (its runner died, a request failed), or ``None``.
    Callers set it too, when an operation of theirs failed half-way; a dirty sandbox is replaced, never reused."""

    def load(self, snapshot: RepoSnapshot) -> None:
        """Make the repository the snapshot, committed once as the base."""

    def run(self, command: str, *, timeout: float | None = None, cwd: str | None = None,
            output_limit: int | None = None, env: dict[str, str] | None = None, tree: bool = False) -> CommandResult:
        """Run a shell command in the repository (or ``cwd`` inside it); ``tree``: also tell the tree id after it
        (:attr:`CommandResult.tree`, ``None`` where :meth:`tree_id` would have raised), in the same round trip."""

    def read_file(self, path: str, limit: int = 1 << 20) -> bytes:
        """A file's bytes (path relative to the repository root)."""

    def write_file(self, path: str, data: bytes, *, tree: bool = False) -> str | None:
        """Create or replace a file inside the repository; ``tree``: return the tree id after it (``None`` where
        :meth:`tree_id` would have raised), in the same round trip."""

    def reset(self) -> dict[str, float]:
        """Back to the base commit: tracked files restored, untracked removed, strays killed. Returns the seconds
        each phase took, by name (``fast_tree``: the tree put back without git; ``git_reset_clean``: by git)."""

    def diff(self) -> str:
        """The working tree against the base commit as a git patch (new files included)."""

    def tree_id(self) -> str:
        """A fingerprint of the working tree's content: it changes exactly when :meth:`diff` would."""

    def export_state(self, limit: int = 128 << 20) -> SandboxState:
        """This sandbox's files now (repository with ``.git``, scratch folders, the base a reset returns to), for
        :meth:`import_state` in another sandbox of the same backend; :class:`SandboxRequestError` when they are over
        ``limit`` bytes."""

    def import_state(self, state: SandboxState) -> None:
        """Become the sandbox ``state`` was exported from (its processes are not copied); :class:`SandboxError` for a
        state of another backend or repository folder."""

    def staging_folder(self, nonce: str, files: dict[str, str] | None = None, key: str = "") -> str | None:
        """A fresh folder for one test run that the agent cannot write to, or ``None`` when this sandbox has no such
        place (the harness then stages in the agent's scratch folders). It holds ``files`` (``{name there: harness
        file in inside_dir}``) and, when ``key`` is given, ``key`` (only the agent's uid can read it): staged
        without a command."""

    def close(self) -> None:
        """Free every resource; idempotent."""


@dataclass(frozen=True)
class SandboxState:
    """A running sandbox's files at one moment (:meth:`RunnerClient.export_state`), to fork it into others."""

    backend: str
    repo_dir: str
    snapshot_key: str
    base_tree: str | None
    repo: str
    """The repository with its ``.git``: a tar, base64 (as it travels to the runner)."""
    scratch: dict[str, str]
    """Scratch folder -> a tar of its content, base64."""
    base: dict[str, Any]
    """The pristine base a reset returns to (commit id, the base ``.git``, its config)."""
    not_copied: tuple[str, ...]
    """What could not be copied (an unreadable file, a socket, message queues), with why."""

    @property
    def size(self) -> int:
        """Bytes of the archives (base64)."""
        return len(self.repo) + sum(map(len, self.scratch.values())) + len(self.base.get("git") or "")


class RunnerClient:
    """Shared implementation of the protocol over a JSON-lines channel to the runner.

    Subclasses provide ``_send(bytes)``, ``_recv_line(deadline) -> bytes`` (raising :class:`RunnerExited`
    at end of stream), ``_shutdown()`` and ``_died_from_inside()``.
    """

    backend = "runner"
    scratch_dirs: tuple[str, ...] = ("/tmp",)
    repo_dir: str = REPO_DIR
    inside_dir: str = "/opt/repogym"

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        self.snapshot_key: str | None = None
        self.base_tree: str | None = None
        self.bytecode_prefix: str | None = None
        self.warm_interpreter: tuple[str, str] | None = None
        self.nested_commands = False
        self.dirty_reason: str | None = None
        """Set when a reset cannot be trusted to restore the sandbox (dead runner, failed request)."""
        self.agent_ran = False
        """Whether any command ran in this sandbox: before that, nothing the agent did can explain a failure."""
        self.untouched = True
        """No tree was loaded or imported here yet: whatever ran (a health check) was the harness's, not an agent's."""
        self._lock = threading.Lock()
        self._next_id = 0
        self._closed = False

    # -- transport, provided by backends --------------------------------------------------------------
    def _send(self, data: bytes) -> None:
        raise NotImplementedError

    def _recv_line(self, deadline: float) -> bytes:
        raise NotImplementedError

    def _shutdown(self) -> None:
        raise NotImplementedError

    def _outside_cause(self) -> str | None:
        """After the runner exited or stopped answering: the cause outside the sandbox that the backend can show
        (killed, paused or stopped from outside, the daemon restarted), or ``None`` when there is none; a
        :class:`SandboxError` when the backend cannot be asked (its daemon does not answer)."""
        raise NotImplementedError

    # -- requests -------------------------------------------------------------------------------------
    def request(self, op: str, *, wait: float = 60.0, then_wait: float = 0.0, **fields: Any) -> dict[str, Any]:
        """Send one request and wait up to ``wait`` seconds for its answer, or for a progress line (the runner is past
        the request's first part), and then ``then_wait`` seconds more."""
        if self._closed:
            raise SandboxError(f"sandbox.{self.backend}", "sandbox is closed")
        with self._lock:
            self._next_id += 1
            rid = self._next_id
            try:
                self._send((json.dumps({"op": op, "id": rid, **fields}) + "\n").encode())
                deadline = time.monotonic() + wait
                while True:
                    answer = json.loads(self._recv_line(deadline))
                    if answer.get("id") == rid and answer.get("progress"):
                        deadline = time.monotonic() + then_wait
                    elif answer.get("id") == rid:
                        break
            except (RunnerExited, RunnerTimeout, BrokenPipeError, ConnectionError) as exc:
                self.dirty_reason = f"runner lost during {op}: {exc}"
                raise self._blame(op, exc) from exc
            except SandboxError as exc:
                self.dirty_reason = str(exc)
                raise
            except (OSError, ValueError) as exc:
                self.dirty_reason = f"runner channel broke during {op}: {exc}"
                raise SandboxError(f"sandbox.{self.backend}.{op}", self.dirty_reason) from exc
        if not answer.pop("ok", False):
            error = answer.get("error", "unknown runner error")
            if error.startswith("runner bug:"):  # ours (the runner's answers start so only then): loud, not data
                raise RuntimeError(f"sandbox.{self.backend}.{op}: {error}")
            raise SandboxRequestError(error)
        return answer

    def _blame(self, op: str, exc: Exception) -> Exception:
        """The error to raise for a runner that exited or hung: the agent's doing, or the infrastructure's.

        Before any command ran, nothing the agent did can explain it: infrastructure. Afterwards it is the
        agent's (reward 0, never an exclusion a failing policy could learn to ask for) unless the backend shows
        a cause outside the sandbox."""
        where = f"sandbox.{self.backend}.{op}"
        if not self.agent_ran:
            return SandboxError(where, f"{exc}, before any command of the agent ran")
        try:
            cause = self._outside_cause()
        except SandboxError as err:  # the backend cannot even be asked (its daemon gone): infrastructure
            cause = f"the backend does not answer ({type(err).__name__}: {err})"
        if cause is None:
            return SandboxKilledByAgent(where, f"{exc}; no cause outside the sandbox, so a command inside it did it")
        return SandboxError(where, f"{exc}; {cause}")

    def environment_id(self) -> str | None:
        """What this sandbox's environment is (an image id, a virtualenv's key), for keeping what an install step
        made in it (:mod:`repogym.envs.sandbox.install_cache`); None where it cannot be told: the steps then run
        at every load."""
        return None

    def load(self, snapshot: RepoSnapshot) -> None:
        self.warm_interpreter = None  # a load ends every process of the last tree's
        install = list(snapshot.install)
        environment = self.environment_id() if install else None
        kept = install_cache.cache_path(snapshot.key, environment) if environment else None
        products = install_cache.read(kept) if kept else None
        if kept is None or products is not None:
            self._load(snapshot, install, kept, products)
            return
        with install_cache.lock(kept):  # another load of this tree may be running the steps: wait for what it made
            self._load(snapshot, install, kept, install_cache.read(kept))

    def _load(self, snapshot: RepoSnapshot, install: list[str], kept: Path | None,
              products: dict[str, Any] | None) -> None:
        # Only a sandbox's first load fills the cache (before it, only the harness's health check runs): nothing an
        # agent left behind in a sandbox reaches another one's load.
        export = kept is not None and products is None and self.untouched
        self.untouched = False
        steps = install and products is None
        # Minutes for a project that builds extensions: said, with the time, while it runs (stderr).
        commit = snapshot.key.split("+install:")[0].rsplit("@", 1)[-1][:12]
        progress = ticking(f"running the install steps at commit {commit} ({' && '.join(install)[:80]}; once per tree "
                           "and environment)") if steps else contextlib.nullcontext()
        try:
            with progress:
                answer = self.request("load", tar=base64.b64encode(snapshot.tar).decode(),
                                      scratch=list(self.scratch_dirs), install=install,
                                      tree_env=dict(snapshot.tree_env), products=products,
                                      export=export, wait=240 + (INSTALL_TIMEOUT if steps else 0))
        except SandboxRequestError as exc:
            if install and "install step" in str(exc):
                raise InstallFailed("sandbox.install", str(exc).removeprefix("RuntimeError: ")) from None
            raise
        if export and "products" in answer:
            install_cache.write(kept, answer["products"])
        self.snapshot_key, self.base_tree = snapshot.key, answer["tree"]

    def run(self, command: str, *, timeout: float | None = None, cwd: str | None = None,
            output_limit: int | None = None, env: dict[str, str] | None = None, tree: bool = False) -> CommandResult:
        timeout = self.config.default_timeout if timeout is None else float(timeout)
        limit = self.config.output_limit if output_limit is None else int(output_limit)
        self.agent_ran = True  # from now on the agent's processes may be what breaks this sandbox
        # A command that hangs the runner is found after the slack as ever; the tree id after it gets what a
        # tree_id gets, counted from the runner's word that the command is done.
        a = self.request("run", cmd=command, timeout=timeout, cwd=cwd, limit=limit, env=env or {}, tree=tree,
                         wait=timeout + self.config.answer_slack, then_wait=TREE_WAIT)
        return CommandResult(a["stdout"], a["stderr"], a["exit_code"], a["timed_out"], a["duration"], a["truncated"],
                             tree=a.get("tree"))

    def read_file(self, path: str, limit: int = 1 << 20) -> bytes:
        a = self.request("read", path=path, limit=limit)
        if "error" in a:
            raise FileNotFoundError(f"{path}: {a['error'].replace('_', ' ')}")
        return base64.b64decode(a["data"])

    def write_file(self, path: str, data: bytes, *, tree: bool = False) -> str | None:
        a = self.request("write", path=path, data=base64.b64encode(data).decode(), tree=tree,
                         wait=TREE_WAIT if tree else 60.0)
        if "error" in a:
            raise IsADirectoryError(path)
        return a.get("tree")

    def reset(self) -> dict[str, float]:
        if self.snapshot_key is None:
            raise SandboxError(f"sandbox.{self.backend}.reset", "nothing loaded to reset to")
        return self.request("reset", scratch=list(self.scratch_dirs), wait=240).get("phases", {})

    def diff(self) -> str:
        return self.request("diff", wait=150)["diff"]

    def tree_id(self) -> str:
        """A fingerprint of the working tree's content: it changes exactly when :meth:`diff` would."""
        return self.request("tree", wait=TREE_WAIT)["tree"]

    def staging_folder(self, nonce: str, files: dict[str, str] | None = None, key: str = "") -> str | None:
        """The runner's folder for one test run, out of the agent's reach (docker: a root-owned tmpfs, see
        ``inside/runner.py`` ``stage``), holding ``files`` and ``key``, or ``None`` when the runner has no such
        place or could not make it."""
        try:
            return self.request("stage", nonce=nonce, files=sorted((files or {}).items()), key=key).get("folder")
        except SandboxRequestError as exc:
            log.debug("no staging folder from the runner (%s): the harness stages in the scratch folders", exc)
            return None

    def export_state(self, limit: int = 128 << 20) -> SandboxState:
        """What :meth:`import_state` needs to make another sandbox of this backend this one, now; the runner
        refuses (:class:`SandboxRequestError`) when the files are over ``limit`` bytes."""
        if self.snapshot_key is None:
            raise SandboxError(f"sandbox.{self.backend}.export_state", "nothing loaded to fork")
        answer = self.request("export_state", scratch=list(self.scratch_dirs), limit=int(limit), wait=240)
        return SandboxState(self.backend, self.repo_dir, self.snapshot_key, self.base_tree, answer["repo"],
                            answer["scratch"], answer["base"], tuple(answer["not_copied"]))

    def import_state(self, state: SandboxState) -> None:
        """Become the sandbox ``state`` was taken from: repository, ``.git``, scratch folders, the base a reset
        returns to. Processes running there are not copied."""
        if state.backend != self.backend or state.repo_dir != self.repo_dir:
            raise SandboxError(f"sandbox.{self.backend}.import_state",
                               f"a {state.backend} state at {state.repo_dir} cannot become a {self.backend} sandbox "
                               f"at {self.repo_dir}")
        self.untouched = False
        self.request("import_state", repo=state.repo, scratch=state.scratch, base=state.base,
                     clean=list(self.scratch_dirs), wait=240)
        self.snapshot_key, self.base_tree = state.snapshot_key, state.base_tree

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

