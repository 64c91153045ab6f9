import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_soak_smoke_run_samples_memory_and_threads(tmp_path):
    out = tmp_path / "soak.json"
    result = subprocess.run(
        [sys.executable, "tools/soak.py", "--minutes=0.3", "--warmup_minutes=0.1",
         "--sample_secs=3", f"--out={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    samples = report["samples"]
    assert len(samples) >= 3
    assert all(s["rss_mib"] > 100 and s["threads"] >= 4 for s in samples)
    # main + 2 env threads + 1 actor + 1 log thread + the prefetch thread (+ the learner's
    # starvation-watchdog timer, alive while it waits for a batch, as it often does at
    # ppo_async.gin's small sizes): a fixed set, whatever the run's length.
    assert max(s["threads"] for s in samples) <= 7
    assert abs(report["summary"]["rss_growth_after_warmup"]) < 1.0
    assert all(s["workers_pss_mib"] == 0 for s in samples)  # no env worker processes


@pytest.mark.slow
def test_soak_samples_the_env_workers_memory(tmp_path):
    out = tmp_path / "soak.json"
    result = subprocess.run(
        [sys.executable, "tools/soak.py", "--minutes=0.2", "--warmup_minutes=0.1",
         "--sample_secs=3", f"--out={out}", "--env_name=Pendulum-v1", "--num_workers=2",
         "--num_parallel_environments=8", "--unroll_length=8"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    samples = json.loads(out.read_text())["samples"]
    # 2 env threads x 2 workers, each its own interpreter's worth of memory at least.
    assert samples and all(4 * 5 < s["workers_pss_mib"] < s["rss_mib"] * 4 for s in samples)
