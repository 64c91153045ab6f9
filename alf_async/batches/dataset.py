"""`DatasetBatches`: learn batches sampled from an RLDS dataset (offline learning),
and `DatasetSampler`, the windows they are made of (hybrid learning shares it)."""

from typing import Optional

import gin
import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async.datasets.reader import SETTING, load_steps
from alf_async.datasets.windows import EpochWindows
from alf_async.experience import Experience, LearnBatch

OFFLINE_ENV_ID = -1  # the env id of a dataset's windows in a learn batch
# Samples gathered per compiled call: a call's dispatch costs about what a learner
# update of a small network does (tools/datasets_benchmark.py)
BATCHES_PER_CALL = 8


class PackedColumns:
    """Per-step fields held side by side, one `[N, C]` constant per dtype: a gather
    of rows fetches every field of that dtype at once (one TF gather a dtype
    instead of one a field).

    Thread-safety: immutable after construction.
    """

    def __init__(self, fields: dict):
        """
        Args:
            fields: `{name: [N, ...] numpy array}`, each of the dtype it is read as.
        """
        groups, self._layout = {}, {}  # dtype -> columns; dtype -> [(name, shape)]
        for key, value in fields.items():
            groups.setdefault(value.dtype, []).append(value.reshape(len(value), -1))
            self._layout.setdefault(value.dtype, []).append((key, value.shape[1:]))
        self._widths = {dtype: [c.shape[1] for c in columns] for dtype, columns in groups.items()}
        self._matrices = {dtype: tf.constant(np.concatenate(columns, axis=1))
                          for dtype, columns in groups.items()}

    def gather(self, rows) -> dict:
        """`rows` (int, any shape R) -> `{name: [*R, ...]}`, inside a compiled function."""
        row_shape, fields = tf.shape(rows), {}
        for dtype, matrix in self._matrices.items():
            parts = tf.split(tf.gather(matrix, rows), self._widths[dtype], axis=-1)
            for (key, shape), part in zip(self._layout[dtype], parts):
                fields[key] = tf.reshape(part, tf.concat([row_shape, list(shape)], 0))
        return fields


class DatasetSampler:
    """Windows of a dataset's steps, shaped as replay's: `[S, n, 1, ...]`.

    Thread-safety: one thread at a time.

    Attributes:
        steps: the `reader.Steps` held in memory.
        windows: their `EpochWindows`.
    """

    def __init__(self, dataset_dir: Optional[str], unroll_spec, algorithm, sequence_length: int,
                 env_name: Optional[str] = None, seed=None):
        """
        Args:
            dataset_dir: the RLDS dataset's directory, or a list of them (their
                steps together: `reader.load_steps`).
            unroll_spec: the driver's unroll spec (the dtypes batches are cast to).
            algorithm: its specs are checked against the dataset's; a
                recurrent one is refused (a dataset holds no policy states).
            sequence_length: n, steps per window (each with the one after it).
            env_name: the run's env id (a dataset of another env is refused).
            seed: seeds the windows' order.

        Raises:
            ValueError: no `dataset_dir`, a recurrent algorithm, or a dataset that
                does not fit the run (`reader.load_steps`; one line).
        """
        if not dataset_dir:
            raise ValueError(f"{SETTING} is needed to learn from a dataset")
        if algorithm.recurrent:
            raise ValueError(f"{SETTING}: {type(algorithm).__name__} is recurrent and needs "
                             f"stored policy states, which a dataset does not hold")
        self._spec = unroll_spec.experience
        self.steps = load_steps(dataset_dir, algorithm.time_step_spec.observation,
                                algorithm.action_spec, env_name)
        self.windows = EpochWindows(self.steps.fields["step_type"], self.steps.episode_last,
                                    sequence_length, seed)
        self.sequence_length = sequence_length
        spec = self._spec
        dtypes = dict(step_type=spec.time_step.step_type.dtype, reward=spec.time_step.reward.dtype,
                      discount=spec.time_step.discount.dtype,
                      observation=spec.time_step.observation.dtype, action=spec.action.dtype,
                      log_prob=spec.log_prob.dtype, policy_version=spec.policy_version.dtype)
        self._columns = PackedColumns({key: np.asarray(self.steps.fields[key], dtype.as_numpy_dtype)
                                       for key, dtype in dtypes.items()})
        self._gather_fn = tf.function(self._gather, autograph=False)
        self._ready, self._ready_count = [], 0  # gathered samples not yet handed out
        self._handed_out = 0  # windows

    def _gather(self, rows) -> list:
        """`[K, S, n + 1, 1]` step indices -> K `LearnBatch`es, in one compiled call of
        TF ops on the dataset held as constants (the copy runs outside the GIL)."""
        spec, window, after = self._spec, rows[:, :, :-1], rows[:, :, -1]
        at, following = self._columns.gather(window), self._columns.gather(after)
        time_steps = lambda fields: ts.TimeStep(*[fields[k] for k in ts.TimeStep._fields])
        shape = tf.shape(window)
        experience = Experience(
            time_step=time_steps(at), action=at["action"], log_prob=at["log_prob"],
            policy_state=tf.nest.map_structure(  # feed-forward: never read
                lambda s: tf.zeros(tf.concat([shape, s.shape[2:]], 0), s.dtype),
                spec.policy_state),
            policy_version=at["policy_version"])
        batches = (experience, time_steps(following), tf.fill(shape[:2], OFFLINE_ENV_ID))
        flat = [tf.unstack(x, num=BATCHES_PER_CALL) for x in tf.nest.flatten(batches)]
        return [tf.nest.pack_sequence_as(batches, [x[k] for x in flat])
                for k in range(BATCHES_PER_CALL)]

    def sample(self, count: int) -> LearnBatch:
        """`count` windows: experience `[count, n, 1, ...]`, bootstrap `[count, 1, ...]`,
        env ids `OFFLINE_ENV_ID`, no env steps.

        The windows of `BATCHES_PER_CALL` samples are gathered at once (one
        dispatch instead of one a batch); `epoch` counts the windows handed out,
        not those gathered ahead.
        """
        if not self._ready or self._ready_count != count:
            rows = self.windows.draw(BATCHES_PER_CALL * count)
            self._ready = self._gather_fn(rows.reshape(BATCHES_PER_CALL, count, -1, 1))
            self._ready_count = count
        experience, bootstrap, env_ids = self._ready.pop(0)
        self._handed_out += count
        return LearnBatch(experience, bootstrap, env_ids, 0)

    @property
    def epoch(self) -> int:
        """Epochs begun by the windows handed out (not those gathered ahead)."""
        return -(-self._handed_out // self.windows.num_starts)

    def describe(self) -> str:
        return (f"windows of {self.sequence_length} of {len(self.steps.episode_last)} dataset "
                f"steps ({self.steps.num_episodes} episodes)")


@gin.configurable(module="alf_async")
class DatasetBatches:
    """Every learn batch is windows of an RLDS dataset's steps: offline learning.

    No env step is learnt from (each batch's `env_steps` is 0): bound the run
    with `train.num_iterations`; evaluation still plays the env. Every step
    that is not LAST starts one window an epoch (`EpochWindows`).

    Thread-safety: `next()` by one thread at a time; the rest by the trainer's.
    """

    NAME = "dataset"  # its `exp_replayer`
    weighted = False
    learns_from_env = False  # offline: no env step is learnt from
    wants_back = ()

    def __init__(self, unroll_spec, algorithm, env_name: Optional[str] = None, seed=None,
                 dataset_dir: Optional[str] = None, batch_size: int = 256,
                 sequence_length: int = 1):
        """
        Args:
            unroll_spec, algorithm, env_name, seed: as `DatasetSampler`'s (the
                driver passes them).
            dataset_dir: the RLDS dataset's directory (TFDS's, e.g. one that
                `train.record_dataset` or `play --record_dataset` wrote), or a
                list of them (a mixed dataset).
            batch_size: windows per learn batch.
            sequence_length: steps per window (DQN's n; 1: single transitions).

        Raises:
            ValueError: a bad size, or a dataset that does not fit (one line).
        """
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"DatasetBatches.batch_size must be an integer >= 1, got "
                             f"{batch_size!r}")
        self.sampler = DatasetSampler(dataset_dir, unroll_spec, algorithm, sequence_length,
                                      env_name, seed)
        self.batch_size = batch_size

    def shape(self, unused_unroll_length: int, unused_batch_size: int) -> tuple:
        """`(batch_size, sequence_length, 1)`."""
        return self.batch_size, self.sampler.sequence_length, 1

    def threads(self, coord, queues) -> list:
        """None: nothing is collected for learning."""
        return []

    def next(self, unused_updates_ahead: int = 0) -> LearnBatch:
        return self.sampler.sample(self.batch_size)

    def after_update(self, batch, per_item) -> None:
        """Nothing to learn from an update."""

    def describe(self, unused_env_steps: int) -> str:
        return f"offline: {self.batch_size} {self.sampler.describe()}"

    def summaries(self) -> dict:
        return {"dataset/epoch": float(self.sampler.epoch)}

    def diagnose(self) -> str:
        return ""

    def save(self) -> None:
        """Nothing to keep: the dataset is on disk."""

    def close(self) -> None:
        """Nothing to release."""
