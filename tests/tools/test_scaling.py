import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_scaling_smoke_run_reports_both_sweeps_and_plots(tmp_path):
    out, png = tmp_path / "scaling.json", tmp_path / "scaling.png"
    result = subprocess.run(
        [sys.executable, "tools/scaling.py", "--duration=0.5", "--warmup=0.2",
         "--total_sub_envs=16,32", "--actor_queues=1,2", "--sub_envs_for_actor_sweep=8",
         "--unroll_length=8", f"--out={out}", f"--plot={png}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [p["total_sub_envs"] for p in report["total_sub_envs"]] == [16, 32]
    assert [p["num_actor_queues"] for p in report["num_actor_queues"]] == [1, 2]
    for point in report["total_sub_envs"] + report["num_actor_queues"]:
        assert point["end_to_end"] > 0 and point["actor_only"] > 0, point
    assert png.stat().st_size > 10_000
