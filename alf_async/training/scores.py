"""A run's score: the one number it is judged by, as a curve and at its end.

An online run is scored by the collection's recent episodes, against env
steps. An offline run learns from no env step (its collection waits, blocked):
it is scored by the greedy policy's evaluation, against learner iterations.
The curve's last point is the run's final score: `result.json`'s
`average_return`, a study's trial value, PBT's ranking and the reports all
read this one number.

Thread-safety: the trainer's (main) thread.
"""

import math
from typing import Optional

import numpy as np
import tensorflow as tf

from alf_async.runs.layout import EVAL_RETURN_TAG, RETURN_TAG


class CollectionScore:
    """The average return of the collection's recent episodes, against env steps.

    Attributes:
        label: what the console line calls it.
        tag: its curve's summary tag in `train/`.
        last: the value of the curve's last point (NaN before any).
    """

    label = "average return"
    tag = RETURN_TAG

    def __init__(self, driver, counters):
        self._driver, self._counters = driver, counters
        self.last = math.nan
        self._episodes = np.zeros([0, 2])

    def after_iteration(self, unused_evaluated: Optional[float]) -> float:
        """Writes this iteration's point (every iteration: a target's exact crossing)."""
        self._episodes = self._driver.stats.recent()
        self.last = _as_written(np.mean(self._episodes[:, 0]) if len(self._episodes)
                                else math.nan)
        with tf.summary.record_if(True):
            tf.summary.scalar(self.tag, self.last, step=self._counters.env_steps)
        return self.last

    def episodes(self) -> np.ndarray:
        """`[n, 2]` (return, length): the episodes the last point averages. The final
        checkpoint keeps these, not the log thread's later window, so that a resumed
        run starts from the average `result.json` holds."""
        return self._episodes


class EvaluationScore:
    """The greedy policy's evaluation return, against learner iterations (offline runs).

    Attributes:
        label, tag, last: as `CollectionScore`'s.
    """

    label = "greedy return"
    tag = EVAL_RETURN_TAG

    def __init__(self, driver, counters):
        self._driver, self._counters = driver, counters
        self.last = math.nan

    def after_iteration(self, evaluated: Optional[float]) -> float:
        """`evaluated`: this iteration's evaluation return, None where none ran."""
        if evaluated is not None:
            self.last = _as_written(evaluated)
            with tf.summary.record_if(True):
                tf.summary.scalar(self.tag, self.last, step=self._counters.iteration)
        return self.last

    def episodes(self) -> np.ndarray:
        """`[n, 2]`: the collection's window (it scores nothing here)."""
        return self._driver.stats.recent()


def score_for(driver, counters):
    """The score of a run whose learn batches come from `driver.batches`."""
    learns_from_env = driver.batches.learns_from_env
    return (CollectionScore if learns_from_env else EvaluationScore)(driver, counters)


def _as_written(value: float) -> float:
    """`value` as a summary keeps it (float32), so the curve and result.json agree."""
    return float(np.float32(value))
