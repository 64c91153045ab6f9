"""A run's score: the collection's return against env steps online, the greedy
evaluation's against learner iterations offline; its last point is the final score."""

import math
import types

import numpy as np
import pytest
import tensorflow as tf

from alf_async.runs import curves
from alf_async.metrics import EpisodeStats
from alf_async.training import scores
from alf_async.runs.layout import EVAL_RETURN_TAG, RETURN_TAG


class _Stats:
    """The collection's window: one episode of return `value` (none while NaN)."""

    def __init__(self):
        self.value = math.nan

    def recent(self):
        return np.zeros([0, 2]) if math.isnan(self.value) else np.array([[self.value, 9.0]])


def _run(tmp_path, learns_from_env, points):
    """Feeds `points` ((iteration, env steps, collection return, evaluation or None))
    to the score of a driver whose batches `learns_from_env`; returns it and its curve."""
    driver = types.SimpleNamespace(stats=_Stats(),
                                   batches=types.SimpleNamespace(learns_from_env=learns_from_env))
    counters = types.SimpleNamespace(iteration=tf.Variable(0, dtype=tf.int64),
                                     env_steps=tf.Variable(0, dtype=tf.int64))
    score = scores.score_for(driver, counters)
    writer = tf.summary.create_file_writer(str(tmp_path / "train"))
    returned = []
    with writer.as_default(), tf.summary.record_if(False):  # the score writes regardless
        for iteration, env_steps, collected, evaluated in points:
            counters.iteration.assign(iteration)
            counters.env_steps.assign(env_steps)
            driver.stats.value = collected
            returned.append(score.after_iteration(evaluated))
    writer.flush()
    return score, returned, curves.load_curve(str(tmp_path))


POINTS = [(1, 64, math.nan, None), (2, 128, 10.1, 30.0), (3, 192, 12.3, None),
          (4, 256, 15.7, 41.3)]


def test_an_online_run_is_scored_by_its_collection_at_every_iteration(tmp_path):
    score, returned, curve = _run(tmp_path, True, POINTS)
    assert score.tag == RETURN_TAG and curves.score_axis(str(tmp_path)) == "env steps"
    assert list(curve["env_steps"]) == [128, 192, 256]  # the NaN point left out
    np.testing.assert_allclose(curve["value"], [10.1, 12.3, 15.7], rtol=1e-6)
    assert math.isnan(returned[0]) and returned[1:] == list(curve["value"])
    assert score.last == curve["value"][-1]  # result.json's number is the curve's last point


def test_an_offline_run_is_scored_by_its_evaluations_against_iterations(tmp_path):
    score, returned, curve = _run(tmp_path, False, POINTS)
    assert score.tag == EVAL_RETURN_TAG
    assert curves.score_axis(str(tmp_path)) == "learner iterations"
    assert list(curve["env_steps"]) == [2, 4]  # learner iterations, at each evaluation
    np.testing.assert_allclose(curve["value"], [30.0, 41.3], rtol=1e-6)
    assert math.isnan(returned[0]) and returned[1:] == [curve["value"][0]] * 2 + [
        curve["value"][1]]  # held between evaluations
    assert score.last == curve["value"][-1]


def test_a_run_with_both_curves_is_read_by_its_env_step_return(tmp_path):
    """A hybrid or online run also evaluates: its score stays the collection's."""
    _run(tmp_path, True, POINTS)
    with tf.summary.create_file_writer(str(tmp_path / "train")).as_default():
        tf.summary.scalar(EVAL_RETURN_TAG, 99.0, step=4)
    assert curves.score_axis(str(tmp_path)) == "env steps"
    assert curves.load_curve(str(tmp_path))["value"][-1] == pytest.approx(15.7)


def test_the_episodes_kept_for_a_resume_are_those_the_last_point_averaged(tmp_path):
    """The log thread goes on adding episodes after the last iteration's score (until
    the driver stops): the final checkpoint must keep the window that score averaged,
    or a resumed run's first line disagrees with result.json."""
    stats = EpisodeStats(num_envs=1, batch_size=1, window=100)
    stats.resume(np.array([[20.0, 20.0], [24.0, 24.0]]))
    driver = types.SimpleNamespace(stats=stats,
                                   batches=types.SimpleNamespace(learns_from_env=True))
    counters = types.SimpleNamespace(iteration=tf.Variable(1, dtype=tf.int64),
                                     env_steps=tf.Variable(64, dtype=tf.int64))
    score = scores.score_for(driver, counters)
    with tf.summary.create_file_writer(str(tmp_path)).as_default():
        assert score.after_iteration(None) == 22.0
    stats.resume(np.array([[50.0, 50.0]]))  # an episode that ended after the last point
    assert stats.averages()[0] == pytest.approx(94.0 / 3)
    np.testing.assert_array_equal(score.episodes(), [[20.0, 20.0], [24.0, 24.0]])
    assert np.mean(score.episodes()[:, 0]) == score.last
