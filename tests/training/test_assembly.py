import dataclasses
import os

import gin
import pytest

from alf_async import config

from alf_async.training import assembly
from alf_async.training.settings import RunSettings
import alf_async.training.run  # noqa: F401  registers gin's `train`, which the gin files bind
from fakes import leaked_driver_threads

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SETTINGS_ERRORS = [  # (bindings, train.seed, the error's message)
    (["AsyncOffPolicyDriver.learn_queue_cap=0"], None,
     "AsyncOffPolicyDriver.learn_queue_cap must be an integer >= 1, got 0"),
    (["AsyncOffPolicyDriver.actor_queue_cap=5"], None,
     "num_actor_queues \\* actor_queue_cap must be <= num_envs"),
    (["AsyncOffPolicyDriver.deterministic=True"], None,
     "AsyncOffPolicyDriver.deterministic=True needs a seed"),
    (["AsyncOffPolicyDriver.deterministic=True", "AsyncOffPolicyDriver.learn_queue_cap=3"], 1,
     "needs learn_queue_cap divisible by num_envs .* got 3 and 2"),
    (["FreshBatches.replay_proportion=0.25"], None,
     "FreshBatches.replay_proportion \\* AsyncOffPolicyDriver.learn_queue_cap must be a "
     "whole number"),
    (["FreshBatches.replay_proportion=0.5"], None, "replay_buffer_num_slots must be >= 1"),
]


@pytest.mark.parametrize("bindings, seed, message", SETTINGS_ERRORS)
def test_bad_settings_are_value_errors_naming_the_setting_before_any_thread(bindings, seed,
                                                                            message):
    config.parse_config([os.path.join(ROOT, "gin_configs", "ppo_async.gin")], bindings)
    try:
        with pytest.raises(ValueError, match=message):
            assembly.build(assembly.run_settings(RunSettings(seed=seed)))
    finally:
        gin.clear_config()
    assert not leaked_driver_threads()


def test_records_that_gin_would_not_build_are_refused_before_anything_is_built():
    """`build(settings)` runs what the records say: gin builds the components, so records
    unlike gin's bindings (edited after `run_settings()` read them) are one error."""
    config.parse_config([os.path.join(ROOT, "gin_configs", "ppo_async.gin")],
                        ["create_environment.num_parallel_environments=4"])
    try:
        records = assembly.run_settings(RunSettings(seed=3))
        assert (records.sizes.unroll_length, records.env.num_parallel_environments) == (32, 4)
        for edited in (dataclasses.replace(records, sizes=dataclasses.replace(
                           records.sizes, unroll_length=8)),
                       dataclasses.replace(records, env=dataclasses.replace(
                           records.env, num_parallel_environments=3))):
            with pytest.raises(ValueError, match="record .* is not what gin's bindings build"):
                assembly.build(edited)
        _, _, driver, _ = assembly.build(records)
        try:
            assert tuple(driver.learn_batch_shape) == (2, 32, 4)  # [Q, T, B] as recorded
        finally:
            driver.stop()
    finally:
        gin.clear_config()
    assert not leaked_driver_threads()


@pytest.mark.parametrize("gin_file, bindings", [
    ("ppo_async.gin", ["create_environment.num_parallel_environments=4"]),
    ("dqn_cartpole.gin", ["ReplayBuffer.min_size=64"]),  # uniform, whole segments
    ("dqn_cartpole_prioritized.gin", ["ReplayBuffer.min_size=64"]),
    ("r2d2_cartpole.gin", ["ReplayBuffer.min_size=64", "ReplayBuffer.batch_size=64",
                           "AsyncOffPolicyDriver.exp_replayer='prioritized'"])])
def test_the_update_compiled_ahead_on_a_zeros_batch_is_the_one_the_first_batch_runs(
        gin_file, bindings):
    """`Learner.trace(driver.example_batch())` before any data: the first real
    update reuses that compilation (a mismatch would compile it a second time)."""
    config.parse_config([os.path.join(ROOT, "gin_configs", gin_file)], bindings)
    try:
        _, learner, driver, loop = assembly.build(assembly.run_settings(RunSettings(seed=3)))
        example = driver.example_batch()
        assert (example.weights is not None) == driver.batches.weighted
        learner.trace(example)
        assert learner._train.experimental_get_tracing_count() == 1  # noqa  # pylint: disable=W0212
        assert int(learner.train_step) == 0  # compiled, not trained
        driver.start()
        try:
            loop.step()
            loop.step()
        finally:
            driver.stop()
        assert learner._train.experimental_get_tracing_count() == 1  # noqa  # pylint: disable=W0212
        assert int(learner.train_step) == 2
        if driver.batches.weighted:  # each update's TD errors went back as priorities,
            # all of them by the time the driver stopped (closing writes what is pending)
            assert (driver.batches.summaries()["replay/priority_updates"]
                    == 2 * driver.batches.replay.items_per_batch)
    finally:
        gin.clear_config()
    assert not leaked_driver_threads()


@pytest.mark.parametrize("gin_file, bindings", [
    ("ppo_async.gin", ["create_environment.num_parallel_environments=4"]),
    ("dqn_cartpole_prioritized.gin", ["ReplayBuffer.min_size=64"])])
def test_a_warm_up_runs_the_update_once_and_puts_every_variable_back(gin_file, bindings,
                                                                     caplog):
    """`Learner.warm_up` (a warm spare's, before its promotion) trains one update on
    zeros to get TensorFlow's first run over with, then leaves no trace of it."""
    config.parse_config([os.path.join(ROOT, "gin_configs", gin_file)], bindings)
    try:
        _, learner, driver, _ = assembly.build(assembly.run_settings(RunSettings(seed=3)))
        example = driver.example_batch()
        learner.trace(example)  # the optimizer's slots exist from here on
        variables = [*learner.variables, *learner.optimizer.variables]
        before = [variable.numpy().copy() for variable in variables]
        learner.warm_up(example)
        assert "ahead failed" not in caplog.text
        changed = [v.name for v, old in zip(variables, before) if not (v.numpy() == old).all()]
        assert changed == []
        assert int(learner.optimizer.iterations) == 0 and int(learner.train_step) == 0
        assert learner._train.experimental_get_tracing_count() == 1  # noqa  # pylint: disable=W0212
        driver.stop()
    finally:
        gin.clear_config()
    assert not leaked_driver_threads()
