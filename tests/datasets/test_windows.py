import numpy as np
import pytest

from alf_async.datasets.reader import _episode_last  # pylint: disable=protected-access
from alf_async.datasets.windows import EpochWindows
from dataset_fakes import concatenated, episode


def _steps():
    step_type = concatenated([episode(n, True, 0) for n in (5, 2, 9, 4)])["step_type"]
    return step_type, _episode_last(step_type)


@pytest.mark.parametrize("length, draw", [(1, 7), (3, 4), (5, 16)])
def test_every_step_but_the_last_starts_one_window_an_epoch_inside_its_episode(length, draw):
    step_type, last = _steps()
    windows = EpochWindows(step_type, last, length, seed=3)
    starts = np.flatnonzero(step_type != 2)
    for epoch in (1, 2, 3):
        drawn = []
        while len(drawn) < len(starts):
            rows = windows.draw(min(draw, len(starts) - len(drawn)))
            assert rows.shape[1] == length + 1
            drawn.extend(rows[:, 0])
            # rows run on from the start and stop at its episode's LAST step
            expected = np.minimum(rows[:, :1] + np.arange(length + 1), last[rows[:, :1]])
            np.testing.assert_array_equal(rows, expected)
            assert (last[rows] == last[rows[:, :1]]).all()
        assert sorted(drawn) == starts.tolist() and windows.epoch == epoch


def test_a_draw_across_an_epoch_end_takes_the_rest_then_the_next_epochs():
    step_type, last = _steps()
    windows = EpochWindows(step_type, last, 1, seed=0)
    first = windows.draw(windows.num_starts - 2)[:, 0]
    across = windows.draw(5)[:, 0]
    assert sorted([*first, *across[:2]]) == np.flatnonzero(step_type != 2).tolist()
    assert windows.epoch == 2 and len(set(across[2:])) == 3


def test_bad_lengths_and_datasets_without_transitions_are_refused():
    step_type, last = _steps()
    with pytest.raises(ValueError, match="^DatasetBatches.sequence_length must be an integer "
                       ">= 1, got 0$"):
        EpochWindows(step_type, last, 0)
    with pytest.raises(ValueError, match="no transition"):
        EpochWindows(np.array([2, 2]), np.array([0, 1]), 1)
