"""`AsyncOffPolicyDriver`: a collection, its queues and threads, and a learn-batch source."""

import dataclasses
from typing import Callable, Optional, Sequence

import gin
import numpy as np
import tensorflow as tf

from alf_async.batches import LearnFeed
from alf_async.batches.contract import check_batch_source
from alf_async.batches.registry import SourceNeeds, build_source, check_name
from alf_async.collection import Collector, LocalCollection, RemoteCollection
from alf_async.collection.contract import check_collection
from alf_async.experience import LearnerCounters, LearnBatch, zeros_learn_batch
from alf_async.collection.pacing import FreeRunning, Lockstep
from alf_async.runs.records import DriverSizes


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


def check_modes(exp_replayer: str, deterministic: bool, remote, num_envs: int,
                num_actor_queues: int, learn_queue_cap: int, seed: Optional[int]) -> None:
    """Raises ValueError unless the replay and deterministic choices can run together."""
    check_name(exp_replayer)
    if not deterministic:
        return
    need = None
    if seed is None:
        need = "a seed (train.seed)"
    elif num_actor_queues == 0:
        need = "actor threads (num_actor_queues >= 1)"
    elif learn_queue_cap % num_envs:
        need = (f"learn_queue_cap divisible by num_envs (every env adds the same number of "
                f"unrolls to a learn batch), got {learn_queue_cap} and {num_envs}")
    elif remote:
        need = "local envs, not remote actors"
    elif exp_replayer != "one_time":
        need = "exp_replayer='one_time'"
    if need:
        raise ValueError(f"AsyncOffPolicyDriver.deterministic=True needs {need}")


def batch_mebibytes(unroll_spec, unroll_steps: int, learn_batch_shape: tuple) -> float:
    """MiB of a `[Q', T', B', ...]` learn batch made of unrolls of `unroll_spec`
    (`unroll_steps` = T * B steps each; pixels stay uint8: 1 byte each)."""
    unroll_bytes = sum(int(np.prod(spec.shape)) * spec.dtype.size
                       for spec in tf.nest.flatten(unroll_spec))
    return unroll_bytes * int(np.prod(learn_batch_shape)) / unroll_steps / 2**20


@gin.configurable(module="alf_async")
class AsyncOffPolicyDriver:
    """Collects experience with `num_envs` env threads and makes learn batches of it.

    Data flow: env thread i -> actor queue `i % num_actor_queues` -> actor
    thread (one batched policy call per group of requests) -> action-return
    queue i -> env thread i; every `unroll_length` steps env thread i puts a
    `[T, B]` unroll on the learn queue (a `LocalCollection`; with `remote`,
    actor processes send them instead: a `RemoteCollection`). The learn-batch
    source (`exp_replayer`: `FreshBatches`, `UniformReplayBatches` or
    `PrioritizedReplayBatches`, or from a dataset `DatasetBatches` and
    `HybridBatches`) turns them into the learn batches that
    `get_training_exps()` returns, and hears back after each update.

    Every reply is stamped with `policy_version`, the number of learner
    updates completed when the policy read its weights.

    Thread-safety: `start()`, `get_training_exps()`, `run_async()` and
    `stop()` are called from one thread (the trainer's); a learner loop's
    prefetch thread takes batches through `feed`.

    Attributes:
        num_envs: E, env threads (of each actor process, with remote actors).
        batch_size: B, sub-envs per env thread.
        unroll_length: T, steps per unroll.
        learn_queue_cap: Q, new unrolls per learn batch.
        deterministic: whether the driver runs in the reproducible mode.
        pace: `pacing.Lockstep` in that mode, else `pacing.FreeRunning`.
        collection: the `LocalCollection` or `RemoteCollection`.
        batches: its learn-batch source (a `batches.contract.BatchSource`).
        feed: the `LearnFeed` a `LearnerLoop` takes the batches from.
        remote: the `ReverbService` of remote actors, or None.
        stats: `EpisodeStats` of every stream's finished episodes.
        compile_seconds: thread name -> seconds `start()` took to compile it.
    """

    STOP_GRACE_SECS = 1.5  # how long `stop()` waits for the threads

    def __init__(self, env_factory: Callable[[int], object], algorithm,
                 counters: Optional[LearnerCounters] = None,
                 num_envs: int = 4,
                 num_actor_queues: int = 1,
                 unroll_length: int = 32,
                 learn_queue_cap: int = 4,
                 actor_queue_cap: int = 2,
                 exp_replayer: str = "one_time",
                 deterministic: bool = False,
                 seed: Optional[int] = None,
                 observers: Sequence[Callable] = (),
                 remote: Optional[Callable] = None,
                 replay_dir: Optional[str] = None,
                 env_name: Optional[str] = None,
                 recorder=None):
        """
        Args:
            env_factory: `env_id -> batched PyEnvironment` of B sub-envs; all
                envs must share B and the algorithm's specs.
            algorithm: an `alf_async.algorithms.contract.Algorithm`.
            counters: the learner's `LearnerCounters` (`Learner.counters`): its update
                count, stamped on every step as the policy version, and its env
                steps (prioritized replay's beta follows them). None: both at 0.
            num_envs: E, number of env threads.
            num_actor_queues: N, number of actor threads; 0: every env thread
                acts itself (cheaper per step; no batching across envs).
            unroll_length: T, steps per unroll.
            learn_queue_cap: Q, unrolls per learn batch (learn queue capacity).
            actor_queue_cap: A, most requests one policy call serves.
            exp_replayer: a name in `batches.registry.SOURCES`. 'one_time':
                each learn batch is Q new unrolls (`FreshBatches`, whose options
                gin sets); 'uniform': windows sampled from a replay table
                (`UniformReplayBatches`); 'prioritized': sampled by priority,
                the learner's TD errors written back (`PrioritizedReplayBatches`,
                whose options gin sets). How long `get_training_exps()` waits
                is `LearnFeed.learner_queue_timeout`.
            deterministic: reproducible mode: a policy lag of 0, seeded actors
                and learn batches in env order (`LocalCollection`,
                `FreshBatches`). Needs `seed`, and Q divisible by E.
            seed: seeds sampling (actions in deterministic mode, replay).
            observers: as tf-agents drivers take them (see `Collector`):
                callables given every unroll as a `Trajectory`, and step
                metrics of E * B sub-envs, whose results `summaries()` gives.
            remote: `(unroll_spec=, num_envs=) -> ReverbService`: actor
                processes (`python -m alf_async.actor`) collect instead.
            replay_dir: where a `ReplayBuffer` with `save_buffer` keeps its
                content (the trainer passes `root_dir/replay`).
            env_name: the env's id, checked against a dataset's (`'dataset'`,
                `'hybrid'`).
            recorder: gets every unroll that arrives, local or remote, in the
                log thread (`add(numpy Unroll)`), and `close()` once the
                threads stopped: `datasets.recorder.EpisodeRecorder`.
        """
        check_sizes(num_envs, num_actor_queues, unroll_length, learn_queue_cap,
                    actor_queue_cap)
        check_modes(exp_replayer, deterministic, remote, num_envs, num_actor_queues,
                    learn_queue_cap, seed)
        counters = counters or LearnerCounters.at_zero()
        self._version = counters.version
        self.num_envs, self.unroll_length = num_envs, unroll_length
        self.learn_queue_cap, self.deterministic = learn_queue_cap, deterministic
        self.pace = Lockstep(seed, num_envs, learn_queue_cap) if deterministic else FreeRunning()
        self.collection = (
            RemoteCollection(env_factory, algorithm, num_envs, unroll_length, remote) if remote
            else LocalCollection(env_factory, algorithm, self._version, num_envs,
                                 num_actor_queues, actor_queue_cap, unroll_length,
                                 self.pace))
        check_collection(self.collection)
        try:
            self._collector = Collector(
                self.collection, learn_queue_cap, observers,
                permits_per_env=self.pace.permits_per_env, recorder=recorder)
            self.batches = build_source(exp_replayer, SourceNeeds(
                self._collector, algorithm, counters.version, counters.env_steps,
                learn_queue_cap, self.pace, seed, replay_dir, env_name))
            check_batch_source(self.batches)
        except Exception:
            self.collection.close()
            raise
        self._more_threads = self.batches.threads(self._collector.coord, self._collector.queues)
        self.feed = LearnFeed(self._collector, self.batches, self.diagnose,
                              self.pace.prefetch_allowed)
        self.batch_size = self.collection.batch_size
        self.remote = getattr(self.collection, "service", None)
        self.stats = self._collector.stats
        self.compile_seconds = self._collector.compile_seconds  # filled by start()
        self._learner_loop = None  # attached by the trainer
        self._started = False

    def example_batch(self) -> LearnBatch:
        """A learn batch of zeros shaped and marked as `get_training_exps()`'s
        (`Learner.trace`)."""
        return zeros_learn_batch(self._collector.queues.learn_queue.spec,
                                 self.learn_batch_shape, self.batches.weighted)._replace(
                                     wants_back=self.batches.wants_back)

    @property
    def learn_batch_shape(self):
        """`(Q', T', B')` of the learn batches' `[Q', T', B']` experience.

        `(Q + mix-in replayed unrolls, T, B)`, or with uniform replay
        `(batch_size, sequence_length, 1)`: each window is one unroll.
        """
        return self.batches.shape(self.unroll_length, self.batch_size)

    def describe(self) -> str:
        """One line on where experience comes from and what a learn batch holds."""
        mib = batch_mebibytes(self._collector.queues.learn_queue.spec,
                              self.unroll_length * self.batch_size, self.learn_batch_shape)
        frames = self.learn_queue_cap * self.unroll_length * self.batch_size
        return (f"{self.collection.describe()}, unroll_length {self.unroll_length}, "
                f"learn_queue_cap {self.learn_queue_cap} "
                f"({self.batches.describe(frames)}, {mib:.3g} MiB per learn batch)")

    def summaries(self) -> dict:
        """`{tag: value}` of the collection and learn-batch figures the trainer writes."""
        values = {**self.batches.summaries(), **self.collection.summaries()}
        metrics = self._collector.metrics
        for metric in metrics.metrics if metrics else []:
            values[f"metrics/{metric.name}"] = metric.result()
        return values

    def busy_fractions(self) -> dict:
        """`env_busy`, `actor_busy`: share of wall time those threads worked since
        the last call (`LocalCollection.busy_fractions`)."""
        return self.collection.busy_fractions()

    def save(self) -> None:
        """Saves what the learn-batch source keeps beside the checkpoint."""
        self.batches.save()

    def learn_queue_size(self) -> int:
        return self.feed.queue_size()

    def start(self) -> None:
        """Compiles the threads' TF functions, then starts every thread (a source
        that does not learn from the env, a dataset's, starts no collection).

        Raises:
            ThreadError: a thread's function failed to compile (names the
                thread); no thread was started.
        """
        if self._started:
            raise RuntimeError("AsyncOffPolicyDriver.start() was already called")
        self._collector.start(self._more_threads, collect=self.batches.learns_from_env)
        self._started = True

    def get_training_exps(self) -> LearnBatch:
        """Waits for the next learn batch.

        Returns:
            `LearnBatch` with experience leaves `[Q', T', B', ...]` (see
            `learn_batch_shape`), bootstrap leaves `[Q', B', ...]`, `[Q']`
            env ids and its new env steps (Q * T * B when fresh).

        Raises:
            ThreadError: a thread failed (names the thread).
            LearnerStarvedError: no batch within `learner_queue_timeout`.
            RuntimeError: the driver was stopped (also when unrolls are still
                queued: nothing is returned after `stop()`).
        """
        return self.feed.take()

    def diagnose(self) -> str:
        """One line on the state of every stage, to tell which one starves."""
        return (f"{self.collection.diagnose(self._collector.queues)}, learn queue "
                f"{self.feed.queue_size()}/{self.learn_queue_cap}{self.batches.diagnose()}")

    def attach(self, learner_loop) -> None:
        """Makes `run_async()` run `learner_loop.step()` (the trainer attaches its loop)."""
        self._learner_loop = learner_loop

    def run_async(self) -> int:
        """ALF's name for one learner iteration: the attached `LearnerLoop` trains on
        one learn batch, which it takes from `feed`. Returns its env steps.

        Raises:
            ThreadError, LearnerStarvedError, RuntimeError: as
                `get_training_exps()`.
        """
        if self._learner_loop is None:
            raise RuntimeError("run_async() needs a LearnerLoop attached to the driver")
        return self._learner_loop.step()

    def request_stop(self) -> None:
        """Asks every thread to stop, without waiting: a learn batch awaited now or
        later raises `DriverStopped`. Safe from any thread but a signal handler."""
        self._collector.coord.request_stop()

    def stop(self) -> None:
        """Stops and joins every thread, then closes the envs and the batch source.

        Idempotent, and safe before `start()`. Re-raises the first error a
        thread hit (a `ThreadError` naming it) unless `get_training_exps()`
        already raised it.
        """
        if self.feed.closed:
            return
        self.feed.close()
        try:
            self._collector.stop(self.STOP_GRACE_SECS, error_seen=self.feed.error_seen)
        finally:
            self.collection.close()
            self.batches.close()
            self._collector.close_recorder()


def local_collection(env_factory: Callable[[int], object], algorithm,
                     version: tf.Variable, sizes: DriverSizes,
                     task: int = 0) -> LocalCollection:
    """The `LocalCollection` of the driver's `sizes` (actor process `task`'s: its
    envs are global env ids `task * E ... task * E + E - 1`).

    Raises:
        ValueError: a size rule is broken (names the setting).
    """
    check_sizes(**dataclasses.asdict(sizes))
    return LocalCollection(env_factory, algorithm, version, sizes.num_envs,
                           sizes.num_actor_queues, sizes.actor_queue_cap, sizes.unroll_length,
                           first_stream=task * sizes.num_envs)
