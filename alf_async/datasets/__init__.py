"""Experience as RLDS datasets (TFDS directories on disk): written while a run trains
or a trained policy plays, read back for offline and hybrid learning.

- `rlds_format`: the RLDS step features of a run's specs, and the moves between
  this project's time-step convention and RLDS's.
- `writer`: `RldsWriter`, episodes to TFDS shards plus the dataset's metadata.
- `recorder`: `EpisodeRecorder`, unrolls (`[T, B, ...]`) cut into episodes.
- `provenance`: what the dataset's metadata says made it.
- `reader`: `load_steps`, a dataset's steps in memory, checked against a run's specs.
- `windows`: `EpochWindows`, windows of steps that never cross an episode's end.

Needs the `[datasets]` extra (`tensorflow-datasets`, `rlds`).
"""
