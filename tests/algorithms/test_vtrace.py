import numpy as np
import pytest

from alf_async.algorithms import vtrace


def numpy_vtrace(log_rhos, discounts, rewards, values, bootstrap, rho_bar, pg_rho_bar):
    """The IMPALA paper's definition, summed term by term (no recursion)."""
    t_len, n = log_rhos.shape
    rhos = np.exp(log_rhos)
    clip = lambda x, c: x if c is None else np.minimum(c, x)
    cs = np.minimum(1.0, rhos)
    next_values = np.concatenate([values[1:], bootstrap[None]], 0)
    deltas = clip(rhos, rho_bar) * (rewards + discounts * next_values - values)
    vs = np.zeros((t_len, n))
    for s in range(t_len):
        total = np.zeros(n)
        for t in range(s, t_len):
            # prod_{i=s}^{t-1} gamma_i c_i
            weight = np.prod(discounts[s:t] * cs[s:t], axis=0)
            total += weight * deltas[t]
        vs[s] = values[s] + total
    next_vs = np.concatenate([vs[1:], bootstrap[None]], 0)
    pg = clip(rhos, pg_rho_bar) * (rewards + discounts * next_vs - values)
    return vs, pg


@pytest.mark.parametrize("rho_bar, pg_rho_bar", [(1.0, 1.0), (None, None), (0.5, 2.0)])
def test_matches_paper_definition(rho_bar, pg_rho_bar):
    rng = np.random.default_rng(0)
    t_len, n = 9, 5
    # Large and small importance weights, so that clipping matters.
    log_rhos = rng.normal(0, 1.5, (t_len, n)).astype(np.float32)
    assert (np.exp(log_rhos) > 2).any() and (np.exp(log_rhos) < 0.5).any()
    discounts = np.full((t_len, n), 0.9, np.float32)
    discounts[rng.random((t_len, n)) < 0.2] = 0.0  # episode ends inside the unroll
    assert (discounts == 0).any()
    rewards = rng.normal(size=(t_len, n)).astype(np.float32)
    values = rng.normal(size=(t_len, n)).astype(np.float32)
    bootstrap = rng.normal(size=n).astype(np.float32)
    got = vtrace.from_importance_weights(log_rhos, discounts, rewards, values, bootstrap,
                                         rho_bar, pg_rho_bar)
    want_vs, want_pg = numpy_vtrace(log_rhos, discounts, rewards, values, bootstrap, rho_bar,
                                    pg_rho_bar)
    np.testing.assert_allclose(got.vs.numpy(), want_vs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got.pg_advantages.numpy(), want_pg, rtol=1e-4, atol=1e-4)


def test_on_policy_vtrace_is_the_n_step_return():
    t_len = 4
    rewards = np.arange(1, t_len + 1, dtype=np.float32)[:, None]
    discounts = np.full((t_len, 1), 0.5, np.float32)
    values = np.zeros((t_len, 1), np.float32)
    bootstrap = np.array([8.0], np.float32)
    got = vtrace.from_importance_weights(np.zeros((t_len, 1), np.float32), discounts, rewards,
                                         values, bootstrap)
    # v_0 = 1 + .5*2 + .25*3 + .125*4 + .0625*8
    assert abs(got.vs.numpy()[0, 0] - (1 + 1 + 0.75 + 0.5 + 0.5)) < 1e-5


@pytest.mark.parametrize("lambda_", [0.0, 0.5, 0.95])
def test_on_policy_vtrace_lambda_is_gae_lambda(lambda_):
    rng = np.random.default_rng(1)
    t_len, n, gamma = 7, 3, 0.9
    rewards = rng.normal(size=(t_len, n)).astype(np.float32)
    values = rng.normal(size=(t_len + 1, n)).astype(np.float32)  # row T: bootstrap
    discounts = np.ones((t_len, n), np.float32)
    discounts[2, 0] = 0.0  # a terminal transition inside the unroll
    got = vtrace.from_importance_weights(np.zeros((t_len, n), np.float32), gamma * discounts,
                                         rewards, values[:-1], values[-1], lambda_=lambda_)
    # GAE(lambda) computed term by term.
    deltas = rewards + gamma * discounts * values[1:] - values[:-1]
    gae = np.zeros((t_len, n))
    for s in range(t_len):
        weight = np.ones(n)
        for t in range(s, t_len):
            gae[s] += weight * deltas[t]
            weight = weight * gamma * lambda_ * discounts[t]
    np.testing.assert_allclose(got.pg_advantages.numpy(), gae, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.vs.numpy(), values[:-1] + gae, rtol=1e-4, atol=1e-5)
