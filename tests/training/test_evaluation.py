import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async.algorithms import PPOAlgorithm
from alf_async.environments import CartPoleBatchedEnv
from alf_async.training.evaluation import GreedyPolicy, export_policy, greedy_actions, run_episodes
from fakes import EPISODE_LENGTH, CountingEnv

_LOAD_AND_ACT = """
import sys
import numpy as np
import tensorflow as tf
import tensorflow as tf
policy = tf.saved_model.load(sys.argv[1])
obs = np.linspace(-0.2, 0.2, 40, dtype=np.float32).reshape(10, 4)
print(" ".join(str(a) for a in policy.action(obs).numpy()))
assert not any(name.startswith("alf_async") for name in sys.modules), "imported alf_async"
"""


def test_run_episodes_averages_episodes_of_equal_length():
    calls = []

    def policy(observation, step_type):
        calls.append(observation.shape)
        return np.zeros(observation.shape[0], np.int64)

    mean_return, mean_length = run_episodes(policy, CountingEnv(0, batch_size=3), 4)
    assert mean_return == EPISODE_LENGTH - 1 and mean_length == EPISODE_LENGTH - 1
    assert calls[0] == (3, 3)


class _UnevenEnv(CountingEnv):
    """Sub-env i's episodes last 2 + 10 i steps and return as much as they last."""

    def _time_step(self):
        length = 2 + 10 * np.arange(self._b)
        phase = self.count % length
        step_type = np.where(phase == 0, ts.StepType.FIRST,
                             np.where(phase == length - 1, ts.StepType.LAST,
                                      ts.StepType.MID)).astype(np.int32)
        return ts.TimeStep(step_type, (phase != 0).astype(np.float32),
                           np.ones(self._b, np.float32), np.zeros((self._b, 3), np.float32))


def test_run_episodes_counts_as_many_episodes_of_each_sub_env_however_long():
    policy = lambda observation, _: np.zeros(observation.shape[0], np.int64)
    # Sub-env 0's episodes return 1, sub-env 1's 11, sub-env 2's 21. The first
    # 3 to finish would all be sub-env 0's (mean 1).
    assert run_episodes(policy, _UnevenEnv(0, batch_size=3), 3) == (11.0, 11.0)
    # 5 over 3 sub-envs: two each of the first two, one of the third.
    assert run_episodes(policy, _UnevenEnv(0, batch_size=3), 5) == (9.0, 9.0)


def test_exported_greedy_policy_acts_like_the_algorithm_without_alf_async(tmp_path):
    env = CartPoleBatchedEnv(1)
    algo = PPOAlgorithm(env.time_step_spec(), env.action_spec())
    path = export_policy(algo, str(tmp_path))
    obs = np.linspace(-0.2, 0.2, 40, dtype=np.float32).reshape(10, 4)
    want = GreedyPolicy(algo).action(obs).numpy()
    result = subprocess.run([sys.executable, "-c", _LOAD_AND_ACT, path], cwd=str(tmp_path),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    got = np.array(result.stdout.split(), np.int64)
    np.testing.assert_array_equal(got, want)


def test_the_export_saves_the_variables_and_not_the_algorithms_object_graph(tmp_path):
    """Walking the algorithm's networks and layers was most of the export's time."""
    env = CartPoleBatchedEnv(1)
    algo = PPOAlgorithm(env.time_step_spec(), env.action_spec())
    path = export_policy(algo, str(tmp_path))
    saved = [name for name, _ in tf.train.list_variables(os.path.join(path, "variables",
                                                                     "variables"))
             if name.endswith("VARIABLE_VALUE")]
    assert len(saved) == len(algo.variables)
    assert all(name.startswith("_policy_variables/") for name in saved), saved


_LOAD_AND_ACT_RECURRENT = """
import sys
import numpy as np
import tensorflow as tf
import tensorflow as tf
policy = tf.saved_model.load(sys.argv[1])
rng = np.random.default_rng(0)
state = policy.initial_state(5)
for step in range(6):
    obs = rng.normal(size=(5, 2)).astype(np.float32)
    step_type = np.full(5, 0 if step == 0 else 1, np.int32)
    action, state = policy.action(obs, step_type, state)
    print(" ".join(str(a) for a in action.numpy()))
"""


@pytest.mark.slow  # an LSTM policy built, exported and loaded
def test_exported_recurrent_policy_carries_its_state_like_the_algorithm(tmp_path):
    env = CartPoleBatchedEnv(1, hide_velocity=True)
    algo = PPOAlgorithm(env.time_step_spec(), env.action_spec(), lstm_size=(16,),
                        actor_fc_layers=(16,), value_fc_layers=(16,))
    path = export_policy(algo, str(tmp_path))
    rng = np.random.default_rng(0)
    state = tf.nest.map_structure(lambda s: tf.zeros([5, *s.shape]), algo.policy_state_spec)
    want = []
    for step in range(6):
        obs = rng.normal(size=(5, 2)).astype(np.float32)
        action, state, _ = algo.act(obs, np.full(5, 0 if step == 0 else 1, np.int32), state,
                                    greedy=True)
        want.append(action.numpy())
    result = subprocess.run([sys.executable, "-c", _LOAD_AND_ACT_RECURRENT, path],
                            cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    got = np.array([line.split() for line in result.stdout.splitlines()], np.int64)
    np.testing.assert_array_equal(got, np.array(want))
    # And through greedy_actions, which run_episodes and play use.
    act = greedy_actions(GreedyPolicy(algo), 5)
    rng = np.random.default_rng(0)
    for step in range(6):
        obs = rng.normal(size=(5, 2)).astype(np.float32)
        np.testing.assert_array_equal(act(obs, np.full(5, 0 if step == 0 else 1)), want[step])


class _ContractOnly(tf.Module):
    """An algorithm with the contract's members only: no actor_net, no normalization."""

    def __init__(self):
        super().__init__()
        spec = CartPoleBatchedEnv(num_envs=1)
        self.time_step_spec, self.action_spec = spec.time_step_spec(), spec.action_spec()
        self.policy_state_spec, self.recurrent, self.item_terms = (), False, ()
        self.burn_in = 0
        self.weights = tf.Variable([[1.0, -1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
        self.variables_to_train = [self.weights]
        self.loss_groups = [("loss", self.variables_to_train)]
        self.mutable_settings = {}

    def act(self, observation, step_type, policy_state, greedy=False, seed=None):
        assert greedy  # evaluation asks for the greedy action
        action = tf.argmax(observation @ self.weights, axis=-1, output_type=tf.int64)
        return action, policy_state, tf.zeros_like(observation[:, 0])

    def observe(self, batch):
        pass

    set_env_steps = preprocess = loss = after_sgd_step = observe

    def scalars(self):
        return {}


def test_an_algorithm_with_only_the_contract_exports_its_greedy_policy(tmp_path):
    from alf_async.algorithms.contract import check_algorithm
    algorithm = _ContractOnly()
    check_algorithm(algorithm)
    loaded = tf.saved_model.load(export_policy(algorithm, str(tmp_path)))
    observation = np.array([[0.5, 0, 0, 0], [-0.5, 0, 0, 0]], np.float32)
    np.testing.assert_array_equal(loaded.action(observation).numpy(), [0, 1])


def test_an_export_stopped_part_way_leaves_the_previous_policy_whole(tmp_path, monkeypatch):
    env = CartPoleBatchedEnv(1)
    first = PPOAlgorithm(env.time_step_spec(), env.action_spec())
    path = export_policy(first, str(tmp_path))
    obs = np.linspace(-0.2, 0.2, 40, dtype=np.float32).reshape(10, 4)
    first_loaded = tf.saved_model.load(path)
    want = first_loaded.action(obs).numpy()
    real_save = tf.saved_model.save

    def save_then_die(obj, export_dir):  # the stop grace's SIGKILL, after the graph is out
        real_save(obj, export_dir)
        for name in os.listdir(os.path.join(export_dir, "variables")):
            os.remove(os.path.join(export_dir, "variables", name))
        raise KeyboardInterrupt

    monkeypatch.setattr(tf.saved_model, "save", save_then_die)
    second = PPOAlgorithm(env.time_step_spec(), env.action_spec())
    with pytest.raises(KeyboardInterrupt):
        export_policy(second, str(tmp_path))
    survivor = tf.saved_model.load(path)
    np.testing.assert_array_equal(survivor.action(obs).numpy(), want)
    monkeypatch.setattr(tf.saved_model, "save", real_save)
    assert export_policy(second, str(tmp_path)) == path  # the next export replaces it
    assert sorted(os.listdir(tmp_path)) == ["policy"]  # nothing staged is left behind
    replaced = tf.saved_model.load(path)
    np.testing.assert_array_equal(replaced.action(obs).numpy(),
                                  GreedyPolicy(second).action(obs).numpy())


def test_the_played_episodes_line_gives_the_spread():
    from alf_async.training.evaluation import episodes_summary  # pylint: disable=C0415
    played = np.array([[500.0, 500], [480.0, 480], [20.0, 20], [500.0, 500]])
    assert episodes_summary(played) == ("average_return=375.0 ± 205.1 (min 20.0, max 500.0) "
                                        "average_length=375.0 over 4 greedy episodes")
