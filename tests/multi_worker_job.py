"""One worker of a two-worker learner, run as a process by test_devices.py.

    python tests/multi_worker_job.py OUT.npz

TF_CONFIG names the cluster and this worker. The worker trains PPO for three
updates on its share of the learn batches of `test_learner._batch` (worker w
gets unroll w of each `[2, T, B]` batch), starting from weights every worker
sets alike, and saves its variables and counters to OUT.npz.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
_TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_TESTS, os.path.join(_TESTS, "learning")]  # fakes, test_learner

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from alf_async.learning.devices import create_strategy, worker_index  # noqa: E402
from test_learner import EQUIVALENCE, _batch, _learner, set_weights  # noqa: E402


def main(out: str) -> None:
    tf.debugging.disable_traceback_filtering()
    strategy = create_strategy("multi_worker", collective_timeout_secs=120)
    worker = worker_index(strategy)
    algo, learner = _learner(strategy, **EQUIVALENCE)
    set_weights(algo)
    for seed in range(3):
        batch = _batch(seed)
        share = tf.nest.map_structure(lambda x: x[worker:worker + 1], batch[:3])
        learner.train(batch._replace(experience=share[0], bootstrap=share[1],
                                     env_ids=share[2], env_steps=batch.env_steps // 2))
    np.savez(out, *[v.numpy() for v in algo.variables], train_step=int(learner.train_step),
             env_steps=int(learner.env_steps), replicas=strategy.num_replicas_in_sync)


if __name__ == "__main__":
    main(sys.argv[1])
