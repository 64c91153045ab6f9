"""`LocalCollection`: env threads in this process, with or without actor threads."""

import time
from typing import Callable

import gin
import numpy as np
import tensorflow as tf
from tf_agents.specs import tensor_spec

from alf_async.collection.policy_call import PolicyCall
from alf_async.experience import make_specs
from alf_async.collection.restart_budget import RestartBudget
from alf_async.collection.pacing import FreeRunning
from alf_async.collection.threads import ActorThread, EnvThread


def check_env_specs(env, env_id: int, algorithm) -> None:
    """Raises ValueError unless `env` has the specs `algorithm` was built for."""
    def same(a, b):
        a, b = tensor_spec.from_spec(a), tensor_spec.from_spec(b)
        return (tf.nest.map_structure(lambda s: (tuple(s.shape), s.dtype), a) ==
                tf.nest.map_structure(lambda s: (tuple(s.shape), s.dtype), b))

    if not same(env.time_step_spec(), algorithm.time_step_spec) or not same(
            env.action_spec(), algorithm.action_spec):
        raise ValueError(
            f"env {env_id} has observation spec {env.observation_spec()} and action spec "
            f"{env.action_spec()}, but the algorithm was built for "
            f"{algorithm.time_step_spec.observation} and {algorithm.action_spec}")


def collection_specs(algorithm, batch_size: int, unroll_length: int):
    """`(request, reply, unroll, log)` specs of a collection of B sub-envs per env."""
    return make_specs(algorithm.time_step_spec, algorithm.action_spec,
                      algorithm.policy_state_spec, batch_size, unroll_length)


def make_envs(env_factory: Callable, num_envs: int, algorithm) -> list:
    """`num_envs` envs from `env_factory`, checked against the algorithm's specs."""
    envs = [env_factory(i) for i in range(num_envs)]
    for i, env in enumerate(envs):
        check_env_specs(env, i, algorithm)
    sizes = [env.batch_size for env in envs]
    if len(set(sizes)) > 1:
        raise ValueError(f"All envs must have the same batch_size, got {sizes}")
    return envs


@gin.configurable(module="alf_async")
class LocalCollection:
    """E env threads of B sub-envs each, served by N actor threads.

    Env thread i sends its requests to actor queue `i % N`; an actor thread
    answers a group of requests with one batched `PolicyCall`. With N = 0
    each env thread calls the policy itself, inside its compiled unroll.
    In deterministic mode each actor takes all of its envs' requests at once,
    in env order, and samples with seeds; envs run only on the permits the
    learn-batch source gives them.

    Thread-safety: built, started and closed by one thread (the driver's);
    `diagnose()`, `summaries()` and `busy_fractions()` may be called from
    any thread while the threads run.
    """

    def __init__(self, env_factory: Callable[[int], object], algorithm,
                 version: tf.Variable, num_envs: int, num_actor_queues: int,
                 actor_queue_cap: int, unroll_length: int,
                 pace=FreeRunning(), restart_failed_envs: bool = False,
                 max_env_restarts: int = 10, env_restart_window_secs: float = 600.0,
                 first_stream: int = 0):
        """
        Args:
            env_factory: `env_id -> batched PyEnvironment` of B sub-envs.
            algorithm: an `alf_async.algorithms.contract.Algorithm`.
            version: int64 scalar variable stamped on every reply.
            num_envs: E, env threads.
            num_actor_queues: N, actor threads (0: env threads act themselves).
            actor_queue_cap: A, most requests one policy call serves.
            unroll_length: T, steps per unroll.
            pace: `pacing.FreeRunning` or `pacing.Lockstep` (deterministic
                mode: seeded actors that wait for all of their envs).
            restart_failed_envs: replace an env that raises by a new one from
                `env_factory` (counted in `faults/env_restarts`) instead of
                stopping at the first env error.
            max_env_restarts: with `restart_failed_envs`, the replacements
                (all env threads together) allowed within
                `env_restart_window_secs`; one more env error stops training
                with that error.
            env_restart_window_secs: the window of `max_env_restarts`.
            first_stream: the global env id of env 0 (an actor process's
                task * E), told to the policy with each row.
        """
        self.envs = make_envs(env_factory, num_envs, algorithm)
        self.batch_size = self.envs[0].batch_size
        self.num_envs = self.num_streams = num_envs
        self._num_actor_queues = num_actor_queues
        self._actor_queue_cap = pace.actor_queue_cap(num_envs, num_actor_queues,
                                                     actor_queue_cap)
        self._seeding = pace.actor_seeding(num_actor_queues)
        self._unroll_length = unroll_length
        self._restart_factory = env_factory if restart_failed_envs else None
        self._restart_budget = RestartBudget(max_env_restarts, env_restart_window_secs,
                                             "LocalCollection.max_env_restarts")
        self._initial_state = tf.nest.map_structure(
            lambda t: t.numpy(), tensor_spec.zero_spec_nest(
                algorithm.policy_state_spec, outer_dims=[self.batch_size]))
        self._policy = PolicyCall(algorithm, version, self.batch_size, first_stream)
        self.specs = collection_specs(algorithm, self.batch_size, unroll_length)
        self.joins_own_threads = False
        self._envs_threads, self._actor_threads = [], []
        self._busy_since, self._busy_totals = time.perf_counter(), {}

    def queue_sizes(self) -> dict:
        """The `TFQueues` sizes this collection's threads use."""
        return dict(num_envs=self.num_envs, num_actor_queues=self._num_actor_queues,
                    actor_queue_cap=self._actor_queue_cap)

    def threads(self, coord: tf.train.Coordinator, queues) -> list:
        """The actor and env threads, over `queues` (a `TFQueues`), not started."""
        n = self._num_actor_queues
        self._actor_threads = [
            ActorThread(f"ActorThread{a}", coord, queues, queues.actor_queues[a],
                        range(a, self.num_envs, n), self._policy.for_actor,
                        **self._seeding, index=a)
            for a in range(n)]

        def policy(i):  # env i's actor queue, or its own policy call
            if n:
                return dict(actor_queue=queues.actor_queues[i % n])
            return dict(act_fn=self._policy.for_env)

        self._envs_threads = [
            EnvThread(f"EnvThread{i}", coord, queues, env, i, self._unroll_length,
                      self._initial_state, self._restart_factory, **policy(i),
                      restart_budget=self._restart_budget)
            for i, env in enumerate(self.envs)]
        self._busy_since = time.perf_counter()
        return [*self._actor_threads, *self._envs_threads]

    def describe(self) -> str:
        return f"{self.num_envs} env threads x {self.batch_size} sub-envs"

    @property
    def env_restarts(self) -> int:
        """Envs replaced after raising (with `restart_failed_envs`)."""
        return sum(t.num_restarts for t in self._envs_threads)

    def summaries(self) -> dict:
        return {"faults/env_restarts": self.env_restarts}

    def busy_fractions(self) -> dict:
        """Share of wall time the env and actor threads worked since the last call.

        `env_busy`: stepping the env; `actor_busy`: in policy calls (absent
        with N = 0). Each is the mean over the stage's threads; the rest of
        the time they waited on a queue (or on TF's per-step overhead).
        """
        now = time.perf_counter()
        since, self._busy_since = self._busy_since, now
        fractions = {}
        for stage, threads in (("env_busy", self._envs_threads),
                               ("actor_busy", self._actor_threads)):
            totals = [t.busy_seconds for t in threads]
            if totals:
                before = self._busy_totals.get(stage, [0.0] * len(totals))
                fractions[stage] = float(np.mean(np.subtract(totals, before))) / max(
                    now - since, 1e-9)
                self._busy_totals[stage] = totals
        return fractions

    def diagnose(self, queues) -> str:
        """One line on the env and actor threads and the actor queues."""
        alive = lambda threads: sum(t.is_alive() for t in threads)
        envs, actors = self._envs_threads, self._actor_threads
        return (f"{alive(envs)}/{len(envs)} env threads and {alive(actors)}/{len(actors)} "
                f"actor threads alive, actor queue sizes "
                f"{[int(q.size()) for q in queues.actor_queues]}, "
                f"{sum(t.num_unrolls for t in envs)} unrolls produced")

    def close(self) -> None:
        """Closes the envs (after the threads were joined)."""
        for thread in self._envs_threads:
            thread.close_env()  # the env it holds now (one restarted replaces the first)
        if not self._envs_threads:  # the driver failed before making threads
            for env in self.envs:
                env.close()
