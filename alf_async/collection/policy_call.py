"""`PolicyCall`: the algorithm's policy as env and actor threads call it.

Every reply is stamped with the policy version (the learner's update count)
that the weights had when the policy read them.
"""

from typing import Optional

import tensorflow as tf

from alf_async.experience import ActReply, ActRequest


class PolicyCall:
    """Calls `algorithm.act` on a batch of requests and stamps the reply.

    Thread-safety: every method may be called from any thread, also inside
    `tf.function`s (each thread traces its own).
    """

    def __init__(self, algorithm, version: tf.Variable, batch_size: int,
                 first_stream: int = 0):
        """
        Args:
            algorithm: an `alf_async.algorithms.contract.Algorithm`: its
                `act(observation, step_type, policy_state, seed=None)` returns
                `(action, new_policy_state, log_prob)` for `[M, ...]` rows.
            version: int64 scalar variable, the learner's update count.
            batch_size: B, sub-envs per env thread (rows of one request).
            first_stream: added to the requests' env ids to make the global
                env ids `act` is told (an actor process's task * E).
        """
        self._algorithm = algorithm
        self._version = version
        self._batch_size = batch_size
        self._first_stream = first_stream

    def for_actor(self, requests: ActRequest, seed=None) -> ActReply:
        """One policy call for an actor's `[n, B, ...]` requests -> `[n, B, ...]` replies.

        `seed`: `[2]` int32 seed of a stateless sampling (None: stateful).
        """
        outer = tf.shape(requests.env_id)[:1]
        # Inner dims are static: each reshape is one op with a constant shape.
        merge = lambda x: tf.reshape(x, [-1, *x.shape[2:]])
        split = lambda x: tf.reshape(x, tf.concat([outer, [self._batch_size], x.shape[1:]], 0))
        inputs = tf.nest.map_structure(merge, (requests.observation, requests.step_type,
                                               requests.policy_state))
        rows = tf.repeat(requests.env_id + self._first_stream, self._batch_size)  # B each
        return tf.nest.map_structure(split, self.reply(*inputs, seed=seed, env_id=rows))

    def for_env(self, request: ActRequest) -> ActReply:
        """The policy call an env thread makes itself (N = 0): `[B, ...]` leaves."""
        return self.reply(request.observation, request.step_type, request.policy_state,
                          env_id=tf.fill(tf.shape(request.step_type),
                                         request.env_id + self._first_stream))

    def reply(self, observation, step_type, policy_state,
              seed: Optional[tf.Tensor] = None, env_id: Optional[tf.Tensor] = None
              ) -> ActReply:
        """The algorithm's actions for `[M, ...]` rows, as an `ActReply`.

        `env_id`: `[M]` int32, each row's global env id (passed to `act`).

        The stamp is the policy version read before the policy call; the
        version is read again after it, and the call is repeated in the rare
        case that a learner update completed in between (a sequence lock).
        So the stamp is the number of updates completed while the weights
        were read, and consecutive stamps of one env never decrease: each
        call depends on the previous step's reply through the env.
        """
        seeded = {} if seed is None else dict(seed=seed)
        if env_id is not None:
            seeded["env_id"] = tf.cast(env_id, tf.int32)

        def attempt(unused_done, *unused_reply):
            version = self._version.read_value()
            with tf.control_dependencies([version]):
                action, state, log_prob = self._algorithm.act(
                    observation, step_type, policy_state, **seeded)
            with tf.control_dependencies(tf.nest.flatten((action, state, log_prob))):
                done = tf.equal(self._version.read_value(), version)
            return done, ActReply(action, state, log_prob,
                                  tf.fill(tf.shape(step_type), version))

        rows = tf.shape(step_type)[:1]
        empty = ActReply(
            tf.nest.map_structure(lambda s: tf.zeros(tf.concat([rows, s.shape], 0), s.dtype),
                                  self._algorithm.action_spec),
            policy_state, tf.zeros(rows, tf.float32), tf.zeros(rows, tf.int64))
        _, reply = tf.while_loop(lambda done, *_: tf.logical_not(done), attempt,
                                 (tf.constant(False), empty))
        return reply
