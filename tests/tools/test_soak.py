import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
    # main + 2 env threads + 1 actor + 1 log thread (+ the learner watchdog timer).
    assert max(s["threads"] for s in samples) <= 6
    assert abs(report["summary"]["rss_growth_after_warmup"]) < 1.0
