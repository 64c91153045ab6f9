"""`Collector`: a collection's threads and the log thread, under one coordinator."""

import logging
import time
from typing import Callable, Optional, Sequence

import tensorflow as tf
from tf_agents.metrics import tf_metric

from alf_async.errors import QUEUE_CLOSED, DriverStopped, ThreadError, stop_with_error
from alf_async.metrics import EpisodeStats, StepMetrics
from alf_async.collection.queues import TFQueues
from alf_async.collection.driver_thread import DriverThread, to_numpy, where_threads_are
from alf_async.experience import LogRecord, unroll_trajectory


class LogThread(DriverThread):
    """Turns the log queue's records into `EpisodeStats`, observer calls and metrics.

    With observers, metrics or a recorder the records are whole unrolls: the
    recorder gets the numpy `Unroll`, each observer the unroll's `[B, T]`
    tf-agents `Trajectory` (`experience.unroll_trajectory`), then the
    `StepMetrics` are updated.
    """

    def __init__(self, name: str, coord: tf.train.Coordinator, queues: TFQueues,
                 stats: EpisodeStats, observers: Sequence[Callable] = (),
                 metrics: Optional[StepMetrics] = None, recorder=None):
        super().__init__(name, coord, queues.close_all)
        self._queues = queues
        self.stats = stats
        self._observers = list(observers)
        self._metrics = metrics
        self._recorder = recorder

    def _step(self) -> None:
        record = to_numpy(self._queues.log_queue.dequeue())
        if self._recorder is not None:
            self._recorder.add(record)
        if self._queues.logs_unrolls:
            if self._observers or self._metrics is not None:  # a recorder alone needs none
                trajectory = unroll_trajectory(record)
                for observer in self._observers:
                    observer(trajectory)
                if self._metrics is not None:
                    self._metrics(trajectory, record.env_id)
            time_step = record.experience.time_step
            record = LogRecord(time_step.reward, time_step.step_type, record.env_id)
        self.stats.update(record.reward, record.step_type, int(record.env_id))


class Collector:
    """Runs a collection (`LocalCollection` or `RemoteCollection`) and a log thread.

    Unrolls (`[T, B, ...]` leaves) arrive on `queues.learn_queue`, of capacity
    `learn_queue_cap`; `take(n)` removes `n` of them. Every unroll's rewards
    and step types also reach the log thread, which keeps `stats` (and feeds
    observers and metrics). The actor process uses a collector alone; the
    `AsyncOffPolicyDriver` puts a learn-batch source behind one.

    Thread-safety: `start()`, `stop()` and `close()` are called by one
    thread; `take()` by one consumer thread at a time; any thread may read
    `stats` and `metrics`.
    """

    def __init__(self, collection, learn_queue_cap: int, observers: Sequence[Callable] = (),
                 permits_per_env: int = 0, stats: Optional[EpisodeStats] = None,
                 recorder=None):
        """
        Args:
            collection: gives `specs`, `queue_sizes()`, `threads(coord,
                queues)`, `num_streams`, `batch_size` and `close()`.
            learn_queue_cap: Q, capacity of the learn queue.
            observers: as tf-agents drivers take them: callables, each called
                in the log thread with every unroll as a `Trajectory` (leaves
                `[B, T, ...]`), and tf-agents step metrics of all streams'
                sub-envs (`batch_size = num_streams * B`), fed through a
                `StepMetrics` (each stream its own columns).
            permits_per_env: deterministic mode: unroll permits per env.
            stats: the episode statistics the log thread keeps (None: an
                `EpisodeStats` of every stream, as gin configures it).
            recorder: `add(numpy Unroll)`, called in the log thread with every
                unroll, and `close()` (`close_recorder()`); None: nothing records.
        """
        metrics = [o for o in observers if isinstance(o, tf_metric.TFStepMetric)]
        observers = [o for o in observers if not isinstance(o, tf_metric.TFStepMetric)]
        request, reply, unroll, log = collection.specs
        streams, batch_size = collection.num_streams, collection.batch_size
        self.collection = collection
        self.metrics = StepMetrics(metrics, streams, batch_size) if metrics else None
        self.stats = stats if stats is not None else EpisodeStats(streams, batch_size)
        self.queues = TFQueues(**collection.queue_sizes(), learn_queue_cap=learn_queue_cap,
                               request_spec=request, reply_spec=reply, unroll_spec=unroll,
                               log_spec=unroll if observers or metrics or recorder else log,
                               permits_per_env=permits_per_env)
        self.coord = tf.train.Coordinator()
        self.threads = [*collection.threads(self.coord, self.queues),
                        LogThread("LogThread", self.coord, self.queues, self.stats,
                                  observers, self.metrics, recorder)]
        self._recorder = recorder
        self.compile_seconds = {}  # thread name -> seconds its prepare() took
        self._others = []  # threads of others (a batch source's, a prefetch thread)
        self._started = False
        self._collecting = False  # whether start() started the collection's threads

    def start(self, more: Sequence[DriverThread] = (), collect: bool = True) -> None:
        """Compiles every thread's TF functions (its own and `more`), then starts them.

        Args:
            more: threads of others (a batch source's), started and joined with these.
            collect: False: only `more` start; no env is stepped (an offline run,
                whose learn batches come from a dataset).

        Raises:
            ThreadError: a thread's function failed to compile (names the
                thread); no thread was started.
        """
        self._others.extend(more)
        self._collecting = collect
        threads = [*self.threads, *more] if collect else list(more)
        for thread in threads:
            start = time.perf_counter()
            try:
                thread.prepare()
            except Exception as error:
                raise ThreadError(
                    f"{thread.name} failed: {type(error).__name__}: {error}") from error
            self.compile_seconds[thread.name] = time.perf_counter() - start
        self._started = True
        for thread in threads:
            thread.start()

    def take(self, n: int):
        """`n` unrolls from the learn queue: leaves `[n, T, B, ...]`.

        Raises:
            ThreadError: a thread failed (names it).
            RuntimeError: stopped.
        """
        try:
            return self.queues.learn_queue.dequeue_many(n)
        except QUEUE_CLOSED:
            self.raise_stopped()

    def start_thread(self, make: Callable) -> DriverThread:
        """Starts `make(coordinator, close_queues)`, a thread that `stop()` joins.

        For threads of others that take learn batches (the learner loop's
        prefetch thread): they stop, fail and are joined like the collector's.
        """
        thread = make(self.coord, self.queues.close_all)
        self._others.append(thread)
        thread.start()
        return thread

    def fail(self, error: BaseException) -> None:
        """Stops every thread with `error`, the one `raise_stopped()` raises if first."""
        stop_with_error(self.coord, self.queues.close_all, error)

    def raise_stopped(self) -> None:
        """Raises the first thread error, or RuntimeError: stopped."""
        self.coord.raise_requested_exception()
        raise DriverStopped()

    def stop(self, grace_secs: float, error_seen: bool = False) -> None:
        """Stops every thread and joins them (its own that it joins, and the others').

        Re-raises the first thread error unless `error_seen`. Safe before
        `start()`.
        """
        self.coord.request_stop()
        self.queues.close_all()
        if not self._started:
            return
        own = [] if self.collection.joins_own_threads else self.threads[:-1]
        joined = [*own, self.threads[-1]] if self._collecting else []
        joined += self._others
        try:
            self.coord.join(joined, stop_grace_period_secs=grace_secs)
        except Exception:
            if not error_seen:
                raise
            logging.debug("Thread error already raised by get_training_exps()")
        finally:
            self._report_stragglers(joined, grace_secs)

    def close_recorder(self) -> None:
        """Gives the recorder the unrolls still on the log queue, then closes it (once
        the log thread stopped, so that the last episodes collected are kept);
        idempotent."""
        recorder, self._recorder = self._recorder, None
        if recorder is None:
            return
        log_queue = self.queues.log_queue
        while int(log_queue.size()) > 0:  # closed: what it holds can still be taken
            recorder.add(to_numpy(log_queue.dequeue()))
        recorder.close()

    @staticmethod
    def _report_stragglers(threads: Sequence[DriverThread], grace_secs: float) -> None:
        """Logs where each thread that outlived the stop's grace is (its Python stack)."""
        late = [t.name for t in threads if t.is_alive()]
        if late:
            logging.error("%s still running %.1f s after the stop; where they are:\n%s",
                          ", ".join(late), grace_secs, where_threads_are(threads))
