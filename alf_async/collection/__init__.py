"""Collection: how experience is produced, behind one small interface.

A collection gives the driver `specs` (request, reply, unroll, log),
`batch_size` (B), `num_streams` (global env ids), `queue_sizes()` for its
`TFQueues`, `threads(coord, queues)`, `joins_own_threads`, `describe()`,
`summaries()`, `busy_fractions()`, `diagnose(queues)` and `close()`.

- `LocalCollection`: env threads here, with N actor threads (or acting
  themselves with N = 0); `PolicyCall` is their stamped policy call.
- `RemoteCollection`: actor processes elsewhere, through a `ReverbService`.
- `Collector`: a collection and the log thread under one coordinator, with
  the learn queue they fill (the actor process uses one alone).

The thread kinds under their public names: `EnvThread`, `ActorThread`,
`LogThread`, and their base `DriverThread` (`driver_thread.py`).
"""

from alf_async.collection.collector import Collector, LogThread
from alf_async.collection.driver_thread import DriverThread
from alf_async.collection.local import LocalCollection
from alf_async.collection.policy_call import PolicyCall
from alf_async.collection.remote import RemoteCollection
from alf_async.collection.threads import ActorThread, EnvThread

__all__ = ["ActorThread", "Collector", "DriverThread", "EnvThread", "LocalCollection",
           "LogThread", "PolicyCall", "RemoteCollection"]
