"""`ReplayBuffer`: windows, the replay-ratio limiter, priorities, sequences, settings,
and another table behind its interface."""

import threading
import time
import types
import weakref

import numpy as np
import pytest

from alf_async.batches.priorities import Priorities
from alf_async.batches.replay_buffer import ReplayBuffer
from alf_async.batches.reverb_table import ReverbTable
from alf_async.batches.segments import stack_segments
from fakes import garbage_collector_off
from replay_fakes import (B, T, counting_unroll as _unroll, deadline as _deadline,
                          replay_buffer as _replay, unroll_spec as _spec)




def test_windows_are_stored_steps_and_their_starts_are_uniform():
    replay = _replay(replay_ratio=1e6, min_size=4 * T)
    try:
        for k in range(4):
            assert replay.insert(_unroll(1000 * k), _deadline(10))
        starts = []
        for _ in range(40):
            batch = replay.sample(_deadline(10))
            first = batch.experience.time_step.reward.numpy()[:, 0, 0]
            boot = batch.bootstrap.reward.numpy()[:, 0]
            np.testing.assert_array_equal(boot, first + 1)  # the next step of the same column
            np.testing.assert_array_equal(batch.experience.action.numpy()[:, 0, 0], first)
            starts.extend(first % 100)
        starts = np.asarray(starts, int)
        assert set(starts) <= set(range(T))
        counts = np.bincount(starts, minlength=T)
        expected = len(starts) / T  # 320 each
        chi2 = ((counts - expected) ** 2 / expected).sum()
        assert chi2 < 24.3, counts  # p = 0.001 with 7 degrees of freedom
    finally:
        replay.close()


def test_close_closes_the_sampler_then_not_when_the_garbage_collector_finds_it():
    """Its destructor holds the GIL while it waits for its worker: left to the
    collector, it stalled every thread of the process for seconds, at any point."""
    replay = _replay(replay_ratio=1e6, min_size=T)
    assert replay.insert(_unroll(0), _deadline(10))
    assert replay.sample(_deadline(10)) is not None
    sampler = weakref.ref(replay.table._samples)  # pylint: disable=protected-access
    with garbage_collector_off():
        replay.close()
        assert sampler() is None


def _sample_until_it_waits(replay, max_batches=500):
    batches = 0
    while replay.sample(_deadline(0.6)) is not None:
        batches += 1
        assert batches < max_batches
    return batches


def _insert_until_it_waits(replay, max_unrolls=500):
    unrolls = 0
    while replay.insert(_unroll(0), _deadline(0.6)):
        unrolls += 1
        assert unrolls < max_unrolls
    return unrolls


def test_sampling_waits_when_ahead_and_inserting_when_behind():
    replay = _replay(min_size=2 * T, batch_size=16, replay_ratio=2.0)
    try:
        assert replay.insert(_unroll(0), _deadline(10))  # B = 2 segments: min_size reached
        batches = _sample_until_it_waits(replay)
        # Sampling stopped at the limiter's bound, not before a batch was due.
        limit = replay.inserted_steps * replay.replay_ratio - replay.offset + replay.error_buffer
        assert limit - 3 * 16 <= batches * 16 <= limit
        assert replay.insert(_unroll(0), _deadline(10))
        assert replay.sample(_deadline(10)) is not None  # new data: sampling goes on
        # The learner stops sampling: collection may run ahead by the slack only.
        unrolls = _insert_until_it_waits(replay)
        ahead = (replay.inserted_steps * replay.replay_ratio - replay.offset
                 - replay.sampled_windows)
        assert unrolls >= 1 and ahead <= replay.error_buffer + 2 * 16 + B * T * 2
    finally:
        replay.close()


def test_with_both_sides_running_the_achieved_ratio_is_the_setting():
    import reverb
    replay = _replay(min_size=2 * T, batch_size=16, replay_ratio=3.0)
    stop = threading.Event()

    def collect():
        while not stop.is_set():
            replay.insert(_unroll(0), stop.is_set)

    thread = threading.Thread(target=collect)
    thread.start()
    try:
        for _ in range(300):
            assert replay.sample(_deadline(10)) is not None
        stop.set()
        thread.join(timeout=5)
        # Reverb counts a window as sampled when its dataset fetches it; the
        # learner saw fewer (the rest were in flight, or dropped at a timeout).
        client = reverb.Client(replay.table.address)
        fetched = client.server_info(timeout=10)[ReverbTable.NAME].rate_limiter_info \
            .sample_stats.completed
    finally:
        stop.set()
        thread.join(timeout=5)
        replay.close()
    assert not thread.is_alive()
    assert replay.sampled_windows <= fetched
    due = replay.inserted_steps * replay.replay_ratio - replay.offset
    assert abs(fetched - due) <= replay.error_buffer + B * T * 3  # one unroll's B segments
    assert abs(replay.achieved_ratio - 3.0) < 0.6


class _SampleOnFlush:
    """A writer proxy: right after each flush, the learner's side samples a
    batch, as it may while the writer thread waits for a core."""

    def __init__(self, replay):
        self._writer, self._replay, self.env_steps = replay.table._writer, replay, []

    def __getattr__(self, name):
        return getattr(self._writer, name)

    def flush(self, **kwargs):
        self._writer.flush(**kwargs)
        self.env_steps.append(self._replay.sample(_deadline(10)).env_steps)


def test_a_batch_sampled_as_soon_as_its_items_land_counts_their_env_steps():
    replay = _replay(replay_ratio=1e3)
    try:
        replay.table._writer = writer = _SampleOnFlush(replay)
        for _ in range(2):
            assert replay.insert(_unroll(0), _deadline(10))
        # Each unroll's T * B steps reach the learner with the first batch that
        # can hold them, never a batch later (beta and the schedules follow them).
        assert writer.env_steps == [T * B, T * B]
    finally:
        replay.close()


def test_a_stop_ends_a_waiting_insert_and_sample_within_the_poll_period():
    replay = _replay(min_size=4 * T)
    try:
        stop = threading.Event()
        results = []
        thread = threading.Thread(target=lambda: results.append(replay.sample(stop.is_set)))
        thread.start()
        time.sleep(0.3)
        start = time.monotonic()
        stop.set()
        thread.join(timeout=5)
        assert not thread.is_alive() and results == [None]
        assert time.monotonic() - start < 1.0
    finally:
        replay.close()


class _ListTable:
    """Another store behind `ReplayTable`: a Python list, sampled uniformly, no limiter."""

    def __init__(self, item_spec, settings, cut, checkpoint_dir):
        self.item_spec, self.settings, self._cut = item_spec, settings, cut
        self.items, self.restored_items, self.sample_timeouts = [], 0, 0
        self._rng = np.random.default_rng(0)

    def insert(self, items, priorities, should_stop):
        self.items = (self.items + list(items))[-self.settings.max_items:]
        return True

    def sample(self, should_stop):
        if len(self.items) < self.settings.min_items:
            return None
        picked = self._rng.integers(len(self.items), size=self.settings.items_per_batch)
        return self._cut(stack_segments([self.items[i] for i in picked])), None

    def update_priorities(self, keys, priorities):
        raise AssertionError("uniform: no priorities")

    def save(self):
        return None

    def close(self):
        self.items = []


def test_another_table_behind_the_interface_gives_the_same_windows_without_reverb():
    replay = _replay(replay_ratio=1e6, min_size=4 * T, capacity=4 * T, table=_ListTable)
    table = replay.table
    assert (table.settings.max_items, table.settings.min_items) == (4, 4)
    assert table.settings.items_per_batch == 64 and table.settings.priority_alpha is None
    for k in range(3):  # 6 segments: the oldest 2 leave
        assert replay.insert(_unroll(1000 * k), _deadline(10))
    batch = replay.sample(_deadline(10))
    first = batch.experience.time_step.reward.numpy()[:, 0, 0]
    np.testing.assert_array_equal(batch.bootstrap.reward.numpy()[:, 0], first + 1)
    assert set((first // 100).astype(int)) <= {10, 11, 20, 21}  # unrolls 1 and 2 only
    assert batch.env_steps == 3 * T * B and replay.sampled_windows == 64


def test_a_table_lacking_members_is_named_where_the_buffer_builds_it():
    lacking = lambda *args: types.SimpleNamespace(insert=None, sample=None)
    with pytest.raises(TypeError, match=r"SimpleNamespace is not a replay table: it lacks "
                                        r"restored_items, sample_timeouts, update_priorities, "
                                        r"save, close"):
        _replay(table=lacking)


@pytest.mark.parametrize("kwargs, message", [
    (dict(save_buffer=True), "ReplayBuffer.save_buffer=True needs a checkpoint_dir"),
    (dict(batch_size=0), "ReplayBuffer.batch_size"),
    (dict(sequence_length=T + 1), "sequence_length=9 must be <= AsyncOffPolicyDriver.unroll_length"),
    (dict(min_size=20_000), "min_size=20000 must be <= capacity"),
    (dict(replay_ratio=0.0), "ReplayBuffer.replay_ratio must be > 0"),
    (dict(capacity=T - 1, min_size=1), "ReplayBuffer.capacity"),
])
def test_bad_settings_name_the_setting(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _replay(**kwargs)


# --- prioritized: every window of a segment, sampling by p^alpha, priorities written back ---

def _prioritized(alpha=0.5, **kwargs):
    priorities = Priorities(alpha, beta=0.4, eps=1e-6, eta=0.9, new_items="one")
    settings = dict(replay_ratio=1e6, min_size=4 * T, batch_size=4 * T, priorities=priorities)
    return _replay(**dict(settings, **kwargs))


def _segment_ids(batch):
    """Each sampled item's segment, told by its first step's count (`first + 100 b`)."""
    first = batch.experience.time_step.reward.numpy()[::T, 0, 0]
    return first.astype(int)


def _fill(replay):
    for k in range(2):  # 2 unrolls of B = 2: segments 0, 100, 1000, 1100
        assert replay.insert(_unroll(1000 * k), _deadline(10))


def _set_priorities(replay, wanted):
    """Writes `wanted[segment]` as each segment's priority; returns their keys."""
    keys = {}
    while len(keys) < len(wanted):
        batch = replay.sample(_deadline(10))
        keys.update(zip(_segment_ids(batch), batch.items.keys))
    segments = sorted(wanted)
    replay.table.update_priorities(np.array([keys[s] for s in segments], np.uint64),
                             np.array([wanted[s] for s in segments]))
    return keys


def test_a_prioritized_batch_is_every_window_of_its_segments_item_major():
    replay = _prioritized()
    try:
        _fill(replay)
        batch = replay.sample(_deadline(10))
        first = batch.experience.time_step.reward.numpy()[:, 0, 0]
        assert first.shape == (4 * T,) and batch.items.keys.shape == (4,)
        starts = first.reshape(4, T) - _segment_ids(batch)[:, None]
        np.testing.assert_array_equal(starts, np.tile(np.arange(T), (4, 1)))
    finally:
        replay.close()


def test_uniform_whole_segments_give_every_window_of_batch_size_over_t_segments():
    replay = _replay(replay_ratio=1e6, min_size=4 * T, batch_size=4 * T, whole_segments=True)
    try:
        _fill(replay)
        seen = set()
        for _ in range(20):
            batch = replay.sample(_deadline(10))
            first = batch.experience.time_step.reward.numpy()[:, 0, 0]
            assert first.shape == (4 * T,) and batch.items is None
            segments = _segment_ids(batch)
            starts = first.reshape(4, T) - segments[:, None]
            np.testing.assert_array_equal(starts, np.tile(np.arange(T), (4, 1)))
            seen.update(segments)
        assert seen == {0, 100, 1000, 1100}  # drawn from all the stored segments
        # The limiter counts a sampled segment as its T windows: the 4 segments due
        # at min_size are replay_ratio items each, not replay_ratio * T.
        assert replay.offset == 4 * replay.replay_ratio
        assert replay.sampled_windows == 20 * 4 * T
        assert replay.describe_batch() == f"4 segments x {T} windows of 1 steps"
    finally:
        replay.close()


def test_sampling_follows_p_to_the_alpha_and_written_priorities_reach_the_table():
    replay = _prioritized(alpha=0.5)
    wanted = {0: 1.0, 100: 4.0, 1000: 9.0, 1100: 16.0}  # p^0.5: 1, 2, 3, 4
    expected = {s: np.sqrt(p) / 10 for s, p in wanted.items()}
    try:
        _fill(replay)
        _set_priorities(replay, wanted)
        for _ in range(10):  # samples in flight when the priorities changed
            replay.sample(_deadline(10))
        counts = dict.fromkeys(wanted, 0)
        for _ in range(500):
            batch = replay.sample(_deadline(10))
            for segment, probability in zip(_segment_ids(batch), batch.items.probability):
                counts[segment] += 1
                assert probability == pytest.approx(expected[segment], rel=1e-5)
    finally:
        replay.close()
    draws = sum(counts.values())  # 2,000
    chi2 = sum((counts[s] - draws * expected[s]) ** 2 / (draws * expected[s]) for s in wanted)
    assert chi2 < 21.1, counts  # p = 1e-4 with 3 degrees of freedom


def test_a_resumed_prioritized_buffer_keeps_its_priorities(tmp_path):
    settings = dict(save_buffer=True, checkpoint_dir=str(tmp_path))
    wanted = {0: 1.0, 100: 4.0, 1000: 9.0, 1100: 16.0}
    replay = _prioritized(**settings)
    try:
        _fill(replay)
        _set_priorities(replay, wanted)
    finally:
        replay.close()  # saves
    resumed = _prioritized(**settings)
    try:
        assert resumed.restored_segments == 4
        batch = resumed.sample(_deadline(5))
        for segment, probability in zip(_segment_ids(batch), batch.items.probability):
            assert probability == pytest.approx(np.sqrt(wanted[segment]) / 10, rel=1e-5)
    finally:
        resumed.close()
    with pytest.raises(ValueError, match="ReplayBuffer.save_buffer: the buffer saved in"):
        _replay(**settings)  # uniform sampling over a prioritized buffer: refused


def test_a_prioritized_batch_size_must_hold_whole_segments():
    with pytest.raises(ValueError, match="ReplayBuffer.batch_size=20 must be a multiple of "
                                         "AsyncOffPolicyDriver.unroll_length=8"):
        _prioritized(batch_size=20)


def _with_state(unroll):
    """A `[T, B, 3]` policy state equal to each step's count."""
    state = np.repeat(unroll.experience.time_step.reward[:, :, None], 3, axis=2)
    return unroll._replace(experience=unroll.experience._replace(policy_state=(state,)))


def test_sequences_are_whole_prefixed_segments_from_the_state_before_them():
    replay = ReplayBuffer(_spec(state_size=3), capacity=10_000, min_size=T, batch_size=2 * T,
                          replay_ratio=1e6, sequence_prefix=3)
    try:
        assert replay.batch_shape == (2, 3 + T, 1)
        for k in range(3):
            assert replay.insert(_with_state(_unroll(k * T)), _deadline(10))
        assert replay.inserted_steps == 3 * T * B  # the first unroll's steps count too
        for _ in range(5):
            batch = replay.sample(_deadline(10))
            reward = batch.experience.time_step.reward.numpy()[:, :, 0]
            assert reward.shape == (2, 3 + T)
            first = reward[:, 0]
            assert set(first % 100) <= {T - 3, 2 * T - 3}  # unrolls 1 and 2, 3 steps early
            np.testing.assert_array_equal(reward, first[:, None] + np.arange(3 + T))
            np.testing.assert_array_equal(batch.bootstrap.reward.numpy()[:, 0], first + 3 + T)
            state = batch.experience.policy_state[0].numpy()
            np.testing.assert_array_equal(state[:, 0, 0, 0], first)
    finally:
        replay.close()


def test_a_burn_in_longer_than_an_unroll_names_the_setting():
    with pytest.raises(ValueError, match=r"burn_in=9 must be in \[0, "
                                         r"AsyncOffPolicyDriver.unroll_length=8\]"):
        ReplayBuffer(_spec(state_size=3), capacity=10_000, min_size=T, batch_size=2 * T,
                     sequence_prefix=9)
