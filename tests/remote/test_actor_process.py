"""Actor processes and the learner's Reverb service, in one process (threads, fake envs).

The actors here are `ActorProcess` objects run in threads, talking to the
learner's server on 127.0.0.1 exactly as separate processes would;
`tests/test_actor.py` runs real processes.
"""

import functools
import threading
import time
import weakref

import gin
import numpy as np
import pytest
import tensorflow as tf

reverb = pytest.importorskip("reverb")

from alf_async.drivers import AsyncOffPolicyDriver  # noqa: E402
from alf_async.errors import LearnerStarvedError  # noqa: E402
from alf_async.remote import ActorProcess, ReverbService  # noqa: E402
from alf_async.remote.actor_process import LearnerGone  # noqa: E402
from alf_async.remote.service import UNROLLS, RemoteUnroll  # noqa: E402
from alf_async.remote import weights  # noqa: E402
from alf_async.remote.weights import IncompatibleWeights  # noqa: E402
from alf_async.training import assembly  # noqa: E402
from fakes import (CountingEnv, counters_of, garbage_collector_off, timed_stop,  # noqa: E402
                   weight_policy_for)

E, T = 2, 3  # env threads per actor process, steps per unroll


@pytest.fixture(autouse=True)
def small_drivers():
    """Learner and actors share these driver sizes, as they share a gin file."""
    gin.bind_parameter("alf_async.AsyncOffPolicyDriver.num_envs", E)
    gin.bind_parameter("alf_async.AsyncOffPolicyDriver.unroll_length", T)
    gin.bind_parameter("alf_async.AsyncOffPolicyDriver.actor_queue_cap", 1)
    yield
    gin.clear_config()


def _learner(version, timeout=30.0, stateless=False, driver_settings=None, port=0,
             **service):
    policy = weight_policy_for(CountingEnv(0), stateless=stateless)
    remote = functools.partial(ReverbService, variables=policy.variables, version=version,
                               port=port, **service)
    gin.bind_parameter("alf_async.LearnFeed.learner_queue_timeout", timeout)
    driver = AsyncOffPolicyDriver(CountingEnv, policy, counters_of(version), learn_queue_cap=2,
                                  remote=remote,
                                  **(driver_settings or {}))
    return driver, policy


class _ActorThread:
    """An `ActorProcess` running in a thread until `stop()`; keeps what `run` raised."""

    def __init__(self, address, task, weight_shape=(), stateless=False, **settings):
        self.actor = ActorProcess(
            address, task,
            lambda ts, a: weight_policy_for(CountingEnv(0), weight_shape, stateless),
            assembly.run_settings().sizes,  # the learner's, read from gin as the command does
            env_factory=CountingEnv, **dict(dict(pull_interval_secs=0.05,
                                                 server_timeout_secs=1.0,
                                                 connect_timeout_secs=5.0), **settings))
        self._stop, self.error = threading.Event(), None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.actor.run(self._stop.is_set)
        except Exception as error:  # pylint: disable=broad-except
            self.error = error

    def stop(self):
        self._stop.set()
        self.thread.join(timeout=30)  # its collector's grace, a pull's timeout, on a busy host
        assert not self.thread.is_alive(), "the actor did not stop"


def _until_delivered(driver, tasks, bound=60.0):
    """Waits for a first unroll (not taking it: no starvation timeout runs), then takes
    unrolls until each of `tasks` delivered one (its threads compiled)."""
    deadline = time.time() + bound
    while not any(driver.remote.registry.unrolls(task) for task in tasks):
        assert time.time() < deadline, f"tasks {tasks} delivered nothing in {bound} s"
        time.sleep(0.05)
    while any(driver.remote.registry.unrolls(task) == 0 for task in tasks):
        assert time.time() < deadline, f"tasks {tasks} delivered nothing in {bound} s"
        _take(driver, 1)


def _take(driver, n):
    batches = [driver.get_training_exps() for _ in range(n)]
    unrolls = [(int(env_id), {k: v[q] for k, v in dict(
        count=b.experience.time_step.observation[..., 2].numpy(),
        local=b.experience.time_step.observation[..., 0].numpy(),
        bootstrap=b.bootstrap.observation[..., 2].numpy(),
        action=b.experience.action.numpy(),
        version=b.experience.policy_version.numpy()).items()})
        for b in batches for q, env_id in enumerate(b.env_ids.numpy())]
    return unrolls


def test_unrolls_of_every_actor_env_arrive_whole_once_and_in_order():
    driver, _ = _learner(tf.Variable(0, dtype=tf.int64))
    driver.start()
    actors = [_ActorThread(driver.remote.address, task) for task in (0, 1)]
    try:
        time.sleep(2.5)  # a full queue for longer than server_timeout_secs: actors wait
        unrolls = _take(driver, 16)
        assert driver.remote.actors_alive() == 2
    finally:
        for actor in actors:
            actor.stop()
        timed_stop(driver, bound=5.0)
    assert all(actor.error is None for actor in actors)
    streams = {}
    for env_id, unroll in unrolls:
        assert (unroll["local"] == env_id % E).all()  # global id = task * E + local env
        streams.setdefault(env_id, []).append(unroll)
    assert set(streams) == {0, 1, 2, 3}
    for env_id, stream in streams.items():
        counts = np.concatenate([u["count"] for u in stream])  # [steps, B]
        expected = np.arange(len(counts))[:, None] * np.ones_like(counts[:1])
        np.testing.assert_array_equal(counts, expected, err_msg=f"stream {env_id}")
        for unroll in stream:
            np.testing.assert_array_equal(unroll["bootstrap"], unroll["count"][-1] + 1)
    assert sum(len(s) for s in streams.values()) == 32
    assert driver.remote.registry.unrolls(0) + driver.remote.registry.unrolls(1) >= 32


def test_the_reader_keeps_one_sampler_through_idle_spells_and_a_stop_wakes_its_wait(caplog):
    """The stall of #63: a sampler made anew after every empty poll left unrolls
    waiting in a full table for seconds. One sampler reads through actors coming and
    going; with no actor left, the stop still ends its wait at once."""
    driver, _ = _learner(tf.Variable(0, dtype=tf.int64))
    driver.start()
    reader = next(t for t in driver.remote._threads  # pylint: disable=protected-access
                  if t.name == "UnrollReaderThread")
    sampler = None
    try:
        for task in (0, 1):  # each spell: an actor delivers, leaves, and the queue idles
            actor = _ActorThread(driver.remote.address, task)
            try:
                deadline = time.time() + 60  # behind what the last spell left queued
                while driver.remote.registry.unrolls(task) < 4:
                    assert time.time() < deadline, f"task {task} delivered too little"
                    _take(driver, 1)
            finally:
                actor.stop()
            time.sleep(1.0)  # five of the old 200 ms polls with nothing to read
        assert reader.samplers_opened == 1
        assert driver.remote.registry.missing == 0 and driver.remote.registry.duplicated == 0
        sampler = weakref.ref(reader._samples)  # pylint: disable=protected-access
        served = _note_serving_at_release(reader, driver.remote.address)
    finally:
        with garbage_collector_off():
            timed_stop(driver, bound=3.0)  # the reader waits for an unroll no actor sends
            # Closed by the stop, not left to the garbage collector: its destructor
            # holds the GIL while it waits for its worker (seconds of a stalled process).
            assert sampler is None or sampler() is None
    assert not reader.is_alive()
    assert "still running" not in caplog.text
    # Released while the server serves: released after the server stopped, its
    # destructor waited up to 35 s for a read the stopped server never answered.
    assert served == [True]


def _note_serving_at_release(reader, address):
    """Wraps `reader.close_sampler` to note whether the server answers at that moment."""
    served, release = [], reader.close_sampler

    def close_sampler():
        try:
            reverb.Client(address).server_info(timeout=2)
            served.append(True)
        except Exception:  # pylint: disable=broad-except  # stopped: no answer
            served.append(False)
        release()
    reader.close_sampler = close_sampler
    return served


def test_counted_envs_name_the_learners_env_ids_and_an_actor_of_fewer_still_runs():
    # Ape-X: the learner's average leaves out env 0; actor 1 has env ids 2 and 3 only.
    gin.bind_parameter("alf_async.EpisodeStats.counted_envs", [1, 2, 3])
    driver, _ = _learner(tf.Variable(0, dtype=tf.int64))
    driver.start()
    actor = _ActorThread(driver.remote.address, 1)
    try:
        unrolls = _take(driver, 2)
    finally:
        actor.stop()
        timed_stop(driver, bound=5.0)
    assert actor.error is None
    assert {env_id for env_id, _ in unrolls} == {2, 3}


def test_steps_carry_the_version_of_the_pulled_weights_that_acted():
    version = tf.Variable(0, dtype=tf.int64)
    driver, policy = _learner(version)
    driver.start()
    actor = _ActorThread(driver.remote.address, 0)
    try:
        _take(driver, 2)
        policy.weight.assign(7)
        version.assign(3)  # the publisher thread sends weights 7 with version 3
        deadline, unrolls = time.time() + 20, []
        while time.time() < deadline and not any((u["version"] == 3).any() for _, u in unrolls):
            unrolls += _take(driver, 1)
    finally:
        actor.stop()
        timed_stop(driver, bound=5.0)
    versions = np.concatenate([u["version"] for _, u in unrolls])
    actions = np.concatenate([u["action"] for _, u in unrolls])
    assert (versions == 3).any(), "the new weights never reached the actor"
    assert set(np.unique(versions)) <= {0, 3}
    np.testing.assert_array_equal(actions[versions == 3], 7)  # stamp 3: weights 7 acted
    for env_id in {e for e, _ in unrolls}:
        stamps = np.concatenate([u["version"][:, 0] for e, u in unrolls if e == env_id])
        assert (np.diff(stamps) >= 0).all()


def test_a_uniform_replay_learner_samples_windows_of_the_remote_actors_streams():
    gin.bind_parameter("alf_async.ReplayBuffer.min_size", 3)
    gin.bind_parameter("alf_async.ReplayBuffer.batch_size", 8)
    gin.bind_parameter("alf_async.ReplayBuffer.sequence_length", 2)
    gin.bind_parameter("alf_async.ReplayBuffer.replay_ratio", 1.0)
    driver, _ = _learner(tf.Variable(0, dtype=tf.int64), stateless=True,
                         driver_settings=dict(exp_replayer="uniform"))
    driver.start()
    actors = [_ActorThread(driver.remote.address, task, stateless=True) for task in (0, 1)]
    try:  # sample until both actors' windows were drawn (actor 1 may connect late)
        batches, deadline = [], time.time() + 30
        while len(batches) < 6 or (len({int(i) // E for b in batches for i in b.env_ids})
                                   < 2 and time.time() < deadline):
            batches.append(driver.get_training_exps())
    finally:
        for actor in actors:
            actor.stop()
        timed_stop(driver, bound=5.0)
    env_ids = np.concatenate([b.env_ids.numpy() for b in batches])
    assert set(env_ids) <= {0, 1, 2, 3} and len(set(env_ids // E)) == 2  # both actors
    for batch in batches:
        observation = batch.experience.time_step.observation.numpy()  # [8, 2, 1, 3]
        assert batch.experience.action.shape[:3] == (8, 2, 1)
        np.testing.assert_array_equal(observation[:, :, 0, 0],
                                      np.repeat(batch.env_ids.numpy()[:, None] % E, 2, 1))
        counts = observation[:, :, 0, 2]  # a window is consecutive steps of one sub-env
        np.testing.assert_array_equal(counts[:, 1] - counts[:, 0], 1)


def test_the_first_weights_served_are_a_resumed_learners_restored_ones():
    """The learner restores its checkpoint after building: actors must never get the
    weights it was built with (the server used to publish them at construction)."""
    version = tf.Variable(0, dtype=tf.int64)
    driver, policy = _learner(version)
    assert driver.remote.address is None  # nothing served before start: the port is free
    version.assign(7)  # a restore
    for variable in policy.variables:
        variable.assign(tf.ones_like(variable))
    driver.start()
    try:
        fresh = weight_policy_for(CountingEnv(0))
        stamp = weights.pull(reverb.Client(driver.remote.address), fresh.variables, 5.0)
        assert stamp.version == 7
        for variable in fresh.variables:
            np.testing.assert_array_equal(variable.numpy(), 1)
    finally:
        driver.stop()


def test_a_task_beyond_max_actors_is_refused_naming_the_setting():
    driver, _ = _learner(tf.Variable(0, dtype=tf.int64), max_actors=2)
    driver.start()
    try:
        with pytest.raises(ValueError, match="--task=2 must be < .*max_actors=2"):
            _ActorThread(driver.remote.address, 2)
    finally:
        driver.stop()


def test_an_actor_built_from_another_config_is_refused():
    driver, _ = _learner(tf.Variable(0, dtype=tf.int64))
    driver.start()
    try:
        with pytest.raises(IncompatibleWeights, match="--gin_file"):
            _ActorThread(driver.remote.address, 0, weight_shape=(2,))
    finally:
        driver.stop()


def test_actors_end_by_themselves_once_the_learner_is_gone():
    driver, _ = _learner(tf.Variable(0, dtype=tf.int64))
    driver.start()
    actor = _ActorThread(driver.remote.address, 0)
    _take(driver, 2)
    driver.stop()
    actor.thread.join(timeout=15)  # server_timeout_secs is 1
    assert not actor.thread.is_alive()
    assert isinstance(actor.error, LearnerGone) and "has not answered" in str(actor.error)


@pytest.mark.slow
def test_an_actor_reconnects_with_a_fresh_connection_to_a_restarted_learner(caplog):
    """A connection kept to a server that went away retries on gRPC's backoff only;
    the actor drops it and connects afresh once the learner is back on its port."""
    caplog.set_level("INFO", logger="absl")
    first, _ = _learner(tf.Variable(0, dtype=tf.int64))
    first.start()
    port = int(first.remote.address.rsplit(":", 1)[1])
    actor = _ActorThread(first.remote.address, 0, server_timeout_secs=60.0)
    try:
        _take(first, 2)
        first.stop()
        time.sleep(3.0)  # down long enough for gRPC's backoff to exceed a second
        assert actor.actor._client is None  # pylint: disable=protected-access  # dropped
        second, _ = _learner(tf.Variable(0, dtype=tf.int64), port=port)
        second.start()
        try:
            assert len(_take(second, 2)) == 4  # learn_queue_cap 2: the actor's unrolls
        finally:
            second.stop()
    finally:
        actor.stop()
    assert "Actor task 0: reconnected to the learner at" in caplog.text
    assert actor.error is None


@pytest.mark.slow
def test_lost_actors_drop_from_actors_alive_and_then_starve_the_learner_with_a_diagnosis():
    driver, _ = _learner(tf.Variable(0, dtype=tf.int64), timeout=4.0, actor_timeout_secs=1.0)
    driver.start()
    actors = [_ActorThread(driver.remote.address, task) for task in (0, 1)]
    try:
        _until_delivered(driver, (0, 1))  # the timeout under test counts from here
        actors[0].stop()
        deadline = time.time() + 3.0  # drain what actor 0 sent, then its timeout passes
        while time.time() < deadline:
            _take(driver, 1)  # the other actor goes on feeding
        assert driver.remote.actors_alive() == 1
        actors[1].stop()
        start = time.time()
        with pytest.raises(LearnerStarvedError, match=r"actor task 0: \d+ unrolls, last"):
            _take(driver, 8)
        assert time.time() - start < 4.0 + 3.0
    finally:
        for actor in actors:
            actor.stop()
        driver.stop()


def test_an_actor_with_no_learner_gives_up_after_connect_timeout():
    start = time.time()
    with pytest.raises(LearnerGone, match="no weights from a learner at --server=127.0.0.1:1"):
        _ActorThread("127.0.0.1:1", 0, connect_timeout_secs=2.0)
    assert time.time() - start < 10


def test_unrolls_from_a_client_that_is_not_one_of_the_runs_actors_are_refused_and_counted(
        caplog):
    """Reverb listens on every interface: a client that reaches the port and writes
    well-formed items to the unroll table, without the run's secret, reaches nothing."""
    driver, _ = _learner(tf.Variable(0, dtype=tf.int64))
    driver.start()
    actor = _ActorThread(driver.remote.address, 0)
    taken = []
    try:
        _until_delivered(driver, [0])
        foreign = reverb.Client(driver.remote.address)
        spec = driver.remote._unroll_spec  # pylint: disable=protected-access
        zeros = tf.nest.map_structure(lambda s: np.full(s.shape, 7, s.dtype.as_numpy_dtype),
                                      spec)
        errors = []

        def write_foreign_items():
            """Blocks while the actor keeps the table full: written beside the taking."""
            try:
                with foreign.trajectory_writer(num_keep_alive_refs=1) as writer:
                    for sequence in range(3):
                        writer.append(RemoteUnroll(zeros, np.int32(1), np.int64(1),
                                                   np.int64(sequence), np.int64(99)))
                        writer.create_item(UNROLLS, 1.0, tf.nest.map_structure(
                            lambda c: c[-1], writer.history))
                    writer.flush(timeout_ms=30_000)
            except Exception as error:  # pylint: disable=broad-except
                errors.append(error)

        foreign_writer = threading.Thread(target=write_foreign_items, daemon=True)
        foreign_writer.start()
        deadline = time.time() + 30
        while driver.remote.registry.refused < 3:
            assert time.time() < deadline, "the foreign items were never read"
            taken += _take(driver, 1)
        foreign_writer.join(timeout=30)
        assert not foreign_writer.is_alive() and not errors, errors
        taken += _take(driver, 4)
        summaries = driver.summaries()
    finally:
        actor.stop()
        timed_stop(driver, bound=5.0)
    assert driver.remote.registry.refused == 3
    assert summaries["faults/refused_unrolls"] == 3
    assert driver.remote.registry.unrolls(1) == 0  # task 1 never counted as an actor
    assert all(0 <= env_id < E for env_id, _ in taken)  # only task 0's streams
    assert all((u["count"] != 7).any() for _, u in taken)
    assert caplog.text.count("Refused an unroll without this run's secret") == 1
