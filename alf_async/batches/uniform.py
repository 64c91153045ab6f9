"""`UniformReplayBatches`: learn batches sampled from a replay table (ALF's
`exp_replayer='uniform'`), for off-policy learners (SAC, DQN)."""

from typing import Callable, Optional

import tensorflow as tf

from alf_async.experience import LearnBatch
from alf_async.batches.priorities import Priorities
from alf_async.batches.replay_buffer import ReplayBuffer
from alf_async.batches.writer import ReplayWriterThread


class UniformReplayBatches:
    """Unrolls go into a `ReplayBuffer`; each learn batch is windows sampled from it.

    A `ReplayWriterThread` moves unrolls from the learn queue into the table;
    the table's rate limiter holds the replay ratio (its settings are
    `ReplayBuffer`'s in gin).

    Thread-safety: `next()` is called by one thread at a time; `save()` and
    `close()` by the trainer's thread (`close()` once no thread samples).
    """

    NAME = "uniform"  # its `exp_replayer`
    weighted = False  # no importance weights
    learns_from_env = True
    wants_back = ()  # uniform sampling learns nothing from an update

    def __init__(self, unroll_spec, algorithm, should_stop: Callable[[], bool],
                 replay_dir: Optional[str] = None, priorities: Optional[Priorities] = None,
                 new_priorities: Optional[Callable] = None):
        """
        Args:
            unroll_spec: spec of one unroll (`[T, B, ...]` leaves).
            algorithm: a recurrent one (`algorithm.recurrent`) learns from
                whole sequences with `algorithm.burn_in` steps before them;
                a feed-forward one from windows.
            should_stop: ends a wait for samples (the coordinator's).
            replay_dir: where a `ReplayBuffer` with `save_buffer` keeps its
                content (the trainer passes `root_dir/replay`).
            priorities: prioritized sampling (`PrioritizedReplayBatches`).
            new_priorities: priorities of new segments computed at insert
                (`ReplayBuffer.new_priorities`).
        """
        self.replay = ReplayBuffer(
            unroll_spec, checkpoint_dir=replay_dir, priorities=priorities,
            sequence_prefix=algorithm.burn_in if algorithm.recurrent else None,
            new_priorities=new_priorities)
        self._should_stop = should_stop

    def shape(self, unused_unroll_length: int, unused_batch_size: int) -> tuple:
        """`(Q', T', 1)`: each window or sequence is one unroll of one sub-env."""
        return self.replay.batch_shape

    def threads(self, coord: tf.train.Coordinator, queues) -> list:
        """The writer thread, from the learn queue into the table."""
        return [ReplayWriterThread("ReplayWriterThread", coord, queues, self.replay)]

    def next(self, unused_updates_ahead: int = 0) -> Optional[LearnBatch]:
        """A learn batch of windows: experience `[batch_size, sequence_length, 1, ...]`.

        Returns None once a stop was requested.
        """
        return self.replay.sample(self._should_stop)

    def after_update(self, batch, per_item) -> None:
        """Uniform sampling learns nothing from an update."""

    def describe(self, unused_env_steps: int) -> str:
        return (f"uniform replay at {self.replay.replay_ratio:g} windows per env step: "
                f"{self.replay.describe_batch()}")

    def summaries(self) -> dict:
        return {"replay/achieved_ratio": self.replay.achieved_ratio,
                "replay/inserted_env_steps": self.replay.inserted_steps}

    def diagnose(self) -> str:
        return f", {self.replay.inserted_steps} env steps put in replay"

    def save(self) -> None:
        """Saves the buffer with `ReplayBuffer.save_buffer` (else nothing)."""
        self.replay.save()

    def close(self) -> None:
        self.replay.close()
