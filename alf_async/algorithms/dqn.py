"""Double DQN with n-step returns, learning from uniform replay."""

from typing import Dict, List, Optional, Sequence

import gin
import tensorflow as tf
from tf_agents.specs import tensor_spec

from alf_async.algorithms import layout

from alf_async.algorithms import networks
from alf_async.algorithms import advantages as adv_lib
from alf_async.algorithms.contract import Stateless
from alf_async.algorithms.target_networks import TargetUpdater
from alf_async.algorithms.schedules import Schedule, schedule_value

Samples = Dict[str, tf.Tensor]


def huber(x, delta: float = 1.0):
    """Element-wise Huber loss: `x^2 / 2` within `delta`, linear beyond."""
    abs_x = tf.abs(x)
    quadratic = tf.minimum(abs_x, delta)
    return 0.5 * tf.square(quadratic) + delta * (abs_x - quadratic)


@gin.configurable(module="alf_async")
def apex_epsilons(num_envs: int, epsilon: float = 0.4, alpha: float = 7.0) -> List[float]:
    """Ape-X's exploration rates: env i of N acts with `epsilon^(1 + alpha * i / (N - 1))`.

    Env 0 explores most (`epsilon`), env N - 1 least (`epsilon^(1 + alpha)`);
    one env gets `epsilon`. Use as `DqnAlgorithm.epsilon_per_env =
    @apex_epsilons()` with `apex_epsilons.num_envs` the number of env ids
    (env threads, times actor processes with remote actors).

    Raises:
        ValueError: `num_envs` < 1 or `epsilon` outside [0, 1] (names it).
    """
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"apex_epsilons.num_envs must be an integer >= 1, got {num_envs!r}")
    if not 0 <= epsilon <= 1:
        raise ValueError(f"apex_epsilons.epsilon must be in [0, 1], got {epsilon!r}")
    if num_envs == 1:
        return [float(epsilon)]
    return [float(epsilon ** (1 + alpha * i / (num_envs - 1))) for i in range(num_envs)]


@gin.configurable(module="alf_async", denylist=["lstm_size"])
class DqnAlgorithm(Stateless, tf.Module):
    """Double DQN: Q(s, a) regressed to n-step returns bootstrapped by a target network.

    The target of a window `s_0 ... s_n` (from `ReplayBuffer`, n =
    `ReplayBuffer.sequence_length`) is `advantages.n_step_return` with
    `V(s_h) = Q_target(s_h, argmax_a Q(s_h, a))`, computed once per learn
    batch. Acting is epsilon-greedy, epsilon on a schedule of env steps, or
    with `epsilon_per_env` one epsilon per env id (Ape-X: each actor explores
    at its own rate; see `apex_epsilons`), never below the schedule's.

    Thread-safety: as `ActorCriticAlgorithm`: actors read the Q network's
    variables while the learner's optimizer writes them.
    """

    def __init__(self, time_step_spec, action_spec,
                 fc_layers: Sequence[int] = (256, 256),
                 activation: str = "relu",
                 conv_layers: networks.ConvLayers = (),
                 observation_scale: float = 1.0,
                 discount: float = 0.99,
                 epsilon_greedy: Schedule = ((0, 1.0), (50_000, 0.05)),
                 target_update_tau: float = 1.0,
                 target_update_period: int = 500,
                 reward_clip: Optional[float] = None,
                 epsilon_per_env: Optional[Sequence[float]] = None,
                 name: str = "dqn",
                 lstm_size: Optional[Sequence[int]] = None):
        """
        Args:
            time_step_spec: unbatched tf-agents time-step spec of one sub-env.
            action_spec: unbatched action spec: a scalar integer from 0.
            fc_layers: hidden layer sizes of the Q network.
            activation: name of a Keras activation for the hidden layers.
            conv_layers: `(filters, kernel, stride)` per convolution for
                `[H, W, C]` image observations.
            observation_scale: observations are cast to float32 and multiplied
                by this inside the network (1/255 for uint8 pixels).
            discount: gamma.
            epsilon_greedy: probability of a uniformly random action, a
                constant or piecewise-linear `[(env_steps, value), ...]`.
            target_update_tau: the target network moves this fraction of the
                way to the Q network ...
            target_update_period: ... every this many optimizer steps (1.0
                and 500: a periodic copy).
            reward_clip: clip rewards to `[-reward_clip, reward_clip]` for
                learning (None: as they are).
            epsilon_per_env: env id i acts with `epsilon_per_env[i % len]`,
                or the schedule's epsilon while that is higher (a schedule
                falling to 0 is a warm-up of random play for every env);
                None: every env follows `epsilon_greedy`.
            lstm_size: LSTM sizes after `fc_layers` (`R2d2Algorithm` sets
                them; a plain DQN is feed-forward).

        Raises:
            ValueError: the action is not a scalar integer.
        """
        super().__init__(name=name)
        self.time_step_spec = tensor_spec.from_spec(time_step_spec)
        self.action_spec = tensor_spec.from_spec(action_spec)
        if not self.action_spec.dtype.is_integer or self.action_spec.shape.rank != 0:
            raise ValueError(f"DqnAlgorithm needs a Discrete action space, got "
                             f"{self.action_spec}")
        self._num_actions = int(self.action_spec.maximum) - int(self.action_spec.minimum) + 1
        obs_spec = self.time_step_spec.observation
        self.q_net, self.target_q_net = networks.q_networks(
            obs_spec, self.action_spec, fc_layers, activation, conv_layers, observation_scale,
            lstm_size)
        self.recurrent, self.burn_in = False, 0
        self.item_terms = ("td_error",)  # prioritized replay's errors
        self._gamma = discount
        self._reward_clip = reward_clip
        self._epsilon_schedule = epsilon_greedy
        self.epsilon = tf.Variable(schedule_value(epsilon_greedy, 0), trainable=False,
                                   name="epsilon")
        self._epsilon_per_env = (None if epsilon_per_env is None else
                                 tf.constant(epsilon_per_env, tf.float32))
        self._target = TargetUpdater(self.q_net.variables, self.target_q_net.variables,
                                     target_update_tau, target_update_period)

    @property
    def policy_state_spec(self):
        return self.q_net.state_spec

    @property
    def variables_to_train(self):
        return self.q_net.trainable_variables

    @property
    def loss_groups(self):
        """One group: the Q network minimises the TD loss."""
        return [("loss", self.variables_to_train)]

    def scalars(self):
        return {"epsilon": self.epsilon}

    def set_env_steps(self, env_steps: int) -> None:
        """Moves epsilon along its schedule to `env_steps`."""
        self.epsilon.assign(schedule_value(self._epsilon_schedule, env_steps))

    def act(self, observation, step_type, policy_state, greedy: bool = False, seed=None,
            env_id=None):
        """Epsilon-greedy actions for N observations (leaves `[N, ...]`).

        Returns:
            `(action, policy_state, log_prob)`: `log_prob` of the
            epsilon-greedy policy, `policy_state` the Q network's after the step.
        """
        q_values, policy_state = self.q_net(observation, step_type=step_type,
                                            network_state=policy_state, training=False)
        best = tf.argmax(q_values, axis=-1, output_type=tf.int32)
        if greedy:
            return (tf.cast(best, self.action_spec.dtype) + self.action_spec.minimum,
                    policy_state, tf.zeros_like(q_values[:, 0]))
        n = tf.shape(best)[:1]
        epsilon = self._row_epsilons(env_id, n)
        if seed is None:
            explore = tf.random.uniform(n) < epsilon
            random = tf.random.uniform(n, 0, self._num_actions, tf.int32)
        else:
            explore = tf.random.stateless_uniform(n, seed) < epsilon
            random = tf.random.stateless_uniform(n, seed + 1, 0, self._num_actions, tf.int32)
        action = tf.where(explore, random, best)
        prob = epsilon / self._num_actions + tf.where(
            tf.equal(action, best), 1 - epsilon, 0.0)
        return (tf.cast(action, self.action_spec.dtype) + self.action_spec.minimum,
                policy_state, tf.math.log(prob))

    def _row_epsilons(self, env_id, n):
        """`[N]` epsilon of each row: the schedule's, or with `epsilon_per_env` its env's
        where that is higher."""
        scheduled = tf.fill(n, self.epsilon.read_value())
        if self._epsilon_per_env is None or env_id is None:
            return scheduled
        size = tf.shape(self._epsilon_per_env)[0]
        env_id = tf.cast(env_id, tf.int32)
        return tf.maximum(scheduled,
                          tf.gather(self._epsilon_per_env, tf.math.floormod(env_id, size)))

    def _time_major_steps(self, experience, bootstrap):
        """`[S, n, 1]` steps and `[S, 1]` bootstraps -> `[n + 1, S]` steps with the
        rewards learned from (clipped with `reward_clip`)."""
        steps = tf.nest.map_structure(layout.time_major_with_bootstrap,
                                      experience.time_step, bootstrap)
        if self._reward_clip is not None:
            steps = steps._replace(reward=tf.clip_by_value(
                steps.reward, -self._reward_clip, self._reward_clip))
        return steps

    # ---- ALGO LOGIC: what DQN computes from a batch (preprocess, loss) ----
    def preprocess(self, experience, bootstrap) -> Samples:
        """Windows `[S, n, 1, ...]` (bootstrap `[S, 1, ...]`) -> `[S]` samples with targets."""
        steps = self._time_major_steps(experience, bootstrap)  # [n + 1, S]
        reward = steps.reward
        # A return bootstraps from rows 1..n only: row 0's value is never used.
        later = tf.nest.map_structure(lambda x: layout.flatten_time(x[1:]), steps.observation)
        q_values, _ = self.q_net(later)
        target_q, _ = self.target_q_net(later)
        best = tf.argmax(q_values, axis=-1, output_type=tf.int32)
        values = tf.reshape(tf.gather(target_q, best, batch_dims=1), tf.shape(reward[1:]))
        values = tf.concat([tf.zeros_like(values[:1]), values], 0)
        target = adv_lib.n_step_return(reward, steps.discount, steps.step_type,
                                       tf.stop_gradient(values), self._gamma)
        action = layout.time_major(experience.action)[0]
        return dict(observation=tf.nest.map_structure(lambda x: x[0], steps.observation),
                    action=tf.cast(action - self.action_spec.minimum, tf.int32),
                    target=target, mask=adv_lib.transition_mask(steps.step_type)[0])

    def loss(self, samples: Samples) -> Dict[str, tf.Tensor]:
        """Per-sample Huber TD loss of a minibatch (`[N]`)."""
        q_values, _ = self.q_net(samples["observation"], training=True)
        return self._td_terms(q_values, samples)

    @staticmethod
    def _td_terms(q_values, samples: Samples) -> Dict[str, tf.Tensor]:
        """`[N, actions]` Q values -> the per-sample TD terms of the actions taken."""
        q = tf.gather(q_values, samples["action"], batch_dims=1)
        td_error = samples["target"] - q
        return dict(loss=huber(td_error), td_error=tf.abs(td_error), q_value=q)

    def after_sgd_step(self) -> None:
        """Moves the target network (every `target_update_period` steps)."""
        self._target.step()
