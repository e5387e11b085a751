"""Our own bugs, made loud: counted, logged with their traceback, fatal in strict mode.

Only what an agent or the outside world can cause becomes an episode's outcome (a reward, an ``infra_error``).
Anything else raised inside repogym is a bug of ours, and a boundary that must not let it end a rollout (``env.step``,
grading, a rollout worker) hands it to :func:`report_bug`, which

- logs it with its traceback the first time a kind (where, exception type) is seen, and only counts it after;
- counts it, per kind, in this process (:func:`bug_counts`); the episode it happened in ends with status
  ``internal_error`` (excluded from training, counted in ``charts/internal_errors``, which stops a run past
  ``train.max_internal_error_rate``);
- in strict mode (``REPOGYM_STRICT=1``, which the test suite sets) raises :class:`InternalError` instead, so a test
  fails on it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter

from repogym.envs.core.errors import InternalError

log = logging.getLogger("repogym.bugs")

STRICT_ENV = "REPOGYM_STRICT"
"""Set to ``1`` to make every reported bug raise (:class:`InternalError`) instead of being counted."""

_counts: Counter[tuple[str, str]] = Counter()
_lock = threading.Lock()


def strict() -> bool:
    """Whether reported bugs raise (``REPOGYM_STRICT=1``)."""
    return os.environ.get(STRICT_ENV, "") not in ("", "0")


def report_bug(where: str, exc: BaseException) -> InternalError:
    """Record ``exc``, a bug of ours caught at boundary ``where``; returns it as an :class:`InternalError` to put in
    the results (``.record()``). Raises that error instead in strict mode."""
    kind = (where, type(exc).__name__)
    with _lock:
        _counts[kind] += 1
        first = _counts[kind] == 1
    error = InternalError(where, f"{type(exc).__name__}: {exc}")
    if strict():
        raise error from exc
    if first:
        log.error("internal error in %s (a bug of repogym's; later ones of this kind are only counted)", where,
                  exc_info=exc)
    return error


def bug_counts() -> dict[str, int]:
    """Bugs reported in this process so far: ``"where: ExceptionType"`` -> count."""
    with _lock:
        return {f"{where}: {name}": n for (where, name), n in _counts.items()}


__all__ = ["STRICT_ENV", "bug_counts", "report_bug", "strict"]
