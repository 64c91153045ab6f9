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

- `queues.py`: `NestFIFOQueue` and `TFQueues`, the TF queues that carry
  nested records between these threads (and to the learner).

The thread kinds under their public names: `EnvThread`, `ActorThread`,
`LogThread`, and their base `DriverThread` (`driver_thread.py`).
"""

import importlib

# Public name -> the module that holds it, imported on first use (PEP 562): the
# light modules here (`restart_budget`, `pacing`) do not pull in TensorFlow.
_HOMES = {
    "ActorThread": "threads", "EnvThread": "threads", "Collector": "collector",
    "LogThread": "collector", "DriverThread": "driver_thread", "LocalCollection": "local",
    "PolicyCall": "policy_call", "RemoteCollection": "remote",
}
__all__ = sorted(_HOMES)


def __getattr__(name):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
