"""What the driver and the learner loop call on a learn-batch source.

`FreshBatches`, `UniformReplayBatches` and `PrioritizedReplayBatches` follow
`BatchSource`; `check_batch_source` (called where the driver builds one)
names what a new source still lacks.
"""

from typing import Any, Dict, List, Optional, Protocol, Tuple, runtime_checkable

from alf_async.errors import check_contract
from alf_async.experience import LearnBatch


@runtime_checkable
class BatchSource(Protocol):
    """Turns the learn queue's unrolls into learn batches, and hears back after updates.

    Thread-safety: `next()` is called by one thread at a time (the trainer's
    or the learner loop's prefetch thread); `after_update()`, `save()` and
    `close()` by the trainer's thread.

    Attributes:
        learns_from_env: whether its batches hold the run's own env steps (False:
            a dataset's alone, and the run is scored by greedy evaluation).
        weighted: whether its batches carry importance weights `[Q', B']`.
        wants_back: names of the algorithm's per-item loss terms (among its
            `item_terms`) it wants in `after_update` (prioritized replay:
            `("td_error",)`); `()`: none, and the learner computes none.
    """

    learns_from_env: bool
    weighted: bool
    wants_back: Tuple[str, ...]

    def shape(self, unroll_length: int, batch_size: int) -> Tuple[int, int, int]:
        """`(Q', T', B')` of its learn batches, given the driver's T and B."""

    def threads(self, coord, queues) -> List:
        """`DriverThread`s it needs started with the collection's (e.g. a replay writer)."""

    def next(self, updates_ahead: int = 0) -> Optional[LearnBatch]:
        """Waits for the next learn batch (`[Q', T', B', ...]`); None once stopped.

        `updates_ahead`: how many updates later it will be trained on."""

    def after_update(self, batch, per_item: Dict[str, Any]) -> None:
        """The port back: what the learner found on `batch` (a `DeviceBatch`, its
        `items` as `next()` made them), per item: the `wants_back` terms of
        the algorithm's loss and their `mask` (`Learner.Update.per_item`)."""

    def describe(self, env_steps: int) -> str:
        """What a learn batch holds, for the start-up line."""

    def summaries(self) -> Dict[str, float]:
        """`{tag: value}` the trainer writes."""

    def diagnose(self) -> str:
        """A clause for the driver's starvation diagnosis ('' if nothing to add)."""

    def save(self) -> None:
        """Keeps what it holds beside the checkpoint (or nothing)."""

    def close(self) -> None:
        """Releases what it holds; once no thread calls `next()`."""




def check_batch_source(source) -> None:
    """Raises TypeError naming every member of `BatchSource` that `source` lacks."""
    check_contract(source, BatchSource, "a learn-batch source")