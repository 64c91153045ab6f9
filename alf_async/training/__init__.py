"""The run: what `python -m alf_async.train` does once its flags are checked.

- `run.py`: `train()` assembles a run, resumes it, loops until its budget is
  spent and saves it.
- `assembly.py`: the algorithm, learner, driver and learner loop, built from gin.
- `loop.py`: the training loop and its hooks (summaries, checkpoints,
  evaluation, the console line).
- `checkpoints.py`: what a root_dir keeps; `evaluation.py`: greedy episodes
  and the exported policy.
- `signals.py`, `gc_policy.py`: a command process's clean stop on a signal,
  and when it collects garbage.

Nothing is imported here: `import alf_async.training.gc_policy` stays light.
"""
