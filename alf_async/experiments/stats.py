"""Figures of one seed's curve, and aggregates over seeds with confidence intervals.

The aggregates follow rliable (Agarwal et al., 2021): the interquartile mean
(the mean of the middle 50 %, `scipy.stats.trim_mean(x, 0.25)`) and a 95 %
percentile-bootstrap confidence interval (`scipy.stats.bootstrap`).
"""

from typing import Dict, List, Optional, Sequence

import numpy as np
from scipy import stats

from alf_async.runs.curves import Curve

CONFIDENCE = 0.95
RESAMPLES = 2000


def seed_figures(curve: Curve, target: Optional[float]) -> Dict[str, Optional[float]]:
    """One run's figures from its `curve` (points in env-step order).

    Returns:
        `env_steps` and `seconds` at the last point; `env_steps_to_target`
        and `seconds_to_target` at the first point whose average return is
        >= `target` (None: not reached, or no target); `best` and `final`
        average return; `last25_min`: the lowest average over the last 25 %
        of the run's env steps (a collapse after reaching the target shows
        here).
    """
    steps, seconds, value = curve["env_steps"], curve["seconds"], curve["value"]
    if not len(value):
        raise ValueError("the run has no finished episode in its summaries")
    reached = np.flatnonzero(value >= target) if target is not None else []
    first = int(reached[0]) if len(reached) else None
    tail = value[steps >= 0.75 * steps[-1]]
    return dict(env_steps=int(steps[-1]), seconds=float(seconds[-1]),
                env_steps_to_target=None if first is None else int(steps[first]),
                seconds_to_target=None if first is None else float(seconds[first]),
                best=float(value.max()), final=float(value[-1]),
                last25_min=float(tail.min()))


def iqm(values: Sequence[float], axis: int = 0) -> np.ndarray:
    """Interquartile mean: the mean of the values between the 25th and 75th percentiles."""
    return stats.trim_mean(values, 0.25, axis=axis)


def confidence_interval(values: np.ndarray, statistic=iqm) -> List[Optional[float]]:
    """95 % percentile-bootstrap interval of `statistic` over axis 0 (None: < 2 values).

    `values` may be `[seeds]` or `[seeds, points]` (one interval per point).
    """
    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:
        nothing = [None] * values.shape[1] if values.ndim > 1 else None
        return [nothing, nothing]
    result = stats.bootstrap((values,), statistic, axis=0, vectorized=True,
                             confidence_level=CONFIDENCE, n_resamples=RESAMPLES,
                             method="percentile", random_state=0)
    low, high = result.confidence_interval
    if values.ndim > 1:
        return [np.asarray(low).tolist(), np.asarray(high).tolist()]
    return [float(low), float(high)]


def aggregate(values: Sequence[Optional[float]]) -> Dict[str, object]:
    """`{n, median, iqm, ci95}` of the values that are not None (None where there are none)."""
    present = np.array([v for v in values if v is not None], dtype=np.float64)
    if not len(present):
        return dict(n=0, median=None, iqm=None, ci95=[None, None])
    return dict(n=int(len(present)), median=float(np.median(present)),
                iqm=float(iqm(present)), ci95=confidence_interval(present))


def mean_curve(curves: List[Curve], x_key: str, points: int = 100) -> Dict[str, list]:
    """The seeds' mean curve against `x_key` ('env_steps' or 'seconds') with its 95 % CI.

    The curves are interpolated onto `points` evenly spaced x values from the
    point where every seed has begun (the latest first point) to the latest
    last point; a seed that ended (at its target, or its budget) holds its last
    value after it. Every point is a mean over all the seeds: the mean never
    jumps where a seed joins or leaves.
    """
    start = max(float(c[x_key][0]) for c in curves)
    end = max(max(float(c[x_key][-1]) for c in curves), start)
    grid = np.linspace(start, end, points)
    values = np.stack([np.interp(grid, c[x_key].astype(np.float64), c["value"])
                       for c in curves])
    interval = confidence_interval(values, statistic=np.mean)
    low, high = ([None] * len(grid), [None] * len(grid)) if interval[0] is None else interval
    rounded = lambda xs: [None if x is None else round(float(x), 3) for x in xs]
    return dict(x=rounded(grid), mean=rounded(values.mean(axis=0)), low=rounded(low),
                high=rounded(high))
