import os

import gin
import pytest

from alf_async import assembly, config
import alf_async.trainer  # noqa: F401  registers gin's `train`, which the gin files bind
from alf_async.threads import live_driver_threads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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
            assembly.build(seed=seed)
    finally:
        gin.clear_config()
    assert not live_driver_threads()
