"""Nothing a process started outlives it: sandboxes and warm pools are closed when it ends.

Every sandbox registers here before it starts (a container by its name, before the daemon creates it) and every
warm pool when it is made. When the process ends normally, by an uncaught exception, by SIGINT (Python's
``KeyboardInterrupt``) or by SIGTERM (turned into ``SystemExit`` by the handler installed here, so ``finally``
blocks run too), :func:`close_all` runs from ``atexit``: new starts are refused, pools stop refilling and close
what they hold, every live sandbox is closed, every container still labelled with this process's owner id is
removed, so one a thread was creating at that moment goes as well, and last the process's heartbeat file is
removed: nothing of it is left for ``repogym gc`` to count.

Not covered: SIGKILL of the process (nothing of it runs). Its local sandboxes die with it (bubblewrap's
``--die-with-parent``); its containers are left to ``repogym gc``, which reaps an owner on this host at once,
since its pid is provably gone. The SIGTERM handler is installed only from the main thread and only over the
default action: a program (or Ray) with its own handler keeps it, and then owns the clean-up at SIGTERM.
"""

from __future__ import annotations

import atexit
import logging
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from repogym.envs.core.bugs import report_bug
from repogym.envs.core.errors import SandboxError, SandboxUnavailable
from repogym.envs.sandbox.owner import stop_heartbeat

log = logging.getLogger(__name__)

_lock = threading.Lock()
_sandboxes: dict[int, Any] = {}  # id -> a live sandbox (closed ones unregister)
_pools: dict[int, Any] = {}
_exiting = threading.Event()
_state: dict[str, Any] = {"installed": False, "docker": False}
POOL_WAIT_S = 20.0  # at exit, how long all pools together wait for the sandbox starts they have in progress


def _install() -> None:
    if _state["installed"]:
        return
    _state["installed"] = True
    atexit.register(close_all)
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError) as exc:  # not the main interpreter, or signals unavailable here
            log.info("no SIGTERM handler installed (%s): the clean-up runs at a normal exit only", exc)


def _on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def register_sandbox(sandbox: Any, docker: bool = False) -> None:
    """Record ``sandbox`` for closing at exit; raises :class:`SandboxError` once the process is exiting."""
    with _lock:
        if _exiting.is_set():
            raise SandboxError("sandbox.start", "the process is exiting: no new sandbox starts")
        _install()
        _sandboxes[id(sandbox)] = sandbox
        _state["docker"] = _state["docker"] or docker


def unregister_sandbox(sandbox: Any) -> None:
    with _lock:
        _sandboxes.pop(id(sandbox), None)


def register_pool(pool: Any) -> None:
    with _lock:
        _install()
        _pools[id(pool)] = pool


def unregister_pool(pool: Any) -> None:
    with _lock:
        _pools.pop(id(pool), None)


def close_later(sandbox: Any, **close_args: Any) -> None:
    """Close ``sandbox`` (or a warm pool: ``timeout=0`` so a start in progress is not waited for) on the process's
    one closing thread, so its caller does not wait for a container's removal. It stays registered until closed: an
    exit in between closes it with the rest. Once the process is exiting, closes now."""
    with _lock:
        if not _exiting.is_set():
            if "closer" not in _state:  # one thread for the process's life, started on first use
                _state["closer"] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="repogym-close")
            try:
                _state["closer"].submit(_close_logged, sandbox, close_args)
                return
            except RuntimeError:  # the interpreter is shutting its executors down (exiting): close here, now
                pass
    sandbox.close(**close_args)


def wait_closed(timeout: float = 60.0) -> None:
    """Wait until what :func:`close_later` was given so far is closed (an env's close leaves nothing running)."""
    with _lock:
        closer = _state.get("closer")
    if closer is None:
        return
    try:
        marker = closer.submit(lambda: None)  # one thread, in order: done when all before it are
    except RuntimeError:  # shut down as the interpreter exits: what it still held, the exit's close_all closes
        return
    marker.result(timeout=timeout)


def _close_logged(sandbox: Any, close_args: dict[str, Any]) -> None:
    try:
        sandbox.close(**close_args)
    except (SandboxError, OSError) as exc:  # the backend: its daemon, a dead sandbox's processes or files
        log.warning("closing %r failed: %s", sandbox, exc)
    except Exception as exc:  # a bug of ours: reported (logged with its traceback, counted)
        report_bug("sandbox.cleanup.close_later", exc)


def exiting() -> bool:
    """Whether :func:`close_all` has begun (pools stop refilling)."""
    return _exiting.is_set()


def close_all() -> int:
    """Close every pool and sandbox of this process and remove its labelled containers; returns how many
    containers the final sweep removed. Safe to call more than once."""
    _exiting.set()
    with _lock:
        pools, sandboxes = list(_pools.values()), list(_sandboxes.values())
    for pool in pools:  # all stop refilling at once; then one shared wait for the starts in progress
        pool.stop()
    deadline = time.monotonic() + POOL_WAIT_S
    bugs: list[Exception] = []
    for pool in pools:
        _close_quietly(lambda: pool.close(timeout=deadline - time.monotonic()), pool, bugs)
    with _lock:
        seen = {id(s) for s in sandboxes}
        sandboxes += [s for s in _sandboxes.values() if id(s) not in seen]  # what a start in progress made
    for sandbox in sandboxes:
        _close_quietly(sandbox.close, sandbox, bugs)
    removed = _sweep_containers() if _state["docker"] else 0
    stop_heartbeat()  # last: until the sweep is done, another host's gc must see this owner alive
    for exc in bugs:  # reported once everything else is closed (strict mode raises the first)
        report_bug("sandbox.cleanup.close_all", exc)
    return removed


def _close_quietly(close, item, bugs: list[Exception]) -> None:
    """Close one pool or sandbox; a failure does not keep the rest alive."""
    try:
        close()
    except (SandboxError, OSError) as exc:  # the backend: its daemon, a dead sandbox's processes or files
        log.warning("closing %r at exit failed: %s", item, exc)
    except Exception as exc:  # a bug of ours: reported after the rest is closed
        bugs.append(exc)


def _sweep_containers() -> int:
    from repogym.envs.sandbox.docker_client import daemon_errors, docker_client
    from repogym.envs.sandbox.owner import OWNER_LABEL, owner_id

    import docker.errors  # a docker sandbox ran in this process, so the SDK is there

    try:
        client = docker_client()
        found = client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={owner_id()}"},
                                       ignore_removed=True)
    except (SandboxUnavailable, *daemon_errors()) as exc:  # the Docker daemon went away
        log.warning("could not list this process's containers at exit (left to repogym gc): %s", exc)
        return 0
    removed = 0
    for container in found:
        try:
            container.remove(force=True)
            removed += 1
        except docker.errors.NotFound:
            log.debug("container %s went meanwhile", container.name)
        except daemon_errors() as exc:  # the Docker daemon refused or failed
            if getattr(exc, "status_code", None) == 409 and "already in progress" in str(exc):
                log.debug("container %s is being removed already", container.name)  # (a close still under way)
                continue
            log.warning("could not remove container %s at exit (left to repogym gc): %s", container.name, exc)
    return removed
