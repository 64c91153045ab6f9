"""Op thread pools and learner strategies; the multi-worker learner runs as two processes
on 127.0.0.1."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from alf_async.learning.devices import (create_strategy, local_devices, num_workers, op_threads,
                               worker_index)
from test_learner import EQUIVALENCE, _batch, _learner, set_weights

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
portpicker = pytest.importorskip("portpicker")


def test_single_process_strategies_have_one_worker_the_chief():
    for strategy in (tf.distribute.get_strategy(),
                     create_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])):
        assert num_workers(strategy) == 1 and worker_index(strategy) == 0
    assert len(local_devices(create_strategy("mirrored", devices=["/cpu:0", "/cpu:1"]))) == 2


def test_multi_worker_needs_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="needs TF_CONFIG"):
        create_strategy("multi_worker", collective_timeout_secs=1.5)


def _run_workers(tmp_path, num):
    ports = [portpicker.pick_unused_port() for _ in range(num)]
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    procs = []
    try:
        for index in range(num):
            env = dict(os.environ, TF_CONFIG=json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}))
            procs.append(subprocess.Popen(
                [sys.executable, "tests/multi_worker_job.py", str(tmp_path / f"w{index}.npz")],
                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for proc in procs:
            output, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0, output[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    return [np.load(tmp_path / f"w{index}.npz") for index in range(num)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_worker_processes_end_with_the_weights_of_one_learner_on_all_the_data(tmp_path):
    workers = _run_workers(tmp_path, 2)
    algo, learner = _learner(tf.distribute.get_strategy(), **EQUIVALENCE)
    set_weights(algo)
    before = [v.numpy() for v in algo.variables]
    for seed in range(3):
        learner.train(_batch(seed))
    for worker in workers:
        assert int(worker["replicas"]) == 2
        assert int(worker["train_step"]) == 3
        assert int(worker["env_steps"]) == int(learner.env_steps)  # counted over both
    changed = False
    for i, (variable, start) in enumerate(zip(algo.variables, before)):
        mine, first, second = variable.numpy(), workers[0][f"arr_{i}"], workers[1][f"arr_{i}"]
        np.testing.assert_array_equal(first, second)  # identical on every worker
        np.testing.assert_allclose(first, mine, rtol=1e-4, atol=1e-6)
        changed |= not np.allclose(mine, start)
    assert changed


_OP_THREADS = """
import gin, tensorflow as tf
from alf_async.learning.devices import op_threads
gin.parse_config(["op_threads.intra_op = 1", "op_threads.inter_op = 3"])
op_threads()
print(tf.config.threading.get_intra_op_parallelism_threads(),
      tf.config.threading.get_inter_op_parallelism_threads())
tf.constant(1.0) + 1.0  # TensorFlow now runs with these pools
op_threads(intra_op=2)
print(tf.config.threading.get_intra_op_parallelism_threads())
"""


def test_op_threads_from_gin_size_the_pools_and_a_later_change_is_one_warning():
    result = subprocess.run([sys.executable, "-c", _OP_THREADS], capture_output=True,
                            text=True, timeout=120, check=True)
    assert result.stdout.splitlines() == ["1 3", "1"]
    assert ("op_threads.intra_op=2 not applied: TensorFlow already runs with 1 in this "
            "process (it applies to a new one)") in result.stderr


@pytest.mark.parametrize("kwargs, setting", [(dict(intra_op=-1), "intra_op"),
                                             (dict(inter_op=-1), "inter_op"),
                                             (dict(inter_op=1.5), "inter_op")])
def test_bad_op_threads_name_the_setting(kwargs, setting):
    with pytest.raises(ValueError, match=f"op_threads.{setting} must be an integer"):
        op_threads(**kwargs)
