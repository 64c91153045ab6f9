"""The learner: SGD on learn batches, written against `tf.distribute`."""

import random
import time
from typing import Any, Dict, NamedTuple, Optional, Tuple

import gin
import tensorflow as tf
from absl import logging

from alf_async.learning import devices as devices_lib
from alf_async.algorithms import layout
from alf_async.algorithms.contract import check_algorithm, per_item_terms
from alf_async.experience import LearnerCounters, LearnBatch
from alf_async.metrics import StageClock
from alf_async.learning.mutable import MutableSettings
from alf_async.learning.optimizers import make_optimizer
from alf_async.algorithms.schedules import Schedule, ScheduledValue, schedule_value

_NON_FINITE = "non-finite loss or gradient"


class DeviceBatch(NamedTuple):
    """A learn batch already placed on the learner's replicas (`Learner.place`).

    Attributes:
        experience, bootstrap, weights: the batch's nests, one share per
            replica (per-replica values when there are several replicas);
            `weights` is `()` when the batch has none.
        policy_version: `[Q, T, B]` int64, the version that acted (host).
        env_steps: Python int, `Q * T * B`.
        items: the learn batch's `items`, for the batch source's
            `after_update` (host, untouched).
        wants_back: the learn batch's `wants_back`: the per-item terms the
            update computes.
    """
    experience: Any
    bootstrap: Any
    weights: Any
    policy_version: Any
    env_steps: int
    items: Any = None
    wants_back: Tuple[str, ...] = ()


class Update(NamedTuple):
    """What one learner update found.

    Attributes:
        losses: `{term: scalar}` means over the update's minibatches (empty
            when a non-finite update was skipped).
        per_item: `{term: [K, Q * B] numpy}` of the terms the batch's source
            wants back (`wants_back`, supplied by the algorithm's loss) and
            their `mask`, computed after the update on every sample (K
            samples per column, time-major); empty if it wants none.
    """
    losses: Dict[str, tf.Tensor]
    per_item: Dict[str, Any]


def clip_gradients(grads, clip_norm: float, norm, group_sizes=None):
    """`grads` scaled to a global norm of at most `clip_norm`.

    Args:
        grads: list of gradient tensors.
        clip_norm: the threshold.
        norm: the global norm of all of `grads`.
        group_sizes: None: all together; else lengths of consecutive groups of
            `grads`, each clipped by its own global norm.
    """
    if group_sizes is None:
        return tf.clip_by_global_norm(grads, clip_norm, use_norm=norm)[0]
    clipped, start = [], 0
    for size in group_sizes:
        clipped += tf.clip_by_global_norm(grads[start:start + size], clip_norm)[0]
        start += size
    return clipped


@gin.configurable(module="alf_async")
class Learner(tf.Module):
    """Trains an algorithm on `[Q, T, B]` learn batches.

    An update is `place()` (copy the batch onto the replicas' devices) then
    `update()`, one compiled call: the algorithm turns the batch into samples
    (advantages with the current weights), then `num_epochs` passes of
    `num_minibatches` shuffled minibatches each take one optimizer step with
    global-norm clipped gradients. A minibatch's gradient may be accumulated
    over `num_microbatches` pieces (less memory, same update). `train()` does
    both; `LearnerLoop` calls them apart, to place the next batch while this
    one trains. `train_step` counts updates: it is the policy version.

    The algorithm follows `alf_async.algorithms.contract.Algorithm`
    (checked here, with a TypeError naming what is missing): the learner calls
    its `observe`, `set_env_steps`, `preprocess` (experience -> a dict of
    `[N, ...]` samples with a `mask`), `loss` (samples -> per-sample terms)
    and `after_sgd_step`, and minimises each of its `loss_groups`' terms over
    that group's variables (SAC's actor, critics and temperature apart;
    actor-critic's policy and value networks, which `clip_per_group` clips
    apart). An `entropy_coeff`, if it has one, is written as a summary.

    The algorithm's variables (and so the optimizer) must have been created
    under `strategy.scope()`.

    Thread-safety: `update()` is called from one thread (the trainer's);
    `place()` may run in the prefetch thread meanwhile, and actors read the
    variables while it runs.
    """

    def __init__(self, algorithm, strategy: Optional[tf.distribute.Strategy] = None,
                 learning_rate: Schedule = 3e-4,
                 optimizer: str = "adam",
                 epsilon: float = 1e-5,
                 rmsprop_decay: float = 0.9,
                 momentum: float = 0.0,
                 num_epochs: int = 4,
                 num_minibatches: int = 4,
                 num_microbatches: int = 1,
                 grad_clip: Optional[float] = 0.5,
                 clip_per_group: bool = False,
                 skip_nonfinite_updates: bool = False,
                 seed: Optional[int] = None):
        """
        Args:
            algorithm: e.g. `PPOAlgorithm`: an `Algorithm` (see above).
            strategy: distribution strategy; default: the current one.
            learning_rate: a constant or piecewise-linear points
                `[(env_steps, value), ...]`, held constant outside them.
            optimizer: 'adam', 'amsgrad' or 'rmsprop' (see `make_optimizer`).
            epsilon: the optimizer's epsilon.
            rmsprop_decay: RMSProp's decay of the squared-gradient average.
            momentum: RMSProp's momentum.
            num_epochs: passes over each learn batch.
            num_minibatches: minibatches per pass.
            num_microbatches: pieces each minibatch's gradient is accumulated
                over before the optimizer step.
            grad_clip: global-norm gradient clipping threshold (None: off).
            clip_per_group: clip each loss group's gradients by their own
                global norm (actor-critic: the policy and the value network
                apart, so that a large value gradient does not shrink the
                policy's step) instead of all of them together.
            skip_nonfinite_updates: when a minibatch's loss or gradient is NaN
                or infinite, skip the rest of that learn batch and count it in
                `skipped_updates` instead of raising FloatingPointError.
            seed: seeds the minibatch shuffles (None: random); they are
                stateless, a function of the seed, update and epoch.
        """
        super().__init__(name="learner")
        check_algorithm(algorithm)
        self._algorithm = algorithm
        self._strategy = strategy or tf.distribute.get_strategy()
        self._num_epochs = num_epochs
        self._num_minibatches = num_minibatches
        self._num_microbatches = num_microbatches
        self._grad_clip = grad_clip
        self._clip_per_group = clip_per_group
        self._skip_nonfinite = skip_nonfinite_updates
        self.skipped_updates = 0
        self._seed = random.randrange(2**31) if seed is None else seed
        with self._strategy.scope():
            self.optimizer = make_optimizer(optimizer, schedule_value(learning_rate, 0),
                                            epsilon, rmsprop_decay, momentum)
            self.optimizer.build(algorithm.variables_to_train)
        # The optimizer's own variable: what its step reads, and what a checkpoint restores.
        self._learning_rate = ScheduledValue("learning_rate", learning_rate,
                                             self.optimizer.learning_rate)
        # Host-side counters (not mirrored). train_step, the number of learn
        # batches trained on, is the policy version stamped on experience.
        self.train_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="train_step")
        self.env_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="env_steps")
        self.mutable = MutableSettings(self._learning_rate, algorithm, self.env_steps)
        # One optimizer step as a function of its own, called before and inside the
        # update's loop: traced once (its gradients are most of the tracing time).
        self._sgd_step_fn = tf.function(self._reduced_sgd_step, autograph=False)

    @property
    def counters(self) -> LearnerCounters:
        """`train_step` (the policy version) and `env_steps`, for the driver."""
        return LearnerCounters(self.train_step, self.env_steps)

    @property
    def strategy(self) -> tf.distribute.Strategy:
        return self._strategy

    @property
    def devices(self):
        """Names of the devices this process's replicas run on."""
        return devices_lib.local_devices(self._strategy)

    def check_batch_shape(self, num_unrolls: int, unroll_length: int,
                          batch_size: int) -> None:
        """Raises ValueError unless a `[Q, T, B]` batch of Q = `num_unrolls` splits evenly.

        The Q * B columns are split across this process's replicas (a
        multi-worker learner's other workers train on batches of their own),
        and each replica's samples (Q * T * B / replicas steps, or its Q * B /
        replicas sequences for a recurrent algorithm) into `num_minibatches`
        x `num_microbatches` pieces.
        """
        replicas = len(self.devices)
        columns = num_unrolls * batch_size
        if columns % replicas:
            raise ValueError(
                f"unrolls per learn batch (learn_queue_cap plus replayed) * "
                f"num_parallel_environments = {columns} does not split across {replicas} "
                f"replicas")
        per_replica = columns // replicas
        if not self._algorithm.recurrent:
            per_replica *= unroll_length
        pieces = self._num_minibatches * self._num_microbatches
        if per_replica % pieces:
            raise ValueError(
                f"A replica's {per_replica} samples per learn batch do not split into "
                f"num_minibatches={self._num_minibatches} x "
                f"num_microbatches={self._num_microbatches}")

    def train(self, batch: LearnBatch, clock: Optional[StageClock] = None
              ) -> Dict[str, tf.Tensor]:
        """`place()` then `update()`; `clock` also gets the `load` time."""
        start = time.perf_counter()
        placed = self.place(batch)
        if clock is not None:
            clock.add("load", time.perf_counter() - start)
        return self.update(placed, clock).losses

    def trace(self, batch: LearnBatch) -> bool:
        """Compiles the update for learn batches shaped like `batch` (a zeros batch
        will do: nothing is trained or observed), so that the first update need not.
        Returns whether it did.

        A failure only logs a warning: the first update then compiles it.
        """
        start = time.perf_counter()
        try:
            self._train.get_concrete_function(*self._update_args(batch))
        except Exception as error:  # pylint: disable=broad-except  # the first update retries
            logging.warning("Compiling the update ahead failed (the first update compiles "
                            "it): %s", str(error).splitlines()[0] if str(error) else error)
            return False
        logging.debug("Compiled the update in %.2f s", time.perf_counter() - start)
        return True

    def warm_up(self, batch: LearnBatch) -> None:
        """`trace()`, then one update on `batch` (zeros will do), after which every
        variable it changed is put back: the first real update then also skips
        TensorFlow's optimising and instantiating the function (about a second).

        Not thread-safe: nothing may read the variables meanwhile (acting
        threads, the weights publisher), so call it before the driver starts.
        A warm spare does, before its promotion. A failure logs a warning.
        """
        if not self.trace(batch):
            return
        variables = list({id(v): v for v in [*self.variables,
                                               *self.optimizer.variables]}.values())
        with self._strategy.scope():
            saved = [tf.identity(variable) for variable in variables]
            try:
                self._train(*self._update_args(batch))
            except Exception as error:  # pylint: disable=broad-except  # the first update retries
                logging.warning("Running the update ahead failed: %s",
                                str(error).splitlines()[0] if str(error) else error)
            finally:
                for variable, value in zip(variables, saved):
                    variable.assign(value)

    def _update_args(self, batch: LearnBatch) -> tuple:
        experience, (bootstrap, weights) = self._distribute(batch)
        return experience, bootstrap, weights, batch.experience.policy_version, batch.wants_back

    def place(self, batch: LearnBatch) -> DeviceBatch:
        """Copies a learn batch onto the replicas' devices.

        First updates the algorithm's running statistics from the batch
        (`algorithm.observe`), so call it once per batch, in arrival order.

        Thread-safety: may run in another thread while `update()` trains on
        the previous batch (the driver's prefetching does this).
        """
        with self._strategy.scope():
            self._algorithm.observe(batch)
        experience, (bootstrap, weights) = self._distribute(batch)
        return DeviceBatch(experience, bootstrap, weights, batch.experience.policy_version,
                           batch.env_steps, batch.items, batch.wants_back)

    def update(self, batch: DeviceBatch, clock: Optional[StageClock] = None) -> Update:
        """One update on a placed learn batch; returns its mean loss terms and per-item terms.

        A batch with importance weights scales each sample's loss terms by
        its column's weight. The per-item terms its source wants back
        (`batch.wants_back`) are computed after the update and forwarded.

        `clock`, if given, gets the `grad` time (the compiled update).

        Counts `train_step` and `env_steps`, moves the schedules to the
        current env step, and writes `loss/*` and `learner/*` summaries to the
        default summary writer, if any, at step `train_step`.

        Raises:
            FloatingPointError: a minibatch's loss or gradient was NaN or
                infinite (its optimizer step was not applied), unless
                `skip_nonfinite_updates`.
        """
        self.mutable.follow()
        self.env_steps.assign_add(self.all_workers_sum(batch.env_steps))
        start = time.perf_counter()
        update = int(self.train_step) + 1
        try:
            info, per_item, lag = self._train(batch.experience, batch.bootstrap,
                                              batch.weights, batch.policy_version,
                                              batch.wants_back)
        except tf.errors.InvalidArgumentError as error:
            if _NON_FINITE not in str(error):
                raise
            message = (f"Non-finite loss or gradient in learner update {update}: that step "
                       f"was not applied")
            if not self._skip_nonfinite:
                raise FloatingPointError(f"{message} and no checkpoint holds it") from None
            self.skipped_updates += 1
            logging.warning("%s; skipped the rest of the learn batch (%d so far)", message,
                            self.skipped_updates)
            return Update({}, {})
        if clock is not None:
            clock.add("grad", time.perf_counter() - start)
        self._summarize(info, lag)
        return Update(info, {k: v.numpy() for k, v in per_item.items()})

    def all_workers_sum(self, value: int) -> int:
        """`value` summed over the learner's worker processes (all-reduced if several).

        Every worker then counts the same env steps, so that schedules
        (learning rate, entropy) move in step on all of them.
        """
        if devices_lib.num_workers(self._strategy) == 1:
            return value
        local = len(self.devices)
        values = self._strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(value if ctx.replica_id_in_sync_group % local == 0 else 0,
                                    tf.int64))
        return int(self._strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None))

    def _distribute(self, batch: LearnBatch):
        """Splits the batch's Q * B columns across this process's replicas.

        With several replicas the `[Q, T, B, ...]` experience is laid out as
        one `[1, T, Q * B, ...]` unroll, and local replica r gets columns
        `[r * W, (r + 1) * W)`, `W = Q * B / local replicas`. One replica on
        an accelerator gets a copy of the whole batch.
        """
        replicas = len(self.devices)
        steps = (batch.bootstrap, () if batch.weights is None else batch.weights)
        if self._strategy.num_replicas_in_sync == 1:
            device = self.devices[0]
            if "CPU" in device.upper():  # already there
                return batch.experience, steps
            with tf.device(device):
                return tf.nest.map_structure(tf.identity, (batch.experience, steps))
        experience = tf.nest.map_structure(layout.one_wide_unroll, batch.experience)
        bootstrap = tf.nest.map_structure(layout.one_wide_step, steps)
        width = batch.env_ids.shape[0] * batch.bootstrap.step_type.shape[1] // replicas

        def shard(ctx):  # replica ids run over all workers, `replicas` per worker
            start = ctx.replica_id_in_sync_group % replicas * width
            return (tf.nest.map_structure(lambda x: x[:, :, start:start + width], experience),
                    tf.nest.map_structure(lambda x: x[:, start:start + width], bootstrap))

        return self._strategy.experimental_distribute_values_from_function(shard)

    # ---- PLUMBING from here on: replicas, epochs, minibatches, microbatches, clipping.
    # The algorithm's own code runs at the two lines marked ALGO LOGIC
    # (`preprocess`, `loss`); a new algorithm changes nothing in this file.
    @tf.function(autograph=False)  # converting the algorithm's code would take seconds
    def _train(self, experience, bootstrap, weights, policy_version, wants_back):
        lag = tf.cast(self.train_step - policy_version, tf.float32)
        samples = self._strategy.run(self._preprocess, (experience, bootstrap, weights))
        orders = self._strategy.run(self._epoch_orders, (samples["mask"], self.train_step))
        num_steps = self._num_epochs * self._num_minibatches
        totals = self._sgd_step_fn(samples, orders, tf.constant(0))
        _, totals = tf.while_loop(
            lambda i, _: i < num_steps,
            lambda i, totals: (i + 1, tf.nest.map_structure(
                tf.add, totals, self._sgd_step_fn(samples, orders, i))),
            (tf.constant(1), totals), parallel_iterations=1)
        per_item = self._per_item(samples, experience, wants_back, totals) if wants_back else {}
        self.train_step.assign_add(1)
        means = {k: v / num_steps for k, v in totals.items()}
        lag = {"min": tf.reduce_min(lag), "mean": tf.reduce_mean(lag), "max": tf.reduce_max(lag)}
        return means, per_item, lag

    def _summarize(self, means: Dict[str, tf.Tensor], lag: Dict[str, tf.Tensor]) -> None:
        """Writes an update's `loss/*` and `learner/*` summaries, if the default writer
        records now. Eager, outside the compiled update: its trace does not depend
        on the writer (a warm spare compiles it before it has one)."""
        if not tf.summary.should_record_summaries():
            return
        step = self.train_step
        for key, value in means.items():
            family = "learner" if key == "grad_norm" else "loss"
            tf.summary.scalar(f"{family}/{key}", value, step=step)
        tf.summary.scalar("learner/learning_rate", self.optimizer.learning_rate, step=step)
        for name, value in self._algorithm.scalars().items():
            tf.summary.scalar(f"learner/{name}", value, step=step)
        for name, value in lag.items():
            tf.summary.scalar(f"learner/policy_lag_{name}", value, step=step)

    def _preprocess(self, experience, bootstrap, weights):
        """The algorithm's samples; with weights, each sample's is its column's (`weight`)."""
        samples = self._algorithm.preprocess(experience, bootstrap)  # ALGO LOGIC: the algorithm's
        if tf.nest.flatten(weights):
            columns = tf.reshape(weights, [-1])  # [Q, B] or [1, W]: the samples' columns
            mask = samples["mask"]  # [T * N] steps, or [N, T'] sequences
            per_column = tf.shape(mask)[0] // tf.size(columns)
            weight = tf.tile(columns, [per_column])
            samples["weight"] = tf.reshape(weight, [-1] + [1] * (mask.shape.rank - 1))
        return samples

    def _per_item(self, samples, experience, wants_back, after):
        """`{term: [K, columns]}` of the `wants_back` terms (and `mask`) after the
        update's steps (`after`: their results, to order the computation after
        them); a sequence's K are its steps."""
        def replica_terms(samples, log_prob):  # a replica's [Q, T, B] or [1, T, W]
            columns = tf.shape(log_prob)[0] * tf.shape(log_prob)[2]
            return per_item_terms(self._algorithm, samples, columns, wants_back)

        with tf.control_dependencies(tf.nest.flatten(after)):
            terms = self._strategy.run(replica_terms, (samples, experience.log_prob))
        return {k: tf.concat(self._strategy.experimental_local_results(v), axis=1)
                for k, v in terms.items()}

    def _epoch_orders(self, mask, train_step):
        """`[num_epochs, N]`: a random order of this replica's N samples per epoch.

        Stateless: a function of the seed, the replica, `train_step` and the
        epoch, so that a seeded run shuffles the same way every time.
        """
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        n = tf.shape(mask)[0]
        orders = []
        for epoch in range(self._num_epochs):
            seed = tf.stack([tf.cast(self._seed, tf.int64) + tf.cast(replica, tf.int64),
                             train_step * self._num_epochs + epoch])
            orders.append(tf.argsort(tf.random.stateless_uniform([n], seed)))
        return tf.stack(orders)

    def _reduced_sgd_step(self, samples, orders, i):
        info = self._strategy.run(self._sgd_step, (samples, orders, i))
        info = tf.nest.map_structure(  # one leaf at a time: not every strategy takes nests
            lambda x: self._strategy.reduce(tf.distribute.ReduceOp.MEAN, x, axis=None), info)
        # In cross-replica context: an assignment updates every replica's copy.
        with tf.control_dependencies(tf.nest.flatten(info)):
            self._algorithm.after_sgd_step()
        return tf.nest.map_structure(tf.identity, info)

    def _loss_groups(self):
        """`[(term, variables)]`: which loss term each set of variables minimises."""
        return self._algorithm.loss_groups

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
        groups = self._loss_groups()
        variables = [v for _, group in groups for v in group]
        size = tf.shape(batch["mask"])[0] // self._num_microbatches
        grads, means = None, None
        for i in range(self._num_microbatches):
            micro = tf.nest.map_structure(lambda x, i=i: x[i * size:(i + 1) * size], batch)
            scale = micro["mask"] * micro["weight"] if "weight" in micro else micro["mask"]
            with tf.GradientTape(persistent=len(groups) > 1) as tape:
                terms = self._algorithm.loss(micro)  # ALGO LOGIC: the algorithm's
                # Partial sums of the minibatch means: they add up over pieces.
                sums = {k: tf.reduce_sum(v * scale) / count for k, v in terms.items()}
            piece = [g for term, group in groups for g in tape.gradient(sums[term], group)]
            del tape
            grads = piece if grads is None else [g + p for g, p in zip(grads, piece)]
            means = sums if means is None else {k: means[k] + v for k, v in sums.items()}
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        norm = tf.linalg.global_norm(grads)
        if self._grad_clip is not None:
            sizes = [len(group) for _, group in groups] if self._clip_per_group else None
            grads = clip_gradients(grads, self._grad_clip, norm, sizes)
        finite = tf.math.is_finite(norm) & tf.math.is_finite(means["loss"])
        with tf.control_dependencies([tf.debugging.Assert(finite, [_NON_FINITE])]):
            self.optimizer.apply_gradients(zip(grads, variables),
                                           skip_gradients_aggregation=True)
        # Each replica's terms are partial sums of the global mean.
        num_replicas = ctx.num_replicas_in_sync
        return dict({k: v * num_replicas for k, v in means.items()}, grad_norm=norm)

