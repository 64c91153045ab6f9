import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow  # two short train commands, one with evaluation videos
def test_the_videos_benchmark_compares_runs_whose_videos_were_made(tmp_path):
    result = subprocess.run(
        [sys.executable, "tools/videos_benchmark.py", "--repeats=1", "--num_env_steps=40000",
         "--eval_interval=4", "--gin_param=create_environment.num_parallel_environments=8"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    found = re.search(r"without videos ([\d,]+) frames/s, with ([\d,]+) frames/s "
                      r"\((\d+) videos\): ratio ([\d.]+)", result.stdout)
    assert found, result.stdout
    without, with_videos = (float(found.group(i).replace(",", "")) for i in (1, 2))
    assert int(found.group(3)) >= 1  # the end of the run waits for the video being made
    assert float(found.group(4)) == pytest.approx(with_videos / without, abs=1e-3)
    assert "median" in result.stdout and "target >= 0.95" in result.stdout
