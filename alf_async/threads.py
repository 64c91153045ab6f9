"""The driver's thread kinds under their public names (DESIGN §2).

They live with their owners: `EnvThread` and `ActorThread` in
`alf_async.collection.threads`, `LogThread` next to the `Collector`,
`ReplayWriterThread` in `alf_async.batches.writer`, and their base,
`DriverThread`, in `alf_async.driver_thread`.
"""

from alf_async.batches.writer import ReplayWriterThread
from alf_async.collection.collector import LogThread
from alf_async.collection.threads import ActorThread, EnvThread
from alf_async.driver_thread import DriverThread, live_driver_threads

__all__ = ["ActorThread", "DriverThread", "EnvThread", "LogThread", "ReplayWriterThread",
           "live_driver_threads"]
