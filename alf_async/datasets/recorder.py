"""`EpisodeRecorder`: unrolls cut into whole episodes, written as an RLDS dataset.

Unrolls (`[T, B, ...]`) of one env carry B sub-env columns; a column's
episode may span several unrolls. The recorder keeps each column's steps
since its last `FIRST` step and hands the episode to an `RldsWriter` once its
`LAST` step arrives. Steps before a column's first `FIRST` (a resumed run's
episodes in progress) and episodes unfinished at `close()` are not written.
"""

from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from alf_async.datasets.rlds_format import FIRST, LAST, to_rlds


def unroll_columns(unroll) -> Dict[str, np.ndarray]:
    """A numpy `Unroll`'s fields as `{name: [T, B, ...]}` (the recorded ones)."""
    experience = unroll.experience
    time_step = experience.time_step
    return dict(observation=time_step.observation, action=experience.action,
                step_type=time_step.step_type, reward=time_step.reward,
                discount=time_step.discount, log_prob=experience.log_prob,
                policy_version=experience.policy_version)


class EpisodeRecorder:
    """Collects the episodes of every stream's columns and writes them in shards.

    Thread-safety: `add()` by one thread (the log thread); `close()` once no
    thread adds (the trainer's, after the driver stopped).

    Attributes:
        writer: the `RldsWriter`.
    """

    def __init__(self, writer, steps_per_shard: int = 100_000,
                 final_metadata: Optional[Callable[[], Dict]] = None):
        """
        Args:
            writer: an `RldsWriter` (or anything with its `write` and
                `write_metadata`).
            steps_per_shard: about this many steps make one shard (written
                when the episode that reaches it ends).
            final_metadata: `() -> {key: JSON value}` added to the dataset's
                metadata at `close()` (the final policy's weights digest).
        """
        self.writer = writer
        self._steps_per_shard = steps_per_shard
        self._final_metadata = final_metadata
        self._open: Dict[Tuple[int, int], List[Dict[str, np.ndarray]]] = {}
        self._done: List[Dict[str, np.ndarray]] = []
        self._done_steps = 0

    def add(self, unroll) -> None:
        """Takes one numpy `Unroll` (`[T, B, ...]` leaves, a scalar `env_id`)."""
        self.add_steps(unroll_columns(unroll), int(unroll.env_id))

    def add_steps(self, columns: Dict[str, np.ndarray], env_id: int = 0,
                  which: Optional[np.ndarray] = None) -> None:
        """Takes `[T, B, ...]` steps (`unroll_columns`' fields) of env `env_id`'s B
        sub-envs, or of those where `which` (`[B]` bool) is set."""
        width = columns["step_type"].shape[1]
        for b in range(width) if which is None else np.flatnonzero(which):
            self._add_column((env_id, int(b)), {k: v[:, b] for k, v in columns.items()})
        if self._done_steps >= self._steps_per_shard:
            self.flush()

    def _add_column(self, key: Tuple[int, int], steps: Dict[str, np.ndarray]) -> None:
        """Appends one column's `[T]` steps to its episode, ending those that end."""
        step_type = steps["step_type"]
        start = 0
        if key not in self._open:  # wait for the column's first FIRST step
            firsts = np.flatnonzero(step_type == FIRST)
            if not len(firsts):
                return
            start = int(firsts[0])
            self._open[key] = []
        for end in np.flatnonzero(step_type[start:] == LAST) + start:
            self._open[key].append({k: v[start:end + 1] for k, v in steps.items()})
            self._finish(self._open[key])
            self._open[key] = []
            start = int(end) + 1
        if start < len(step_type):
            self._open[key].append({k: v[start:] for k, v in steps.items()})

    def _finish(self, pieces: List[Dict[str, np.ndarray]]) -> None:
        episode = {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}
        if episode["step_type"][0] != FIRST:  # not from a FIRST step: not an episode
            return
        self._done.append(to_rlds(episode))
        self._done_steps += len(episode["step_type"])

    def flush(self) -> None:
        """Writes the finished episodes as one shard."""
        self.writer.write(self._done)
        self._done, self._done_steps = [], 0

    def close(self) -> None:
        """Writes what is finished, then the final metadata; unfinished episodes are
        left out."""
        self.flush()
        self.writer.write_metadata(self._final_metadata() if self._final_metadata else {})


def open_recorder(directory: str, env_name: str, observation_spec, action_spec,
                  producer: Dict, final_metadata: Optional[Callable[[], Dict]] = None,
                  steps_per_shard: int = 100_000) -> EpisodeRecorder:
    """An `EpisodeRecorder` into the RLDS dataset at `directory`, its metadata the
    env, the specs and `producer` (`provenance.dataset_metadata`).

    A directory that holds a dataset of the same producer (kind and root_dir),
    env and specs is appended to (a resumed run); any other is refused.

    Raises:
        ValueError: the directory holds another dataset (one line).
        MissingExtraError: no `[datasets]` extra.
    """
    # pylint: disable=import-outside-toplevel
    from alf_async.datasets.provenance import dataset_metadata, same_producer
    from alf_async.datasets.writer import RldsWriter
    metadata = dataset_metadata(env_name, observation_spec, action_spec, producer)
    writer = RldsWriter(directory, observation_spec, action_spec, metadata,
                        same_producer(metadata))
    return EpisodeRecorder(writer, steps_per_shard, final_metadata)
