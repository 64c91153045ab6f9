import os
import subprocess
import sys

import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TAG = "Metrics_vs_EnvironmentSteps/AverageReturn"


def _fake_run(path, values):
    writer = tf.summary.create_file_writer(os.path.join(path, "train"))
    with writer.as_default():
        for i, value in enumerate(values):
            tf.summary.scalar(TAG, value, step=1000 * (i + 1))
    writer.close()
    return str(path)


@pytest.mark.slow
def test_cli_writes_a_png_with_one_line_per_run(tmp_path):
    runs = [_fake_run(tmp_path / "ppo", [10.0, 300.0]), _fake_run(tmp_path / "impala", [9.0])]
    out = tmp_path / "curves.png"
    result = subprocess.run([sys.executable, "tools/plot_curves.py", *runs, f"--out={out}"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


@pytest.mark.slow
def test_without_matplotlib_it_is_one_line_naming_the_extra(tmp_path):
    run = _fake_run(tmp_path / "ppo", [10.0, 300.0])
    blocked = tmp_path / "block" / "matplotlib"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text(
        "raise ImportError(\"No module named 'matplotlib'\", name='matplotlib')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "block"))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    result = subprocess.run([sys.executable, "tools/plot_curves.py", run,
                             f"--out={tmp_path / 'c.png'}"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, lines  # no TensorFlow banner, no traceback
    assert lines[0].startswith("E") and lines[0].endswith(
        "tools/plot_curves.py needs the [plot] extra: pip install '.[plot]'"), lines
