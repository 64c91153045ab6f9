"""Hyper-parameters that change with training progress (env steps)."""

from typing import Sequence, Tuple, Union

import numpy as np

Schedule = Union[float, Sequence[Tuple[int, float]]]


def schedule_value(schedule: Schedule, env_steps: int) -> float:
    """A constant, or a piecewise-linear `[(env_steps, value), ...]` schedule.

    Outside the first and last points the value is held constant.
    """
    if isinstance(schedule, (int, float)):
        return float(schedule)
    steps, values = zip(*schedule)
    if list(steps) != sorted(steps):
        raise ValueError(f"Schedule points must be sorted by env steps, got {schedule}")
    return float(np.interp(env_steps, steps, values))
