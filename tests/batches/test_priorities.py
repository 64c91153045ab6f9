"""`Priorities`: importance weights, R2D2's item priority, the beta schedule, settings."""

import numpy as np
import pytest

from alf_async.batches.priorities import Priorities


def _priorities(**kwargs):
    settings = dict(alpha=0.6, beta=[(0, 0.4), (1000, 1.0)], eps=1e-6, eta=0.9)
    return Priorities(**dict(settings, **kwargs))


def test_weights_are_n_p_to_the_minus_beta_over_the_batch_max():
    priorities = _priorities()
    probability = np.array([0.5, 0.1, 0.01, 0.1])
    table_size = np.array([20, 20, 25, 25])
    weights = priorities.weights(probability, table_size, env_steps=500)  # beta 0.7
    raw = (table_size * probability) ** -0.7
    np.testing.assert_allclose(weights, raw / raw.max(), rtol=1e-6)
    assert weights.dtype == np.float32 and weights.max() == 1.0
    # Beta anneals to 1 and stays there; at 1 the weights are 1 / (N P) normalised.
    assert priorities.beta(0) == pytest.approx(0.4) and priorities.beta(10**6) == 1.0
    full = priorities.weights(probability, table_size, env_steps=10**6)
    np.testing.assert_allclose(full, (1 / (table_size * probability)) * 0.25, rtol=1e-6)


def test_an_items_priority_mixes_max_and_mean_of_its_masked_errors():
    priorities = _priorities(eta=0.9, eps=0.01)
    errors = np.array([[1.0, -3.0, 2.0, 100.0],   # the 100 is masked out
                       [0.5, 0.5, 0.5, 0.5]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], np.float32)
    mixed = priorities.item_priorities(errors, mask)
    np.testing.assert_allclose(mixed, [0.9 * 3 + 0.1 * 2 + 0.01, 0.5 + 0.01], rtol=1e-6)
    # New items enter at the largest priority written so far.
    assert priorities.new_item_priority() == pytest.approx(2.91)
    assert _priorities(new_items="one").new_item_priority() == 1.0


@pytest.mark.parametrize("kwargs, message", [
    (dict(alpha=-0.1), "priority_replay_alpha must be >= 0, got -0.1"),
    (dict(beta=1.5), r"priority_replay_beta must be in \[0, 1\], got 1.5"),
    (dict(beta=[(0, 0.4), (100, 1.2)]), r"priority_replay_beta must be in \[0, 1\], got 1.2"),
    (dict(beta=-0.2), r"priority_replay_beta must be in \[0, 1\], got -0.2"),
    (dict(eta=1.1), r"priority_replay_eta must be in \[0, 1\], got 1.1"),
    (dict(eta=-0.5), r"priority_replay_eta must be in \[0, 1\], got -0.5"),
    (dict(eps=0.0), "priority_replay_eps must be > 0, got 0.0"),
    (dict(alpha="high"), "priority_replay_alpha must be >= 0, got 'high'"),
    (dict(new_items="computed"),
     "new_items must be one of 'max', 'one', 'td_error', got 'computed'"),
])
def test_bad_settings_name_the_setting(kwargs, message):
    with pytest.raises(ValueError, match=f"PrioritizedReplayBatches.{message}"):
        _priorities(**kwargs)
