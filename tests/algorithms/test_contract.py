import pytest
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from alf_async.algorithms import DqnAlgorithm, ImpalaAlgorithm, PPOAlgorithm, SacAlgorithm
from alf_async.algorithms.contract import Algorithm, check_algorithm
from alf_async.environments import CartPoleBatchedEnv
from alf_async.learning.learner import Learner


def _pendulum_specs():
    observation = tensor_spec.BoundedTensorSpec([3], "float32", -8.0, 8.0)
    return ts.time_step_spec(observation), tensor_spec.BoundedTensorSpec([1], "float32", -2.0, 2.0)


@pytest.mark.parametrize("make", [
    lambda env: PPOAlgorithm(env.time_step_spec(), env.action_spec()),
    lambda env: ImpalaAlgorithm(env.time_step_spec(), env.action_spec()),
    lambda env: DqnAlgorithm(env.time_step_spec(), env.action_spec()),
    lambda env: SacAlgorithm(*_pendulum_specs()),
])
def test_every_shipped_algorithm_keeps_the_contract(make):
    algorithm = make(CartPoleBatchedEnv(num_envs=2))
    check_algorithm(algorithm)
    assert isinstance(algorithm, Algorithm)
    trained = {v.ref() for v in algorithm.variables_to_train}
    assert trained == {v.ref() for _, group in algorithm.loss_groups for v in group}


class _NoAct:
    """Everything but `act` and `loss_groups`."""

    time_step_spec = action_spec = policy_state_spec = ()
    recurrent = False
    burn_in = 0
    item_terms = ()
    variables_to_train = ()
    mutable_settings = {}

    def observe(self, batch):
        pass

    set_env_steps = preprocess = loss = after_sgd_step = scalars = observe


def test_a_missing_member_is_named_by_the_learner():
    with pytest.raises(TypeError, match=r"_NoAct is not an alf_async algorithm: it lacks "
                                        r"loss_groups, act \("):
        Learner(_NoAct())
