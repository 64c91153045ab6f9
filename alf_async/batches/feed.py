"""`LearnFeed`: the learner's end of the driver, where learn batches are taken."""

from typing import Callable

import gin

from alf_async.errors import (DriverStopped, LearnerStarvedError, StarvationWatchdog,
                              ThreadError)
from alf_async.experience import LearnBatch
from alf_async.collection.driver_thread import DriverThread


@gin.configurable(module="alf_async")
class LearnFeed:
    """Takes learn batches from a batch source, bounded by the starvation watchdog.

    What a `LearnerLoop` needs of the driver, and nothing else: batches, the
    errors they end with, a coordinator for its prefetch thread and the
    learn-queue depth. The driver's `get_training_exps()` is `take()`.

    Thread-safety: `take()` and `raise_stopped()` are called by the consumer
    (the trainer's thread); `next()` by one thread at a time (the consumer
    or the prefetch thread); `close()` by the thread that stops the driver.
    """

    def __init__(self, collector, batches, diagnose: Callable[[], str],
                 prefetch_allowed: bool = True, learner_queue_timeout: float = 300.0):
        """
        Args:
            collector: the `Collector` whose coordinator and learn queue the
                batches come through.
            batches: the learn-batch source (a `contract.BatchSource`).
            diagnose: `() -> str`, the driver's line on every stage.
            prefetch_allowed: whether batches may be fetched ahead of the
                update that uses them (not in deterministic mode: collection
                must not overlap an update).
            learner_queue_timeout: seconds a batch may take before the run
                fails with the diagnosis of the pipeline (gin).
        """
        self._collector = collector
        self._batches = batches
        self._watchdog = StarvationWatchdog(learner_queue_timeout, collector.fail, diagnose)
        self.prefetch_allowed = prefetch_allowed
        self.error_seen = False  # the consumer was given the first thread error
        self.closed = False

    def take(self) -> LearnBatch:
        """`next()` for the consumer: an error it raises counts as seen (`stop()`
        does not raise it again)."""
        try:
            return self.next()
        except (ThreadError, LearnerStarvedError, RuntimeError):
            self.error_seen = True
            raise

    def next(self, updates_ahead: int = 0) -> LearnBatch:
        """Waits for the next learn batch (leaves `[Q', T', B', ...]`), marked with
        the per-item terms its source wants back (`wants_back`).

        Args:
            updates_ahead: how many learner updates later the batch will be
                trained on (`FreshBatches` counts `max_policy_lag` at that
                update).

        Raises:
            ThreadError: a thread failed (names the thread).
            LearnerStarvedError: no batch within the timeout.
            RuntimeError: closed (the driver was stopped).
        """
        if self.closed:
            raise DriverStopped()
        with self._watchdog.guard():
            batch = self._batches.next(updates_ahead)
        if batch is None:
            self._collector.raise_stopped()
        return batch._replace(wants_back=self._batches.wants_back)

    def after_update(self, batch, per_item) -> None:
        """Hands the batch source what the learner found on `batch`, per item
        (`BatchSource.after_update`: prioritized replay writes priorities)."""
        self._batches.after_update(batch, per_item)

    def raise_stopped(self) -> None:
        """Raises the first thread error, or RuntimeError: the driver was stopped."""
        self.error_seen = True
        self._collector.raise_stopped()

    def start_thread(self, make: Callable) -> DriverThread:
        """`Collector.start_thread`: a thread that takes learn batches (the
        learner loop's prefetch thread), stopped, failed and joined with the driver's."""
        return self._collector.start_thread(make)

    def queue_size(self) -> int:
        """Unrolls waiting on the learn queue; 0 where the source learns from no env
        step (offline: nothing takes from it, and the read is a TF op per update)."""
        if not self._batches.learns_from_env:
            return 0
        return int(self._collector.queues.learn_queue.size())

    def close(self) -> None:
        """Makes every later `next()` raise RuntimeError."""
        self.closed = True
