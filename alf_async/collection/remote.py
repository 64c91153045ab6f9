"""`RemoteCollection`: unrolls from actor processes on other hosts, through Reverb."""

from typing import Callable

import tensorflow as tf

from alf_async.collection.local import check_env_specs, collection_specs
from alf_async.environments import first_env


class RemoteCollection:
    """Actor processes (`python -m alf_async.actor`), each with E env threads.

    Their unrolls reach this process through a `ReverbService`, whose reader
    thread puts them on the learn queue; this process steps no env (it
    builds env 0 only to read its specs).

    Thread-safety: as `LocalCollection`.
    """

    def __init__(self, env_factory: Callable[[int], object], algorithm, num_envs: int,
                 unroll_length: int, service: Callable):
        """
        Args:
            env_factory: `env_id -> batched PyEnvironment`; env 0 is built
                for its specs and batch size, then closed.
            algorithm: an `alf_async.algorithms.contract.Algorithm`.
            num_envs: E, env threads of each actor process.
            unroll_length: T, steps per unroll.
            service: `(unroll_spec=, num_envs=) -> ReverbService`.
        """
        with first_env(env_factory) as env:
            check_env_specs(env, 0, algorithm)
            self.batch_size = env.batch_size
        self.num_envs = num_envs
        self.specs = collection_specs(algorithm, self.batch_size, unroll_length)
        self.service = service(unroll_spec=self.specs[2], num_envs=num_envs)
        self.num_streams = self.service.num_streams  # global env ids
        self.joins_own_threads = True  # the service's close() joins them

    @staticmethod
    def queue_sizes() -> dict:
        """No env or actor queues here: the reader thread fills the learn queue."""
        return dict(num_envs=0, num_actor_queues=0, actor_queue_cap=1)

    def threads(self, coord: tf.train.Coordinator, queues) -> list:
        """The service's unroll-reader and weights-publisher threads, not started."""
        return self.service.threads(coord, queues)

    def describe(self) -> str:
        port = self.service.port or "a free one"
        return (f"remote actor processes (port {port}), each "
                f"{self.num_envs} env threads x {self.batch_size} sub-envs")

    def summaries(self) -> dict:
        registry = self.service.registry
        return {"driver/actors_alive": self.service.actors_alive(),
                "faults/duplicated_unrolls": registry.duplicated,
                "faults/refused_unrolls": registry.refused,
                "faults/missing_unrolls": registry.missing}

    @staticmethod
    def busy_fractions() -> dict:
        return {}  # the env and actor threads run in the actor processes

    def diagnose(self, unused_queues) -> str:
        return self.service.diagnose()

    def close(self) -> None:
        """Joins the service's threads (their stop must be requested), stops its server."""
        self.service.close()
