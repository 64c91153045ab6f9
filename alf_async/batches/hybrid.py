"""`HybridBatches`: each learn batch part dataset, part online replay (RLPD's symmetric
sampling, ALF's hybrid training)."""

import threading
from typing import Callable, Optional

import gin
import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async.batches.dataset import OFFLINE_ENV_ID, DatasetSampler
from alf_async.batches.uniform import UniformReplayBatches
from alf_async.experience import LearnBatch


def offline_share(batch: LearnBatch) -> float:
    """The share of a batch's samples (windows whose first step is not LAST: those a
    loss counts) that came from the dataset."""
    env_ids = np.asarray(batch.env_ids)
    first_types = np.asarray(batch.experience.time_step.step_type)[:, 0, 0]
    valid = first_types != ts.StepType.LAST
    return float(np.sum(valid & (env_ids == OFFLINE_ENV_ID)) / max(np.sum(valid), 1))


@gin.configurable(module="alf_async")
class HybridBatches(UniformReplayBatches):
    """Uniform replay of fresh experience, each batch topped up with dataset windows.

    The replay's `ReplayBuffer.batch_size` windows are the online share; the
    dataset adds `round(batch_size * f / (1 - f))` more, f =
    `offline_fraction` (0.5: as many again, RLPD's symmetric sampling). The
    replay ratio counts online windows only. `hybrid/offline_fraction` is the
    share of the samples really trained on (windows starting at a LAST step
    are masked) that came from the dataset.

    Thread-safety: as `UniformReplayBatches`.
    """

    NAME = "hybrid"

    def __init__(self, unroll_spec, algorithm, should_stop: Callable[[], bool],
                 replay_dir: Optional[str] = None, env_name: Optional[str] = None, seed=None,
                 dataset_dir: Optional[str] = None, offline_fraction: float = 0.5):
        """
        Args:
            unroll_spec, algorithm, should_stop, replay_dir: as `UniformReplayBatches`'.
            env_name, seed: as `DatasetSampler`'s.
            dataset_dir: the RLDS dataset's directory, or a list of them.
            offline_fraction: the dataset's share of every learn batch, in (0, 1).

        Raises:
            ValueError: a fraction outside (0, 1), or a dataset that does not fit.
        """
        if not 0 < offline_fraction < 1:
            raise ValueError(f"HybridBatches.offline_fraction must be in (0, 1), got "
                             f"{offline_fraction!r}")
        super().__init__(unroll_spec, algorithm, should_stop, replay_dir)
        self.sampler = DatasetSampler(dataset_dir, unroll_spec, algorithm,
                                      self.replay.sequence_length, env_name, seed)
        online = self.replay.batch_size
        self.offline_windows = max(1, round(online * offline_fraction / (1 - offline_fraction)))
        self._shares = []  # the dataset's share of each batch since the last summaries()
        self._lock = threading.Lock()  # next() appends on the prefetch thread

    def shape(self, unroll_length: int, batch_size: int) -> tuple:
        """`(online + offline windows, sequence_length, 1)`."""
        online, length, one = super().shape(unroll_length, batch_size)
        return online + self.offline_windows, length, one

    def next(self, updates_ahead: int = 0) -> Optional[LearnBatch]:
        """The replay's windows, then the dataset's, in one batch (None once stopped)."""
        online = super().next(updates_ahead)
        if online is None:
            return None
        offline = self.sampler.sample(self.offline_windows)
        join = lambda a, b: tf.concat([a, tf.cast(b, a.dtype)], 0)
        batch = LearnBatch(
            tf.nest.map_structure(join, online.experience, offline.experience),
            tf.nest.map_structure(join, online.bootstrap, offline.bootstrap),
            join(online.env_ids, offline.env_ids), online.env_steps, items=online.items)
        with self._lock:
            self._shares.append(offline_share(batch))
        return batch

    def describe(self, env_steps: int) -> str:
        return (f"hybrid: {super().describe(env_steps)}, plus {self.offline_windows} "
                f"{self.sampler.describe()}")

    def summaries(self) -> dict:
        """The replay's, and the dataset's share of the samples since the last call."""
        with self._lock:
            shares, self._shares = self._shares, []
        values = super().summaries()
        if shares:
            values["hybrid/offline_fraction"] = float(np.mean(shares))
        values["dataset/epoch"] = float(self.sampler.epoch)
        return values
