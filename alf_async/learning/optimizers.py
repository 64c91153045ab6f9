"""The learner's optimizers: Adam (one fused kernel per variable), AMSGrad, RMSprop."""

import tensorflow as tf


class FusedAdam(tf.keras.optimizers.Adam):
    """Keras's Adam whose step on each variable is TensorFlow's fused `ResourceApplyAdam`.

    Same update, same slots and checkpoint layout as `tf.keras.optimizers.Adam`
    (`m += (1 - beta_1) * (g - m)`, `v += (1 - beta_2) * (g^2 - v)`,
    `var -= lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon)`),
    but one kernel per variable instead of about fifteen ops: the update's
    graph is smaller, so tracing and TensorFlow's optimising it before the
    first update take less of a run's start, and each step launches fewer ops.
    AMSGrad and sparse gradients take Keras's own step.
    """

    def update_step(self, gradient, variable):
        if self.amsgrad or isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable)
        index = self._index_dict[self._var_key(variable)]
        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        return tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=self._momentums[index].handle,
            v=self._velocities[index].handle, beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step), lr=tf.cast(self.learning_rate, dtype),
            beta1=beta_1, beta2=beta_2, epsilon=tf.cast(self.epsilon, dtype), grad=gradient)


def make_optimizer(name: str, learning_rate: float, epsilon: float, decay: float,
                   momentum: float) -> tf.keras.optimizers.Optimizer:
    """'adam' or 'amsgrad' (use epsilon), or 'rmsprop' (uses decay, momentum, epsilon).

    'amsgrad' is Adam dividing by the largest second-moment estimate so far
    instead of the current one: after a stretch of tiny gradients a sudden
    large one cannot make a step larger than the ones before it.
    """
    if name in ("adam", "amsgrad"):
        return FusedAdam(learning_rate, epsilon=epsilon, amsgrad=name == "amsgrad")
    if name == "rmsprop":
        return tf.keras.optimizers.RMSprop(learning_rate, rho=decay, momentum=momentum,
                                           epsilon=epsilon)
    raise ValueError(f"Learner.optimizer must be 'adam', 'amsgrad' or 'rmsprop', got {name!r}")
