"""Learning: SGD on learn batches over a `tf.distribute` strategy.

- `learner.py`: `Learner` (`place` a `[Q, T, B, ...]` batch on the devices,
  `update` = epochs x minibatches in one `tf.function`).
- `prefetch.py`: `LearnerLoop`, one iteration (fetch, place, update), and the
  `PrefetchThread` that fetches and places ahead of the update.
- `optimizers.py`, `devices.py` (op thread pools, the strategy).

The learner trains an algorithm (`alf_async.algorithms`, below it): it imports
the algorithms' contract, never the other way round. Nothing is imported here.
"""
