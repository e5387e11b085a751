"""Warm bytecode for test runs: the interpreter's own files compiled once, mounted read-only in every sandbox.

Test runs read and write bytecode only under a harness prefix (``PYTHONPYCACHEPREFIX``), never the agent's
``__pycache__`` (``testrun.py``). With a fresh prefix per run, each run compiled pytest and the standard library
from source: two thirds of a small suite's grading. Here that prefix is filled once (``inside/repogym_bytecode.py``,
with the interpreter the tests use, before any agent exists) and mounted read-only at :data:`BYTECODE_MOUNT`:

- docker: a volume per image (``repogym-bytecode-<image id>``), filled by a throwaway container of the image
  (labelled with this process as its owner, so the exit sweep and ``repogym gc`` reap one left running);
- local: a folder under the cache per virtualenv (``bytecode/<env>``), filled on the host with the paths the
  sandbox sees.

Filling runs in the background on first use; sandboxes started before it is done still mount the volume (docker: a
partly filled prefix is only slower; each file is written whole) or go without (local), and then compile as before.
Nothing of the repository is ever in it, and nothing in a sandbox can write it. A stale file is harmless: Python
checks each one against its source's size and time. A fill that fails (the daemon, the disk) is logged and leaves
sandboxes to compile from source, the way every run did before.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from repogym.envs.core.paths import cache_dir
from repogym.envs.sandbox.base import INSIDE_DIR
from repogym.envs.sandbox.owner import owner_labels

log = logging.getLogger(__name__)

BYTECODE_MOUNT = "/.repogym-bytecode"
"""Where sandboxes see the warm prefix (read-only)."""
SCRIPT = INSIDE_DIR / "repogym_bytecode.py"
FILL_TIMEOUT = 600.0
VOLUME_LABEL = "repogym.bytecode"

_lock = threading.Lock()
_filling: set[str] = set()  # what this process started or found filled
_volumes: dict[str, str] = {}  # image -> its volume's name
_threads: list[threading.Thread] = []


def _filled_marker(name: str) -> Path:
    return cache_dir() / "bytecode" / f"{name}.filled"


def docker_volume(client, image: str, repo_dir: str, inside_dir: str) -> str:
    """The name of ``image``'s bytecode volume, filled in the background the first time it is asked for (with the
    harness's script from ``inside_dir``; ``repo_dir`` is left out)."""
    name = _volumes.get(image)
    if name is None:
        name = _volumes[image] = f"repogym-bytecode-{client.images.get(image).id.split(':')[-1][:16]}"
    with _lock:
        if name in _filling:
            return name
        _filling.add(name)
    _start(_fill_volume, client, image, name, repo_dir, inside_dir)
    return name


def _fill_volume(client, image: str, name: str, repo_dir: str, inside_dir: str) -> None:
    import docker.errors

    marker = _filled_marker(name)
    try:
        try:
            volume = client.volumes.get(name)
        except docker.errors.NotFound:
            volume = client.volumes.create(name, labels={VOLUME_LABEL: image})
        # The marker names the volume it was written for: one removed and made again (empty) is filled again.
        created = str(volume.attrs.get("CreatedAt"))
        if marker.is_file() and marker.read_text().split("\n", 1)[0] == created:
            return
        output = client.containers.run(
            image, ["sh", "-c", 'exec python "$0" "$1" --exclude "$2"', f"{inside_dir}/{SCRIPT.name}", BYTECODE_MOUNT,
                    repo_dir],
            volumes={name: {"bind": BYTECODE_MOUNT, "mode": "rw"}}, network_mode="none", user="root",
            working_dir="/", remove=True, labels={VOLUME_LABEL: image, **owner_labels()}, mem_limit="1g")
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{created}\n{output.decode(errors='replace')}")
        log.info("bytecode for %s: %s", image, output.decode(errors="replace").strip())
    except (docker.errors.DockerException, OSError) as exc:  # the daemon or the image: runs compile from source
        log.warning("could not fill the bytecode volume %s for %s (test runs compile from source): %s",
                    name, image, exc)


def local_folder(env: Path, views: list[tuple[Path, str]], excluded: list[str]) -> Path | None:
    """The filled bytecode folder of the local virtualenv ``env``, or None while it is being filled (started in
    the background on the first call). ``views``: ``(host folder, where the sandbox sees it)``."""
    target = cache_dir() / "bytecode" / f"local-{env.name}"
    if target.is_dir():
        return target
    with _lock:
        if str(target) in _filling:
            return None
        _filling.add(str(target))
    _start(_fill_folder, target, views, excluded)
    return None


def _start(fill, *args) -> None:
    thread = threading.Thread(target=fill, args=args, name="repogym-bytecode", daemon=True)
    _threads.append(thread)
    thread.start()


def wait(timeout: float = FILL_TIMEOUT) -> None:
    """Wait for the fills this process started (so a benchmark or a test sees warm runs)."""
    deadline = time.monotonic() + timeout
    for thread in list(_threads):
        thread.join(max(0.0, deadline - time.monotonic()))


def _fill_folder(target: Path, views: list[tuple[Path, str]], excluded: list[str]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        args = [str(building), *(f"{source}={view}" for source, view in views)]
        for path in excluded:
            args += ["--exclude", path]
        done = subprocess.run([sys.executable, "-I", str(SCRIPT), *args], capture_output=True, text=True,
                              timeout=FILL_TIMEOUT)
        if done.returncode != 0:
            raise OSError(f"exit {done.returncode}: {done.stderr.strip()[-400:]}")
        for folder, _, _ in os.walk(building):  # the sandbox's unprivileged user reads it
            os.chmod(folder, 0o755)
        try:
            os.rename(building, target)
        except OSError:  # another process filled it first: theirs is as good
            if not target.is_dir():
                raise
    except (OSError, subprocess.TimeoutExpired) as exc:  # the disk, or a fill past its time: runs compile from source
        log.warning("could not fill the bytecode folder %s (test runs compile from source): %s", target, exc)
    finally:
        shutil.rmtree(building, ignore_errors=True)
