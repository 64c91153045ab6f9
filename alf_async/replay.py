"""Replay: mix-in replay of recent unrolls, and uniform replay in a Reverb table.

`UnrollReplay` appends replayed unrolls to each learn batch of new ones
(IMPALA's mix-in, for on-policy-style learners). `UniformReplay` is ALF's
`exp_replayer='uniform'`: the learner learns from windows sampled from a
buffer, at a controlled replay ratio (SAC, DQN).
"""

import os
from typing import Any, Callable, List, NamedTuple, Optional

from absl import logging
import gin
import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async import extras, quiet
from alf_async.experience import Experience, LearnBatch, Unroll


class UnrollReplay:
    """A ring of the `num_slots` most recent unrolls, sampled uniformly.

    IMPALA-style mix-in replay: each learn batch of Q new unrolls gets
    `round(proportion * Q)` replayed ones appended; off-policy corrections
    (V-trace, PPO's ratio to the behaviour log-probs) account for their age.

    Thread-safety: used by one thread (whichever assembles learn batches).
    """

    def __init__(self, num_slots: int, seed: Optional[int] = None):
        """
        Args:
            num_slots: most unrolls kept; the oldest is overwritten first.
            seed: seeds the sampling (None: random).
        """
        if num_slots < 1:
            raise ValueError(f"FreshBatches.replay_buffer_num_slots must be >= 1 "
                             f"when replay_proportion > 0, got {num_slots}")
        self._slots = []
        self._num_slots = num_slots
        self._next = 0
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return len(self._slots)

    def add(self, unrolls: Unroll) -> None:
        """Stores each of `[n, ...]` unrolls (any nest) in its own slot."""
        for i in range(int(tf.nest.flatten(unrolls)[0].shape[0])):
            unroll = tf.nest.map_structure(lambda x, i=i: x[i], unrolls)
            if len(self._slots) < self._num_slots:
                self._slots.append(unroll)
            else:
                self._slots[self._next] = unroll
            self._next = (self._next + 1) % self._num_slots

    def sample(self, n: int) -> Unroll:
        """`n` stored unrolls drawn uniformly with replacement, leaves `[n, ...]`."""
        if not self._slots:
            raise ValueError("UnrollReplay.sample() before any add()")
        picks = self._rng.integers(len(self._slots), size=n)
        return tf.nest.map_structure(lambda *xs: tf.stack(xs),
                                     *[self._slots[i] for i in picks])


class Segment(NamedTuple):
    """One sub-env's column of an unroll: the item a `UniformReplay` stores.

    `time_step` leaves are `[T + 1, ...]` (the unroll's T steps, then its
    bootstrap); `action`, `log_prob` and `policy_version` leaves `[T, ...]`;
    `env_id` is a scalar.
    """
    time_step: Any
    action: Any
    log_prob: Any
    policy_version: Any
    env_id: Any


def segment_spec(unroll_spec: Unroll) -> Segment:
    """The spec of one `Segment` of unrolls with spec `unroll_spec` (`[T, B, ...]`)."""
    experience = unroll_spec.experience
    column = lambda s, extra=0: tf.TensorSpec([s.shape[0] + extra, *s.shape[2:]], s.dtype)
    return Segment(tf.nest.map_structure(lambda s: column(s, 1), experience.time_step),
                   tf.nest.map_structure(column, experience.action),
                   column(experience.log_prob), column(experience.policy_version),
                   unroll_spec.env_id)


def unroll_segments(unroll: Unroll) -> List[Segment]:
    """Splits a numpy `Unroll` (`[T, B, ...]` leaves) into its B `Segment`s."""
    experience = unroll.experience
    time_steps = tf.nest.map_structure(lambda x, last: np.concatenate([x, last[None]]),
                                       experience.time_step, unroll.bootstrap)
    column = lambda b: lambda x: x[:, b]
    return [Segment(tf.nest.map_structure(column(b), time_steps),
                    tf.nest.map_structure(column(b), experience.action),
                    experience.log_prob[:, b], experience.policy_version[:, b],
                    np.asarray(unroll.env_id, np.int32))
            for b in range(experience.log_prob.shape[1])]


def cut_windows(segments: Segment, starts, length: int) -> Unroll:
    """Windows of `length` steps from `[S, T (+ 1), ...]` segments, as `[S, length, 1]` unrolls.

    Window s holds steps `starts[s] ... starts[s] + length - 1` of segment s
    and, as its bootstrap, the step after them; each is one unroll of one
    sub-env (B = 1). A window may start at any of the T steps: one that runs
    past the segment ends at the segment's bootstrap step, marked LAST where
    it is not the window's bootstrap, so that returns stop there and the
    padding steps after it (copies) are masked like steps after an episode.
    """
    num_steps = tf.shape(segments.log_prob)[1]
    rows = starts[:, None] + tf.range(length + 1)[None]  # [S, length + 1]
    take = lambda x, rows: tf.gather(x, rows, batch_dims=1)
    time_steps = tf.nest.map_structure(lambda x: take(x, tf.minimum(rows, num_steps)),
                                       segments.time_step)
    cut = (rows >= num_steps) & (tf.range(length + 1) < length)[None]
    time_steps = time_steps._replace(step_type=tf.where(
        cut, tf.cast(ts.StepType.LAST, time_steps.step_type.dtype), time_steps.step_type))
    step_rows = tf.minimum(rows[:, :length], num_steps - 1)
    unroll = lambda x: take(x, step_rows)[:, :, None]  # [S, length, 1, ...]
    experience = Experience(
        tf.nest.map_structure(lambda x: x[:, :length, None], time_steps),
        tf.nest.map_structure(unroll, segments.action), unroll(segments.log_prob), (),
        unroll(segments.policy_version))
    bootstrap = tf.nest.map_structure(lambda x: x[:, length, None], time_steps)
    return Unroll(experience, bootstrap, segments.env_id)


@gin.configurable(module="alf_async")
class UniformReplay:
    """Uniform experience replay in a Reverb table served in this process.

    ALF's `exp_replayer='uniform'`: every unroll's B columns go into the
    table as `Segment`s (T steps and their bootstrap); a learn batch is
    `batch_size` segments drawn uniformly with replacement, each cut to a
    window of `sequence_length` steps from a uniformly drawn start
    (`cut_windows`), so that windows start uniformly over the stored steps. The oldest segments leave first once `capacity`
    env steps are held. A `SampleToInsertRatio` rate limiter holds
    `replay_ratio` (sampled windows per inserted env step): when the learner
    falls behind, `insert` waits (and so do the env threads, behind the learn
    queue); when it runs ahead, `sample` waits for data.

    Thread-safety: one thread inserts (the driver's `ReplayWriterThread`) and
    one samples (the learner's); every wait is bounded and polls a stop flag.
    """

    TABLE = "uniform_replay"
    _POLL_MS = 200  # longest a wait goes without checking for a stop

    def __init__(self, unroll_spec: Unroll,
                 capacity: int = 100_000,
                 min_size: int = 1_000,
                 batch_size: int = 256,
                 sequence_length: int = 1,
                 replay_ratio: float = 64.0,
                 ratio_tolerance: float = 0.1,
                 save_buffer: bool = False,
                 checkpoint_dir: Optional[str] = None):
        """
        Args:
            unroll_spec: spec of the driver's unrolls (`[T, B, ...]` leaves).
            capacity: env steps kept (in whole segments of T).
            min_size: env steps stored before the first sample.
            batch_size: windows per learn batch (the learner splits them into
                `Learner.num_minibatches` optimizer steps).
            sequence_length: steps per window (DQN's n of n-step returns; 1:
                single transitions); each comes with the step after it.
            replay_ratio: sampled windows per inserted env step, e.g. 256 for
                one optimizer step on 256 windows per env step.
            ratio_tolerance: how far sampling may run ahead of or behind
                insertion, relative to the windows due at `min_size`, before
                one side waits.
            save_buffer: keep the buffer's content in `checkpoint_dir` (each
                `save()` replaces the previous copy; `close()` saves too) and
                resume from it, rate limiter included. Off: a resumed run
                refills `min_size` steps before learning again.
            checkpoint_dir: where the buffer is kept (the trainer's
                `root_dir/replay`); needed with `save_buffer`.
        """
        self._reverb = reverb = extras.import_reverb(
            "AsyncOffPolicyDriver.exp_replayer='uniform'")
        spec = segment_spec(unroll_spec)
        self.unroll_length = spec.log_prob.shape[0]
        _check_settings(capacity, min_size, batch_size, sequence_length, replay_ratio,
                        ratio_tolerance, self.unroll_length)
        self.batch_size, self.sequence_length = batch_size, sequence_length
        self.replay_ratio = replay_ratio
        if save_buffer and not checkpoint_dir:
            raise ValueError("UniformReplay.save_buffer=True needs a checkpoint_dir "
                             "(alf_async.train passes root_dir/replay)")
        self.checkpoint_dir = checkpoint_dir if save_buffer else None
        table = self._table(spec, unroll_spec.experience.log_prob.shape[1], capacity, min_size,
                            ratio_tolerance)
        with quiet.native_stderr_held():  # Reverb: "Started replay server on port ..."
            self._server = reverb.Server([table], checkpointer=(
                reverb.checkpointers.DefaultCheckpointer(self.checkpoint_dir)
                if self.checkpoint_dir else None))
        self.address = f"127.0.0.1:{self._server.port}"
        self._client = reverb.Client(self.address)
        self.restored_segments = self._check_restored(table)
        self._writer = self._client.trajectory_writer(num_keep_alive_refs=1)
        self._dataset = reverb.TrajectoryDataset.from_table_signature(
            self.address, self.TABLE, max_in_flight_samples_per_worker=batch_size,
            rate_limiter_timeout_ms=self._POLL_MS).batch(batch_size, drop_remainder=True)
        self._samples = None  # the dataset's iterator, made by the sampling thread
        self.inserted_steps = 0
        self.sampled_windows = 0
        # Waits of the sampler that outlasted a poll; each drops the windows
        # in flight (Reverb counted them as sampled, the learner never saw them).
        self.sample_timeouts = 0
        self._steps_sampled_up_to = 0
        self._cut = tf.function(self._random_windows, autograph=False)

    def _table(self, spec: Segment, spec_batch_size: int, capacity: int, min_size: int,
               ratio_tolerance: float):
        reverb, steps = self._reverb, self.unroll_length
        samples_per_insert = self.replay_ratio * steps  # per segment of T steps
        min_items = max(1, min_size // steps)
        # At least room for a learn batch and an unroll's B segments either side.
        error_buffer = max(ratio_tolerance * min_items * samples_per_insert,
                           2.0 * (self.batch_size + spec_batch_size * samples_per_insert))
        # Reverb's limiter keeps sampled windows within `error_buffer` of
        # `ratio * inserted steps - offset`: the first min_size steps are free.
        self.offset, self.error_buffer = min_items * samples_per_insert, error_buffer
        return reverb.Table(
            self.TABLE, sampler=reverb.selectors.Uniform(), remover=reverb.selectors.Fifo(),
            max_size=capacity // steps, signature=spec,
            rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
                samples_per_insert, min_items, error_buffer))

    def _check_restored(self, table) -> int:
        """The number of segments restored from `checkpoint_dir` (0: none);
        raises ValueError if they were saved under other settings."""
        info = self._client.server_info()[self.TABLE]
        if not info.current_size:
            return 0
        saved = (info.max_size, info.rate_limiter_info.samples_per_insert,
                 info.rate_limiter_info.min_size_to_sample,
                 [(s.shape, s.dtype) for s in tf.nest.flatten(info.signature)])
        wanted = (table.info.max_size, table.info.rate_limiter_info.samples_per_insert,
                  table.info.rate_limiter_info.min_size_to_sample,
                  [(s.shape, s.dtype) for s in tf.nest.flatten(table.info.signature)])
        if saved != wanted:
            self._stop_server()
            raise ValueError(
                f"UniformReplay.save_buffer: the buffer saved in {self.checkpoint_dir} was made "
                f"with other replay settings or specs (capacity, replay_ratio, min_size, "
                f"unroll_length or the env's); delete it or restore those settings")
        logging.info("Resumed the replay buffer from %s: %d segments", self.checkpoint_dir,
                     info.current_size)
        return info.current_size

    def save(self) -> Optional[str]:
        """With `save_buffer`, writes the buffer to `checkpoint_dir` (replacing
        the previous copy) and returns the copy's path; else returns None."""
        if not self.checkpoint_dir:
            return None
        with quiet.native_stderr_held():  # Reverb: "Stored checkpoint to ..." (ours follows)
            path = self._client.checkpoint()
        size = sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path))
        logging.info("Saved the replay buffer (%.1f MiB) to %s", size / 2**20, path)
        return path

    def insert(self, unroll: Unroll, should_stop: Callable[[], bool]) -> bool:
        """Stores a numpy unroll's B segments; waits while the learner is behind.

        Returns:
            True once they are stored; False if `should_stop()` turned true
            while waiting.
        """
        segments = unroll_segments(unroll)
        for segment in segments:
            self._writer.append(segment)
            self._writer.create_item(self.TABLE, 1.0, tf.nest.map_structure(
                lambda column: column[-1], self._writer.history))
        while not should_stop():
            try:
                self._writer.flush(timeout_ms=self._POLL_MS)
            except self._reverb.errors.DeadlineExceededError:
                continue
            self.inserted_steps += len(segments) * self.unroll_length
            return True
        return False

    def sample(self, should_stop: Callable[[], bool]) -> Optional[LearnBatch]:
        """Waits for a learn batch of `batch_size` windows (None if `should_stop()`).

        Returns:
            `LearnBatch` with experience leaves `[batch_size, sequence_length,
            1, ...]` (no policy state), bootstrap leaves `[batch_size, 1,
            ...]`, the windows' env ids, and as `env_steps` the env steps
            inserted since the previous batch.
        """
        while not should_stop():
            if self._samples is None:
                with quiet.native_stderr_held():  # Reverb: "... accessed directly without gRPC"
                    self._samples = iter(self._dataset)
            try:
                sample = next(self._samples)
            except (StopIteration, tf.errors.OutOfRangeError):  # the rate limiter's timeout
                self._samples = None
                self.sample_timeouts += 1
                continue
            windows = self._cut(sample.data)
            self.sampled_windows += self.batch_size
            inserted, self._steps_sampled_up_to = (
                self.inserted_steps - self._steps_sampled_up_to, self.inserted_steps)
            return LearnBatch(windows.experience, windows.bootstrap, windows.env_id, inserted)
        return None

    def _random_windows(self, segments: Segment) -> Unroll:
        starts = tf.random.uniform([self.batch_size], 0, self.unroll_length, tf.int32)
        return cut_windows(segments, starts, self.sequence_length)

    @property
    def achieved_ratio(self) -> float:
        """Windows sampled per env step inserted so far."""
        return self.sampled_windows / max(self.inserted_steps, 1)

    def close(self) -> None:
        """Saves the buffer (with `save_buffer`) and stops the server; call
        once no thread inserts or samples."""
        self._writer.close()
        self.save()
        self._stop_server()

    def _stop_server(self) -> None:
        with quiet.native_stderr_held():  # Reverb: "Shutting down replay server"
            self._server.stop()


def _check_settings(capacity, min_size, batch_size, sequence_length, replay_ratio,
                    ratio_tolerance, unroll_length: int) -> None:
    """Raises ValueError naming the `UniformReplay` setting that breaks a rule."""
    for name, value, least in [("capacity", capacity, unroll_length),
                               ("min_size", min_size, unroll_length),
                               ("batch_size", batch_size, 1),
                               ("sequence_length", sequence_length, 1)]:
        if not isinstance(value, (int, np.integer)) or value < least:
            raise ValueError(f"UniformReplay.{name} must be an integer >= {least} "
                             f"(AsyncOffPolicyDriver.unroll_length is {unroll_length}), "
                             f"got {value!r}")
    for name, value in [("replay_ratio", replay_ratio), ("ratio_tolerance", ratio_tolerance)]:
        if not value > 0:
            raise ValueError(f"UniformReplay.{name} must be > 0, got {value!r}")
    if sequence_length > unroll_length:
        raise ValueError(f"UniformReplay.sequence_length={sequence_length} must be <= "
                         f"AsyncOffPolicyDriver.unroll_length={unroll_length}")
    if min_size > capacity:
        raise ValueError(f"UniformReplay.min_size={min_size} must be <= capacity={capacity}")
