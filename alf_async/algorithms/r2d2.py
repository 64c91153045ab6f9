"""R2D2: recurrent DQN learning from replayed sequences (Kapturowski et al., 2019)."""

from typing import Dict, Sequence

import gin
import tensorflow as tf

from alf_async.algorithms import layout
from alf_async.algorithms import advantages as adv_lib
from alf_async.algorithms.dqn import DqnAlgorithm, Samples, huber


def rescale(x, eps: float = 1e-3):
    """R2D2's value rescaling `h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x`."""
    return tf.sign(x) * (tf.sqrt(tf.abs(x) + 1.0) - 1.0) + eps * x


def unrescale(x, eps: float = 1e-3):
    """The inverse of `rescale`."""
    root = (tf.sqrt(1.0 + 4.0 * eps * (tf.abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return tf.sign(x) * (tf.square(root) - 1.0)


@gin.configurable(module="alf_async")
class R2d2Algorithm(DqnAlgorithm):
    """Double DQN with an LSTM Q network, trained on whole replayed sequences.

    The replay (`exp_replayer='uniform'` or `'prioritized'`) hands it each
    stored segment of T steps with the `burn_in` steps before it and the
    LSTM state the actor had before those (R2D2's stored state). Per
    sequence `[burn_in + T + 1]` (the last step is the bootstrap):
    - the online and target networks run over all of it from the stored
      state, giving double-Q values at every step; the targets are n-step
      returns (`advantages.n_step_returns`), cut at the sequence's end;
    - the loss runs the online network over the burn-in steps without
      gradient, then over the T trained steps from the state it reached.
    With prioritized replay a sequence's priority is R2D2's
    `eta * max |delta| + (1 - eta) * mean |delta|` over its T steps. With
    `value_rescaling` the network learns `h(Q)` (`rescale`): targets are
    `h(n-step return of h^-1(values))`, as R2D2 does for Atari's large returns.

    Acting, epsilon schedules (`epsilon_per_env` for Ape-X's rates) and the
    target network are `DqnAlgorithm`'s; its settings are set here as
    `R2d2Algorithm.<name>` (e.g. `R2d2Algorithm.fc_layers`, the layers
    before the LSTM).

    Thread-safety: as `DqnAlgorithm`.
    """

    def __init__(self, time_step_spec, action_spec, lstm_size: Sequence[int] = (64,),
                 burn_in: int = 8, n_step: int = 3, value_rescaling: bool = False,
                 **dqn_settings):
        """
        Args:
            time_step_spec: as `DqnAlgorithm`'s.
            action_spec: as `DqnAlgorithm`'s.
            lstm_size: LSTM layer sizes after `fc_layers`.
            burn_in: steps before each replayed sequence that only bring the
                LSTM's state forward (from the stored one); at most
                `AsyncOffPolicyDriver.unroll_length`.
            n_step: n of the n-step targets.
            value_rescaling: learn `h(Q)` instead of Q (`rescale`).
            **dqn_settings: `DqnAlgorithm`'s other arguments.

        Raises:
            ValueError: `lstm_size` empty, `burn_in` < 0 or `n_step` < 1.
        """
        if not lstm_size:
            raise ValueError("R2d2Algorithm.lstm_size must name at least one LSTM layer")
        for setting, value, least in (("burn_in", burn_in, 0), ("n_step", n_step, 1)):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"R2d2Algorithm.{setting} must be an integer >= {least}, "
                                 f"got {value!r}")
        super().__init__(time_step_spec, action_spec, lstm_size=lstm_size, **dqn_settings)
        self.recurrent, self.burn_in, self._n_step = True, burn_in, n_step
        self._value_rescaling = value_rescaling

    def preprocess(self, experience, bootstrap) -> Samples:
        """Sequences `[S, burn_in + T, 1, ...]` (bootstrap `[S, 1, ...]`) -> `[S]` samples.

        Returns:
            `observation`, `step_type` `[S, burn_in + T, ...]`; `action`,
            `target`, `mask` `[S, T]` (the trained steps); `policy_state`
            `[S, ...]`, the stored state before the sequence.
        """
        steps = self._time_major_steps(experience, bootstrap)  # [L + 1, S]
        state = tf.nest.map_structure(layout.first_step, experience.policy_state)
        batch_major = layout.swap_time  # [L + 1, S] <-> [S, L + 1]
        run = lambda net: net(tf.nest.map_structure(batch_major, steps.observation),
                              step_type=batch_major(steps.step_type), network_state=state)[0]
        best = tf.argmax(run(self.q_net), axis=-1, output_type=tf.int32)  # [S, L + 1]
        values = batch_major(tf.gather(run(self.target_q_net), best, batch_dims=2))
        if self._value_rescaling:
            values = unrescale(values)
        target = adv_lib.n_step_returns(steps.reward, steps.discount, steps.step_type,
                                        tf.stop_gradient(values), self._gamma, self._n_step)
        if self._value_rescaling:
            target = rescale(target)
        trained = lambda x: batch_major(x)[:, self.burn_in:]  # [L, S] -> [S, T]
        action = layout.time_major(experience.action) - self.action_spec.minimum
        return dict(observation=tf.nest.map_structure(lambda x: batch_major(x[:-1]),
                                                      steps.observation),
                    step_type=batch_major(steps.step_type[:-1]),
                    action=trained(tf.cast(action, tf.int32)), target=trained(target),
                    mask=trained(adv_lib.transition_mask(steps.step_type)),
                    policy_state=state)

    def loss(self, samples: Samples) -> Dict[str, tf.Tensor]:
        """Per-step Huber TD loss of a minibatch of N sequences (`[N, T]`)."""
        burn_in, state = self.burn_in, samples["policy_state"]
        part = lambda x, rows: tf.nest.map_structure(lambda y: y[:, rows], x)
        if burn_in:
            _, state = self.q_net(part(samples["observation"], slice(None, burn_in)),
                                  step_type=samples["step_type"][:, :burn_in],
                                  network_state=state, training=True)
            state = tf.nest.map_structure(tf.stop_gradient, state)
        q_values, _ = self.q_net(part(samples["observation"], slice(burn_in, None)),
                                 step_type=samples["step_type"][:, burn_in:],
                                 network_state=state, training=True)
        q = tf.gather(q_values, samples["action"], batch_dims=2)
        td_error = samples["target"] - q
        return dict(loss=huber(td_error), td_error=tf.abs(td_error), q_value=q)
