import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async.experience import Experience, Unroll, make_specs
from alf_async.replay import UniformReplay, UnrollReplay, cut_windows, unroll_segments


def _unrolls(ids):
    """Unroll-like nests whose every leaf holds the unroll's id."""
    ids = tf.constant(ids, tf.int32)
    return dict(env_id=ids, data=tf.cast(ids, tf.float32)[:, None] * tf.ones([1, 4]))


def test_keeps_the_most_recent_slots_and_samples_only_them():
    replay = UnrollReplay(num_slots=3, seed=0)
    replay.add(_unrolls([0, 1]))
    replay.add(_unrolls([2, 3]))
    assert len(replay) == 3
    sample = replay.sample(50)
    assert sample["data"].shape == (50, 4)
    ids = set(sample["env_id"].numpy())
    assert ids == {1, 2, 3}  # 0 was overwritten; 50 draws hit all three
    np.testing.assert_array_equal(sample["data"].numpy()[:, 0], sample["env_id"].numpy())


def test_same_seed_same_samples():
    draws = []
    for _ in range(2):
        replay = UnrollReplay(num_slots=8, seed=5)
        replay.add(_unrolls(list(range(8))))
        draws.append(replay.sample(10)["env_id"].numpy())
    np.testing.assert_array_equal(*draws)


def test_bad_use():
    with pytest.raises(ValueError, match="replay_buffer_num_slots must be >= 1"):
        UnrollReplay(num_slots=0)
    with pytest.raises(ValueError, match="before any add"):
        UnrollReplay(num_slots=2).sample(1)


# --- UniformReplay: segments, windows, uniform starts and the replay-ratio limiter ---

T, B = 8, 2
MID, LAST = int(ts.StepType.MID), int(ts.StepType.LAST)


def _spec():
    time_step_spec = ts.time_step_spec(tf.TensorSpec([2], tf.float32))
    action_spec = tf.TensorSpec([], tf.int64)
    return make_specs(time_step_spec, action_spec, (), B, T)[2]


def _unroll(first: int, env_id: int = 0, step_type=None) -> Unroll:
    """A numpy unroll whose observations count steps: column b, step t -> first + t + 100 b."""
    count = (first + np.arange(T + 1)[:, None] + 100 * np.arange(B)[None]).astype(np.float32)
    types = np.full((T + 1, B), MID, np.int32) if step_type is None else step_type
    time_steps = ts.TimeStep(types, count, np.ones_like(count),
                             np.stack([count, -count], -1))
    steps = ts.TimeStep(*[x[:T] for x in time_steps])
    bootstrap = ts.TimeStep(*[x[T] for x in time_steps])
    experience = Experience(steps, count[:T].astype(np.int64), -count[:T], (),
                            count[:T].astype(np.int64))
    return Unroll(experience, bootstrap, np.int32(env_id))


def test_segments_are_columns_with_their_bootstrap():
    segments = unroll_segments(_unroll(10, env_id=3))
    assert len(segments) == B
    np.testing.assert_array_equal(segments[1].time_step.reward, 110 + np.arange(T + 1))
    np.testing.assert_array_equal(segments[1].action, 110 + np.arange(T))
    assert segments[0].time_step.observation.shape == (T + 1, 2) and segments[1].env_id == 3


def _stacked(segments):
    return tf.nest.map_structure(lambda *x: tf.constant(np.stack(x)), *segments)


def test_windows_take_the_steps_after_their_start_and_the_next_as_bootstrap():
    segments = _stacked(unroll_segments(_unroll(0)))
    windows = cut_windows(segments, tf.constant([0, 2]), length=3)
    reward = windows.experience.time_step.reward.numpy()
    assert reward.shape == (2, 3, 1)
    np.testing.assert_array_equal(reward[:, :, 0], [[0, 1, 2], [102, 103, 104]])
    np.testing.assert_array_equal(windows.bootstrap.reward.numpy()[:, 0], [3, 105])
    np.testing.assert_array_equal(windows.experience.action.numpy()[:, :, 0],
                                  [[0, 1, 2], [102, 103, 104]])
    assert (windows.experience.time_step.step_type.numpy() == MID).all()


def test_a_window_past_the_segment_ends_at_its_bootstrap_marked_last():
    segments = _stacked(unroll_segments(_unroll(0)))
    windows = cut_windows(segments, tf.constant([T - 1, T - 2]), length=3)
    reward = windows.experience.time_step.reward.numpy()[:, :, 0]
    step_type = windows.experience.time_step.step_type.numpy()[:, :, 0]
    # Start T-1: step T-1, then the bootstrap (step T) marked LAST, then a copy of it.
    np.testing.assert_array_equal(reward[0], [T - 1, T, T])
    np.testing.assert_array_equal(step_type[0], [MID, LAST, LAST])
    # Start T-2: steps T-2, T-1 and the bootstrap step T, marked LAST (a return stops there).
    np.testing.assert_array_equal(reward[1], [100 + T - 2, 100 + T - 1, 100 + T])
    np.testing.assert_array_equal(step_type[1], [MID, MID, LAST])
    np.testing.assert_array_equal(windows.bootstrap.reward.numpy()[:, 0], [T, 100 + T])


def _replay(**kwargs):
    settings = dict(capacity=10_000, min_size=T, batch_size=64, sequence_length=1,
                    replay_ratio=4.0, ratio_tolerance=0.1)
    settings.update(kwargs)
    return UniformReplay(_spec(), **settings)


def _deadline(seconds):
    end = time.monotonic() + seconds
    return lambda: time.monotonic() > end


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
        client = reverb.Client(replay.address)
        fetched = client.server_info(timeout=10)[UniformReplay.TABLE].rate_limiter_info \
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


def test_a_saved_buffer_is_restored_and_sampled_at_once_unless_saving_is_off(tmp_path):
    settings = dict(replay_ratio=1e3, min_size=4 * T, save_buffer=True,
                    checkpoint_dir=str(tmp_path))
    replay = _replay(**settings)
    try:
        for k in range(4):
            assert replay.insert(_unroll(1000 * k), _deadline(10))
    finally:
        replay.close()  # saves
    resumed = _replay(**settings)
    try:
        assert resumed.restored_segments == 4 * B
        batch = resumed.sample(_deadline(5))  # no insert: min_size is already held
        first_steps = set(batch.experience.time_step.reward.numpy()[:, 0, 0].tolist())
        assert first_steps <= {  # the steps stored before the restart
            1000 * k + t + 100 * b for k in range(4) for t in range(T) for b in range(B)}
    finally:
        resumed.close()
    fresh = _replay(**dict(settings, save_buffer=False))
    try:
        assert fresh.restored_segments == 0
        assert fresh.sample(_deadline(1.0)) is None  # waits to refill min_size
    finally:
        fresh.close()


def test_a_buffer_saved_under_other_settings_is_refused(tmp_path):
    settings = dict(save_buffer=True, checkpoint_dir=str(tmp_path))
    replay = _replay(**settings)
    try:
        assert replay.insert(_unroll(0), _deadline(10))
    finally:
        replay.close()
    with pytest.raises(ValueError, match="UniformReplay.save_buffer: the buffer saved in"):
        _replay(replay_ratio=8.0, **settings)


@pytest.mark.parametrize("kwargs, message", [
    (dict(save_buffer=True), "UniformReplay.save_buffer=True needs a checkpoint_dir"),
    (dict(batch_size=0), "UniformReplay.batch_size"),
    (dict(sequence_length=T + 1), "sequence_length=9 must be <= AsyncOffPolicyDriver.unroll_length"),
    (dict(min_size=20_000), "min_size=20000 must be <= capacity"),
    (dict(replay_ratio=0.0), "UniformReplay.replay_ratio must be > 0"),
    (dict(capacity=T - 1, min_size=1), "UniformReplay.capacity"),
])
def test_bad_settings_name_the_setting(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _replay(**kwargs)
