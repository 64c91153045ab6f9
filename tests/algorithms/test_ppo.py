import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async.algorithms import PPOAlgorithm
from alf_async.environments import CartPoleBatchedEnv
from alf_async.experience import Experience


def _algorithm(**kwargs):
    env = CartPoleBatchedEnv(2)
    return PPOAlgorithm(env.time_step_spec(), env.action_spec(), **kwargs)


def _samples(rng, n=64):
    return dict(observation=rng.normal(size=(n, 4)).astype(np.float32),
                step_type=np.full(n, ts.StepType.MID, np.int32),
                action=rng.integers(0, 2, n).astype(np.int64),
                behaviour_log_prob=np.log(rng.uniform(0.2, 0.8, n)).astype(np.float32),
                advantage=rng.normal(size=n).astype(np.float32),
                value_target=rng.normal(size=n).astype(np.float32),
                mask=np.ones(n, np.float32))


def test_loss_matches_numpy_clipped_surrogate():
    rng = np.random.default_rng(1)
    algo = _algorithm(clip_ratio=0.2, value_loss_coeff=0.5, entropy_coeff=0.01)
    s = _samples(rng)
    terms = {k: v.numpy() for k, v in algo.loss(s).items()}
    dist, _ = algo.actor_net(s["observation"], step_type=s["step_type"], network_state=())
    logits = dist.logits_parameter().numpy()
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    new_lp = log_p[np.arange(len(s["action"])), s["action"]]
    ratio = np.exp(new_lp - s["behaviour_log_prob"])
    assert ((ratio > 1.2) | (ratio < 0.8)).any(), "the test must exercise clipping"
    adv = s["advantage"]
    pg = -np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv)
    value, _ = algo.value_net(s["observation"], step_type=s["step_type"])
    vloss = 0.5 * (value.numpy() - s["value_target"]) ** 2
    entropy = -(np.exp(log_p) * log_p).sum(-1)
    np.testing.assert_allclose(terms["pg_loss"], pg, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(terms["value_loss"], vloss, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(terms["loss"], pg + 0.5 * vloss - 0.01 * entropy, rtol=1e-4,
                               atol=1e-5)


def test_preprocess_masks_last_steps_and_normalizes():
    rng = np.random.default_rng(2)
    algo = _algorithm(normalize_advantages=True)
    q, t, b = 2, 5, 3
    step_type = np.full((q, t, b), ts.StepType.MID, np.int32)
    step_type[:, 2] = ts.StepType.LAST
    step_type[:, 3] = ts.StepType.FIRST
    time_step = ts.TimeStep(step_type, rng.normal(size=(q, t, b)).astype(np.float32),
                            np.ones((q, t, b), np.float32),
                            rng.normal(size=(q, t, b, 4)).astype(np.float32))
    exp = Experience(time_step, rng.integers(0, 2, (q, t, b)), np.zeros((q, t, b), np.float32),
                     (), np.zeros((q, t, b), np.int64))
    boot = tf.nest.map_structure(lambda x: x[:, 0], time_step)
    samples = {k: v.numpy() for k, v in algo.preprocess(exp, boot).items()}
    assert samples["observation"].shape == (q * t * b, 4)
    mask = samples["mask"].reshape(t, q * b)
    np.testing.assert_array_equal(mask[2], 0)
    assert mask.sum() == (t - 1) * q * b
    adv = samples["advantage"][samples["mask"] == 1]
    assert abs(adv.mean()) < 1e-5 and abs(adv.std() - 1) < 1e-3
    np.testing.assert_array_equal(samples["advantage"][samples["mask"] == 0], 0)
