"""Success rates over episodes: the Wilson interval of a rate and the unbiased pass@k estimator.

Shared by the benchmark (its summaries) and the trainer (its evaluations), which do not import each other.
"""

from __future__ import annotations

import math

from repogym.envs.core.errors import ConfigError


def pass_at_k(n: int, c: int, k: int) -> float:
    """The probability that at least one of k samples drawn from n (c of them correct) is correct.

    1 - C(n-c, k) / C(n, k), computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i) so large n cannot overflow.
    """
    if not 0 <= c <= n:
        raise ConfigError(f"expected 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ConfigError(f"expected 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (default 95%) of a success rate; (0.0, 1.0) when n is 0 (nothing known)."""
    if not 0 <= successes <= n:
        raise ConfigError(f"expected 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_metrics(prefix: str, resolved_by_task: dict[str, list[bool]]) -> dict[str, float]:
    """``PREFIX/success_rate`` pooled over episodes with its 95% Wilson interval (``success_low``, ``success_high``),
    and ``pass@1`` and ``pass@k`` (k: the fewest samples of any task) as means over tasks of the estimator."""
    outcomes = [r for rs in resolved_by_task.values() for r in rs]
    if not outcomes:
        return {}
    wins = sum(outcomes)
    low, high = wilson(wins, len(outcomes))
    out = {f"{prefix}/success_rate": wins / len(outcomes), f"{prefix}/success_low": low,
           f"{prefix}/success_high": high}
    k = min(len(rs) for rs in resolved_by_task.values() if rs)
    for kk in sorted({1, k}):
        out[f"{prefix}/pass@{kk}"] = sum(pass_at_k(len(rs), sum(rs), kk) for rs in resolved_by_task.values()
                                         if rs) / sum(1 for rs in resolved_by_task.values() if rs)
    return out


__all__ = ["pass_at_k", "rate_metrics", "wilson"]
