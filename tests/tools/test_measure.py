import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import measure  # noqa: E402  pylint: disable=wrong-import-position


def test_alternating_rates_interleaves_settled_slices_and_counts_only_measured_ones():
    now, calls, counts = [0.0], [], {"n": 0}

    def side(name, seconds, units):
        def step():
            calls.append(name)
            now[0] += seconds
            counts["n"] += name == "a"  # a counter only side a moves
            return units
        return step

    tallies = measure.alternating_rates(
        {"a": side("a", 0.125, 1), "b": side("b", 0.25, 3)}, duration=1.0, settle=0.25,
        slices=2, counters=lambda: dict(counts), clock=lambda: now[0],
        cpu=lambda: now[0] / 2)  # the fake process keeps half a core busy
    # Each slice: a settles 0.25 s (2 steps) and is measured 0.5 s (4), then b (1 + 2).
    assert calls == (["a"] * 6 + ["b"] * 3) * 2
    a, b = tallies["a"], tallies["b"]
    assert (a.units, a.seconds, a.rate) == (8, 1.0, 8.0)
    assert (b.units, b.seconds, b.rate) == (12, 1.0, 12.0)
    assert a.cpu_us_per_unit == pytest.approx(0.5e6 / 8)
    assert b.cpu_us_per_unit == pytest.approx(0.5e6 / 12)
    # a's 4 measured steps a slice count; its settling steps and b's slices do not.
    assert a.count_rate("n") == 8.0 and b.count_rate("n") == 0.0
