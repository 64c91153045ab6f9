"""TF queues that carry nested structures between the driver's threads.

The blocking queue ops run inside TensorFlow's runtime without holding the
Python GIL, so an env thread waiting for an action, an actor waiting for
requests and the learner waiting for experience never stall one another.
"""

from typing import Any, List, Optional, Sequence

import tensorflow as tf

from alf_async.experience import LogRecord, Unroll

Nest = Any


class NestFIFOQueue:
    """A `tf.queue.FIFOQueue` whose elements are nests of tensors.

    The queue is described by a nest of `tf.TensorSpec`s; every element is a
    nest of the same structure whose leaves have those shapes and dtypes.
    Leaves of a batched dequeue gain a leading axis.

    The methods work eagerly and inside `tf.function`s.

    Thread-safety: all methods may be called from any thread at the same
    time; blocking calls return with `tf.errors.OutOfRangeError` (dequeue)
    or `tf.errors.CancelledError` (enqueue) once the queue is closed.
    """

    def __init__(self, capacity: int, spec: Nest, name: str = "queue"):
        """
        Args:
            capacity: maximum number of elements the queue holds.
            spec: nest of `tf.TensorSpec` describing one element. It may be a
                single spec or contain empty tuples; it must have a leaf.
            name: name of the queue, used in error messages.
        """
        leaves = tf.nest.flatten(spec)
        if not leaves:
            raise ValueError(f"Queue '{name}' needs at least one tensor in its spec.")
        self._spec = spec
        self._capacity = capacity
        self._queue = tf.queue.FIFOQueue(
            capacity,
            dtypes=[s.dtype for s in leaves],
            shapes=[s.shape for s in leaves],
            name=name)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def spec(self) -> Nest:
        """The nest of `tf.TensorSpec` of one element."""
        return self._spec

    def enqueue(self, element: Nest) -> Optional[tf.Operation]:
        """Adds one element, blocking while the queue is full.

        Returns the enqueue op inside a `tf.function` (for control
        dependencies), None when run eagerly.
        """
        return self._queue.enqueue(tf.nest.flatten(element))

    def dequeue(self) -> Nest:
        """Removes one element, blocking while the queue is empty."""
        return self._pack(self._queue.dequeue())

    def dequeue_many(self, n) -> Nest:
        """Removes exactly `n` (int or scalar tensor) elements; leaves `[n, ...]`."""
        return self._pack(self._queue.dequeue_many(n))

    def dequeue_all(self) -> Nest:
        """Removes `capacity` elements; leaves are shaped `[capacity, ...]`."""
        return self.dequeue_many(self._capacity)

    def size(self) -> tf.Tensor:
        """Number of elements in the queue now (an int32 scalar tensor)."""
        return self._queue.size()

    def close(self, cancel_pending_enqueues: bool = True) -> None:
        """Closes the queue, waking up every blocked caller."""
        self._queue.close(cancel_pending_enqueues=cancel_pending_enqueues)

    def _pack(self, tensors) -> Nest:
        return tf.nest.pack_sequence_as(self._spec, tf.nest.flatten(tensors))


class TFQueues:
    """All queues of one `AsyncOffPolicyDriver`.

    - `actor_queues[a]`: requests `ActRequest` (`[B, ...]` leaves) from the
      envs served by actor `a`; env `i` uses actor queue `i % num_actor_queues`.
    - `action_return_queues[i]`: replies `ActReply` for env `i` (capacity 1,
      an env has at most one request outstanding).
    - `learn_queue`: `Unroll`s (`[T, B, ...]` leaves), capacity
      `learn_queue_cap`.
    - `log_queue`: `LogRecord`s (`[T, B]` leaves) for the log thread, or whole
      `Unroll`s where observers or metrics need them.
    - `unroll_permits[i]` (deterministic mode only): scalar tokens; env `i`
      takes one before each unroll, so the driver decides when envs run.

    Thread-safety: `close_all()` may be called from any thread, any number of
    times; it unblocks every thread waiting on any of the queues.
    """

    def __init__(self, num_envs: int, num_actor_queues: int, actor_queue_cap: int,
                 learn_queue_cap: int, request_spec: Nest, reply_spec: Nest,
                 unroll_spec: Nest, log_spec: Nest, permits_per_env: int = 0):
        self.actor_queues: List[NestFIFOQueue] = [
            NestFIFOQueue(actor_queue_cap, request_spec, name=f"actor_queue{a}")
            for a in range(num_actor_queues)
        ]
        self.action_return_queues: List[NestFIFOQueue] = [
            NestFIFOQueue(1, reply_spec, name=f"action_return_queue{i}")
            for i in range(num_envs if num_actor_queues else 0)
        ]
        self.learn_queue = NestFIFOQueue(learn_queue_cap, unroll_spec, name="learn_queue")
        # A few records per env so that logging never throttles the envs (and
        # a few with no local env: a remote learner's reader fills it).
        self.log_queue = NestFIFOQueue(max(4 * num_envs, 8), log_spec, name="log_queue")
        self.logs_unrolls = isinstance(log_spec, Unroll)  # observers or metrics need them
        self.unroll_permits: List[NestFIFOQueue] = [
            NestFIFOQueue(permits_per_env, tf.TensorSpec([], tf.int32),
                          name=f"unroll_permits{i}")
            for i in range(num_envs if permits_per_env else 0)
        ]

    def log(self, unroll: Unroll) -> None:
        """Puts `unroll` on the log queue: whole where observers or metrics need it,
        else the `LogRecord` the episode statistics read."""
        time_step = unroll.experience.time_step
        self.log_queue.enqueue(unroll if self.logs_unrolls else LogRecord(
            time_step.reward, time_step.step_type, unroll.env_id))

    def all_queues(self) -> Sequence[NestFIFOQueue]:
        return [*self.actor_queues, *self.action_return_queues, self.learn_queue,
                self.log_queue, *self.unroll_permits]

    def close_all(self) -> None:
        for queue in self.all_queues():
            queue.close(cancel_pending_enqueues=True)
