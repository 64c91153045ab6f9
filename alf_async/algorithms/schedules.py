"""Hyper-parameters that change with training progress (env steps), and the
variables a built run holds them in."""

from typing import Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

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


class ScheduledValue:
    """A hyper-parameter the built run holds in a variable, set from its schedule.

    The variable is what the compiled update reads, so a new schedule takes
    effect at the next update without rebuilding anything. A checkpoint
    restores the variable's old value; `follow()` after the restore puts the
    schedule's back (the trainer does, before it reports the values it
    trains with).

    Thread-safety: `set` and `follow` are called from the learner's thread;
    actors may read the variable meanwhile.
    """

    def __init__(self, name: str, schedule: Schedule,
                 variable: Optional[tf.Variable] = None):
        """
        Args:
            name: the setting's name (`learning_rate`, `clip_ratio`, ...).
            schedule: a constant or `[(env_steps, value), ...]` points.
            variable: the variable that holds it (an optimizer's learning
                rate); None: a new non-trainable float32 variable.
        """
        schedule_value(schedule, 0)  # a malformed schedule fails here, naming its points
        self.name, self.schedule = name, schedule
        self.variable = variable if variable is not None else tf.Variable(
            schedule_value(schedule, 0), trainable=False, dtype=tf.float32, name=name)

    def follow(self, env_steps: int) -> None:
        """Sets the variable to the schedule's value at `env_steps`."""
        self.variable.assign(schedule_value(self.schedule, env_steps))

    def set(self, schedule: Schedule, env_steps: int) -> None:
        """Replaces the schedule (e.g. a constant) and applies it at `env_steps`."""
        schedule_value(schedule, 0)
        self.schedule = schedule
        self.follow(env_steps)

    def value(self) -> float:
        """The value the variable holds now: what the next update uses (the shortest
        decimal of that float32: 0.2855, not 0.2854999899864197)."""
        return float(str(np.float32(self.variable.numpy())))
