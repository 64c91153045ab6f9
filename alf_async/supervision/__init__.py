"""Supervision: processes of a run kept alive, and faults injected to prove it.

- `supervisor.py`: `Supervisor` runs one process per `ChildSpec`, restarts
  what dies within a budget, stops them all without orphans.
- `spare.py`: warm spares, a command imported ahead and promoted on a restart.
- `chaos.py`: `python -m alf_async.supervision.chaos`, seeded faults around a
  launch and the ledger of what they did.

The command that starts a supervised run is `python -m alf_async.launch`.
"""
