"""The learner's iteration: fetch a learn batch, place it on the devices, update.

`LearnerLoop.step()` is one iteration. With `prefetch_depth > 0` a
`PrefetchThread` fetches and places the next batches while the learner trains
on the current one, so that placement overlaps the update. The loop's
`StageClock` holds the timing the trainer writes as `learner/*`.
"""

import queue
import time
from typing import Callable, Optional

import gin
import numpy as np

from alf_async.metrics import StageClock
from alf_async.collection.driver_thread import DriverThread
from alf_async.learning.stall_watch import StallWatch


class PrefetchThread(DriverThread):
    """Takes learn batches and places them on the learner's devices ahead of use.

    While the learner trains on batch k, this thread dequeues batch k+1 (and
    up to `depth` batches in all) and copies it onto the replicas, so that
    the learner finds it ready.

    Thread-safety: `get()` is called by one consumer thread.
    """

    _POLL_SECS = 0.05  # how often a blocked put or get checks for a stop

    def __init__(self, name: str, coord, close_queues: Callable[[], None],
                 fetch: Callable, place: Callable, depth: int, on_load: Callable):
        """
        Args:
            fetch: `() -> LearnBatch`, blocks until a batch is there.
            place: `LearnBatch -> DeviceBatch`.
            depth: most placed batches waiting for the learner.
            on_load: `seconds -> None`, told how long each `place` took.
        """
        super().__init__(name, coord, close_queues)
        self._fetch = fetch
        self._place = place
        self._on_load = on_load
        self._ready = queue.Queue(maxsize=depth)

    def _step(self) -> None:
        batch = self._fetch()
        start = time.perf_counter()
        placed = self._place(batch)
        self._on_load(time.perf_counter() - start)
        while not self._coord.should_stop():
            try:
                self._ready.put(placed, timeout=self._POLL_SECS)
                return
            except queue.Full:
                pass

    def get(self):
        """The next placed batch; None once a stop was requested."""
        while True:
            try:
                return self._ready.get(timeout=self._POLL_SECS)
            except queue.Empty:
                if self._coord.should_stop():
                    return None


@gin.configurable(module="alf_async")
class LearnerLoop:
    """Feeds a `Learner` with the learn batches of a driver's `LearnFeed`.

    The trainer calls `step()` (and attaches the loop to the driver, whose
    `run_async()`, ALF's name, is then `step()`). The driver needs the
    learner's `train_step` only (the policy version it stamps on
    experience); everything else about learning is here.

    Thread-safety: `step()` is called from one thread (the trainer's); the
    prefetch thread it starts calls the feed's `next()` and the learner's
    `place()`.
    """

    def __init__(self, learner, feed, prefetch_depth: int = 1,
                 stall_warning_secs: Optional[float] = 5.0, stacks_dir: Optional[str] = None,
                 diagnose: Callable[[], str] = lambda: ""):
        """
        Args:
            learner: provides `place(LearnBatch) -> DeviceBatch` and
                `update(DeviceBatch, clock) -> Update`.
            feed: the driver's `LearnFeed` (`driver.feed`).
            prefetch_depth: learn batches dequeued and placed on the
                learner's devices ahead of the update that uses them (0:
                fetch each batch when it is needed). Deterministic drivers
                do not prefetch (collection must not overlap an update).
            stall_warning_secs: a wait for a learn batch this long logs one
                warning and writes every thread's stack (`StallWatch`; None
                or 0: never).
            stacks_dir: where those stacks go (the run's `stalls/`).
            diagnose: the pipeline's state, for that warning (the driver's
                `diagnose()`).
        """
        if not isinstance(prefetch_depth, (int, np.integer)) or prefetch_depth < 0:
            raise ValueError(f"LearnerLoop.prefetch_depth must be an integer >= 0, "
                             f"got {prefetch_depth!r}")
        self._learner = learner
        self._feed = feed
        self.prefetch_depth = prefetch_depth if feed.prefetch_allowed else 0
        self._prefetcher = None  # started by the first step()
        self.clock = StageClock()
        self.stall_watch = StallWatch(stall_warning_secs, stacks_dir, diagnose)

    def step(self) -> int:
        """Trains the learner on one learn batch; returns its env steps.

        Then hands the feed what the update found per item (`after_update`:
        prioritized replay's new priorities).

        Times the wait for the batch (`dequeue_wait`), its placement on the
        devices (`load`, overlapped when prefetching), the update (`grad`)
        and the hand-back (`after_update`) in `self.clock`, and samples the
        learn-queue depth.

        Raises:
            ThreadError, LearnerStarvedError, RuntimeError: as the feed's
                `next()`.
        """
        self.clock.observe("learn_queue_depth", self._feed.queue_size())
        start = time.perf_counter()
        if self.prefetch_depth:
            with self.stall_watch.guard("a learn batch (prefetched)"):
                placed = self._next_prefetched()
            self.clock.add("dequeue_wait", time.perf_counter() - start)
        else:
            with self.stall_watch.guard("a learn batch"):
                batch = self._feed.take()
            fetched = time.perf_counter()
            self.clock.add("dequeue_wait", fetched - start)
            placed = self._learner.place(batch)
            self.clock.add("load", time.perf_counter() - fetched)
        update = self._learner.update(placed, self.clock)
        start = time.perf_counter()
        self._feed.after_update(placed, update.per_item)
        self.clock.add("after_update", time.perf_counter() - start)
        self.clock.tick()
        return placed.env_steps

    def _next_prefetched(self):
        if self._prefetcher is None:
            # A prefetched batch is trained on up to `depth` updates later:
            # the batch source counts its policy lag at that update.
            fetch = lambda: self._feed.next(updates_ahead=self.prefetch_depth)
            self._prefetcher = self._feed.start_thread(
                lambda coord, close: PrefetchThread(
                    "PrefetchThread", coord, close, fetch, self._learner.place,
                    self.prefetch_depth, lambda seconds: self.clock.add("load", seconds)))
        placed = self._prefetcher.get()
        if placed is None:
            self._feed.raise_stopped()
        return placed
