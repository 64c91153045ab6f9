"""How collection is paced against learning: free-running, or in lockstep for reproducibility.

The driver picks one pace (`AsyncOffPolicyDriver.deterministic`) and hands the
same object to the collection (actor batching, seeds), the collector (unroll
permits), the learn-batch source (which unrolls make a batch, in which
order) and the learner loop (whether it may prefetch), instead of a flag
each of them tests.

- `FreeRunning` (the default): envs run ahead as far as the queues let them,
  actors serve whatever requests wait, batches keep arrival order, and the
  learner loop may prefetch.
- `Lockstep` (deterministic mode): every env is let run `Q / E` unrolls per
  learn batch (its permits), each actor waits for all of its envs and samples
  with seeds, batches are in env order, nothing is prefetched and TensorFlow
  ops reduce in a fixed order: the same seed gives the same losses.
"""

from typing import Callable, Optional, Sequence

import tensorflow as tf


class FreeRunning:
    """Collection runs ahead of learning as far as the queues allow.

    Attributes:
        permits_per_env: 0: envs need no permit to run an unroll.
        prefetch_allowed: the learner loop may fetch batches ahead.
    """

    permits_per_env = 0
    prefetch_allowed = True

    @staticmethod
    def actor_queue_cap(unused_num_envs: int, unused_num_actor_queues: int,
                        actor_queue_cap: int) -> int:
        """The setting as it is: an actor serves up to that many waiting requests."""
        return actor_queue_cap

    @staticmethod
    def actor_seeding(unused_num_actor_queues: int) -> dict:
        """No seeds: actors sample from TensorFlow's stateful generator."""
        return {}

    @staticmethod
    def take(take: Callable[[int], object], n: int, unused_permits: Sequence) -> object:
        """The next `n` unrolls in arrival order."""
        return take(n)

    @staticmethod
    def configure_ops() -> None:
        """Nothing to set."""


class Lockstep:
    """Deterministic mode: envs run only on permits, actors wait for all their envs.

    Attributes:
        permits_per_env: `Q / E` unrolls each env may run per learn batch.
        prefetch_allowed: False: collection must not overlap an update.
    """

    prefetch_allowed = False

    def __init__(self, seed: Optional[int], num_envs: int, learn_queue_cap: int):
        """
        Args:
            seed: seeds the actors' sampling.
            num_envs: E, env threads.
            learn_queue_cap: Q, unrolls per learn batch (a multiple of E).
        """
        self._seed = seed
        self.permits_per_env = learn_queue_cap // num_envs

    @staticmethod
    def actor_queue_cap(num_envs: int, num_actor_queues: int, unused_cap: int) -> int:
        """Each actor takes all of its envs' requests at once (in env order)."""
        return -(-num_envs // num_actor_queues)

    def actor_seeding(self, num_actor_queues: int) -> dict:
        """`ActorThread` keywords: stateless samples seeded by call count."""
        return dict(seed=self._seed, stride=num_actor_queues)

    @staticmethod
    def take(take: Callable[[int], object], n: int, permits: Sequence) -> object:
        """Lets every env produce its `Q / E` unrolls; returns them sorted by env."""
        for queue in permits:
            for _ in range(queue.capacity):
                queue.enqueue(tf.constant(0, tf.int32))
        unrolls = take(n)
        order = tf.argsort(unrolls.env_id, stable=True)  # an env's unrolls stay in order
        return tf.nest.map_structure(lambda x: tf.gather(x, order), unrolls)

    @staticmethod
    def configure_ops() -> None:
        """Kernels too must reduce in a fixed order (matters on GPUs)."""
        tf.config.experimental.enable_op_determinism()
