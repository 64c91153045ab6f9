"""An actor process: a `LocalCollection` (env and actor threads) writing to a remote learner.

`python -m alf_async.actor` runs one `ActorProcess`. It acts with its own
copy of the algorithm, whose variables a `WeightsPuller` keeps close to the
learner's, and writes every unroll to the learner's Reverb 'unrolls' table.
"""

import random
import threading
import time
from typing import Callable, Optional

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from alf_async.collection import Collector
from alf_async.metrics import EpisodeStats
from alf_async.drivers import AsyncOffPolicyDriver, DriverSizes, local_collection
from alf_async.environments import create_environment, first_env
from alf_async.experience import Unroll
from alf_async.remote import run_secret, weights
from alf_async.extras import import_reverb
from alf_async.remote.learner_watch import LearnerWatch
from alf_async.remote.service import UNROLLS, RemoteUnroll


class LearnerGone(RuntimeError):
    """The learner's server stopped answering for `server_timeout_secs`."""


class LearnerNeverAnswered(LearnerGone):
    """No learner answered at `--server` within `connect_timeout_secs`."""


# A wait this long or longer is no limit: the launch's actors wait for their learner
# whatever happens (`alf_async.launch` binds the timeouts to 1e9 s).
NO_LIMIT_SECS = 1e8


class StoppedBeforeStart(Exception):
    """`should_stop()` turned true while the actor waited for its first weights."""


class WeightsPuller(threading.Thread):
    """Pulls the learner's weights every `interval_secs`, or sooner on `request()`.

    A daemon thread apart from acting: a pull assigns the variables the
    actors read (as a local learner's update would) and then the version.
    A failed pull is logged and retried at the next occasion; while
    `client()` is None (the actor reconnects) there is no pull.
    """

    def __init__(self, client: Callable, variables, version: tf.Variable,
                 interval_secs: float, timeout_secs: float,
                 on_contact: Callable[[], None] = lambda: None):
        super().__init__(name="WeightsPuller", daemon=True)
        self._on_contact = on_contact  # the server answered a pull
        self._client, self._variables, self._version = client, variables, version
        self._interval, self._timeout = interval_secs, timeout_secs
        self._wake, self._stopping = threading.Event(), threading.Event()
        self.num_pulls = 0
        self.stamp = None  # of the weights assigned last

    def request(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stopping.is_set():
                return
            self.pull_once()

    def pull_once(self, log_failure: Callable = logging.warning):
        """One pull; returns the new weights' `Stamp` or None (nothing new, or failed:
        logged with `log_failure`)."""
        client = self._client()
        if client is None:
            return None
        try:
            pulled = weights.pull(client, self._variables, self._timeout, self.stamp)
        except weights.IncompatibleWeights:
            raise
        except Exception as error:  # pylint: disable=broad-except
            log_failure("Pulling weights failed: %s", error)
            return None
        self._on_contact()
        if pulled is not None:
            self._version.assign(pulled.version)
            self.stamp = pulled
            self.num_pulls += 1
        return pulled


@gin.configurable(module="alf_async")
class ActorProcess:
    """Collects experience for the learner at `server` as actor task `task`.

    It runs the `LocalCollection` of the shared gin configuration (its env
    and actor threads, with the driver's sizes) under a `Collector`, waits
    for the learner's first weights, then sends every unroll, stamped with
    the policy version that acted, to the 'unrolls' table. A full table makes it wait (the learner sets the pace); a server
    that stops answering for `server_timeout_secs` ends it (`LearnerGone`).

    Thread-safety: `run()` is called once, from one thread.
    """

    _FLUSH_MS = 200  # longest a write waits before checking for a stop
    _PULL_TIMEOUT_SECS = 2.0  # longest a weight pull waits for the server
    _RECONNECT_POLL_SECS = 0.2  # between tries of a fresh connection
    _CLEAN_UP_SECS = 10.0  # longest the clean-up after the learner is gone may take

    def __init__(self, server: str, task: int, algorithm_class: Callable,
                 sizes: DriverSizes,
                 seed: Optional[int] = None,
                 pull_interval_secs: float = 1.0,
                 pull_every_unrolls: int = 0,
                 server_timeout_secs: float = 30.0,
                 connect_timeout_secs: float = 300.0,
                 env_factory: Optional[Callable] = None,
                 should_stop: Callable[[], bool] = lambda: False,
                 ends_process: bool = False, root_dir: Optional[str] = None):
        """
        Args:
            server: `HOST:PORT` of the learner's Reverb server.
            task: this process's index, `0 ... ReverbService.max_actors - 1`.
            algorithm_class: the learner's (`RunSettings.algorithm_class`).
            sizes: the learner's `DriverSizes` (its E, N, T, A: this
                process collects as the learner would; Q is the learner's).
            seed: seeds this process's envs and TensorFlow (None: random).
            pull_interval_secs: seconds between weight pulls.
            pull_every_unrolls: also pull after this many unrolls (0: never).
            server_timeout_secs: how long the server may stay unreachable
                while training before the process ends.
            connect_timeout_secs: how long to wait for the learner's first
                weights (the learner may still be starting).
            env_factory: `env_id -> batched env`; None: `create_environment`
                seeded per task and env.
            should_stop: polled while waiting for the first weights; True
                ends the wait (`StoppedBeforeStart`).
            ends_process: the actor command's: a learner silent past the
                timeouts (plus a grace) ends the process, whatever call it
                is blocked in (`LearnerWatch`).
            root_dir: the learner's, whose `run_secret` file the unrolls carry
                (read once the first weights came: the learner made it by
                then); `ALF_ASYNC_RUN_SECRET` instead where set.

        Raises:
            ValueError: a bad `task`, weights that do not fit the algorithm, or no
                run secret.
            LearnerGone: no weights within `connect_timeout_secs`.
            StoppedBeforeStart: `should_stop()` while waiting for them.
        """
        if not isinstance(task, int) or task < 0:
            raise ValueError(f"--task must be an integer >= 0, got {task!r}")
        self._reverb = import_reverb("python -m alf_async.actor")
        self.server, self.task = server, task
        self._client = self._reverb.Client(server)
        self._server_timeout = server_timeout_secs
        self._pull_every = pull_every_unrolls
        env_factory = env_factory or self._seeded_envs(seed)
        with first_env(env_factory) as env:
            algorithm = algorithm_class(env.time_step_spec(), env.action_spec())
        version = tf.Variable(-1, dtype=tf.int64, trainable=False)
        self.watch = LearnerWatch(f"Actor task {task}, learner at {server}",
                                  server_timeout_secs, connect_timeout_secs,
                                  ends_process=ends_process)
        self.puller = WeightsPuller(lambda: self._client, algorithm.variables, version,
                                    pull_interval_secs, self._PULL_TIMEOUT_SECS,
                                    on_contact=self.watch.contact)
        self.watch.arm()
        try:
            self._await_first_weights(should_stop)
        finally:
            self.watch.disarm()
        self._secret = run_secret.for_actor(root_dir)
        collection = local_collection(env_factory, algorithm, version, sizes, task)
        # Every env of its own: `EpisodeStats.counted_envs` names the learner's env ids.
        stats = EpisodeStats(collection.num_streams, collection.batch_size, counted_envs=None)
        self.collector = Collector(collection, learn_queue_cap=1, stats=stats)
        self._writer = self._client.trajectory_writer(num_keep_alive_refs=1)
        self.unrolls_sent = 0
        self._incarnation = random.randrange(2**62)  # this process, apart from a restart

    def _seeded_envs(self, seed: Optional[int]) -> Callable:
        """`create_environment` with seeds apart from every other task's (and TF seeded)."""
        if seed is None:
            return lambda i: create_environment(seed=None)
        tf.random.set_seed(seed + 7919 * self.task)
        return lambda i: create_environment(seed=seed + 1000 * i + 100_000 * (self.task + 1))

    def _await_first_weights(self, should_stop: Callable[[], bool]) -> None:
        """Pulls until the first weights come; `connect_timeout_secs` bounds the wait for
        a first answer, `server_timeout_secs` a silence after one."""
        limit = self.watch.limit()
        logging.info("Actor task %d: waiting %s for the learner's weights at %s", self.task,
                     "as long as it takes" if limit >= NO_LIMIT_SECS else f"up to {limit:.0f} s",
                     self.server)
        while self.watch.silence() <= self.watch.limit():
            if should_stop():
                raise StoppedBeforeStart(f"actor task {self.task}: stopped before any weights")
            pulled = self.puller.pull_once(log_failure=logging.debug)  # not up yet: normal
            if pulled is not None:
                if self.task >= pulled.max_actors:
                    raise ValueError(f"--task={self.task} must be < the learner's "
                                     f"ReverbService.max_actors={pulled.max_actors}")
                logging.info("Actor task %d: weights of update %d from %s", self.task,
                             pulled.version, self.server)
                return
            time.sleep(1.0)
        if self.watch.last_contact is not None:
            raise LearnerGone(f"the learner at {self.server} has not answered for "
                              f"{self.watch.limit():.0f} s (stopped or failed)")
        raise LearnerNeverAnswered(
            f"no weights from a learner at --server={self.server} within "
            f"{self.watch.limit():.0f} s (is `alf_async.train --serve_port` running there, "
            f"and reachable?)")

    def run(self, should_stop: Callable[[], bool]) -> int:
        """Collects until `should_stop()` or the learner is gone; returns unrolls sent.

        Raises:
            LearnerGone: the server stopped answering.
            ThreadError: an env or actor thread failed (names it).
            ValueError: the unrolls do not fit the learner's table.
        """
        self.collector.start()
        self.puller.start()
        self.watch.arm()
        try:
            while not should_stop():
                self._send(self.collector.take(1))
                if not self._flush(should_stop):
                    break
                self.unrolls_sent += 1
                if self._pull_every and self.unrolls_sent % self._pull_every == 0:
                    self.puller.request()
        except LearnerGone as gone:
            logging.error("Actor task %d exits after %d unrolls: %s", self.task,
                          self.unrolls_sent, gone)
            self.watch.end_within(self._CLEAN_UP_SECS)  # a starved clean-up is cut short
            raise
        finally:
            self.watch.disarm()
            self.puller.stop()
            try:
                self.collector.stop(AsyncOffPolicyDriver.STOP_GRACE_SECS)
            finally:
                self.collector.collection.close()
            if self._writer is not None:
                self._writer.close()
            # A pull in flight ends within its timeout; exiting while Reverb's
            # threads run would abort the process.
            self.puller.join(timeout=self._PULL_TIMEOUT_SECS + 1)
        return self.unrolls_sent

    def _send(self, unrolls: Unroll) -> None:
        """Queues the item of the one unroll of `[1, T, B, ...]` leaves (its env id
        made global)."""
        unroll = tf.nest.map_structure(lambda x: x[0], unrolls)
        unroll = unroll._replace(
            env_id=unroll.env_id + self.task * self.collector.collection.num_envs)
        self._writer.append(tf.nest.map_structure(
            lambda x: np.asarray(x), RemoteUnroll(
                unroll, np.int32(self.task), np.int64(self._incarnation),
                np.int64(self.unrolls_sent), np.int64(self._secret))))
        try:
            self._writer.create_item(UNROLLS, 1.0, tf.nest.map_structure(
                lambda column: column[-1], self._writer.history))
        except ValueError as error:
            raise ValueError(f"this actor's unrolls do not fit the learner's table (start "
                             f"it with the learner's --gin_file and --gin_param): "
                             f"{str(error).splitlines()[0]}") from None

    def _flush(self, should_stop: Callable[[], bool]) -> bool:
        """Waits until the server took the unroll; False if stopped meanwhile.

        A server that stopped answering is waited for with fresh connections
        (`_reconnect`); the unroll in flight is then lost.
        """
        last_contact = time.monotonic()
        while not should_stop():
            try:
                self._writer.flush(timeout_ms=self._FLUSH_MS)
                self.watch.contact()
                return True
            except (self._reverb.errors.DeadlineExceededError, RuntimeError):
                pass
            if self._reachable():  # a full queue: the learner sets the pace
                self.watch.contact()
                last_contact = time.monotonic()
            elif not self._reconnect(should_stop, last_contact):
                return False
        return False

    def _reconnect(self, should_stop: Callable[[], bool], last_contact: float) -> bool:
        """Drops every connection to the server, then tries fresh ones until it
        answers (True: a new client and writer) or `should_stop()` (False).

        A connection kept open to a server that went away retries only on
        gRPC's backoff (seconds after a restarted learner is back); a fresh one
        connects at once.

        Raises:
            LearnerGone: no answer `server_timeout_secs` after `last_contact`.
        """
        self._client = self._writer = None  # the puller's too: it reads `_client`
        while not should_stop():
            if time.monotonic() - last_contact > self._server_timeout:
                raise LearnerGone(f"the learner at {self.server} has not answered for "
                                  f"{self._server_timeout:.0f} s (stopped or failed)")
            client = self._reverb.Client(self.server)
            try:
                client.server_info(timeout=1)
            except Exception:  # pylint: disable=broad-except  # not back yet
                del client
                time.sleep(self._RECONNECT_POLL_SECS)
                continue
            self.watch.contact()
            self._client = client
            self._writer = client.trajectory_writer(num_keep_alive_refs=1)
            logging.info("Actor task %d: reconnected to the learner at %s", self.task,
                         self.server)
            return True
        return False

    def _reachable(self) -> bool:
        try:
            self._client.server_info(timeout=1)
            return True
        except Exception:  # pylint: disable=broad-except
            return False
