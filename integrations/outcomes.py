"""How the adapters end an episode on a bug of repogym's that the environment caught, one rule for all of them.

``RepoTaskEnv.step`` reports a bug of ours anywhere in a step (a tool, grading, the final analysis) in
``info["internal_error"]`` and ends the episode with the eval status ``internal_error``. Nothing after it says
anything of the policy, so every adapter (OpenEnv, SkyRL, verifiers, mini-swe-agent) ends the episode there, as :func:`repogym.agents.rollout.run_episode` does: status
``internal_error``, a NaN reward, ``exclude`` set, never a reward of 0 that a trainer would learn from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from repogym.envs.core.status import Status


def internal_error_of(info: Mapping[str, Any]) -> dict[str, str] | None:
    """The bug of ours a step's ``info`` reports, as ``{"where", "message"}``; None when it reports none."""
    value = info.get("internal_error")
    if value is None:
        record = info.get("eval") or {}
        if record.get("status") != Status.INTERNAL_ERROR:
            return None
        value = record.get("error") or {}
    if isinstance(value, Mapping):  # the env's {"where", "message"}
        return {"where": str(value.get("where", "env.step")), "message": str(value.get("message", ""))}
    return {"where": "env.step", "message": str(value)}  # an env that reports the message alone


def ended_by_bug(info: Mapping[str, Any], error: dict[str, str]) -> dict[str, Any]:
    """``info`` of the step that met ``error`` as the episode's last: eval status ``internal_error`` with the error,
    ``exclude`` set (the reward that goes with it is NaN)."""
    return {**info, "eval": {"status": Status.INTERNAL_ERROR, "error": error}, "exclude": True}


__all__ = ["ended_by_bug", "internal_error_of"]
