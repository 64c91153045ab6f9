"""Supervision: processes of a run kept alive, and where they run (faults injected
to prove it are `alf_async.chaos`). The command that starts a supervised run is
`python -m alf_async.launch`.

- `supervisor.py`: `Supervisor` runs one process per `ChildSpec` through a
  backend, restarts what dies within a budget, stops them all without orphans.
- `backend.py`: the interface a backend gives the supervisor (place the
  learner, start a command, see its exit, signal it, keep its warm spare,
  close); `backends.py`: the backends by name (`BACKENDS`), as `--backend`
  chooses them.
- `local.py`: the local backend, subprocesses of the launch on this host.
- `ray_backend.py` and `command_host.py`: the Ray backend, each process hosted
  by a Ray actor on a node of a Ray cluster.
- `spare.py`: warm spares, a command imported ahead and promoted on a restart.
"""
