"""Chaos: a supervised run under seeded faults, and what it came to.

    python -m alf_async.chaos --gin_file=gin_configs/ppo_chaos.gin --root_dir=runs/chaos/1

- `run.py`: the command (`__main__.py` runs it): the launch it starts, the
  faults it injects on a schedule, the ledger it prints and writes.
- `faults.py`: the fault kinds, their seeded schedule, the run's processes
  (`LaunchTree`) and the `Injector`.
- `ledger.py`: what a run and its faults came to, read from its typed events.
- `ray_cluster.py`: a Ray cluster of simulated nodes on this host, for
  `--backend=ray` chaos runs and the Ray tests.

It stands above `supervision/` (which keeps a run alive) and reads a run from
outside, through `runs/layout` and `events`.
"""
