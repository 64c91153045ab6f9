"""The threads of a local collection: env threads and actor threads.

An `EnvThread` steps one batched env and produces `[T, B]` unrolls; an
`ActorThread` serves one actor queue with batched policy calls. Both are
`DriverThread`s: a failure stops every thread with an error naming it.
"""

import logging
import time
from typing import Callable, Optional, Sequence

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async import events
from alf_async.collection.driver_thread import DriverThread
from alf_async.experience import ActReply, ActRequest, Experience, Unroll, batched
from alf_async.collection.restart_budget import RestartBudget
from alf_async.collection.queues import NestFIFOQueue, TFQueues


class EnvThread(DriverThread):
    """Steps one batched env of B sub-envs and produces `[T, B]` unrolls.

    For each step it sends the current time step and policy state to its
    actor queue, waits for the reply on its own action-return queue (or,
    given `act_fn`, calls the policy itself), records the step and steps the
    env. Every `unroll_length` steps it enqueues an
    `Unroll` (with the following time step as bootstrap) to the learn queue
    and a `LogRecord` to the log queue. The policy state it carries is reset
    to the initial state where a time step is FIRST.

    A whole unroll is one compiled call (a `tf.while_loop` over the steps;
    the env steps through `tf.numpy_function`), so that the per-step cost is
    a few graph ops rather than a round of Python and eager ops.
    """

    def __init__(self, name: str, coord: tf.train.Coordinator, queues: TFQueues, env,
                 env_id: int, unroll_length: int, initial_policy_state,
                 env_factory: Optional[Callable] = None,
                 actor_queue: Optional[NestFIFOQueue] = None,
                 act_fn: Optional[Callable] = None,
                 restart_budget: Optional[RestartBudget] = None):
        """
        Args:
            env: a batched tf-agents `PyEnvironment` owned by this thread.
            env_id: index of this env; selects its action-return queue.
            unroll_length: T.
            initial_policy_state: numpy nest, `[B, ...]` leaves.
            env_factory: `env_id -> env`; if given, an env that raises is
                replaced by a new one (the partial unroll is dropped, the
                policy state reset) instead of stopping training.
            actor_queue: the queue of the actor that serves this env; or
            act_fn: `ActRequest -> ActReply` (`[B, ...]` leaves), the policy
                call this thread makes itself, inside its compiled unroll.
            restart_budget: bounds the replacements (shared by the env
                threads); once spent, an env that raises stops training
                with its error. None: no bound.
        """
        super().__init__(name, coord, queues.close_all)
        self._queues = queues
        if (actor_queue is None) == (act_fn is None):
            raise ValueError("EnvThread needs exactly one of actor_queue and act_fn")
        self._env = env
        self._env_factory = env_factory
        self._restart_budget = restart_budget
        self.num_restarts = 0
        self._env_id = np.int32(env_id)
        self._actor_queue = actor_queue
        self._act_fn = act_fn
        self._return_queue = queues.action_return_queues[env_id] if actor_queue else None
        self._permits = queues.unroll_permits[env_id] if queues.unroll_permits else None
        self._unroll_length = unroll_length
        self._initial_policy_state = initial_policy_state
        self._time_step_spec = batched(env.time_step_spec(), env.batch_size)
        self._time_step_dtypes = [s.dtype.as_numpy_dtype
                                  for s in tf.nest.flatten(self._time_step_spec)]
        self._action_spec = env.action_spec()
        self._carry = None  # (time step, policy state) between unrolls
        self._env_error = None
        # No autograph: the loops are explicit, and converting the policy's
        # code would take seconds at start-up (docs/speed.md, Start-up time).
        self._unroll = tf.function(self._unroll_fn, autograph=False)
        self.num_unrolls = 0  # unrolls put on the learn queue (read by diagnostics)
        self.busy_seconds = 0.0  # time spent stepping the env (read by the trainer)

    def prepare(self) -> None:
        state_spec = tf.nest.map_structure(tf.TensorSpec.from_tensor,
                                           tf.nest.map_structure(tf.convert_to_tensor,
                                                                 self._initial_policy_state))
        self._unroll.get_concrete_function(self._time_step_spec, state_spec)

    def _step(self) -> None:
        try:
            if self._carry is None:
                self._carry = (self._reset_env(), self._initial_policy_state)
            self._carry = self._unroll(*self._carry)
        except tf.errors.OpError:
            if not self._may_restart():
                raise
            self._restart_env()
            return
        self.num_unrolls += 1

    def _reset_env(self):
        """The env's first time step; an error in it counts as the env's (an OpError)."""
        try:
            return self._env.reset()
        except Exception as error:  # pylint: disable=broad-except
            self._env_error = error
            raise tf.errors.UnknownError(None, None, f"env reset raised {error!r}") from error

    def _may_restart(self) -> bool:
        """Whether the env that just raised may be replaced (restarts on, budget left)."""
        if self._env_error is None or self._env_factory is None:
            return False
        if self._restart_budget is not None and not self._restart_budget.allow():
            logging.error("%s: env raised %r with its restart budget spent (%s): stopping",
                          self.name, self._env_error, self._restart_budget.describe())
            return False
        return True

    def close_env(self) -> None:
        """Closes the env this thread owns now; call once the thread has ended."""
        self._env.close()

    def _restart_env(self) -> None:
        """Replaces the env that raised. A replacement that fails while it is made (its
        worker killed as it starts) is an env error too: made again, within the
        restart budget."""
        try:
            self._env.close()
        except Exception:  # pylint: disable=broad-except
            logging.exception("%s: closing the failed env raised too", self.name)
        while True:
            logging.warning("%s: env raised %r; replacing it with a new one", self.name,
                            self._env_error)
            events.emit("env_exception_survived", env=self.name, error=repr(self._env_error))
            self._env_error = None  # from here on, an error is the new env's
            self.num_restarts += 1
            try:
                self._env = self._env_factory(int(self._env_id))
                break
            except Exception as error:  # pylint: disable=broad-except
                self._env_error = error
                if not self._may_restart():
                    raise
        self._carry = None  # reset the env and the policy state; drop the partial unroll

    def _fail(self, error: Exception) -> None:
        # An env error reaches here wrapped by tf.numpy_function: report the original.
        super()._fail(self._env_error or error)

    def _unroll_fn(self, time_step, policy_state):
        if self._permits is not None:  # deterministic mode: wait for the driver's go
            # Ops on different queues are not ordered in a tf.function: the
            # first request must depend on the permit explicitly.
            with tf.control_dependencies([self._permits.dequeue()]):
                time_step, policy_state = tf.nest.map_structure(tf.identity,
                                                                (time_step, policy_state))
        steps = tf.nest.map_structure(
            lambda s: tf.TensorArray(s.dtype, size=self._unroll_length,
                                     element_shape=s.shape[1:]),
            self._queues.learn_queue.spec.experience)
        # One step's graph in a loop, not T copies of it: tracing and graph
        # optimisation take a T-th of the time.
        _, time_step, policy_state, steps = tf.while_loop(
            lambda t, *_: t < self._unroll_length, self._one_step,
            (tf.constant(0), time_step, policy_state, steps), parallel_iterations=1)
        experience = tf.nest.map_structure(lambda array: array.stack(), steps)
        unroll = Unroll(experience, time_step, self._env_id)
        self._queues.learn_queue.enqueue(unroll)
        self._queues.log(unroll)
        return time_step, policy_state

    def _one_step(self, t, time_step, policy_state, steps):
        """Acts on `time_step`, records it as step `t` of `steps` and steps the env."""
        first = tf.equal(time_step.step_type, ts.StepType.FIRST)
        policy_state = tf.nest.map_structure(
            lambda s, s0: tf.where(tf.reshape(first, [-1] + [1] * (s.shape.rank - 1)), s0, s),
            policy_state, self._initial_policy_state)
        reply = self._request_actions(
            ActRequest(time_step.observation, time_step.step_type, policy_state, self._env_id))
        steps = tf.nest.map_structure(
            lambda array, x: array.write(t, x), steps,
            Experience(time_step, reply.action, reply.log_prob, policy_state,
                       reply.policy_version))
        return t + 1, self._env_step(reply.action), reply.policy_state, steps

    def _request_actions(self, request: ActRequest) -> ActReply:
        """The reply to one request: from the actor thread, or from our own call."""
        if self._act_fn is None:
            # Wait for the reply only once the request is in: unordered, the dequeue
            # could wait beside an enqueue that a stop fails, and TensorFlow then warns
            # of a cancelled dequeue on a queue not yet closed.
            with tf.control_dependencies([self._actor_queue.enqueue(request)]):
                return self._return_queue.dequeue()
        # As in ActorThread: read the weights once the observation is here.
        with tf.control_dependencies(tf.nest.flatten(request)):
            return self._act_fn(request)

    def _env_step(self, action):
        specs = tf.nest.flatten(self._time_step_spec)
        flat = tf.numpy_function(self._step_env, tf.nest.flatten(action),
                                 [s.dtype for s in specs], stateful=True)
        for tensor, spec in zip(flat, specs):
            tensor.set_shape(spec.shape)
        return tf.nest.pack_sequence_as(self._time_step_spec, flat)

    def _step_env(self, *flat_action):
        """Steps the env (called by TF with numpy arrays): the flat time step.

        A method rather than a closure in `_env_step`, so that autograph does
        not convert it (converted calls would cost more than the step itself).
        """
        start = time.perf_counter()
        try:
            time_step = self._env.step(
                tf.nest.pack_sequence_as(self._action_spec, list(flat_action)))
        except Exception as error:
            self._env_error = error
            raise
        self.busy_seconds += time.perf_counter() - start
        return [np.asarray(x, dtype) for x, dtype in zip(tf.nest.flatten(time_step),
                                                         self._time_step_dtypes)]


def _send(queue, reply) -> None:
    """Enqueues `reply` as a `tf.cond` branch (which must return what the other does)."""
    queue.enqueue(reply)


class ActorThread(DriverThread):
    """Serves one actor queue with batched policy calls.

    Each step takes every waiting request, up to the queue's capacity (at
    least one, blocking for it), runs ONE policy call on all their
    `[n * B, ...]` observations and sends each env its `[B, ...]` share of
    the reply. Every step, routing included, is compiled, and one call from
    Python runs `SERVES_PER_CALL` steps.

    Seeded (deterministic mode), each step instead waits for one request
    from every env it serves, orders them by env id and samples with the
    stateless seed `(seed, index + stride * call)`.
    """

    SERVES_PER_CALL = 8  # blocking in a call is fine: a stop closes the queues

    def __init__(self, name: str, coord: tf.train.Coordinator, queues: TFQueues,
                 actor_queue: NestFIFOQueue, env_ids: Sequence[int], act_fn: Callable,
                 seed: Optional[int] = None, stride: int = 1, index: int = 0):
        """
        Args:
            actor_queue: the queue this actor alone consumes.
            env_ids: the envs whose requests come through `actor_queue`.
            act_fn: `(ActRequest with [n, B, ...] leaves, seed or None)` ->
                `ActReply` with `[n, B, ...]` leaves.
            seed: if given, serve in the seeded, reproducible way.
            stride: the number of actors: each seeded call's counter grows
                by it, so that no two actors share a seed.
            index: this actor's index, where its seeds' call counter starts.
        """
        super().__init__(name, coord, queues.close_all)
        self._actor_queue = actor_queue
        self._return_queues = {i: queues.action_return_queues[i] for i in env_ids}
        self._act_fn = act_fn
        self._seed = seed
        if seed is not None:
            self._stride = stride
            self._counter = tf.Variable(index, dtype=tf.int32, trainable=False)
        self._busy = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        self._serve = tf.function(self._serve_requests, autograph=False)  # as EnvThread

    @property
    def busy_seconds(self) -> float:
        """Time spent in policy calls (from requests in hand to replies computed).

        Stays 0 in deterministic mode, which cannot read the clock in graph.
        """
        return float(self._busy.numpy())

    def prepare(self) -> None:
        self._serve.get_concrete_function()

    def _step(self) -> None:
        self._serve()

    def _serve_requests(self) -> None:
        # Calling a tf.function from Python costs about as much as one serve:
        # each call serves several times (docs/speed.md).
        def serve(i):
            self._serve_once()  # ordered within the loop by its queue ops
            return i + 1

        tf.while_loop(lambda i: i < self.SERVES_PER_CALL, serve, [tf.constant(0)],
                      parallel_iterations=1)

    def _serve_once(self) -> None:
        if self._seed is None:
            # Only this thread dequeues, so `size()` requests are surely there.
            n = tf.clip_by_value(self._actor_queue.size(), 1, self._actor_queue.capacity)
            requests = self._actor_queue.dequeue_many(n)
            seed = None
        else:
            requests = self._actor_queue.dequeue_many(len(self._return_queues))
            requests = tf.nest.map_structure(
                lambda x, order=tf.argsort(requests.env_id): tf.gather(x, order), requests)
            seed = tf.stack([tf.constant(self._seed % 2**31, tf.int32), self._counter])
            self._counter.assign_add(self._stride)
        # Read the weights and their version only once the requests are here,
        # not when the call starts waiting (reads are otherwise unordered).
        # Seeded runs go without the timing: TF's op determinism forbids timestamps.
        timed = self._seed is None
        with tf.control_dependencies(tf.nest.flatten(requests)):
            start = tf.timestamp() if timed else None
            replies = self._act_fn(requests, seed)
        if timed:
            with tf.control_dependencies(tf.nest.flatten(replies)):
                self._busy.assign_add(tf.timestamp() - start)
        for env_id, queue in self._return_queues.items():
            index = tf.where(tf.equal(requests.env_id, env_id))[:, 0]
            tf.cond(tf.size(index) > 0,
                    lambda q=queue, i=index: _send(q, tf.nest.map_structure(
                        lambda x: x[i[0]], replies)),
                    lambda: None)
