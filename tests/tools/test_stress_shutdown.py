import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.alone
@pytest.mark.slow
def test_random_start_stop_cycles_are_prompt_and_leak_no_thread():
    result = subprocess.run(
        [sys.executable, "tools/stress_shutdown.py", "--cycles=12", "--max_run_secs=0.8",
         "--stop_bound=2.0", "--gin_param=create_environment.num_parallel_environments=16"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-500:] + result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["cycles"] == 12 and report["leaked_threads"] == []
    assert report["slowest_stop_secs"] < 2.0
