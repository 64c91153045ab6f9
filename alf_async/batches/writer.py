"""`ReplayWriterThread`: moves unrolls from the learn queue into a replay buffer."""

import tensorflow as tf

from alf_async.collection.driver_thread import DriverThread, to_numpy
from alf_async.collection.queues import TFQueues


class ReplayWriterThread(DriverThread):
    """Moves unrolls from the learn queue into a `ReplayBuffer`.

    Its insert waits while the learner lags behind the replay ratio; the
    learn queue then fills and the env threads wait behind it, so that
    collection runs at the pace the ratio allows.
    """

    def __init__(self, name: str, coord: tf.train.Coordinator, queues: TFQueues, replay):
        super().__init__(name, coord, queues.close_all)
        self._learn_queue = queues.learn_queue
        self._replay = replay

    def _step(self) -> None:
        unroll = to_numpy(self._learn_queue.dequeue())
        self._replay.insert(unroll, self._coord.should_stop)
