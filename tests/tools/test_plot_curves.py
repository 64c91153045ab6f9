import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import plot_curves  # noqa: E402

TAG = "Metrics_vs_EnvironmentSteps/AverageReturn"


def _fake_run(path, values):
    writer = tf.summary.create_file_writer(os.path.join(path, "train"))
    with writer.as_default():
        for i, value in enumerate(values):
            tf.summary.scalar(TAG, value, step=1000 * (i + 1))
    writer.close()
    return str(path)


def test_load_curve_reads_what_the_run_wrote(tmp_path):
    run = _fake_run(tmp_path / "a", [10.0, 50.0, 200.0])
    curve = plot_curves.load_curve(run, TAG)
    np.testing.assert_array_equal(curve["env_steps"], [1000, 2000, 3000])
    np.testing.assert_allclose(curve["value"], [10, 50, 200])
    assert curve["seconds"][0] == 0 and (np.diff(curve["seconds"]) >= 0).all()
    with pytest.raises(ValueError, match="has no 'loss/x' summaries"):
        plot_curves.load_curve(run, "loss/x")


def test_cli_writes_a_png_with_one_line_per_run(tmp_path):
    runs = [_fake_run(tmp_path / "ppo", [10.0, 300.0]), _fake_run(tmp_path / "impala", [9.0])]
    out = tmp_path / "curves.png"
    result = subprocess.run([sys.executable, "tools/plot_curves.py", *runs, f"--out={out}"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
