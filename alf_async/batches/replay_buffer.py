"""`ReplayBuffer`: experience replay in a Reverb table served in this process."""

import os
from typing import Callable, List, NamedTuple, Optional, Sequence

from absl import logging
import gin
import numpy as np
import tensorflow as tf

from alf_async import extras, quiet
from alf_async.batches.packing import ColumnPacking
from alf_async.batches.priorities import Priorities
from alf_async.batches.segments import (Segment, SequenceSplitter, cut_windows, segment_spec,
                                        stack_segments)
from alf_async.experience import LearnBatch, Unroll


def check_saved_copies(checkpoint_dir: str) -> None:
    """Checks the copies of a buffer saved in `checkpoint_dir` before Reverb loads it.

    Reverb writes a copy's `DONE` file last and resumes from the newest copy
    that has one: a copy torn by a kill mid-write is passed over, here with
    one warning line. Copies without any complete one would make Reverb
    start an empty buffer silently: that raises instead.

    Raises:
        ValueError: copies exist but none is complete (one line).
    """
    if not os.path.isdir(checkpoint_dir):
        return
    copies = sorted(path for path in (os.path.join(checkpoint_dir, name)
                                      for name in os.listdir(checkpoint_dir))
                    if os.path.isdir(path))  # named by their time: sorted, oldest first
    complete = [path for path in copies if os.path.exists(os.path.join(path, "DONE"))]
    for path in copies:
        if path not in complete and (not complete or path > complete[-1]):
            logging.warning("ReplayBuffer.save_buffer: the copy %s is torn (no DONE file: "
                            "a kill mid-write); passed over", path)
    if copies and not complete:
        raise ValueError(f"ReplayBuffer.save_buffer: none of the {len(copies)} copies of the "
                         f"buffer in {checkpoint_dir} is complete; move them away to start "
                         f"with an empty buffer")


class SampledItems(NamedTuple):
    """Which table items a prioritized learn batch holds (host numpy, `[S]` each).

    Attributes:
        keys: uint64 Reverb keys, to write their priorities back.
        probability: each item's sampling probability.
        table_size: items in the table when it was sampled.
    """
    keys: np.ndarray
    probability: np.ndarray
    table_size: np.ndarray


@gin.configurable(module="alf_async")
class ReplayBuffer:
    """Experience replay in a Reverb table served in this process (ALF's `ReplayBuffer`).

    Every unroll's B columns go into the table as `Segment`s (T steps and
    their bootstrap), each stored as one Reverb column per dtype
    (`ColumnPacking`: Reverb's cost per item grows with its columns). Uniform (ALF's `exp_replayer='uniform'`): a learn batch
    is `batch_size` segments drawn uniformly with replacement, each cut to a
    window of `sequence_length` steps from a uniformly drawn start
    (`cut_windows`), so that windows start uniformly over the stored steps;
    with `whole_segments`, `batch_size / T` segments each cut into all their
    T windows instead (every window is still drawn with the same chance, and
    Reverb's cost per sampled item is shared by T windows). Prioritized (given `priorities`): `batch_size / T` segments drawn by
    Reverb's `Prioritized` selector, each cut into the T windows that start
    at its steps, so that an item's priority covers all it holds.
    Sequences (given `sequence_prefix`, for a recurrent learner): each
    segment also holds the `sequence_prefix` steps before it and the policy
    state before them (`SequenceSplitter`), and a learn batch is
    `batch_size / T` whole segments, uniformly or by priority (R2D2). In
    every mode `batch_size` counts the steps the learner trains on (a
    sequence's prefix is only burnt in). The oldest segments leave first once `capacity`
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
                 checkpoint_dir: Optional[str] = None,
                 priorities: Optional[Priorities] = None,
                 sequence_prefix: Optional[int] = None,
                 whole_segments: bool = False,
                 new_priorities: Optional[Callable[[List[Segment]], Sequence[float]]] = None):
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
            priorities: prioritized sampling (`PrioritizedReplayBatches`
                passes it; None: uniform).
            sequence_prefix: whole segments with this many steps of burn-in
                before them, for a recurrent learner (the batch sources pass
                its `burn_in`); None: windows.
            whole_segments: uniform replay samples `batch_size / T` segments
                and learns from every window of each (prioritized replay and
                sequences always do); False: `batch_size` segments, one
                window of each.
            new_priorities: `segments -> [S]` priorities of the S segments
                of a new unroll, computed at insert (`PrioritizedReplayBatches`
                with `new_items='td_error'`); None: each gets
                `priorities.new_item_priority()` (1 without priorities).
        """
        self._reverb = reverb = extras.import_reverb(
            "AsyncOffPolicyDriver.exp_replayer='uniform'")
        self.unroll_length = unroll_spec.experience.log_prob.shape[0]
        _check_settings(capacity, min_size, batch_size, sequence_length, replay_ratio,
                        ratio_tolerance, self.unroll_length, sequence_prefix)
        self._splitter = SequenceSplitter(sequence_prefix or 0)
        self._state_structure = unroll_spec.experience.policy_state
        self._packing = ColumnPacking(segment_spec(unroll_spec, self._splitter.prefix))
        self.batch_size, self.sequence_length = batch_size, sequence_length
        self.priorities, self.sequences = priorities, sequence_prefix is not None
        whole = bool(priorities or self.sequences or whole_segments)
        self._set_sizes(batch_size, whole)
        self.replay_ratio = replay_ratio
        if save_buffer and not checkpoint_dir:
            raise ValueError("ReplayBuffer.save_buffer=True needs a checkpoint_dir "
                             "(alf_async.train passes root_dir/replay)")
        self.checkpoint_dir = checkpoint_dir if save_buffer else None
        table = self._table(self._packing.spec, unroll_spec.experience.log_prob.shape[1],
                            capacity, min_size, ratio_tolerance)
        self._server = self._serve(table)
        self.address = f"127.0.0.1:{self._server.port}"
        self._client = reverb.Client(self.address)
        self.restored_segments = self._check_restored(table)
        self._writer = self._client.trajectory_writer(num_keep_alive_refs=1)
        self._samples = None  # the dataset's iterator, made by the sampling thread
        self.inserted_steps = self.sampled_windows = 0
        # Waits of the sampler that outlasted a poll; each drops the windows
        # in flight (Reverb counted them as sampled, the learner never saw them).
        self.sample_timeouts = 0
        self._steps_sampled_up_to = 0
        cut = (self._whole_segments if self.sequences else
               self._every_window if whole else self._random_windows)
        self._cut = tf.function(cut, autograph=False)  # `[S, ...]` segments
        self._dataset = self._sampled_dataset(cut)
        self._new_priorities = new_priorities or self._constant_priorities

    def _set_sizes(self, batch_size: int, whole: bool) -> None:
        """Trained steps per sampled item (T where `whole`: every window of a segment,
        else 1), the learn batch's columns per item, and items per learn batch."""
        steps_per_item = self.unroll_length if whole else 1
        if batch_size % steps_per_item:
            raise ValueError(
                f"ReplayBuffer.batch_size={batch_size} must be a multiple of "
                f"AsyncOffPolicyDriver.unroll_length={self.unroll_length} with prioritized "
                f"replay, sequences or whole_segments (each sampled segment gives all its "
                f"steps)")
        self._steps_per_item = steps_per_item
        self.windows_per_item = 1 if self.sequences else steps_per_item
        self.items_per_batch = batch_size // steps_per_item

    def _sampled_dataset(self, cut: Callable):
        """The table's items, `items_per_batch` at a time, cut into windows inside the
        dataset's pipeline, so that the sampling thread makes one call per learn batch.
        Its elements are flat (tf.data would turn the lists of a policy state into
        tuples); `_sampled_structure` is their structure, `(windows, info)`, set when
        `map` traces."""
        self._sampled_structure = None

        def cut_sampled(sample):
            cut_sample = (cut(self._packing.unpack(sample.data)), sample.info)
            self._sampled_structure = tf.nest.map_structure(lambda _: 0, cut_sample)
            return tuple(tf.nest.flatten(cut_sample))

        return self._reverb.TrajectoryDataset.from_table_signature(
            self.address, self.TABLE, max_in_flight_samples_per_worker=self.items_per_batch,
            rate_limiter_timeout_ms=self._POLL_MS).batch(
                self.items_per_batch, drop_remainder=True).map(cut_sampled)

    def _table(self, spec, spec_batch_size: int, capacity: int, min_size: int,
               ratio_tolerance: float):
        reverb, steps = self._reverb, self.unroll_length
        # Sampled items per inserted segment of T steps.
        samples_per_insert = self.replay_ratio * steps / self._steps_per_item
        min_items = max(1, min_size // steps)
        # At least room for a learn batch and an unroll's B segments either side.
        error_buffer = max(ratio_tolerance * min_items * samples_per_insert,
                           2.0 * (self.items_per_batch + spec_batch_size * samples_per_insert))
        # Reverb's limiter keeps sampled items within `error_buffer` of
        # `samples_per_insert * inserted segments - offset`: the first min_size
        # steps are free (uniform: an item sampled is a window).
        self.offset, self.error_buffer = min_items * samples_per_insert, error_buffer
        return reverb.Table(
            self.TABLE, remover=reverb.selectors.Fifo(),
            sampler=(reverb.selectors.Prioritized(self.priorities.alpha) if self.priorities
                     else reverb.selectors.Uniform()),
            max_size=capacity // steps, signature=spec,
            rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
                samples_per_insert, min_items, error_buffer))

    def _serve(self, table):
        """The Reverb server of `table`, resumed from the buffer saved in
        `checkpoint_dir` if any (`check_saved_copies`); a saved copy that cannot
        be read is one line (ValueError), not a traceback."""
        reverb = self._reverb
        if not self.checkpoint_dir:
            with quiet.native_stderr_held():  # Reverb: "Started replay server on port ..."
                return reverb.Server([table])
        check_saved_copies(self.checkpoint_dir)
        try:
            with quiet.native_stderr_held():
                return reverb.Server([table], checkpointer=reverb.checkpointers.
                                     DefaultCheckpointer(self.checkpoint_dir))
        except RuntimeError as error:
            raise ValueError(f"ReplayBuffer.save_buffer: the buffer saved in "
                             f"{self.checkpoint_dir} cannot be read ({str(error).splitlines()[0]})"
                             f"; move it away to start with an empty buffer") from None

    def _check_restored(self, table) -> int:
        """The number of segments restored from `checkpoint_dir` (0: none);
        raises ValueError if they were saved under other settings."""
        info = self._client.server_info()[self.TABLE]
        if not info.current_size:
            return 0
        saved = (info.max_size, str(info.sampler_options),
                 info.rate_limiter_info.samples_per_insert,
                 info.rate_limiter_info.min_size_to_sample,
                 [(s.shape, s.dtype) for s in tf.nest.flatten(info.signature)])
        wanted = (table.info.max_size, str(table.info.sampler_options),
                  table.info.rate_limiter_info.samples_per_insert,
                  table.info.rate_limiter_info.min_size_to_sample,
                  [(s.shape, s.dtype) for s in tf.nest.flatten(table.info.signature)])
        if saved != wanted:
            self._stop_server()
            raise ValueError(
                f"ReplayBuffer.save_buffer: the buffer saved in {self.checkpoint_dir} was made "
                f"with other replay settings or specs (capacity, replay_ratio, min_size, "
                f"priorities, unroll_length or the env's); delete it or restore those settings")
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
        segments = self._splitter.split(unroll)
        priorities = self._new_priorities(segments)
        # Counted before its items can be sampled, so that a learn batch never
        # holds steps no batch has counted (`sample()`'s `env_steps`); a new
        # stream's first unroll only prefixes the next, but its steps count.
        self.inserted_steps += unroll.experience.log_prob.size
        for segment, priority in zip(segments, priorities):
            self._writer.append(self._packing.pack(segment))
            self._writer.create_item(self.TABLE, priority, tf.nest.map_structure(
                lambda column: column[-1], self._writer.history))
        while not should_stop():
            try:
                self._writer.flush(timeout_ms=self._POLL_MS)
            except self._reverb.errors.DeadlineExceededError:
                continue
            return True
        return False

    def sample(self, should_stop: Callable[[], bool]) -> Optional[LearnBatch]:
        """Waits for a learn batch of `batch_size` windows (None if `should_stop()`).

        Returns:
            `LearnBatch` with experience leaves `[Q', T', 1, ...]`
            (`batch_shape`; windows: `[batch_size, sequence_length, 1]`),
            bootstrap leaves `[Q', 1, ...]`, their env ids, and as `env_steps`
            the env steps inserted since the previous batch. Prioritized
            windows are item-major (item i's window at step t is `i * T + t`)
            and `items` is the batch's `SampledItems`. Sequences carry their
            stored policy state at every step.
        """
        while not should_stop():
            if self._samples is None:
                with quiet.native_stderr_held():  # Reverb: "... accessed directly without gRPC"
                    self._samples = iter(self._dataset)
            try:
                windows, info = tf.nest.pack_sequence_as(self._sampled_structure,
                                                         list(next(self._samples)))
            except (StopIteration, tf.errors.OutOfRangeError):  # the rate limiter's timeout
                self._samples = None
                self.sample_timeouts += 1
                continue
            self.sampled_windows += self.batch_size
            inserted, self._steps_sampled_up_to = (
                self.inserted_steps - self._steps_sampled_up_to, self.inserted_steps)
            items = None
            if self.priorities:
                items = SampledItems(*[x.numpy() for x in (
                    info.key, info.probability, info.table_size)])
            return LearnBatch(windows.experience, windows.bootstrap, windows.env_id, inserted,
                              items=items)
        return None

    def _constant_priorities(self, segments: List[Segment]) -> List[float]:
        priority = self.priorities.new_item_priority() if self.priorities else 1.0
        return [priority] * len(segments)

    def windows(self, segments: List[Segment]) -> Unroll:
        """What a learn batch would hold of `segments` (numpy, each as inserted):
        their windows item-major (or whole sequences), as `sample` cuts them."""
        return self._cut(stack_segments(segments))

    def mutate_priorities(self, keys: np.ndarray, priorities: np.ndarray) -> None:
        """Sets the priorities of items by key (items evicted since are skipped)."""
        self._client.mutate_priorities(self.TABLE, updates=dict(
            zip(keys.tolist(), np.asarray(priorities, np.float64).tolist())))

    def _random_windows(self, segments: Segment) -> Unroll:
        starts = tf.random.uniform([self.batch_size], 0, self.unroll_length, tf.int32)
        return cut_windows(segments, starts, self.sequence_length)

    def _whole_segments(self, segments: Segment) -> Unroll:
        """Each segment as one sequence: `[items, prefix + T, 1]`, from its stored state."""
        length = self._splitter.prefix + self.unroll_length
        state = tf.nest.pack_sequence_as(  # Reverb gives lists back as tuples
            self._state_structure, tf.nest.flatten(segments.policy_state))
        return cut_windows(segments._replace(policy_state=state),
                           tf.zeros(tf.shape(segments.log_prob)[:1], tf.int32), length)

    def describe_batch(self) -> str:
        """What a learn batch holds, for the console."""
        if self.sequences:
            return (f"{self.items_per_batch} sequences of {self._splitter.prefix} burn-in + "
                    f"{self.unroll_length} steps")
        if self.windows_per_item > 1:
            return (f"{self.items_per_batch} segments x {self.windows_per_item} windows of "
                    f"{self.sequence_length} steps")
        return f"{self.batch_size} windows of {self.sequence_length} steps"

    @property
    def batch_shape(self) -> tuple:
        """`(Q', T', B')` of the learn batches: windows `(batch_size, sequence_length, 1)`,
        or sequences `(batch_size / T, prefix + T, 1)`."""
        if self.sequences:
            return self.items_per_batch, self._splitter.prefix + self.unroll_length, 1
        return self.batch_size, self.sequence_length, 1

    def _every_window(self, segments: Segment) -> Unroll:
        """The T windows of each segment, item-major: `[items * T, sequence_length, 1]`."""
        steps = self.unroll_length
        repeated = tf.nest.map_structure(lambda x: tf.repeat(x, steps, axis=0), segments)
        starts = tf.tile(tf.range(steps), tf.shape(segments.log_prob)[:1])
        return cut_windows(repeated, starts, self.sequence_length)

    @property
    def achieved_ratio(self) -> float:
        """Windows sampled per env step inserted so far."""
        return self.sampled_windows / max(self.inserted_steps, 1)

    def close(self) -> None:
        """Saves the buffer (with `save_buffer`), stops the server and closes the
        sampler; call once no thread inserts or samples."""
        self._writer.close()
        self.save()
        self._stop_server()
        # The sampler closes now, in this thread, not whenever the garbage collector
        # finds it: its destructor waits for its worker while holding the GIL, which
        # stalls every Python thread of the process (up to seconds, at any point).
        self._samples = None

    def _stop_server(self) -> None:
        with quiet.native_stderr_held():  # Reverb: "Shutting down replay server"
            self._server.stop()


def _check_settings(capacity, min_size, batch_size, sequence_length, replay_ratio,
                    ratio_tolerance, unroll_length: int, sequence_prefix) -> None:
    """Raises ValueError naming the `ReplayBuffer` setting that breaks a rule."""
    if sequence_prefix is not None and not 0 <= sequence_prefix <= unroll_length:
        raise ValueError(f"The recurrent algorithm's burn_in={sequence_prefix} must be in "
                         f"[0, AsyncOffPolicyDriver.unroll_length={unroll_length}] (its "
                         f"steps come from a sub-env's previous unroll)")
    for name, value, least in [("capacity", capacity, unroll_length),
                               ("min_size", min_size, unroll_length),
                               ("batch_size", batch_size, 1),
                               ("sequence_length", sequence_length, 1)]:
        if not isinstance(value, (int, np.integer)) or value < least:
            raise ValueError(f"ReplayBuffer.{name} must be an integer >= {least} "
                             f"(AsyncOffPolicyDriver.unroll_length is {unroll_length}), "
                             f"got {value!r}")
    for name, value in [("replay_ratio", replay_ratio), ("ratio_tolerance", ratio_tolerance)]:
        if not value > 0:
            raise ValueError(f"ReplayBuffer.{name} must be > 0, got {value!r}")
    if sequence_length > unroll_length:
        raise ValueError(f"ReplayBuffer.sequence_length={sequence_length} must be <= "
                         f"AsyncOffPolicyDriver.unroll_length={unroll_length}")
    if min_size > capacity:
        raise ValueError(f"ReplayBuffer.min_size={min_size} must be <= capacity={capacity}")
