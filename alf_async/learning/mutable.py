"""The learner's side of population-based training: the settings a built run may change
without a rebuild, what it trains with, and a digest of its weights.

A setting held in a variable (`ScheduledValue`: the learning rate, which is the
optimizer's own, and the algorithm's `mutable_settings`) is written by a
checkpoint's restore like any weight; `follow()` puts its configured schedule
back, and `trains_with()` reads the live values back for the run's
`trains_with` report. `weights_digest()` leaves them out, so that a checkpoint
and the run that restored it under new settings digest the same.

Thread-safety: used from the learner's thread (the trainer's main thread).
"""

import hashlib
from typing import Dict

import numpy as np
import tensorflow as tf

from alf_async.algorithms.schedules import ScheduledValue


class MutableSettings:
    """The learning rate and an algorithm's mutable settings, moved by the env steps."""

    def __init__(self, learning_rate: ScheduledValue, algorithm, env_steps: tf.Variable):
        """`env_steps`: the learner's env-step counter, which the schedules follow."""
        self._learning_rate, self._algorithm, self._env_steps = (learning_rate, algorithm,
                                                                 env_steps)

    @property
    def settings(self) -> Dict[str, ScheduledValue]:
        """name -> `ScheduledValue`: the learning rate and the algorithm's own."""
        return {"learning_rate": self._learning_rate, **self._algorithm.mutable_settings}

    def follow(self) -> None:
        """Moves every schedule to the current env step (each update does; the trainer
        after a restore, which put the checkpoint's values in the variables)."""
        self._learning_rate.follow(int(self._env_steps))
        self._algorithm.set_env_steps(int(self._env_steps))

    def trains_with(self) -> Dict[str, float]:
        """The values the next update uses, read from the live variables (not from the
        configuration)."""
        return {name: setting.value() for name, setting in self.settings.items()}

    def weights_digest(self) -> str:
        """sha256 of the algorithm's variables (normalisers included), the mutable
        settings' left out."""
        mutable = {id(setting.variable) for setting in self.settings.values()}
        digest = hashlib.sha256()
        for variable in self._algorithm.variables:
            if id(variable) not in mutable:
                digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
        return digest.hexdigest()
