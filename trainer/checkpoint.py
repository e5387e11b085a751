"""Checkpoints that resume exactly: learner (model, optimiser), curriculum, RNG states, step, version."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch


def rng_state() -> dict[str, Any]:
    """The global RNG states (Python, NumPy, torch), as a checkpoint holds them."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def save_checkpoint(run_dir: str | Path, step: int, state: dict[str, Any], rng: dict[str, Any] | None = None) -> Path:
    """Write ``RUN_DIR/checkpoints/step-N.pt`` atomically and point ``latest`` at it. ``rng``: the global RNG states
    to restore on resume (None: the current ones; an interrupted step's are those of when the step before ended)."""
    folder = Path(run_dir) / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step-{step:06d}.pt"
    tmp = path.with_suffix(".tmp")
    state = {**state, "step": step, "rng": rng if rng is not None else rng_state()}
    torch.save(state, tmp)
    tmp.replace(path)  # a crash mid-write leaves the previous checkpoint intact
    (folder / "latest").write_text(path.name + "\n")
    return path


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint of a run, or None."""
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = pointer.parent / pointer.read_text().strip()
    return path if path.exists() else None


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint and restore the global RNG states it saved."""
    state = torch.load(path, map_location="cpu", weights_only=False)
    rng = state["rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    return state
