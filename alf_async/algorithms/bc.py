"""Behaviour cloning: the policy that maximises the likelihood of a dataset's actions."""

from typing import Dict, Sequence

import gin
import tensorflow as tf
from tf_agents.specs import tensor_spec

from alf_async.algorithms import advantages as adv_lib
from alf_async.algorithms import layout, networks
from alf_async.algorithms.contract import Stateless

Samples = Dict[str, tf.Tensor]


@gin.configurable(module="alf_async")
class BcAlgorithm(Stateless, tf.Module):
    """BC: minimise `-log pi(a|s)` over the steps of windows (a dataset's, usually).

    Discrete actions get a categorical policy, `Box` actions a Gaussian one
    (tf-agents' `ActorDistributionNetwork`); the greedy policy is its mode.
    Each step of a window `[S, n, 1, ...]` whose action was taken (not a
    `LAST` step) is a sample.

    Thread-safety: actors and the evaluation read the policy's variables
    while the learner's optimizer writes them.
    """

    def __init__(self, time_step_spec, action_spec,
                 fc_layers: Sequence[int] = (256, 256),
                 activation: str = "relu",
                 conv_layers: networks.ConvLayers = (),
                 observation_scale: float = 1.0,
                 initial_action_std: float = 0.35,
                 name: str = "bc"):
        """
        Args:
            time_step_spec: unbatched tf-agents time-step spec of one sub-env.
            action_spec: unbatched action spec (discrete or `Box`).
            fc_layers: the policy's hidden layer sizes.
            activation: name of a Keras activation for the hidden layers.
            conv_layers: `(filters, kernel, stride)` per convolution for
                `[H, W, C]` image observations.
            observation_scale: observations are cast to float32 and multiplied
                by this inside the network (1/255 for uint8 pixels).
            initial_action_std: the Gaussian's std before training (`Box`).
        """
        super().__init__(name=name)
        self.time_step_spec = tensor_spec.from_spec(time_step_spec)
        self.action_spec = tensor_spec.from_spec(action_spec)
        self.actor_net = networks.actor_network(
            self.time_step_spec.observation, self.action_spec, fc_layers, activation,
            conv_layers, observation_scale, initial_action_std)
        self.actor_net.create_variables()

    @property
    def variables_to_train(self):
        return self.actor_net.trainable_variables

    @property
    def loss_groups(self):
        return [("loss", self.variables_to_train)]

    def act(self, observation, step_type, policy_state, greedy: bool = False, seed=None,
            env_id=None):
        """The policy's mode (`greedy`) or a sample, for `[N, ...]` observations.

        Returns:
            `(action, (), log_prob)`.
        """
        action, log_prob = networks.policy_action(self.actor_net, observation, step_type,
                                                  greedy, seed)
        return tf.cast(action, self.action_spec.dtype), policy_state, log_prob

    # ---- ALGO LOGIC: what BC computes from a batch (preprocess, loss) ----
    def preprocess(self, experience, bootstrap) -> Samples:
        """Windows `[S, n, 1, ...]` (bootstrap `[S, 1, ...]`) -> `[n * S]` steps."""
        step_types = layout.time_major_with_bootstrap(experience.time_step.step_type,
                                                      bootstrap.step_type)  # [n + 1, S]
        flat = lambda x: layout.flatten_time(layout.time_major(x))
        return dict(observation=tf.nest.map_structure(flat, experience.time_step.observation),
                    action=flat(experience.action),
                    mask=layout.flatten_time(adv_lib.transition_mask(step_types)))

    def loss(self, samples: Samples) -> Dict[str, tf.Tensor]:
        """Per-sample negative log-likelihood of the actions taken (`[N]`)."""
        dist, _ = self.actor_net(samples["observation"], step_type=None, network_state=(),
                                 training=True)
        log_prob = dist.log_prob(samples["action"])
        return dict(loss=-log_prob, log_prob=log_prob)
