import numpy as np
import pytest
import tensorflow as tf

from alf_async.algorithms.target_networks import TargetUpdater


def test_starts_as_a_copy_and_moves_every_period():
    source = tf.Variable([1.0, 2.0])
    target = tf.Variable([0.0, 0.0])
    copy = TargetUpdater([source], [target], tau=1.0, period=3)
    np.testing.assert_array_equal(target.numpy(), [1.0, 2.0])
    source.assign([5.0, 6.0])
    copy.step()
    copy.step()
    np.testing.assert_array_equal(target.numpy(), [1.0, 2.0])  # not yet
    copy.step()
    np.testing.assert_array_equal(target.numpy(), [5.0, 6.0])


def test_polyak_averaging_every_step():
    source = tf.Variable(0.0)
    target = tf.Variable(0.0)
    polyak = TargetUpdater([source], [target], tau=0.25, period=1)
    source.assign(4.0)
    tf.function(polyak.step)()
    polyak.step()
    np.testing.assert_allclose(target.numpy(), 0.25 * 4 + 0.75 * (0.25 * 4))


@pytest.mark.parametrize("tau, period", [(0.0, 1), (1.5, 1), (1.0, 0)])
def test_bad_settings(tau, period):
    with pytest.raises(ValueError, match="target_update_tau"):
        TargetUpdater([tf.Variable(0.0)], [tf.Variable(0.0)], tau, period)
