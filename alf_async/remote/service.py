"""The learner's side of remote collection: Reverb server, unroll reader, weights publisher."""

import random
import threading
import time
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from alf_async import events, quiet
from alf_async.experience import Unroll
from alf_async.collection.queues import TFQueues
from alf_async.remote import run_secret, weights
from alf_async.extras import import_reverb, trajectory_dataset
from alf_async.collection.driver_thread import DriverThread

UNROLLS = "unrolls"
STOP_TASK = -1  # the task of the item `ReverbService.close()` wakes the reader with


class RemoteUnroll(NamedTuple):
    """An item of the 'unrolls' table: an actor process's `[T, B]` unroll.

    `unroll.env_id` is global, `task * num_envs + local env thread`, so that
    every env thread of every actor process is one stream; `task` is the
    actor process's `--task`; `incarnation` (random, int64) tells a restarted
    process apart, and `sequence` counts its unrolls from 0, so that the
    learner sees an unroll delivered twice or lost; `secret` is the run's
    (`run_secret`): an item without it is refused.
    """
    unroll: Unroll
    task: Any
    incarnation: Any
    sequence: Any
    secret: Any


def remote_unroll_spec(unroll_spec: Unroll) -> RemoteUnroll:
    return RemoteUnroll(unroll_spec, tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int64),
                        tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int64))


class ActorRegistry:
    """When each actor process last delivered an unroll, how many it delivered, and
    which came twice or not at all (by each process incarnation's sequence numbers).

    Thread-safety: `seen()` is called by the reader thread; the readers from any.
    """

    def __init__(self, timeout_secs: float):
        self._timeout = timeout_secs
        self._lock = threading.Lock()
        self._last_seen: Dict[int, float] = {}
        self._unrolls: Dict[int, int] = {}
        self._sequences: Dict[tuple, int] = {}  # (task, incarnation) -> last sequence
        self.duplicated = 0  # unrolls delivered again
        self.missing = 0  # unrolls skipped within one incarnation
        self.refused = 0  # items without the run's secret

    def refuse(self, task: int) -> None:
        """Counts an item without the run's secret; the first logs one warning line."""
        with self._lock:
            self.refused += 1
            first = self.refused == 1
        if first:
            logging.warning("Refused an unroll without this run's secret (claimed actor task "
                            "%d): a client that is not one of the run's actors wrote to the "
                            "Reverb port; faults/refused_unrolls counts them", task)
        events.emit("unroll_refused", task=int(task), refused=self.refused)

    def seen(self, task: int, incarnation: int = 0, sequence: int = 0) -> None:
        with self._lock:
            self._last_seen[task] = time.monotonic()
            self._unrolls[task] = self._unrolls.get(task, 0) + 1
            # An incarnation first seen mid-way (this learner restarted, the actor
            # did not) counts from where it is.
            last = self._sequences.get((task, incarnation), sequence - 1)
            if sequence <= last:
                self.duplicated += 1
                logging.warning("Actor task %d delivered unroll %d again (after %d)", task,
                                sequence, last)
                events.emit("unroll_duplicated", task=int(task), unroll=int(sequence))
                return
            self.missing += sequence - last - 1
            self._sequences[task, incarnation] = sequence

    def alive(self) -> int:
        """Actor processes that delivered an unroll within the timeout."""
        now = time.monotonic()
        with self._lock:
            return sum(now - t <= self._timeout for t in self._last_seen.values())

    def unrolls(self, task: int) -> int:
        with self._lock:
            return self._unrolls.get(task, 0)

    def describe(self) -> str:
        now = time.monotonic()
        with self._lock:
            if not self._last_seen:
                return "no actor process has delivered an unroll"
            return "; ".join(f"actor task {task}: {self._unrolls[task]} unrolls, last "
                             f"{now - seen:.1f} s ago"
                             for task, seen in sorted(self._last_seen.items()))


class UnrollReaderThread(DriverThread):
    """Moves unrolls from the 'unrolls' table to the learn queue and the log queue.

    It stands in for local env threads: downstream of the learn queue
    (`get_training_exps`, replay, policy-lag checks, statistics) nothing changes.

    It reads through one sampler for its whole life, with one worker (a
    queue's order) and no timeout: a sampler made anew after every poll that
    found the queue empty left unrolls waiting in a full table for 3-20 s on
    a busy host, and lost the ones in flight. `ReverbService.close()` ends a
    read that waits by writing a `STOP_TASK` item.
    """

    def __init__(self, name: str, coord: tf.train.Coordinator, queues: TFQueues,
                 serve: Callable[[], str], registry: ActorRegistry, secret: int):
        """`serve() -> address` starts the server (at `prepare()`, with the driver);
        an item without `secret` is refused (`registry.refuse`)."""
        super().__init__(name, coord, queues.close_all)
        self._queues, self._secret = queues, secret
        self._registry = registry
        self._serve = serve
        self._dataset = self._samples = None
        self.samplers_opened = 0

    def prepare(self) -> None:
        """Starts the server and opens its 'unrolls' table."""
        self._dataset = trajectory_dataset(
            import_reverb("train --serve_port (remote actors)"), self._serve(), UNROLLS,
            max_in_flight_samples_per_worker=1, num_workers_per_iterator=1,
            rate_limiter_timeout_ms=-1)

    _OPEN_TRIES = 5
    _OPEN_RETRY_SECS = 0.2

    def _open_sampler(self):
        """`iter()` of the dataset; a first connection refused as unavailable is tried
        again (up to `_OPEN_TRIES` times): gRPC may hand it a channel of a server that
        stopped on the same port (a learner restarted in this process: "Socket closed")."""
        for attempt in range(1, self._OPEN_TRIES + 1):
            try:
                with quiet.native_stderr_held():  # Reverb: "... accessed directly without gRPC"
                    return iter(self._dataset)
            except tf.errors.UnavailableError:
                if attempt == self._OPEN_TRIES:
                    raise
                time.sleep(self._OPEN_RETRY_SECS)
        return None  # not reached

    def _step(self) -> None:
        if self._samples is None:
            self._samples = self._open_sampler()
            self.samplers_opened += 1
        try:
            item = next(self._samples).data
        except (StopIteration, tf.errors.OutOfRangeError):  # the server stopped
            self._samples = None
            return
        if int(item.secret) != self._secret:
            self._registry.refuse(int(item.task))
            return
        if int(item.task) == STOP_TASK:
            return  # `close()` woke it
        self._registry.seen(int(item.task), int(item.incarnation), int(item.sequence))
        unroll = item.unroll
        self._queues.learn_queue.enqueue(unroll)
        self._queues.log(unroll)

    def close_sampler(self) -> None:
        """Closes the sampler now (the thread has ended; `ReverbService` fed its reads
        ahead), not when the garbage collector finds it: its destructor waits for its
        worker while holding the GIL, which stalls every Python thread of the process."""
        self._samples = None


class WeightsPublisherThread(DriverThread):
    """Publishes the weights whenever the policy version has advanced by `interval`."""

    _POLL_SECS = 0.05

    def __init__(self, name: str, coord: tf.train.Coordinator, queues: TFQueues,
                 publish: Callable[[int], None], version: tf.Variable, interval: int):
        super().__init__(name, coord, queues.close_all)
        self._publish = publish
        self._version = version
        self._interval = interval
        self._published = 0

    def prepare(self) -> None:
        """Counts from the version the server published when it started."""
        self._published = int(self._version.numpy())

    def _step(self) -> None:
        if self._coord.wait_for_stop(self._POLL_SECS):
            return
        version = int(self._version.numpy())
        if version - self._published >= self._interval:
            self._publish(version)
            self._published = version


@gin.configurable(module="alf_async")
class ReverbService:
    """The Reverb server of a learner whose actors run in other processes.

    Its server starts with the driver (`threads()`), after a resumed learner
    restored its weights. It holds two tables: 'unrolls', a queue of
    `queue_capacity` unrolls that actor processes write to (a full queue
    makes their writes wait: the learner sets the pace), and 'weights', the
    newest variables and policy version, published when the server starts
    and every `publish_interval` updates. Its threads run under the
    driver's coordinator.

    The server listens on every interface of the host at `port`. An unroll
    without the run's `secret` (`run_secret`) is refused and counted.
    """

    # How long `close()` waits for its threads: within a SIGTERM's 5 s stop, with
    # the learner's checkpoint after it.
    _CLOSE_TIMEOUT_SECS = 1.5
    _WAKE_TIMEOUT_MS = 500  # longest the item that wakes the reader waits for room

    def __init__(self, unroll_spec: Unroll, variables: Sequence[tf.Variable],
                 version: tf.Variable, num_envs: int, secret: Optional[int] = None,
                 port: Optional[int] = None,
                 max_actors: int = 16,
                 queue_capacity: int = 8,
                 publish_interval: int = 1,
                 actor_timeout_secs: float = 30.0):
        """Checks the settings; the server starts with the driver (`threads()`).

        Args:
            unroll_spec: spec of one unroll (`[T, B, ...]` leaves).
            variables: the algorithm's variables, sent to the actors.
            version: the learner's update count (the policy version).
            num_envs: E, env threads per actor process.
            secret: the run's (`run_secret.for_learner`); every unroll must carry it
                (None: `ALF_ASYNC_RUN_SECRET`, else one only this process knows).
            port: where the server listens (None or 0: a free port).
            max_actors: actor tasks must be `0 ... max_actors - 1`.
            queue_capacity: unrolls the 'unrolls' table holds.
            publish_interval: learner updates between weight publications.
            actor_timeout_secs: an actor process that delivered no unroll
                for this long is not counted in `actors_alive()`.
        """
        for name, value in [("max_actors", max_actors), ("queue_capacity", queue_capacity),
                            ("publish_interval", publish_interval)]:
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ReverbService.{name} must be an integer >= 1, got {value!r}")
        self._reverb = import_reverb("train --serve_port (remote actors)")
        self._unroll_spec, self._queue_capacity = unroll_spec, queue_capacity
        self.port = port or None  # None: a free one, known once serving
        self.address: Optional[str] = None
        self._server = self._client = None
        self._variables, self._version = list(variables), version
        self.max_actors, self.num_envs = max_actors, num_envs
        self._publish_interval = publish_interval
        self.registry = ActorRegistry(actor_timeout_secs)
        self._threads = []
        self._learner_id = random.randrange(2**62)  # tells a restarted learner apart
        self._secret = run_secret.for_learner(None) if secret is None else secret

    def _serve(self) -> str:
        """Starts the server and publishes the weights as they are now (a resumed
        learner's restored ones: no actor ever acts on the weights before it).
        Returns its address."""
        reverb = self._reverb
        with quiet.native_stderr_held():  # Reverb: "Started replay server on port ..."
            self._server = reverb.Server(
                [reverb.Table.queue(UNROLLS, self._queue_capacity, signature=remote_unroll_spec(
                    self._unroll_spec)), weights.weights_table()], port=self.port)
        self.port = self._server.port
        self.address = f"127.0.0.1:{self.port}"
        self._client = reverb.Client(self.address)
        self.publish(int(self._version.numpy()))
        logging.info("Reverb server for remote actors listening on port %d", self.port)
        return self.address

    @property
    def num_streams(self) -> int:
        """Global env ids in use: `max_actors * num_envs`."""
        return self.max_actors * self.num_envs

    def publish(self, version: int) -> None:
        """Makes the current weights, stamped `version`, the actors' next pull."""
        weights.publish(self._client, self._variables,
                        weights.Stamp(self._learner_id, version, self.max_actors))

    def threads(self, coord: tf.train.Coordinator, queues: TFQueues):
        """The reader and publisher threads, for the driver to start (the reader's
        `prepare()` starts the server); `close()` joins them."""
        self._threads = [
            UnrollReaderThread("UnrollReaderThread", coord, queues, self._serve,
                               self.registry, self._secret),
            WeightsPublisherThread("WeightsPublisherThread", coord, queues, self.publish,
                                   self._version, self._publish_interval)]
        return self._threads

    def queued_unrolls(self) -> int:
        if self._client is None:
            return 0
        return int(self._client.server_info(timeout=5)[UNROLLS].current_size)

    def actors_alive(self) -> int:
        return self.registry.alive()

    def diagnose(self) -> str:
        return (f"remote actors on port {self.port}: {self.registry.describe()}; "
                f"{self.queued_unrolls()} unrolls in the Reverb queue")

    def _wake_reader(self) -> None:
        """Writes a `STOP_TASK` item, which ends a read waiting for an unroll that no
        actor will send (a full table means the reader is not waiting: given up)."""
        reader = next((t for t in self._threads if isinstance(t, UnrollReaderThread)), None)
        if reader is not None and reader.is_alive():
            self._write_stop_items(1)

    def _write_stop_items(self, count: int) -> None:
        if self._client is None:
            return
        zeros = tf.nest.map_structure(lambda s: np.zeros(s.shape, s.dtype.as_numpy_dtype),
                                      self._unroll_spec)
        writer = self._client.trajectory_writer(num_keep_alive_refs=1)
        try:
            for _ in range(count):
                writer.append(RemoteUnroll(zeros, np.int32(STOP_TASK), np.int64(0),
                                           np.int64(0), np.int64(self._secret)))
                writer.create_item(UNROLLS, 1.0, tf.nest.map_structure(
                    lambda column: column[-1], writer.history))
            writer.flush(timeout_ms=self._WAKE_TIMEOUT_MS)
        except Exception:  # pylint: disable=broad-except  # the join below tells
            pass
        finally:
            writer.close()

    def _release_samplers(self) -> None:
        """Drops the reader's sampler while the server still serves, its reads ahead
        fed with `STOP_TASK` items: they end at once. Dropped after the server
        stopped, its destructor waited for a read the server never answered, up
        to 35 s (the stalls at the end of training); dropped while a read waits
        on an empty table, ~2 s."""
        readers = [t for t in self._threads if isinstance(t, UnrollReaderThread)]
        if readers:
            self._write_stop_items(2)  # the read in flight, and one more ahead
        for reader in readers:
            reader.close_sampler()

    def close(self) -> None:
        """Joins the service's threads (their stop must be requested), then stops the
        server (if it started).

        A read in progress when the server stops would never return: a read
        waiting for an unroll is woken first (`_wake_reader`), and the server
        stays up until the threads are gone and the sampler is released.
        """
        self._wake_reader()
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(timeout=self._CLOSE_TIMEOUT_SECS)
        if any(thread.is_alive() for thread in self._threads):
            logging.warning("Reverb service threads still running after %.1f s; leaving the "
                            "server to the end of the process", self._CLOSE_TIMEOUT_SECS)
            return
        self._release_samplers()
        if self._server is not None:
            with quiet.native_stderr_held():  # Reverb: "Shutting down replay server"
                self._server.stop()
