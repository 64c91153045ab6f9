"""`FaultInjectingEnv`: seeded faults at rate p, and p checked."""

import numpy as np
import pytest

from alf_async.environments import create_environment
from alf_async.environments import fault_injection
from alf_async.environments.fault_injection import InjectedEnvFault


def _faults(env, steps):
    """The steps at which `env` raised, of `steps`."""
    env.reset()
    faults = []
    for step in range(steps):
        try:
            env.step(np.zeros(env.batch_size, np.int64))
        except InjectedEnvFault as fault:
            assert "step_fault_probability=0.2" in str(fault)
            faults.append(step)
    return faults


def test_faults_come_at_rate_p_at_the_same_steps_in_a_run_of_the_same_seed():
    make = lambda seed: create_environment(num_parallel_environments=4, seed=seed,
                                           step_fault_probability=0.2)
    fault_injection._BUILT.clear()  # pylint: disable=protected-access  # a new process
    first, rebuilt = _faults(make(3), 2000), _faults(make(3), 2000)
    fault_injection._BUILT.clear()  # pylint: disable=protected-access  # the same run again
    assert _faults(make(3), 2000) == first
    assert 300 <= len(first) <= 500  # mean 400, sd 18: 5.6 sd either side
    # An env rebuilt with its seed after a fault draws anew: it does not replay
    # the faults of the env it replaces (a fault every k steps, forever).
    assert rebuilt != first and 300 <= len(rebuilt) <= 500


def test_p_zero_wraps_nothing_and_p_outside_0_1_names_the_setting():
    assert type(create_environment(num_parallel_environments=2)).__name__ == \
        "CartPoleBatchedEnv"
    with pytest.raises(ValueError, match=r"create_environment.step_fault_probability must "
                                         r"be in \[0, 1\], got 1.5"):
        create_environment(num_parallel_environments=2, step_fault_probability=1.5)
