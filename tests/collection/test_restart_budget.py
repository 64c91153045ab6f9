"""`RestartBudget`: a sliding window of restarts, and its settings' errors."""

import pytest

from alf_async.collection.restart_budget import RestartBudget


def test_the_budget_allows_max_restarts_within_any_window():
    budget = RestartBudget(2, 10.0)
    assert [budget.allow(now) for now in (0.0, 5.0, 9.0)] == [True, True, False]
    assert budget.allow(10.5)  # the restart at 0 s left the window
    assert not budget.allow(11.0)  # 5 s and 10.5 s are in it


def test_a_zero_budget_allows_nothing():
    assert not RestartBudget(0, 1.0).allow(0.0)


@pytest.mark.parametrize("args, line", [
    ((-1, 1.0), "LocalCollection.max_env_restarts must be >= 0, got -1"),
    ((1, 0.0), "the window of LocalCollection.max_env_restarts must be > 0 s, got 0.0")])
def test_bad_settings_name_the_setting(args, line):
    with pytest.raises(ValueError, match=line):
        RestartBudget(*args, setting="LocalCollection.max_env_restarts")
