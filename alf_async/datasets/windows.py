"""`EpochWindows`: windows of dataset steps, each step a window's first once an epoch."""

import numpy as np

from alf_async.datasets.rlds_format import LAST


class EpochWindows:
    """Draws windows of `length + 1` step indices that never leave their episode.

    A window's first step is its sample (DQN's n-step target, SAC's and BC's
    transition); every step that is not `LAST` is the first of exactly one
    window an epoch, in a random order drawn anew each epoch. Rows past the
    episode's `LAST` step repeat it, which the estimators treat as the end
    (`advantages.n_step_return` stops at `LAST`; a transition out of `LAST` is
    masked).

    Thread-safety: one thread at a time.

    Attributes:
        epoch: epochs begun (1 after the first draw).
        num_starts: steps that start a window (every step but the LAST ones).
    """

    def __init__(self, step_type: np.ndarray, episode_last: np.ndarray, length: int,
                 seed=None):
        """
        Args:
            step_type: `[N]` step types of the dataset's steps.
            episode_last: `[N]` index of each step's episode's LAST step.
            length: window length n (`n + 1` rows: the last is the bootstrap).
            seed: seeds the order (None: random).

        Raises:
            ValueError: `length` < 1, or no step starts a window.
        """
        if not isinstance(length, (int, np.integer)) or length < 1:
            raise ValueError(f"DatasetBatches.sequence_length must be an integer >= 1, "
                             f"got {length!r}")
        self._starts = np.flatnonzero(np.asarray(step_type) != LAST)
        if not len(self._starts):
            raise ValueError("the dataset holds no transition (every step is LAST)")
        self._last = np.asarray(episode_last)
        self._offsets = np.arange(length + 1)
        self._rng = np.random.default_rng(seed)
        self._order = np.empty(0, np.int64)
        self.epoch = 0
        self.num_starts = len(self._starts)

    def draw(self, count: int) -> np.ndarray:
        """`[count, length + 1]` step indices: `count` windows, the next in the epoch's
        order (a draw that ends an epoch continues with the next one's)."""
        taken = []
        while count > 0:
            if not len(self._order):
                self._order = self._starts[self._rng.permutation(self.num_starts)]
                self.epoch += 1
            taken.append(self._order[:count])
            self._order = self._order[count:]
            count -= len(taken[-1])
        starts = np.concatenate(taken)
        return np.minimum(starts[:, None] + self._offsets, self._last[starts][:, None])
