"""Population-based training: members, their mutable settings, exploit and explore.

- `mutations.py`: `--mutate=BINDING:SPEC`, the settings a run may change at a
  resume (`Learner.mutable`), perturbed or resampled within bounds;
- `members.py`: a member is an ordinary run in its own root_dir, trained one
  interval at a time; its score, and what it reports it trains with;
- `exploit.py`: the bottom of the population copies a top member's checkpoint,
  whole or not at all;
- `lineage.py`: `root/pbt/lineage.jsonl`, and the report (a table and a plot);
- `settings.py`: the population's settings, checked before anything starts;
- `controller.py`: the loop, with every mutation checked against what the
  member really trains with.

The command is `python -m alf_async.pbt` (light: nothing here imports TensorFlow).
"""
