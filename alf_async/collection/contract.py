"""What the `Collector` and the driver call on a collection.

`LocalCollection` and `RemoteCollection` follow `Collection`;
`check_collection` (called where the driver builds one) names what a new
collection still lacks.
"""

from typing import Dict, List, Protocol, Tuple, runtime_checkable

from alf_async.errors import check_contract
from alf_async.experience import Nest


@runtime_checkable
class Collection(Protocol):
    """Produces `[T, B]` unrolls onto the learn queue, with threads the `Collector` runs.

    Attributes:
        specs: `(request, reply, unroll, log)` specs of its queues.
        batch_size: B, sub-envs per unroll.
        num_streams: global env ids it produces (env threads of all actors).
        joins_own_threads: whether `close()` joins its threads (a remote
            service's) instead of the `Collector`.

    Thread-safety: every method is called by the driver's thread;
    `busy_fractions()` and `summaries()` read counters the threads write.
    """

    specs: Tuple[Nest, Nest, Nest, Nest]
    batch_size: int
    num_streams: int
    joins_own_threads: bool

    def queue_sizes(self) -> Dict[str, int]:
        """Keyword sizes of its `TFQueues` (env and actor queues)."""

    def threads(self, coord, queues) -> List:
        """Its `DriverThread`s, built on `queues` under `coord`."""

    def describe(self) -> str:
        """Where experience comes from, for the start-up line."""

    def summaries(self) -> Dict[str, float]:
        """`{tag: value}` the trainer writes."""

    def busy_fractions(self) -> Dict[str, float]:
        """Share of wall time its threads worked since the last call."""

    def diagnose(self, queues) -> str:
        """Its part of the driver's starvation diagnosis."""

    def close(self) -> None:
        """Closes its envs (or service)."""




def check_collection(collection) -> None:
    """Raises TypeError naming every member of `Collection` that `collection` lacks."""
    check_contract(collection, Collection, "a collection")