"""`PrioritizedReplayBatches`: importance weights out, TD errors back in as priorities."""

import contextlib
import threading
import time
import types

import numpy as np
import pytest
import tensorflow as tf

from alf_async.batches.priorities import PriorityWriterThread
from alf_async.batches.prioritized import PrioritizedReplayBatches
from alf_async.batches.replay_buffer import ReplayBuffer
from alf_async.batches.reverb_table import ReverbTable
from fakes import gin_bound
from replay_fakes import T, counting_unroll, unroll_spec

ALPHA, ETA, EPS = 1.0, 0.5, 1e-6


class _TdAlgorithm:
    """What the source asks of an algorithm: feed-forward, with a `td_error` item term."""
    policy_state_spec = ()
    item_terms = ("td_error",)
    recurrent, burn_in = False, 0


class _RecurrentTdAlgorithm(_TdAlgorithm):
    """A recurrent one (R2D2's shape): sequences with 2 steps of burn-in."""
    recurrent, burn_in = True, 2


class _InsertTdAlgorithm(_TdAlgorithm):
    """Its |TD error| of a window is `scale` x the window's first reward (a counting
    unroll's count): what a new segment's computed priority must come from."""

    def __init__(self):
        self.scale = tf.Variable(0.01)

    def preprocess(self, experience, bootstrap):
        del bootstrap
        reward = experience.time_step.reward[:, 0, 0]  # windows [N, 1, 1]
        return {"reward": reward, "mask": tf.ones_like(reward)}

    def loss(self, samples):
        return {"td_error": -samples["reward"] * self.scale, "loss": samples["reward"]}


def _source(env_steps=lambda: 500, algorithm=_TdAlgorithm, state_size=0, **kwargs):
    replay = {"ReplayBuffer.capacity": 10_000, "ReplayBuffer.min_size": 4 * T,
              "ReplayBuffer.batch_size": 4 * T, "ReplayBuffer.replay_ratio": 1e6}
    end = time.monotonic() + 30
    with gin_bound(replay):
        return PrioritizedReplayBatches(
            unroll_spec(state_size), algorithm(), lambda: time.monotonic() > end, env_steps,
            priority_replay_alpha=ALPHA, priority_replay_beta=[(0, 0.0), (1000, 1.0)],
            priority_replay_eps=EPS, priority_replay_eta=ETA, **kwargs)


def _segments(batch):
    return batch.experience.time_step.reward.numpy()[::T, 0, 0].astype(int)


def _fill(source):
    for k in range(2):  # segments 0, 100, 1000, 1100 at priority 1
        assert source.replay.insert(counting_unroll(1000 * k), lambda: False)


def _assert_sampled_by(source, priority):
    """After the batches sampled before the last write, each segment's probability
    is its priority over their sum (alpha 1)."""
    for _ in range(10):
        source.next()
    batch = source.next()
    total = sum(priority.values())
    for segment, probability in zip(_segments(batch), batch.items.probability):
        assert probability == pytest.approx(priority[segment] / total, rel=1e-5)


def test_weights_are_each_segments_importance_weight_on_all_its_windows():
    source = _source()
    rank = {0: 1.0, 100: 2.0, 1000: 3.0, 1100: 4.0}
    try:
        _fill(source)
        batch = source.next()  # priorities 1-4 apart (unsampled segments stay at 1)
        errors = np.array([rank[s] for s in _segments(batch)])[:, None] * np.ones(T)
        source.after_update(batch, {"td_error": errors.reshape(1, -1),
                                    "mask": np.ones((1, errors.size))})
        source.write_priorities()
        for _ in range(10):  # batches sampled before the write
            source.next()
        distinct = 0
        for _ in range(10):
            batch = source.next()
            items = batch.items
            want = (items.table_size * items.probability) ** -0.5  # beta 0.5 at 500 env steps
            np.testing.assert_allclose(batch.weights.numpy()[:, 0],
                                       np.repeat(want / want.max(), T), rtol=1e-5)
            distinct += len(set(items.probability.tolist())) > 1
        assert distinct  # no segment above 0.4: P(ten batches of one each) < 1e-13
        assert source.summaries()["replay/priority_beta"] == pytest.approx(0.5)
    finally:
        source.close()


@contextlib.contextmanager
def _writing_priorities(source):
    """Runs the source's `PriorityWriterThread` (its replay writer thread stays
    unstarted); then stops it and closes the source."""
    coord = tf.train.Coordinator()
    queues = types.SimpleNamespace(close_all=lambda: None, learn_queue=None)
    writer, = [t for t in source.threads(coord, queues) if isinstance(t, PriorityWriterThread)]
    writer.start()
    try:
        yield
    finally:
        coord.request_stop()
        coord.join([writer], stop_grace_period_secs=30)
        source.close()


def _wait_for(condition):
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "not within 30 s"
        time.sleep(0.01)


def test_td_errors_written_back_become_the_segments_priorities():
    source = _source()
    with _writing_priorities(source):
        _fill(source)
        batch = source.next()
        segments = _segments(batch)
        # Window t of segment s has |TD error| (s + 1) * (t + 1); its last window is masked.
        errors = np.array([(s + 1.0) * (t + 1) for s in segments for t in range(T)])[None]
        mask = np.tile(np.r_[np.ones(T - 1), 0.0], len(segments))[None]
        source.after_update(types.SimpleNamespace(items=batch.items),
                            {"td_error": -errors, "mask": mask})
        _wait_for(lambda: source.summaries()["replay/priority_updates"] == len(segments))
        top = lambda s: (s + 1.0) * (T - 1)  # the largest unmasked error
        mean = lambda s: (s + 1.0) * T / 2
        priority = {s: 1.0 for s in (0, 100, 1000, 1100)}
        priority.update({s: ETA * top(s) + (1 - ETA) * mean(s) + EPS for s in segments})
        assert source.priorities.max_priority == pytest.approx(max(priority.values()))
        _assert_sampled_by(source, priority)
        batch = source.next()
        source.after_update(batch, {})  # a skipped update writes nothing
        source.write_priorities()
        assert source.summaries()["replay/priority_updates"] == len(segments)


def test_after_update_hands_over_without_waiting_for_the_table(monkeypatch):
    held, release = threading.Event(), threading.Event()
    mutate = ReverbTable.update_priorities

    def slow_mutate(replay, keys, priorities):  # a table write that takes until released
        held.set()
        assert release.wait(30)
        mutate(replay, keys, priorities)

    monkeypatch.setattr(ReverbTable, "update_priorities", slow_mutate)
    source = _source()
    with _writing_priorities(source):
        _fill(source)
        batch = source.next()
        errors = np.full((1, len(batch.items.keys) * T), 2.0)
        terms = {"td_error": errors, "mask": np.ones_like(errors)}
        source.after_update(batch, terms)
        assert held.wait(30)  # the writer thread is in the table ...
        handed = threading.Thread(target=source.after_update, args=(batch, terms), daemon=True)
        handed.start()
        handed.join(10)
        assert not handed.is_alive()  # ... and the learner's next hand-over returns at once
        release.set()
        source.write_priorities()  # a save's write: after it, both updates are in the table
        assert source.summaries()["replay/priority_updates"] == 2 * len(batch.items.keys)


def test_new_items_td_error_enter_with_their_errors_under_the_current_network():
    source = _source(algorithm=_InsertTdAlgorithm, new_items="td_error")
    # Segment c (first count c) has windows t = 0..T-1 with |TD error| scale * (c + t).
    want = lambda c, scale: scale * (ETA * (c + T - 1) + (1 - ETA) * (c + (T - 1) / 2)) + EPS
    try:
        assert source.replay.insert(counting_unroll(0), lambda: False)  # segments 0, 100
        source._algorithm.scale.assign(0.02)  # the learner moved on
        assert source.replay.insert(counting_unroll(1000), lambda: False)  # 1000, 1100
        priority = {0: want(0, 0.01), 100: want(100, 0.01),
                    1000: want(1000, 0.02), 1100: want(1100, 0.02)}
        assert source.priorities.max_priority == pytest.approx(priority[1100])
        _assert_sampled_by(source, priority)
    finally:
        source.close()


def test_new_items_enter_at_the_largest_priority_so_far_by_default():
    source = _source()
    try:
        _fill(source)
        batch = source.next()
        errors = np.full((1, len(batch.items.keys) * T), 3.0)
        source.after_update(batch, {"td_error": errors, "mask": np.ones_like(errors)})
        source.write_priorities()
        assert source.replay.insert(counting_unroll(2000), lambda: False)  # 2000, 2100
        top = 3.0 + EPS
        priority = {s: 1.0 for s in (0, 100, 1000, 1100)}
        priority.update({s: top for s in _segments(batch)})
        priority.update({2000: top, 2100: top})
        _assert_sampled_by(source, priority)
    finally:
        source.close()


def _with_state(unroll):
    state = np.repeat(unroll.experience.time_step.reward[:, :, None], 3, axis=2)
    return unroll._replace(experience=unroll.experience._replace(policy_state=(state,)))


def test_a_recurrent_learners_sequence_gets_the_mix_of_its_trained_steps_errors():
    source = _source(algorithm=_RecurrentTdAlgorithm, state_size=3)
    try:
        for first in (0, 1000, 2000):  # the first unroll of each stream only prefixes
            assert source.replay.insert(_with_state(counting_unroll(first)), lambda: False)
        batch = source.next()
        assert batch.experience.time_step.reward.shape == (4, 2 + T, 1)
        assert batch.weights.shape == (4, 1)  # a weight per sequence
        sequences = batch.experience.time_step.reward.numpy()[:, 2, 0].astype(int)
        # The learner's per-item terms of sequences: [K = T steps, S]; step t of
        # sequence s has |TD error| (s + 1) * (t + 1), its last step masked.
        errors = np.array([[(s + 1.0) * (t + 1) for s in sequences] for t in range(T)])
        mask = np.ones_like(errors)
        mask[-1] = 0
        source.after_update(types.SimpleNamespace(items=batch.items),
                            {"td_error": errors, "mask": mask})
        source.write_priorities()
        want = {s: ETA * (s + 1.0) * (T - 1) + (1 - ETA) * (s + 1.0) * T / 2 + EPS
                for s in sequences}
        for _ in range(10):  # batches sampled before the write
            source.next()
        priority = dict.fromkeys((1000, 1100, 2000, 2100), 1.0)
        priority.update(want)
        total = sum(priority.values())
        batch = source.next()
        for sequence, probability in zip(batch.experience.time_step.reward.numpy()[:, 2, 0],
                                         batch.items.probability):
            assert probability == pytest.approx(priority[int(sequence)] / total, rel=1e-5)
    finally:
        source.close()
