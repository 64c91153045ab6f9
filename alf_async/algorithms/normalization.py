"""Running observation normalisation and reward scaling.

Both are off by default and both are learned from the experience the learner
receives: the observation statistics from every new step, the reward scale
from the standard deviation of the discounted return accumulated along each
sub-env's steps (as in OpenAI baselines' `VecNormalize`). The statistics are
`tf_agents.utils.tensor_normalizer.StreamingTensorNormalizer`s, variables of
the algorithm: checkpointed with it, read by the actors like the weights, and
saved into the exported policy.
"""

from typing import Dict

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts
from tf_agents.utils import tensor_normalizer


class Normalization(tf.Module):
    """Observation normalisation and reward scaling of one algorithm.

    Thread-safety: `observe()` is called by one thread (the learner's
    `place()`), in the order the learn batches arrive; `observation()` and
    `reward()` may be called from any thread. A reader may see the statistics
    halfway through an update, as it may see weights halfway through an
    optimizer step.
    """

    def __init__(self, observation_spec, discount: float,
                 normalize_observations: bool = False, normalize_rewards: bool = False,
                 clip_value: float = 10.0):
        """
        Args:
            observation_spec: unbatched spec of one observation (a float `Box`).
            discount: gamma of the returns whose std scales the rewards.
            normalize_observations: subtract the running mean and divide by the
                running std of each observation element, then clip.
            normalize_rewards: divide rewards by the running std of the
                discounted return.
            clip_value: normalised observations are clipped to +- this.

        Raises:
            ValueError: `normalize_observations` with non-float observations.
        """
        super().__init__(name="normalization")
        if normalize_observations and not all(
                s.dtype.is_floating for s in tf.nest.flatten(observation_spec)):
            raise ValueError(f"normalize_observations needs float observations, got "
                             f"{observation_spec}")
        self._clip_value = clip_value
        self._observations = (tensor_normalizer.StreamingTensorNormalizer(
            observation_spec, scope="observations") if normalize_observations else None)
        self._returns = (tensor_normalizer.StreamingTensorNormalizer(
            tf.TensorSpec([], tf.float32), scope="returns") if normalize_rewards else None)
        self._running_returns = _RunningReturns(discount)

    def observation(self, observation):
        """`observation` (leaves `[..., *spec.shape]`) normalised, or as it is."""
        if self._observations is None:
            return observation
        return self._observations.normalize(observation, clip_value=self._clip_value)

    def reward(self, reward):
        """`reward` divided by the return std, or as it is."""
        if self._returns is None:
            return reward
        return self._returns.normalize(reward, clip_value=0.0, center_mean=False)

    def observe(self, time_step, env_ids, num_new: int) -> None:
        """Updates the statistics from the first `num_new` unrolls of a learn batch.

        Args:
            time_step: leaves `[Q', T, B, ...]` (host tensors), unrolls in the
                order each env thread produced them.
            env_ids: `[Q']`, the env thread of each unroll.
            num_new: how many leading unrolls are new (the rest are replayed).
        """
        new = lambda x: x[:num_new]
        if self._observations is not None:
            self._observations.update(tf.nest.map_structure(new, time_step.observation))
        if self._returns is not None:
            returns = [self._running_returns.add(int(env_id), reward, step_type)
                       for env_id, reward, step_type in zip(
                           np.asarray(env_ids)[:num_new], np.asarray(new(time_step.reward)),
                           np.asarray(new(time_step.step_type)))]
            self._returns.update(tf.constant(np.concatenate(returns), tf.float32))



class _RunningReturns:
    """Each sub-env's discounted return so far, carried from unroll to unroll.

    Not checkpointed: after a restart the returns start again from 0.
    """

    def __init__(self, discount: float):
        self._discount = discount
        self._returns: Dict[int, np.ndarray] = {}  # env id -> [B]

    def add(self, env_id: int, reward: np.ndarray, step_type: np.ndarray) -> np.ndarray:
        """Carries env `env_id`'s returns over `[T, B]` steps; the `[T * B]` returns."""
        running = self._returns.get(env_id, np.zeros(reward.shape[1]))
        out = np.empty(reward.shape, np.float64)
        for t, (r, s) in enumerate(zip(reward, step_type)):
            running = np.where(s == ts.StepType.FIRST, 0.0, running * self._discount + r)
            out[t] = running
        self._returns[env_id] = running
        return out.reshape(-1)
