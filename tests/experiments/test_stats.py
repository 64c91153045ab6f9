import numpy as np
import pytest

from alf_async.experiments import stats


def _curve(values, start=1000, step=1000, seconds_per_point=2.0):
    n = len(values)
    return dict(env_steps=np.arange(start, start + n * step, step),
                seconds=np.arange(1, n + 1) * seconds_per_point,
                value=np.array(values, dtype=np.float64))


def test_seed_figures_by_hand():
    figures = stats.seed_figures(_curve([10, 50, 120, 480, 300, 490, 460, 470]), 475.0)
    assert figures["env_steps_to_target"] == 4000  # the first point >= 475
    assert figures["seconds_to_target"] == 8.0
    assert figures["best"] == 490 and figures["final"] == 470
    # last 25 % of 8000 steps: points at >= 6000 steps: 490, 460, 470
    assert figures["last25_min"] == 460
    assert figures["env_steps"] == 8000 and figures["seconds"] == 16.0


def test_not_reached_and_no_target():
    assert stats.seed_figures(_curve([1, 2]), 475.0)["env_steps_to_target"] is None
    assert stats.seed_figures(_curve([1, 2]), None)["seconds_to_target"] is None


def test_iqm_is_the_mean_of_the_middle_half():
    assert stats.iqm([1.0, 2.0, 3.0, 100.0]) == pytest.approx(2.5)
    assert stats.iqm([0.0, 1, 2, 3, 4, 5, 6, 1000]) == pytest.approx(np.mean([2, 3, 4, 5]))


def test_aggregate_skips_missing_values_and_brackets_the_iqm():
    agg = stats.aggregate([4.0, None, 1.0, 3.0, 2.0])
    assert agg["n"] == 4 and agg["median"] == 2.5 and agg["iqm"] == pytest.approx(2.5)
    low, high = agg["ci95"]
    assert 1.0 <= low <= agg["iqm"] <= high <= 4.0
    assert stats.aggregate([None])["iqm"] is None
    assert stats.aggregate([7.0])["ci95"] == [None, None]  # one value: no interval


def test_mean_curve_starts_where_every_seed_has_begun_and_holds_a_finished_seeds_last_value():
    """The seconds panel's mean jumped where a second seed joined: now every point is a
    mean over every seed."""
    a = _curve([0, 100, 200, 300])  # steps 1000..4000
    b = _curve([0, 50], start=2000)  # steps 2000..3000, then it ended at 50
    curve = stats.mean_curve([a, b], "env_steps", points=3)
    assert curve["x"] == [2000.0, 3000.0, 4000.0]  # from the later start
    assert curve["mean"] == [50.0, 125.0, 175.0]  # b holds 50 at 4000
    assert all(lo <= m <= hi for lo, m, hi in zip(curve["low"], curve["mean"], curve["high"]))
    alone = stats.mean_curve([a], "env_steps", points=2)
    assert alone["low"] == [None, None]  # one seed: no interval


def test_mean_curve_never_jumps_where_a_seed_joins_or_leaves():
    curves = [_curve([0, 100, 200, 300], start=1000 + 250 * k) for k in range(4)]
    curve = stats.mean_curve(curves, "env_steps", points=50)
    slope = 100 / 1000 * (curve["x"][1] - curve["x"][0])
    assert np.abs(np.diff(curve["mean"])).max() <= slope + 0.01  # rounded to 3 decimals
