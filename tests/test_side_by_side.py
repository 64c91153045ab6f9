"""The suite's `alone` lock (tests/side_by_side.py), in a small suite of its own run by
pytest-xdist's two workers: the `alone` test overlaps no other, and the others overlap."""

import json
import os
import subprocess
import sys
import textwrap

TESTS = os.path.dirname(os.path.abspath(__file__))

CONFTEST = """
from side_by_side import pytest_runtest_protocol  # noqa: F401
"""

# Each test notes when it ran, in a file of its own.
TEST_FILE = """
import json, os, time
import pytest

@pytest.mark.{marker}
@pytest.mark.parametrize("k", range({count}))
def test_notes_when_it_ran(k):
    start = time.time()
    time.sleep({seconds})
    with open(os.path.join({notes!r}, f"{{os.getpid()}}-{{time.time_ns()}}"), "w") as f:
        json.dump(dict(file=__name__, alone={alone}, start=start, end=time.time()), f)
"""


def _write_suite(root, notes):
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: x\n    shared: x\n")
    (root / "conftest.py").write_text(CONFTEST)
    files = dict(test_a=("alone", 2, 0.6), test_b=("shared", 5, 0.3),
                 test_c=("shared", 5, 0.3), test_d=("shared", 5, 0.3))
    for name, (marker, count, seconds) in files.items():
        (root / f"{name}.py").write_text(textwrap.dedent(TEST_FILE.format(
            marker=marker, count=count, seconds=seconds, notes=str(notes),
            alone=marker == "alone")))


def _overlap(one, other):
    return one["start"] < other["end"] and other["start"] < one["end"]


def test_an_alone_test_runs_with_no_other_beside_it_and_the_rest_run_side_by_side(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    _write_suite(tmp_path, notes)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile",
         "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path, capture_output=True,
        text=True, timeout=120, env=dict(os.environ, PYTHONPATH=TESTS))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    runs = [json.loads(p.read_text()) for p in notes.iterdir()]
    alone = [r for r in runs if r["alone"]]
    shared = [r for r in runs if not r["alone"]]
    assert len(alone) == 2 and len(shared) == 15
    assert not [(a, s) for a in alone for s in shared if _overlap(a, s)]
    assert any(_overlap(s, t) for s in shared for t in shared if s["file"] != t["file"])
