import numpy as np
from tf_agents.trajectories import time_step as ts

from alf_async.algorithms import advantages


def numpy_gae(rewards, discounts, step_types, values, gamma, lam):
    """Plain loop over the ALF time-step convention (row T is the bootstrap)."""
    t_len = rewards.shape[0] - 1
    adv = np.zeros((t_len,) + rewards.shape[1:])
    for n in range(rewards.shape[1]):
        acc = 0.0
        for t in reversed(range(t_len)):
            if step_types[t, n] == ts.StepType.LAST:
                acc = 0.0  # the transition out of LAST starts a new episode
            else:
                d = gamma * discounts[t + 1, n]
                delta = rewards[t + 1, n] + d * values[t + 1, n] - values[t, n]
                acc = delta + d * lam * acc
            adv[t, n] = acc
    return adv


def _random_sequences(rng, t_len=12, n=6):
    step_types = rng.choice([ts.StepType.MID, ts.StepType.LAST], size=(t_len + 1, n),
                            p=[0.8, 0.2]).astype(np.int32)
    step_types[1:][step_types[:-1] == ts.StepType.LAST] = ts.StepType.FIRST
    step_types[0] = ts.StepType.FIRST
    rewards = rng.normal(size=(t_len + 1, n)).astype(np.float32)
    rewards[step_types == ts.StepType.FIRST] = 0
    # Terminations (discount 0) and time-limit truncations (discount 1).
    discounts = np.where((step_types == ts.StepType.LAST) & (rng.random((t_len + 1, n)) < 0.5),
                         0.0, 1.0).astype(np.float32)
    values = rng.normal(size=(t_len + 1, n)).astype(np.float32)
    return rewards, discounts, step_types, values


def test_gae_matches_numpy_loop():
    rng = np.random.default_rng(0)
    rewards, discounts, step_types, values = _random_sequences(rng)
    assert (step_types[:-1] == ts.StepType.LAST).any() and (discounts == 0).any()
    got = advantages.generalized_advantage_estimation(
        rewards, discounts, step_types, values, gamma=0.97, lambda_=0.9)
    want = numpy_gae(rewards, discounts, step_types, values, 0.97, 0.9)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_last_step_of_unroll_bootstraps_from_next_value():
    rewards = np.array([[0.0], [1.0], [2.0]], np.float32)
    values = np.array([[0.5], [1.5], [10.0]], np.float32)
    step_types = np.full((3, 1), ts.StepType.MID, np.int32)
    discounts = np.ones((3, 1), np.float32)
    got = advantages.generalized_advantage_estimation(rewards, discounts, step_types, values,
                                                      gamma=0.9, lambda_=1.0).numpy()
    last = 2.0 + 0.9 * 10.0 - 1.5
    assert abs(got[1, 0] - last) < 1e-5 and last != 0
    assert abs(got[0, 0] - (1.0 + 0.9 * 1.5 - 0.5 + 0.9 * last)) < 1e-5



def numpy_n_step_return(rewards, discounts, step_types, values, gamma):
    """Row 0's n-step return by a plain loop, stopping at the first LAST step."""
    n = rewards.shape[0] - 1
    out = np.zeros(rewards.shape[1])
    for col in range(rewards.shape[1]):
        total, scale = 0.0, 1.0
        for k in range(1, n + 1):
            total += scale * rewards[k, col]
            scale *= gamma * discounts[k, col]
            if step_types[k, col] == ts.StepType.LAST or k == n:
                total += scale * values[k, col]
                break
        out[col] = total
    return out


def test_n_step_return_matches_numpy_loop():
    rng = np.random.default_rng(3)
    for n in (1, 3, 5):
        rewards, discounts, step_types, values = _random_sequences(rng, t_len=n, n=64)
        got = advantages.n_step_return(rewards, discounts, step_types, values, 0.9).numpy()
        want = numpy_n_step_return(rewards, discounts, step_types, values, 0.9)
        valid = step_types[0] != ts.StepType.LAST
        np.testing.assert_allclose(got[valid], want[valid], rtol=1e-5, atol=1e-5)
        # Some windows end early (terminated or truncated), some bootstrap at row n.
        if n > 1:
            assert (step_types[1:-1] == ts.StepType.LAST).any()


def test_n_step_returns_from_every_row_stop_at_the_sequences_end():
    """Row t's return is row 0's of the window t ... min(t + n, T): a return that
    would run past the last row bootstraps there (R2D2's sequences)."""
    rng = np.random.default_rng(5)
    rewards, discounts, step_types, values = _random_sequences(rng, t_len=10, n=32)
    got = advantages.n_step_returns(rewards, discounts, step_types, values, 0.9, 3).numpy()
    assert got.shape == (10, 32)
    for t in range(10):
        end = min(t + 3, 10)
        window = [x[t:end + 1] for x in (rewards, discounts, step_types, values)]
        want = numpy_n_step_return(*window, 0.9)
        valid = step_types[t] != ts.StepType.LAST
        np.testing.assert_allclose(got[t][valid], want[valid], rtol=1e-5, atol=1e-5)
    # The last row's return is one step: its reward and the bootstrap's value.
    mid = (step_types[9] != ts.StepType.LAST)
    np.testing.assert_allclose(got[9][mid], (rewards[10] + 0.9 * discounts[10] * values[10])[mid],
                               rtol=1e-5)
