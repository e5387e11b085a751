"""Reaping leftovers: containers (and their runs) that a crashed process did not remove."""

from __future__ import annotations

import time

from envs.sandbox.docker import LABEL, docker_client


def leftover_containers(run_id: str | None = None, older_than_s: float = 0.0) -> list:
    """repogym containers, optionally of one run and older than some age."""
    filters = {"label": [f"{LABEL}.run={run_id}"] if run_id else [LABEL]}
    now = time.time()
    found = []
    for container in docker_client().containers.list(all=True, filters=filters):
        created = float(container.labels.get(f"{LABEL}.created", "0") or 0)
        if now - created >= older_than_s:
            found.append(container)
    return found


def reap(run_id: str | None = None, older_than_s: float = 0.0, dry_run: bool = False) -> list[str]:
    """Remove leftover containers; returns their names."""
    names = []
    for container in leftover_containers(run_id, older_than_s):
        names.append(container.name)
        if not dry_run:
            container.remove(force=True)
    return names
