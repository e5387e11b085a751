"""What a task's install steps made, kept per tree and environment, so they run once, not at every load.

An install step (``setup.install``: ``pip install -e .``, a build of C extensions in place) can take minutes
(astropy: about four), and every sandbox that loads the task's tree runs it: the agent's, and each grading's
fresh one. The first load of a tree in an environment runs the steps as ever; the runner then hands back what they
changed in the tree (a tar of the files they added or changed, and the paths they removed), and later loads of the
same tree in the same environment unpack that instead of running them.

Keyed by the snapshot (its key names the commit's tree and the install steps) and the sandbox's
:meth:`~repogym.envs.sandbox.base.RunnerSandbox.environment_id` (a docker image id, a local virtualenv's key):
what the steps make depends on both. Only a sandbox's first load fills the cache (not a load after another
sandbox's state was imported): before it only the harness has run anything there (a health check), so nothing an
agent left behind in a sandbox reaches another's load. Files under the cache folder's ``installs/``, written whole
(a temporary file renamed into place); ``repogym gc`` does not remove them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from repogym.envs.core.paths import cache_dir

log = logging.getLogger(__name__)

FORMAT = 1
"""Changes when the runner's products change shape: older entries are then not read."""


def cache_path(snapshot_key: str, environment_id: str) -> Path:
    """Where the products of ``snapshot_key``'s install steps in ``environment_id`` are kept."""
    digest = hashlib.sha256(f"{FORMAT}\n{snapshot_key}\n{environment_id}".encode()).hexdigest()[:24]
    return cache_dir() / "installs" / f"{digest}.json"


_locks: dict[Path, threading.Lock] = {}
_locks_lock = threading.Lock()


def lock(path: Path) -> threading.Lock:
    """The lock loads in this process hold while they run the install steps for ``path``: sandboxes that load the
    same tree at once (a validation's) wait for the first one's products instead of each running the steps."""
    with _locks_lock:
        return _locks.setdefault(path, threading.Lock())


def read(path: Path) -> dict[str, Any] | None:
    """The kept products at ``path``, or None when there are none (or they cannot be read: the steps run again)."""
    try:
        products = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("install products %s cannot be read (%s): the install steps run again", path, exc)
        return None
    if not isinstance(products, dict) or not isinstance(products.get("tar"), str) \
            or not isinstance(products.get("deleted"), list):
        log.warning("install products %s are not in the expected shape: the install steps run again", path)
        return None
    return products


def write(path: Path, products: dict[str, Any]) -> None:
    """Keep ``products`` at ``path``, whole or not at all (a failure only costs the next load an install)."""
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".", suffix=".tmp", delete=False) as fh:
            temporary = fh.name
            json.dump(products, fh)
        os.replace(temporary, path)
    except OSError as exc:
        log.warning("install products could not be kept at %s (%s): the next load installs again", path, exc)
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
