"""The learner: SGD on learn batches, written against `tf.distribute`."""

from typing import Dict, Optional

import gin
import tensorflow as tf

from alf_async.experience import LearnBatch


@gin.configurable(module="alf_async")
class Learner:
    """Trains an algorithm on `[Q, T, B]` learn batches.

    One `train()` call is one compiled update: the algorithm turns the batch
    into samples (advantages with the current weights), then `num_epochs`
    passes of `num_minibatches` shuffled minibatches each take one optimizer
    step with global-norm clipped gradients.

    The algorithm's variables (and so the optimizer) must have been created
    under `strategy.scope()`.

    Thread-safety: `train()` is called from one thread (the driver's caller);
    actor threads may read the variables while it runs.
    """

    def __init__(self, algorithm, strategy: Optional[tf.distribute.Strategy] = None,
                 learning_rate: float = 3e-4,
                 adam_epsilon: float = 1e-5,
                 num_epochs: int = 4,
                 num_minibatches: int = 4,
                 grad_clip: Optional[float] = 0.5):
        """
        Args:
            algorithm: e.g. `PPOAlgorithm`; provides `preprocess`, `loss` and
                `variables_to_train`.
            strategy: distribution strategy; default: the current one.
            learning_rate: Adam's learning rate.
            adam_epsilon: Adam's epsilon.
            num_epochs: passes over each learn batch.
            num_minibatches: minibatches per pass.
            grad_clip: global-norm gradient clipping threshold (None: off).
        """
        self._algorithm = algorithm
        self._strategy = strategy or tf.distribute.get_strategy()
        self._num_epochs = num_epochs
        self._num_minibatches = num_minibatches
        self._grad_clip = grad_clip
        with self._strategy.scope():
            self.optimizer = tf.keras.optimizers.Adam(learning_rate, epsilon=adam_epsilon)
            self.optimizer.build(algorithm.variables_to_train)
            # Number of learn batches trained on: the policy version.
            self.train_step = tf.Variable(0, dtype=tf.int64, trainable=False,
                                          name="train_step")

    @property
    def strategy(self) -> tf.distribute.Strategy:
        return self._strategy

    def check_batch_size(self, num_samples: int) -> None:
        """Raises ValueError unless `num_samples` splits into minibatches."""
        if num_samples % self._num_minibatches:
            raise ValueError(
                f"A learn batch of {num_samples} samples (learn_queue_cap * unroll_length * "
                f"num_parallel_environments) does not split into "
                f"num_minibatches={self._num_minibatches}")

    def train(self, batch: LearnBatch) -> Dict[str, tf.Tensor]:
        """One update on a learn batch; returns the mean loss terms.

        Writes `loss/*` and `learner/policy_lag_*` summaries to the default
        summary writer, if any, at step `train_step`.
        """
        return self._train(batch.experience, batch.bootstrap)

    @tf.function
    def _train(self, experience, bootstrap):
        lag = tf.cast(self.train_step - experience.policy_version, tf.float32)
        samples = self._strategy.run(self._algorithm.preprocess, (experience, bootstrap))
        orders = self._strategy.run(self._epoch_orders, (samples["mask"],))
        num_steps = self._num_epochs * self._num_minibatches
        totals = self._reduced_sgd_step(samples, orders, 0)
        for i in tf.range(1, num_steps):
            totals = tf.nest.map_structure(tf.add, totals,
                                           self._reduced_sgd_step(samples, orders, i))
        self.train_step.assign_add(1)
        means = {k: v / num_steps for k, v in totals.items()}
        step = self.train_step
        for key, value in means.items():
            family = "learner" if key == "grad_norm" else "loss"
            tf.summary.scalar(f"{family}/{key}", value, step=step)
        tf.summary.scalar("learner/policy_lag_mean", tf.reduce_mean(lag), step=step)
        tf.summary.scalar("learner/policy_lag_max", tf.reduce_max(lag), step=step)
        return means

    def _epoch_orders(self, mask):
        """`[num_epochs, N]`: a random order of this replica's samples per epoch."""
        n = tf.shape(mask)[0]
        return tf.stack([tf.random.shuffle(tf.range(n)) for _ in range(self._num_epochs)])

    def _reduced_sgd_step(self, samples, orders, i):
        info = self._strategy.run(self._sgd_step, (samples, orders, i))
        return self._strategy.reduce(tf.distribute.ReduceOp.MEAN, info, axis=None)

    def _sgd_step(self, samples, orders, i):
        """Optimizer step `i` (epoch i // M, minibatch i % M) on one replica."""
        order = orders[i // self._num_minibatches]
        size = tf.shape(order)[0] // self._num_minibatches
        start = (i % self._num_minibatches) * size
        batch = tf.nest.map_structure(lambda x: tf.gather(x, order[start:start + size]),
                                      samples)
        ctx = tf.distribute.get_replica_context()
        count = tf.maximum(ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                                          tf.reduce_sum(batch["mask"])), 1.0)
        variables = self._algorithm.variables_to_train
        with tf.GradientTape() as tape:
            terms = self._algorithm.loss(batch)
            means = {k: tf.reduce_sum(v * batch["mask"]) / count for k, v in terms.items()}
        grads = tape.gradient(means["loss"], variables)
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        norm = tf.linalg.global_norm(grads)
        if self._grad_clip is not None:
            grads, _ = tf.clip_by_global_norm(grads, self._grad_clip, use_norm=norm)
        self.optimizer.apply_gradients(zip(grads, variables), skip_gradients_aggregation=True)
        # Each replica's terms are partial sums of the global mean.
        num_replicas = ctx.num_replicas_in_sync
        return dict({k: v * num_replicas for k, v in means.items()}, grad_norm=norm)

