"""`AsyncOffPolicyDriver`: the env, actor and log threads and their queues."""

import contextlib
import logging
import threading
import time
from typing import Callable, Optional, Sequence

import gin
import numpy as np
import tensorflow as tf
from tf_agents.specs import tensor_spec

from alf_async.errors import QUEUE_CLOSED, LearnerStarvedError, ThreadError, stop_with_error
from alf_async.experience import ActReply, ActRequest, LearnBatch, make_specs
from alf_async.metrics import EpisodeStats, StepMetrics
from alf_async.queues import TFQueues
from alf_async.replay import UniformReplay, UnrollReplay
from alf_async.threads import (ActorThread, DriverThread, EnvThread, LogThread,
                               ReplayWriterThread)


def check_sizes(num_envs: int, num_actor_queues: int, unroll_length: int,
                learn_queue_cap: int, actor_queue_cap: int) -> None:
    """Raises ValueError naming the setting when a size rule is broken."""
    for name, value, least in [("num_envs", num_envs, 1),
                               ("num_actor_queues", num_actor_queues, 0),
                               ("unroll_length", unroll_length, 1),
                               ("learn_queue_cap", learn_queue_cap, 1),
                               ("actor_queue_cap", actor_queue_cap, 1)]:
        if not isinstance(value, (int, np.integer)) or value < least:
            raise ValueError(f"AsyncOffPolicyDriver.{name} must be an integer >= {least}, "
                             f"got {value!r}")
    if num_actor_queues * actor_queue_cap > num_envs:
        raise ValueError(
            f"num_actor_queues * actor_queue_cap must be <= num_envs (each actor waits for "
            f"requests from its envs), got {num_actor_queues} * {actor_queue_cap} > "
            f"{num_envs}")


def _check_env_specs(env, env_id: int, algorithm) -> None:
    def same(a, b):
        a, b = tensor_spec.from_spec(a), tensor_spec.from_spec(b)
        return (tf.nest.map_structure(lambda s: (tuple(s.shape), s.dtype), a) ==
                tf.nest.map_structure(lambda s: (tuple(s.shape), s.dtype), b))

    if not same(env.time_step_spec(), algorithm.time_step_spec) or not same(
            env.action_spec(), algorithm.action_spec):
        raise ValueError(
            f"env {env_id} has observation spec {env.observation_spec()} and action spec "
            f"{env.action_spec()}, but the algorithm was built for "
            f"{algorithm.time_step_spec.observation} and {algorithm.action_spec}")


def check_deterministic(num_envs: int, num_actor_queues: int, learn_queue_cap: int,
                        seed: Optional[int]) -> None:
    """Raises ValueError unless deterministic mode can run with these settings."""
    if seed is None:
        raise ValueError("AsyncOffPolicyDriver.deterministic=True needs a seed "
                         "(train.seed)")
    if num_actor_queues == 0:
        raise ValueError("AsyncOffPolicyDriver.deterministic=True needs actor threads "
                         "(num_actor_queues >= 1)")
    if learn_queue_cap % num_envs:
        raise ValueError(f"AsyncOffPolicyDriver.deterministic=True needs learn_queue_cap "
                         f"divisible by num_envs (every env adds the same number of unrolls "
                         f"to a learn batch), got {learn_queue_cap} and {num_envs}")


def check_uniform_replay(algorithm, replay_proportion: float, deterministic: bool,
                         max_policy_lag: Optional[int]) -> None:
    """Raises ValueError for settings that `exp_replayer='uniform'` cannot honour."""
    for name, value, allowed in [("replay_proportion", replay_proportion, 0.0),
                                 ("deterministic", deterministic, False),
                                 ("max_policy_lag", max_policy_lag, None)]:
        if value != allowed:
            raise ValueError(f"AsyncOffPolicyDriver.{name}={value!r} applies to "
                             f"exp_replayer='one_time' only; leave it {allowed!r} with "
                             f"exp_replayer='uniform'")
    if tf.nest.flatten(algorithm.policy_state_spec):
        raise ValueError("exp_replayer='uniform' needs a feed-forward policy (replayed "
                         "windows carry no recurrent state)")


def _num_replayed(replay_proportion: float, learn_queue_cap: int) -> int:
    """Replayed unrolls per learn batch; raises ValueError unless a whole number."""
    replayed = replay_proportion * learn_queue_cap
    if replay_proportion < 0 or abs(replayed - round(replayed)) > 1e-6:
        raise ValueError(
            f"AsyncOffPolicyDriver.replay_proportion * learn_queue_cap must be a whole "
            f"number >= 0 (unrolls replayed per learn batch), got {replay_proportion} * "
            f"{learn_queue_cap}")
    return int(round(replayed))


@gin.configurable(module="alf_async")
class AsyncOffPolicyDriver:
    """Collects experience with `num_envs` env threads and feeds a learner.

    Data flow: env thread i -> actor queue `i % num_actor_queues` -> actor
    thread (one batched policy call per group of requests) -> action-return
    queue i -> env thread i; every `unroll_length` steps env thread i puts a
    `[T, B]` unroll on the learn queue, from which `get_training_exps()` takes
    `learn_queue_cap` unrolls at a time. With `num_actor_queues = 0` each env
    thread calls the policy itself, inside its compiled unroll (no actor
    threads, no hand-offs).

    Every reply is stamped with `policy_version`, the number of learner
    updates completed when the policy read its weights.

    Thread-safety: `start()`, `run_async()` and `stop()` are called from
    one thread (the trainer's). `get_training_exps()` is called either by
    that thread or, once the learner loop prefetches, by the prefetch thread
    alone.
    """

    def __init__(self, env_factory: Callable[[int], object], algorithm,
                 policy_version: Optional[tf.Variable] = None,
                 num_envs: int = 4,
                 num_actor_queues: int = 1,
                 unroll_length: int = 32,
                 learn_queue_cap: int = 4,
                 actor_queue_cap: int = 2,
                 episode_window: int = 100,
                 learner_queue_timeout: float = 300.0,
                 max_policy_lag: Optional[int] = None,
                 restart_failed_envs: bool = False,
                 replay_proportion: float = 0.0,
                 replay_buffer_num_slots: int = 0,
                 exp_replayer: str = "one_time",
                 observers: Sequence[Callable] = (),
                 metrics: Sequence = (),
                 deterministic: bool = False,
                 seed: Optional[int] = None,
                 stop_grace_period_secs: float = 1.5,
                 remote: Optional[Callable] = None,
                 replay_dir: Optional[str] = None):
        """
        Args:
            env_factory: `env_id -> batched PyEnvironment` of B sub-envs; all
                envs must share B and the algorithm's specs.
            algorithm: an `alf_async.algorithms.contract.Algorithm`; the
                driver calls its `act(observation, step_type, policy_state,
                seed=...) -> (action, new_policy_state, log_prob)` on `[n * B,
                ...]` rows and reads its `time_step_spec`, `action_spec` and
                `policy_state_spec`.
            policy_version: int64 scalar variable, the learner's update count
                (`Learner.train_step`), stamped on every step. None: always 0.
            num_envs: E, number of env threads.
            num_actor_queues: N, number of actor threads; 0: every env thread
                acts itself (cheaper per step; no batching across envs).
            unroll_length: T, steps per unroll.
            learn_queue_cap: Q, unrolls per learn batch (learn queue capacity).
            actor_queue_cap: A, most requests one policy call serves.
            episode_window: episodes averaged by the episode statistics.
            learner_queue_timeout: seconds `get_training_exps()` waits for a
                learn batch before failing with a diagnosis of the pipeline.
            max_policy_lag: unrolls with a step acted on by weights more than
                this many learner updates old are dropped (and counted in
                `dropped_unrolls`) and replaced by fresher ones. None: keep all.
            restart_failed_envs: replace an env that raises by a new one from
                `env_factory` (counted in `env_restarts`) instead of stopping.
            replay_proportion: p; each learn batch of Q new unrolls gets
                `p * Q` unrolls replayed from recent ones appended (p:1).
            replay_buffer_num_slots: unrolls kept for replay.
            exp_replayer: 'one_time': each learn batch is Q new unrolls (plus
                any mix-in replay); 'uniform': unrolls go into a
                `UniformReplay` (its settings are gin's) and each learn batch
                is windows sampled from it, for off-policy learners (SAC, DQN).
            observers: callables, each called in the log thread with every
                unroll as a tf-agents `Trajectory` (leaves `[B, T, ...]`).
            metrics: tf-agents step metrics of E * B sub-envs (e.g.
                `tf_metrics.AverageReturnMetric(batch_size=E * B)`), updated in
                the log thread (`StepMetrics`); the trainer writes their results.
            deterministic: reproducible mode: env threads run one learn
                batch's unrolls at a time, only while the learner waits (a
                fixed policy lag of 0); each actor serves all of its envs
                at once in env order with seeded sampling; a learn batch
                holds `Q / E` unrolls of every env, in env order. Needs
                `seed`, and Q divisible by E.
            seed: seeds sampling (actions in deterministic mode, replay).
            stop_grace_period_secs: how long `stop()` waits for threads.
            remote: `(unroll_spec=, num_envs=) -> ReverbService`: collection runs
                in actor processes (`python -m alf_async.actor`), each with
                `num_envs` env threads, whose unrolls arrive through the
                service's Reverb server; this process steps no env (it
                builds env 0 only to read its specs).
            replay_dir: where a `UniformReplay` with `save_buffer` keeps its
                content (the trainer passes `root_dir/replay`).
        """
        check_sizes(num_envs, num_actor_queues, unroll_length, learn_queue_cap,
                    actor_queue_cap)
        self._deterministic = deterministic
        if deterministic:
            check_deterministic(num_envs, num_actor_queues, learn_queue_cap, seed)
            # Each actor takes all of its envs' requests at once.
            actor_queue_cap = -(-num_envs // num_actor_queues)
        if exp_replayer not in ("one_time", "uniform"):
            raise ValueError(f"AsyncOffPolicyDriver.exp_replayer must be 'one_time' or "
                             f"'uniform', got {exp_replayer!r}")
        if exp_replayer == "uniform":
            check_uniform_replay(algorithm, replay_proportion, deterministic, max_policy_lag)
        if remote and deterministic:
            raise ValueError("AsyncOffPolicyDriver.deterministic=True needs local envs, "
                             "not remote actors")
        self._learner_loop = None  # attached by a LearnerLoop
        self._helpers = []  # threads started for others (the prefetch thread)
        self._num_replayed = _num_replayed(replay_proportion, learn_queue_cap)
        self._replay = (UnrollReplay(replay_buffer_num_slots, seed)
                        if self._num_replayed else None)
        self._algorithm = algorithm
        self._unroll_length = unroll_length
        self._learn_queue_cap = learn_queue_cap
        self._grace = stop_grace_period_secs
        self._timeout = learner_queue_timeout
        self._max_policy_lag = max_policy_lag
        self._restart_factory = env_factory if restart_failed_envs else None
        self.dropped_unrolls = 0
        self._num_envs = num_envs
        self._envs = self._make_envs(env_factory, 1 if remote else num_envs, algorithm)
        self._batch_size = self._envs[0].batch_size
        request, reply, unroll, log = make_specs(
            algorithm.time_step_spec, algorithm.action_spec, algorithm.policy_state_spec,
            self._batch_size, unroll_length)
        self._version = (policy_version if policy_version is not None else
                         tf.Variable(0, dtype=tf.int64, trainable=False))
        self.remote = remote(unroll_spec=unroll, num_envs=num_envs) if remote else None
        if self.remote:
            for env in self._envs:  # built for their specs only
                env.close()
            self._envs, num_envs, num_actor_queues = [], 0, 0
        streams = self.remote.num_streams if self.remote else num_envs  # global env ids
        self._observers = list(observers)
        self.metrics = StepMetrics(metrics, streams, self._batch_size) if metrics else None
        self._queues = TFQueues(
            num_envs, num_actor_queues, actor_queue_cap, learn_queue_cap, request, reply,
            unroll, unroll if observers or metrics else log,
            permits_per_env=learn_queue_cap // num_envs if deterministic else 0)
        self.uniform_replay = (UniformReplay(self._queues.learn_queue.spec,
                                             checkpoint_dir=replay_dir)
                               if exp_replayer == "uniform" else None)
        self._coord = tf.train.Coordinator()
        self.stats = EpisodeStats(streams, self._batch_size, episode_window)
        self._threads = self._make_threads(num_envs, num_actor_queues, seed)
        self._started = self._stopped = self._error_raised = False
        self.compile_seconds = {}  # thread name -> seconds its prepare() took (start())
        self._busy_since, self._busy_totals = time.perf_counter(), {}

    @staticmethod
    def _make_envs(env_factory: Callable, num_envs: int, algorithm) -> list:
        envs = [env_factory(i) for i in range(num_envs)]
        for i, env in enumerate(envs):
            _check_env_specs(env, i, algorithm)
        sizes = [env.batch_size for env in envs]
        if len(set(sizes)) > 1:
            raise ValueError(f"All envs must have the same batch_size, got {sizes}")
        return envs

    def _make_threads(self, num_envs: int, num_actor_queues: int, seed: Optional[int]):
        initial_state = tf.nest.map_structure(
            lambda t: t.numpy(),
            tensor_spec.zero_spec_nest(self._algorithm.policy_state_spec,
                                       outer_dims=[self._batch_size]))
        q = self._queues
        seeding = dict(seed=seed, stride=num_actor_queues) if self._deterministic else {}
        actors = [ActorThread(f"ActorThread{a}", self._coord, q, q.actor_queues[a],
                              range(a, num_envs, num_actor_queues), self._act,
                              **seeding, index=a)
                  for a in range(num_actor_queues)]
        def policy(i):  # env i's actor queue, or its own policy call
            if num_actor_queues:
                return dict(actor_queue=q.actor_queues[i % num_actor_queues])
            return dict(act_fn=self._act_in_env_thread)

        envs = [EnvThread(f"EnvThread{i}", self._coord, q, env, i, self._unroll_length,
                          initial_state, self._restart_factory, **policy(i))
                for i, env in enumerate(self._envs)]
        writers = ([ReplayWriterThread("ReplayWriterThread", self._coord, q,
                                       self.uniform_replay)] if self.uniform_replay else [])
        self._remote_threads = self.remote.threads(self._coord, q) if self.remote else []
        log = LogThread("LogThread", self._coord, q, self.stats, self._observers, self.metrics)
        return [*actors, *envs, *self._remote_threads, *writers, log]

    def _act(self, requests, seed=None) -> ActReply:
        """One policy call for an actor's `[n, B, ...]` requests -> `[n, B, ...]` replies.

        `seed`: `[2]` int32 seed of a stateless sampling (None: stateful).
        """
        outer = tf.shape(requests.env_id)[:1]
        # Inner dims are static: each reshape is one op with a constant shape.
        merge = lambda x: tf.reshape(x, [-1, *x.shape[2:]])
        split = lambda x: tf.reshape(x, tf.concat([outer, [self._batch_size], x.shape[1:]], 0))
        inputs = tf.nest.map_structure(merge, (requests.observation, requests.step_type,
                                               requests.policy_state))
        return tf.nest.map_structure(split, self._reply(*inputs, seed=seed))

    def _act_in_env_thread(self, request: ActRequest) -> ActReply:
        """The policy call an env thread makes itself (N = 0): `[B, ...]` leaves."""
        return self._reply(request.observation, request.step_type, request.policy_state)

    def _reply(self, observation, step_type, policy_state, seed=None) -> ActReply:
        """The algorithm's actions for `[M, ...]` rows, as an `ActReply`.

        The stamp is the policy version read before the policy call; the
        version is read again after it, and the call is repeated in the rare
        case that a learner update completed in between (a sequence lock).
        So the stamp is the number of updates completed while the weights
        were read, and consecutive stamps of one env never decrease: each
        call depends on the previous step's reply through the env.
        """
        seeded = {} if seed is None else dict(seed=seed)

        def attempt(unused_done, *unused_reply):
            version = self._version.read_value()
            with tf.control_dependencies([version]):
                action, state, log_prob = self._algorithm.act(
                    observation, step_type, policy_state, **seeded)
            with tf.control_dependencies(tf.nest.flatten((action, state, log_prob))):
                done = tf.equal(self._version.read_value(), version)
            return done, ActReply(action, state, log_prob,
                                  tf.fill(tf.shape(step_type), version))

        rows = tf.shape(step_type)[:1]
        empty = ActReply(
            tf.nest.map_structure(lambda s: tf.zeros(tf.concat([rows, s.shape], 0), s.dtype),
                                  self._algorithm.action_spec),
            policy_state, tf.zeros(rows, tf.float32), tf.zeros(rows, tf.int64))
        _, reply = tf.while_loop(lambda done, *_: tf.logical_not(done), attempt,
                                 (tf.constant(False), empty))
        return reply

    @property
    def batch_size(self) -> int:
        """B, sub-envs per env thread."""
        return self._batch_size

    @property
    def num_envs(self) -> int:
        """E, env threads (of each actor process, with remote actors)."""
        return self._num_envs

    @property
    def unroll_length(self) -> int:
        """T, steps per unroll."""
        return self._unroll_length

    @property
    def learn_queue_cap(self) -> int:
        """Q, unrolls per learn batch."""
        return self._learn_queue_cap

    @property
    def deterministic(self) -> bool:
        """Whether the driver runs in the reproducible mode."""
        return self._deterministic

    @property
    def learn_batch_shape(self):
        """`(Q', T', B')` of the learn batches' `[Q', T', B']` experience.

        `(Q + mix-in replayed unrolls, T, B)`, or with uniform replay
        `(batch_size, sequence_length, 1)`: each window is one unroll.
        """
        if self.uniform_replay:
            return self.uniform_replay.batch_size, self.uniform_replay.sequence_length, 1
        return self._learn_queue_cap + self._num_replayed, self._unroll_length, self._batch_size

    @property
    def learn_batch_bytes(self) -> int:
        """Bytes of one learn batch's experience and bootstrap."""
        q, t, b = self.learn_batch_shape
        return self.unroll_bytes * q * t * b // (self._unroll_length * self._batch_size)

    @property
    def env_steps_per_batch(self) -> int:
        """Q * T * B, the env steps of one learn batch."""
        return self._learn_queue_cap * self._unroll_length * self._batch_size

    @property
    def unroll_bytes(self) -> int:
        """Bytes of one unroll as the learn queue holds it (`[T, B, ...]` leaves).

        A learn batch is `learn_batch_shape[0]` of them; the learn queue holds at
        most Q. Pixels stay uint8, so they count 1 byte each.
        """
        return sum(int(np.prod(spec.shape)) * spec.dtype.size
                   for spec in tf.nest.flatten(self._queues.learn_queue.spec))

    def describe(self) -> str:
        """One line on where experience comes from and what a learn batch holds."""
        replay = self.uniform_replay
        if replay:
            batch = (f"uniform replay at {replay.replay_ratio:g} windows per env step: "
                     f"{replay.batch_size} windows of {replay.sequence_length} steps")
        else:
            batch = f"{self.env_steps_per_batch} frames"
        where = f"remote actor processes (port {self.remote.port}), each " if self.remote else ""
        return (f"{where}{self._num_envs} env threads x {self._batch_size} sub-envs, "
                f"unroll_length {self._unroll_length}, learn_queue_cap {self._learn_queue_cap} "
                f"({batch}, {self.learn_batch_bytes / 2**20:.3g} MiB per learn batch)")

    def summaries(self) -> dict:
        """`{tag: value}` of the collection and learn-batch figures the trainer writes."""
        values = {"learner/dropped_unrolls": self.dropped_unrolls,
                  "driver/env_restarts": self.env_restarts}
        if self.remote:
            values["driver/actors_alive"] = self.remote.actors_alive()
        for metric in self.metrics.metrics if self.metrics else []:
            values[f"metrics/{metric.name}"] = metric.result()
        if self.uniform_replay:
            values["replay/achieved_ratio"] = self.uniform_replay.achieved_ratio
            values["replay/inserted_env_steps"] = self.uniform_replay.inserted_steps
        return values

    def save(self) -> None:
        """Saves what the driver keeps beside the checkpoint (a uniform replay buffer
        with `UniformReplay.save_buffer`; otherwise nothing)."""
        if self.uniform_replay:
            self.uniform_replay.save()

    def learn_queue_size(self) -> int:
        return int(self._queues.learn_queue.size())

    def start(self) -> None:
        """Compiles the threads' TF functions, then starts every thread.

        Raises:
            ThreadError: a thread's function failed to compile (names the
                thread); no thread was started.
        """
        if self._started:
            raise RuntimeError("AsyncOffPolicyDriver.start() was already called")
        for thread in self._threads:
            start = time.perf_counter()
            try:
                thread.prepare()
            except Exception as error:
                raise ThreadError(
                    f"{thread.name} failed: {type(error).__name__}: {error}") from error
            self.compile_seconds[thread.name] = time.perf_counter() - start
        self._started = True
        for thread in self._threads:
            thread.start()

    def get_training_exps(self) -> LearnBatch:
        """Waits for `learn_queue_cap` unrolls.

        Returns:
            `LearnBatch` with experience leaves `[Q, T, B, ...]`, bootstrap
            leaves `[Q, B, ...]`, `[Q]` env ids and `Q * T * B` env steps.

        Raises:
            ThreadError: a thread failed (names the thread).
            LearnerStarvedError: no batch within `learner_queue_timeout`.
            RuntimeError: the driver was stopped (also when unrolls are still
                queued: nothing is returned after `stop()`).
        """
        try:
            return self.next_learn_batch()
        except (ThreadError, LearnerStarvedError, RuntimeError):
            self._error_raised = True  # stop() need not raise it again
            raise

    def next_learn_batch(self, updates_ahead: int = 0) -> LearnBatch:
        """`get_training_exps()` for a helper thread, e.g. the learner loop's prefetch.

        Its errors are still re-raised by `stop()`. `updates_ahead`: how many
        learner updates later the batch will be trained on; `max_policy_lag`
        counts the lag at that update.
        """
        if self._stopped:
            raise RuntimeError("AsyncOffPolicyDriver was stopped")
        if self.uniform_replay:
            return self._sample_replay()
        if self._deterministic:
            unrolls = self._collect_in_env_order()
        else:
            unrolls = self._dequeue(self._learn_queue_cap)
        if self._max_policy_lag is not None:
            unrolls = self._drop_stale(unrolls, updates_ahead)
        if self._replay is not None:
            self._replay.add(unrolls)
            unrolls = tf.nest.map_structure(lambda a, b: tf.concat([a, b], 0), unrolls,
                                            self._replay.sample(self._num_replayed))
        return LearnBatch(unrolls.experience, unrolls.bootstrap, unrolls.env_id,
                          self.env_steps_per_batch)

    def _collect_in_env_order(self):
        """Lets every env produce `Q / E` unrolls; returns them sorted by env."""
        for permits in self._queues.unroll_permits:
            for _ in range(permits.capacity):
                permits.enqueue(np.int32(0))
        unrolls = self._dequeue(self._learn_queue_cap)
        order = tf.argsort(unrolls.env_id, stable=True)  # an env's unrolls stay in order
        return tf.nest.map_structure(lambda x: tf.gather(x, order), unrolls)

    @contextlib.contextmanager
    def _watchdog(self):
        """Stops the driver with `LearnerStarvedError` if the block takes too long."""
        watchdog = threading.Timer(self._timeout, self._starved)
        watchdog.daemon = True
        watchdog.start()
        try:
            yield
        finally:
            watchdog.cancel()

    def _dequeue(self, n: int):
        """`n` unrolls from the learn queue, under the starvation watchdog."""
        with self._watchdog():
            try:
                return self._queues.learn_queue.dequeue_many(n)
            except QUEUE_CLOSED:
                self._coord.raise_requested_exception()
                raise RuntimeError("AsyncOffPolicyDriver was stopped") from None

    def _sample_replay(self) -> LearnBatch:
        """A learn batch of windows from the uniform replay, under the watchdog."""
        with self._watchdog():
            batch = self.uniform_replay.sample(self._coord.should_stop)
        if batch is None:
            self._coord.raise_requested_exception()
            raise RuntimeError("AsyncOffPolicyDriver was stopped")
        return batch

    def _drop_stale(self, unrolls, updates_ahead: int):
        """Replaces unrolls older than `max_policy_lag` updates by fresh ones.

        The lag is counted at the update `updates_ahead` from now, when the
        batch will be trained on.
        """
        while True:
            oldest = tf.reduce_min(unrolls.experience.policy_version, axis=[1, 2])
            now = self._version.read_value() + updates_ahead
            fresh = now - oldest <= self._max_policy_lag
            stale = int(tf.reduce_sum(tf.cast(~fresh, tf.int32)))
            if not stale:
                return unrolls
            self.dropped_unrolls += stale
            kept = tf.nest.map_structure(lambda x: tf.boolean_mask(x, fresh), unrolls)
            unrolls = tf.nest.map_structure(lambda a, b: tf.concat([a, b], 0), kept,
                                            self._dequeue(stale))

    @property
    def env_restarts(self) -> int:
        """Envs replaced after raising (with `restart_failed_envs`)."""
        return sum(t.num_restarts for t in self._threads if isinstance(t, EnvThread))

    def busy_fractions(self) -> dict:
        """Share of wall time the env and actor threads worked since the last call.

        `env_busy`: stepping the env; `actor_busy`: in policy calls. Each is
        the mean over the stage's threads; the rest of the time they waited
        on a queue (or, for env threads, on TF's per-step overhead).
        """
        now = time.perf_counter()
        wall = max(now - self._busy_since, 1e-9)
        fractions = {}
        for stage, kind in (("env_busy", EnvThread), ("actor_busy", ActorThread)):
            totals = [t.busy_seconds for t in self._threads if isinstance(t, kind)]
            if not totals:  # no actor threads: env threads act themselves
                continue
            before = self._busy_totals.get(stage, [0.0] * len(totals))
            fractions[stage] = float(np.mean(np.subtract(totals, before))) / wall
            self._busy_totals[stage] = totals
        self._busy_since = now
        return fractions

    def diagnose(self) -> str:
        """One line on the state of every stage, to tell which one starves."""
        envs = [t for t in self._threads if isinstance(t, EnvThread)]
        actors = [t for t in self._threads if isinstance(t, ActorThread)]
        alive = lambda threads: sum(t.is_alive() for t in threads)
        replay = self.uniform_replay
        collection = self.remote.diagnose() if self.remote else (
            f"{alive(envs)}/{len(envs)} env threads and {alive(actors)}/{len(actors)} "
            f"actor threads alive, actor queue sizes "
            f"{[int(q.size()) for q in self._queues.actor_queues]}, "
            f"{sum(t.num_unrolls for t in envs)} unrolls produced")
        return (f"{collection}, learn queue {self.learn_queue_size()}/{self._learn_queue_cap}" +
                (f", {replay.inserted_steps} env steps put in replay" if replay else ""))

    def _starved(self) -> None:
        stop_with_error(self._coord, self._queues.close_all, LearnerStarvedError(
            f"No learn batch within learner_queue_timeout={self._timeout}s: "
            f"{self.diagnose()}"))

    def attach(self, learner_loop) -> None:
        """Makes `run_async()` run `learner_loop.step()` (`LearnerLoop` calls this)."""
        self._learner_loop = learner_loop

    def run_async(self) -> int:
        """Trains the attached learner on one learn batch; returns its env steps.

        ALF's name for `LearnerLoop.step()`: see there.

        Raises:
            ThreadError, LearnerStarvedError, RuntimeError: as
                `get_training_exps()`.
        """
        if self._learner_loop is None:
            raise RuntimeError("run_async() needs a LearnerLoop attached to the driver")
        return self._learner_loop.step()

    def start_helper_thread(self, make: Callable) -> DriverThread:
        """Starts `make(coordinator, close_queues)`, a thread that `stop()` joins.

        For threads of others that take learn batches (the learner loop's
        prefetch thread): they stop, fail and are joined like the driver's.
        """
        thread = make(self._coord, self._queues.close_all)
        self._helpers.append(thread)
        thread.start()
        return thread

    def raise_stopped(self) -> None:
        """Raises the first thread error, or RuntimeError: the driver was stopped."""
        self._error_raised = True
        self._coord.raise_requested_exception()
        raise RuntimeError("AsyncOffPolicyDriver was stopped")

    def stop(self) -> None:
        """Stops and joins every thread, then closes the envs.

        Idempotent, and safe before `start()`. Re-raises the first error a
        thread hit (a `ThreadError` naming it) unless `get_training_exps()`
        already raised it.
        """
        if self._stopped:
            return
        self._stopped = True
        self._coord.request_stop()
        self._queues.close_all()
        try:
            if self._started:  # the remote service joins its own threads (close())
                self._coord.join([t for t in self._threads + self._helpers
                                  if t not in self._remote_threads],
                                 stop_grace_period_secs=self._grace)
        except Exception:
            if not self._error_raised:
                raise
            logging.debug("Thread error already raised by get_training_exps()")
        finally:
            for thread in self._threads:
                if isinstance(thread, EnvThread):
                    thread.close_env()
            if self.uniform_replay:
                self.uniform_replay.close()
            if self.remote:
                self.remote.close()
