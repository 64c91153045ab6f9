import subprocess
import sys

import numpy as np

from alf_async.algorithms import PPOAlgorithm
from alf_async.environments import CartPoleBatchedEnv
from alf_async.evaluation import GreedyPolicy, export_policy, run_episodes
from fakes import EPISODE_LENGTH, CountingEnv

_LOAD_AND_ACT = """
import sys
import numpy as np
import tensorflow as tf
policy = tf.saved_model.load(sys.argv[1])
obs = np.linspace(-0.2, 0.2, 40, dtype=np.float32).reshape(10, 4)
print(" ".join(str(a) for a in policy.action(obs).numpy()))
assert not any(name.startswith("alf_async") for name in sys.modules), "imported alf_async"
"""


def test_run_episodes_averages_the_first_finished_episodes():
    calls = []

    def policy(observation, step_type):
        calls.append(observation.shape)
        return np.zeros(observation.shape[0], np.int64)

    mean_return, mean_length = run_episodes(policy, CountingEnv(0, batch_size=3), 4)
    assert mean_return == EPISODE_LENGTH - 1 and mean_length == EPISODE_LENGTH - 1
    assert calls[0] == (3, 3)


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
