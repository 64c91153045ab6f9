"""Conservative Q-learning (Kumar et al., 2020): DQN's and SAC's critics held down on
actions the data did not take.

Both add CQL(H)'s regulariser to the critic's TD loss,
`cql_alpha * (logsumexp_a Q(s, a) - Q(s, a_data))`: exact over the actions
for DQN; for SAC estimated from actions drawn uniformly in the bounds and
from the policy, each weighted by its density (importance sampling).
"""

from typing import Dict

import gin
import numpy as np
import tensorflow as tf

from alf_async.algorithms.dqn import DqnAlgorithm
from alf_async.algorithms.sac import SacAlgorithm

Samples = Dict[str, tf.Tensor]


@gin.configurable(module="alf_async")
class CqlDqnAlgorithm(DqnAlgorithm):
    """Double DQN with CQL's regulariser, for discrete actions (offline, or hybrid).

    Arguments as `DqnAlgorithm`'s, plus `cql_alpha`, the regulariser's weight.
    """

    def __init__(self, time_step_spec, action_spec, cql_alpha: float = 1.0, **kwargs):
        super().__init__(time_step_spec, action_spec, **kwargs)
        self.cql_alpha = cql_alpha

    def loss(self, samples: Samples) -> Dict[str, tf.Tensor]:
        """DQN's per-sample terms, the regulariser (`cql_gap`) added to `loss`."""
        q_values, _ = self.q_net(samples["observation"], training=True)
        terms = self._td_terms(q_values, samples)
        gap = tf.reduce_logsumexp(q_values, -1) - terms["q_value"]
        return dict(terms, loss=terms["loss"] + self.cql_alpha * gap, cql_gap=gap)


@gin.configurable(module="alf_async")
class CqlSacAlgorithm(SacAlgorithm):
    """SAC with CQL(H)'s regulariser on both critics, for `Box` actions.

    Arguments as `SacAlgorithm`'s, plus `cql_alpha`, the regulariser's weight,
    and `num_sampled_actions`, the uniform and the policy actions drawn per
    state to estimate `logsumexp_a Q(s, a)`.
    """

    def __init__(self, time_step_spec, action_spec, cql_alpha: float = 5.0,
                 num_sampled_actions: int = 10, **kwargs):
        super().__init__(time_step_spec, action_spec, **kwargs)
        self.cql_alpha = cql_alpha
        self._num_sampled = num_sampled_actions
        low, high = (np.broadcast_to(b, self.action_spec.shape).astype(np.float32)
                     for b in (self.action_spec.minimum, self.action_spec.maximum))
        self._low, self._high = tf.constant(low), tf.constant(high)
        self._uniform_log_density = -float(np.sum(np.log(high - low)))

    def _sampled_q(self, observation):
        """`[critics, K, N]` Q of K uniform and K policy actions at each state, each
        less its log-density (logsumexp of them estimates log of the integral)."""
        n, k = tf.shape(observation)[0], self._num_sampled
        tiled = tf.repeat(observation, k, axis=0)  # [N * K, ...], state-major
        uniform = tf.random.uniform(tf.concat([[n * k], tf.shape(self._low)], 0),
                                    self._low, self._high)
        dist, _ = self.actor_net(tiled, step_type=None, network_state=(), training=True)
        policy = tf.stop_gradient(self._sample(dist))
        scores = []
        for action, log_density in ((uniform, self._uniform_log_density),
                                    (policy, tf.stop_gradient(dist.log_prob(policy)))):
            q = self._q_values(self.critics, tiled, action) - log_density  # [C, N * K]
            scores.append(tf.transpose(tf.reshape(q, [len(self.critics), n, k]), [0, 2, 1]))
        return tf.concat(scores, 1)

    def loss(self, samples: Samples) -> Dict[str, tf.Tensor]:
        """SAC's per-sample terms, the regulariser (`cql_gap`) added to the critics'."""
        terms = super().loss(samples)
        sampled = self._sampled_q(samples["observation"])  # [C, 2K, N]
        data_q = self._q_values(self.critics, samples["observation"], samples["action"])
        log_k = tf.math.log(tf.cast(tf.shape(sampled)[1], tf.float32))
        gap = tf.reduce_sum(tf.reduce_logsumexp(sampled, 1) - log_k - data_q, 0)
        critic_loss = terms["critic_loss"] + self.cql_alpha * gap
        return dict(terms, critic_loss=critic_loss, cql_gap=gap,
                    loss=critic_loss + terms["actor_loss"] + terms["alpha_loss"])
