"""`ReplayBuffer`: experience replay, as segments in a `ReplayTable` (Reverb by default)."""

from typing import Callable, List, Optional, Sequence

import gin
import numpy as np
import tensorflow as tf

from alf_async.batches.priorities import Priorities
from alf_async.batches.reverb_table import ReverbTable
from alf_async.batches.segments import Segment, SequenceSplitter, segment_spec, stack_segments
from alf_async.batches.shapes import EveryWindow, RandomWindows, SamplingShape, WholeSequences
from alf_async.batches.table import TableSettings, check_table
from alf_async.experience import LearnBatch, Unroll


@gin.configurable(module="alf_async")
class ReplayBuffer:
    """Experience replay (ALF's `ReplayBuffer`): segments in a table, cut into learn batches.

    Every unroll's B columns go into the table (`table`, a `ReplayTable`;
    Reverb by default) as `Segment`s: T steps and their bootstrap. A learn
    batch is S sampled segments cut by a sampling shape (`shapes`):
    uniform (ALF's `exp_replayer='uniform'`): `batch_size` segments drawn
    with replacement, one window of `sequence_length` steps from a uniformly
    drawn start of each (`RandomWindows`), so that windows start uniformly
    over the stored steps; with `whole_segments`, `batch_size / T` segments
    each cut into all their T windows instead (`EveryWindow`: every window is
    still drawn with the same chance, and the table's cost per sampled item is
    shared by T windows). Prioritized (given `priorities`): `batch_size / T`
    segments drawn by priority, each cut into its T windows, so that an
    item's priority covers all it holds. Sequences (given `sequence_prefix`,
    for a recurrent learner): each segment also holds the `sequence_prefix`
    steps before it and the policy state before them (`SequenceSplitter`),
    and is learnt whole (`WholeSequences`, R2D2). In every mode `batch_size`
    counts the steps the learner trains on (a sequence's prefix is only
    burnt in). The oldest segments leave first once `capacity` env steps are
    held. The table's rate limiter holds `replay_ratio` (sampled windows per
    inserted env step): when the learner falls behind, `insert` waits (and so
    do the env threads, behind the learn queue); when it runs ahead, `sample`
    waits for data.

    Thread-safety: one thread inserts (the driver's `ReplayWriterThread`) and
    one samples (the learner's); every wait is bounded and polls a stop flag.
    """

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
                 new_priorities: Optional[Callable[[List[Segment]], Sequence[float]]] = None,
                 table: Callable = ReverbTable):
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
            table: the store, `(item_spec, TableSettings, cut, checkpoint_dir)
                -> ReplayTable` (`ReverbTable`).
        """
        self.unroll_length = unroll_spec.experience.log_prob.shape[0]
        _check_settings(capacity, min_size, batch_size, sequence_length, replay_ratio,
                        ratio_tolerance, self.unroll_length, sequence_prefix)
        if save_buffer and not checkpoint_dir:
            raise ValueError("ReplayBuffer.save_buffer=True needs a checkpoint_dir "
                             "(alf_async.train passes root_dir/replay)")
        self._splitter = SequenceSplitter(sequence_prefix or 0)
        self.shape = _sampling_shape(unroll_spec, batch_size, sequence_length,
                                     sequence_prefix, bool(priorities or whole_segments))
        self.batch_size, self.sequence_length = batch_size, sequence_length
        self.priorities, self.replay_ratio = priorities, replay_ratio
        settings = self._settings(capacity, min_size, ratio_tolerance,
                                  unroll_spec.experience.log_prob.shape[1])
        self.table = table(segment_spec(unroll_spec, self._splitter.prefix), settings,
                           self.shape.cut, checkpoint_dir if save_buffer else None)
        check_table(self.table)
        self.restored_segments = self.table.restored_items
        self.inserted_steps = self.sampled_windows = 0
        self._steps_sampled_up_to = 0
        self._cut = tf.function(self.shape.cut, autograph=False)  # `[S, ...]` segments
        self._new_priorities = new_priorities or self._constant_priorities

    def _settings(self, capacity: int, min_size: int, ratio_tolerance: float,
                  unroll_batch_size: int) -> TableSettings:
        """The table's sizes and rate: `replay_ratio` windows per env step, in items."""
        steps, shape = self.unroll_length, self.shape
        # Sampled items per inserted segment of T steps.
        samples_per_insert = self.replay_ratio * steps / shape.steps_per_item
        min_items = max(1, min_size // steps)
        # At least room for a learn batch and an unroll's B segments either side.
        error_buffer = max(ratio_tolerance * min_items * samples_per_insert,
                           2.0 * (shape.items_per_batch + unroll_batch_size * samples_per_insert))
        # The rate limiter keeps sampled items within `error_buffer` of
        # `samples_per_insert * inserted segments - offset`: the first min_size
        # steps are free (uniform: an item sampled is a window).
        self.offset, self.error_buffer = min_items * samples_per_insert, error_buffer
        return TableSettings(capacity // steps, min_items, samples_per_insert, error_buffer,
                             shape.items_per_batch,
                             self.priorities.alpha if self.priorities else None)

    @property
    def windows_per_item(self) -> int:
        """Learn-batch columns per sampled segment (T for every window, else 1)."""
        return self.shape.windows_per_item

    @property
    def items_per_batch(self) -> int:
        return self.shape.items_per_batch

    @property
    def batch_shape(self) -> tuple:
        """`(Q', T', B')` of the learn batches: windows `(batch_size, sequence_length, 1)`,
        or sequences `(batch_size / T, prefix + T, 1)`."""
        return self.shape.batch_shape

    def describe_batch(self) -> str:
        """What a learn batch holds, for the console."""
        return self.shape.describe()

    def save(self) -> Optional[str]:
        """With `save_buffer`, writes the buffer to `checkpoint_dir` (replacing
        the previous copy) and returns the copy's path; else returns None."""
        return self.table.save()

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
        return self.table.insert(segments, priorities, should_stop)

    def sample(self, should_stop: Callable[[], bool]) -> Optional[LearnBatch]:
        """Waits for a learn batch of `batch_size` windows (None if `should_stop()`).

        Returns:
            `LearnBatch` with experience leaves `[Q', T', 1, ...]`
            (`batch_shape`; windows: `[batch_size, sequence_length, 1]`),
            bootstrap leaves `[Q', 1, ...]`, their env ids, and as `env_steps`
            the env steps inserted since the previous batch. Prioritized
            windows are item-major (item i's window at step t is `i * T + t`)
            and `items` is the batch's `table.SampledItems`. Sequences carry
            their stored policy state at every step.
        """
        sampled = self.table.sample(should_stop)
        if sampled is None:
            return None
        windows, items = sampled
        self.sampled_windows += self.batch_size
        inserted, self._steps_sampled_up_to = (
            self.inserted_steps - self._steps_sampled_up_to, self.inserted_steps)
        return LearnBatch(windows.experience, windows.bootstrap, windows.env_id, inserted,
                          items=items)

    def _constant_priorities(self, segments: List[Segment]) -> List[float]:
        priority = self.priorities.new_item_priority() if self.priorities else 1.0
        return [priority] * len(segments)

    def windows(self, segments: List[Segment]) -> Unroll:
        """What a learn batch would hold of `segments` (numpy, each as inserted):
        their windows item-major (or whole sequences), as `sample` cuts them."""
        return self._cut(stack_segments(segments))

    @property
    def sample_timeouts(self) -> int:
        """Waits of the sampler that outlasted a poll; each drops the windows in
        flight (the table counted them as sampled, the learner never saw them)."""
        return self.table.sample_timeouts

    @property
    def achieved_ratio(self) -> float:
        """Windows sampled per env step inserted so far."""
        return self.sampled_windows / max(self.inserted_steps, 1)

    def close(self) -> None:
        """Saves the buffer (with `save_buffer`) and closes the table; call once no
        thread inserts or samples."""
        self.table.close()


def _sampling_shape(unroll_spec: Unroll, batch_size: int, sequence_length: int,
                    sequence_prefix: Optional[int], every_window: bool) -> SamplingShape:
    """Whole sequences for a recurrent learner, else windows: every window of each
    sampled segment (prioritized, `whole_segments`) or one at random."""
    unroll_length = unroll_spec.experience.log_prob.shape[0]
    if sequence_prefix is not None:
        return WholeSequences(batch_size, unroll_length, sequence_prefix,
                              unroll_spec.experience.policy_state)
    shape = EveryWindow if every_window else RandomWindows
    return shape(batch_size, unroll_length, sequence_length)

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
