"""`ReplayTable`: what a replay buffer needs of the store behind it.

A table holds items (here `Segment`s), drops the oldest past its size, and
hands out batches of them, uniformly or by priority, at a rate its rate
limiter keeps in step with insertion. `ReverbTable` is the implementation;
another store (a TF-uniform buffer, a remote service) is a class with these
members that `ReplayBuffer.table` names in gin.
"""

from typing import Any, Callable, NamedTuple, Optional, Protocol, Sequence, Tuple
from typing import runtime_checkable

import numpy as np

from alf_async.errors import check_contract


class TableSettings(NamedTuple):
    """The sizes and rates a table keeps (`ReplayBuffer` derives them from its settings).

    Attributes:
        max_items: items kept; the oldest leave first.
        min_items: items stored before the first sample.
        samples_per_insert: sampled items per inserted item, held by the
            rate limiter once `min_items` are stored.
        error_buffer: how far (in sampled items) sampling may run ahead of or
            behind `samples_per_insert` before one side waits.
        items_per_batch: S, items per sampled batch.
        priority_alpha: sampling exponent of prioritized sampling; None:
            uniform.
    """
    max_items: int
    min_items: int
    samples_per_insert: float
    error_buffer: float
    items_per_batch: int
    priority_alpha: Optional[float] = None


class SampledItems(NamedTuple):
    """Which table items a prioritized batch holds (host numpy, `[S]` each).

    Attributes:
        keys: uint64 keys, to write their priorities back.
        probability: each item's sampling probability.
        table_size: items in the table when it was sampled.
    """
    keys: np.ndarray
    probability: np.ndarray
    table_size: np.ndarray


@runtime_checkable
class ReplayTable(Protocol):
    """A rate-limited store of items, sampled a batch at a time.

    Built as `table(item_spec, settings, cut, checkpoint_dir)`: `item_spec`
    the nest of `tf.TensorSpec` of one item, `settings` a `TableSettings`,
    `cut` a function of a batch of S items (leaves `[S, ...]`) that returns
    what `sample()` gives (the sampling shape's windows or sequences), run
    where the batch is made; `checkpoint_dir` where `save()` keeps the
    content (None: nowhere) and where the table resumes from.

    Thread-safety: one thread inserts and one samples; `update_priorities()`
    may run in a third; every wait is bounded by `should_stop`.

    Attributes:
        restored_items: items resumed from `checkpoint_dir` at start (0: none).
        sample_timeouts: waits of the sampler that outlasted a poll (each
            drops the batch in flight).
    """

    restored_items: int
    sample_timeouts: int

    def insert(self, items: Sequence[Any], priorities: Sequence[float],
               should_stop: Callable[[], bool]) -> bool:
        """Stores numpy items with their priorities; False if stopped while waiting."""

    def sample(self, should_stop: Callable[[], bool]
               ) -> Optional[Tuple[Any, Optional[SampledItems]]]:
        """`(cut batch, SampledItems or None if uniform)`; None if stopped."""

    def update_priorities(self, keys: np.ndarray, priorities: np.ndarray) -> None:
        """Sets the priorities of items by key (items evicted since are skipped)."""

    def save(self) -> Optional[str]:
        """Writes the content to `checkpoint_dir`; returns its path (None: not kept)."""

    def close(self) -> None:
        """Saves (if kept), then releases the store; once no thread inserts or samples."""


def check_table(table) -> None:
    """Raises TypeError naming every member of `ReplayTable` that `table` lacks."""
    check_contract(table, ReplayTable, "a replay table")
