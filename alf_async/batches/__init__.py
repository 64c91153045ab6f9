"""Learn batches: how the learner's batches are made from unrolls, behind one interface.

A source (`contract.BatchSource`) gives the driver `shape(T, B)` (the
batch's `(Q', T', B')`), `threads(coord, queues)`, `next(updates_ahead)`
(None once stopped), `describe(env_steps)`, `summaries()`, `diagnose()`,
`save()` and `close()`, and hears back from the learner loop through
`after_update(batch, per_item)`: the per-item terms of the algorithm's loss
it declared it `wants_back`. `registry.SOURCES` names the sources.

- `FreshBatches` (`exp_replayer='one_time'`): Q new unrolls per batch, with
  the `max_policy_lag` filter, deterministic permits and mix-in replay as
  options.
- `UniformReplayBatches` (`exp_replayer='uniform'`): windows sampled from a
  Reverb replay table at a controlled replay ratio.
- `PrioritizedReplayBatches` (`exp_replayer='prioritized'`): segments sampled
  by priority, their TD errors written back after each update (by a
  `PriorityWriterThread`, off the learner's thread).

Replay is three pieces: `ReplayBuffer` (settings, rate, segments), a table
behind `table.ReplayTable` (`reverb_table.ReverbTable`), and a sampling shape
(`shapes`: windows, every window of a segment, whole sequences). The segments,
the writer threads and IMPALA's mix-in replay (`UnrollReplay`) live here too.

`LearnFeed` is where the learner takes a source's batches (the driver's
`get_training_exps()`, the learner loop's prefetch), bounded by the
starvation watchdog.
"""

from alf_async.batches.feed import LearnFeed
from alf_async.batches.fresh import FreshBatches
from alf_async.batches.prioritized import PrioritizedReplayBatches
from alf_async.batches.replay_buffer import ReplayBuffer
from alf_async.batches.uniform import UniformReplayBatches

__all__ = ["FreshBatches", "LearnFeed", "PrioritizedReplayBatches", "ReplayBuffer",
           "UniformReplayBatches"]
