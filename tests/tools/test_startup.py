import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import startup  # noqa: E402  pylint: disable=wrong-import-position

LOG = """I1123 04:40:00.1 train.py:30] Imports: 2.71 s
I1123 04:40:05.2 trainer.py:99] Average return reached 475.0 after 5.40 s and 200704 env steps
I1123 04:40:09.3 trainer.py:60] Timeline: build 0.37 s, compile 0.31 s (ActorThread0 0.18 s, \
EnvThread0 0.06 s, LogThread 0.00 s), first iteration 2.26 s, training 2.83 s, \
checkpoint and export 0.30 s
"""


def test_parse_log_reads_every_phase_and_each_threads_compile_time():
    phases = startup.parse_log(LOG)
    assert phases == {
        "imports": 2.71, "reached": 5.40, "build": 0.37, "compile": 0.31,
        "compile ActorThread0": 0.18, "compile EnvThread0": 0.06, "compile LogThread": 0.0,
        "first iteration": 2.26, "training": 2.83, "checkpoint and export": 0.30}


def test_parse_log_without_a_timeline_is_an_error():
    with pytest.raises(ValueError, match="Timeline"):
        startup.parse_log("I1123 train.py:30] Imports: 2.71 s\n")


def test_medians_take_each_phase_over_the_runs_that_have_it():
    runs = [dict(wall=3.0, reached=1.0), dict(wall=1.0), dict(wall=2.0, reached=3.0)]
    assert startup.medians(runs) == dict(wall=2.0, reached=2.0)


@pytest.mark.slow
def test_a_real_run_reports_phases_that_fit_in_its_wall_time():
    result = subprocess.run(
        [sys.executable, "tools/startup.py", "--seeds=1", "--stop_at_return=1e9",
         "--gin_param=train.num_iterations=3"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    run = json.loads(result.stdout.splitlines()[0])
    threads = {"compile ActorThread0", "compile EnvThread0", "compile EnvThread1",
               "compile LogThread"}
    phases = {"imports", "build", "compile", "update compiled", "first iteration", "training",
              "checkpoint and export"}
    assert threads | phases | {"seed", "wall", "tf_import", "wall_per_tf_import"} == set(run)
    assert run["wall_per_tf_import"] == pytest.approx(run["wall"] / run["tf_import"], abs=0.01)
    assert 0 < run["tf_import"] < run["wall"]  # "reached" never happens
    assert sum(run[k] for k in phases) <= run["wall"]
    assert sum(run[k] for k in threads) <= run["compile"] + 0.01 * len(threads)
    assert "median of 1 runs:" in result.stdout
