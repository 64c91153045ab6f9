"""`EpisodeRecorder`: unrolls cut into whole episodes, written as an RLDS dataset.

Unrolls (`[T, B, ...]`) of one env carry B sub-env columns; a column's
episode may span several unrolls. The recorder keeps each env's steps back
to its oldest open episode's `FIRST` step and hands an episode to an
`RldsWriter` once its `LAST` step arrives. Steps before a column's first
`FIRST` (a resumed run's episodes in progress) and episodes unfinished at
`close()` are not written.
"""

from typing import Callable, Dict, List, Optional

import numpy as np

from alf_async.datasets.rlds_format import FIRST, LAST, MID, to_rlds


def step_columns(time_step, action, log_prob, policy_version) -> Dict[str, np.ndarray]:
    """The recorded fields of steps (`[..., B, ...]` each) by name: what `add_steps`
    takes, from a collection's unroll or from a played episode."""
    return dict(observation=time_step.observation, action=action,
                step_type=time_step.step_type, reward=time_step.reward,
                discount=time_step.discount, log_prob=log_prob, policy_version=policy_version)


def unroll_columns(unroll) -> Dict[str, np.ndarray]:
    """A numpy `Unroll`'s fields as `{name: [T, B, ...]}` (the recorded ones)."""
    experience = unroll.experience
    return step_columns(experience.time_step, experience.action, experience.log_prob,
                        experience.policy_version)


class _Stream:
    """One env's recent steps, time-major: `{field: [rows, B, ...]}` from global step
    index `offset`, kept back to the oldest open episode's FIRST step.

    Per column it tracks the global index of its latest FIRST and LAST steps,
    so that an episode is the steps from a FIRST to the next LAST (-1: none yet).
    """

    def __init__(self, columns: Dict[str, np.ndarray]):
        width = columns["step_type"].shape[1]
        self.rows = {k: np.empty((0,) + v.shape[1:], v.dtype) for k, v in columns.items()}
        self.offset = self.size = 0
        self.first = np.full(width, -1, np.int64)
        self.last = np.full(width, -1, np.int64)

    def append(self, columns: Dict[str, np.ndarray]) -> None:
        """Appends `[T, B, ...]` steps (copied), growing the rows when full."""
        length = len(columns["step_type"])
        if self.size + length > len(self.rows["step_type"]):
            capacity = max(2 * (self.size + length), 64)
            for key, rows in self.rows.items():
                grown = np.empty((capacity,) + rows.shape[1:], rows.dtype)
                grown[:self.size] = rows[:self.size]
                self.rows[key] = grown
        for key, value in columns.items():
            self.rows[key][self.size:self.size + length] = value
        self.size += length

    def steps(self, column: int, first: int, last: int) -> Dict[str, np.ndarray]:
        """Column `column`'s `[L]` steps from global index `first` to `last` (copies:
        the rows are reused)."""
        begin, end = first - self.offset, last - self.offset + 1
        return {k: rows[begin:end, column].copy() for k, rows in self.rows.items()}

    def trim(self) -> None:
        """Drops the rows no open episode needs (moving the rest to the front)."""
        open_ = self.first > self.last
        keep = int(self.first[open_].min()) if open_.any() else self.offset + self.size
        drop = keep - self.offset
        if drop <= 0:
            return
        for rows in self.rows.values():
            rows[:self.size - drop] = rows[drop:self.size]
        self.offset, self.size = keep, self.size - drop


class EpisodeRecorder:
    """Collects the episodes of every stream's columns and writes them in shards.

    An episode is a column's steps from a FIRST step to the next LAST one: a
    column's steps before its first FIRST (a resumed run's episodes in
    progress), an episode cut short by a new FIRST, and episodes unfinished at
    `close()` are not written. The bookkeeping is per unroll, in numpy; the
    per-episode work is one slice per field.

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
        self._streams: Dict[int, _Stream] = {}
        self._done: List[Dict[str, np.ndarray]] = []
        self._done_steps = 0

    def add(self, unroll) -> None:
        """Takes one numpy `Unroll` (`[T, B, ...]` leaves, a scalar `env_id`)."""
        self.add_steps(unroll_columns(unroll), int(unroll.env_id))

    def add_steps(self, columns: Dict[str, np.ndarray], env_id: int = 0,
                  which: Optional[np.ndarray] = None) -> None:
        """Takes `[T, B, ...]` steps (`unroll_columns`' fields) of env `env_id`'s B
        sub-envs, or of those where `which` (`[B]` bool) is set."""
        stream = self._streams.get(env_id) or self._streams.setdefault(env_id, _Stream(columns))
        step_type = columns["step_type"]
        if which is not None:  # the other columns' steps start and end nothing
            step_type = np.where(np.asarray(which, bool)[None], step_type, MID)
        index = stream.offset + stream.size + np.arange(len(step_type))[:, None]
        stream.append(columns)
        firsts = np.maximum.accumulate(
            np.vstack([stream.first[None], np.where(step_type == FIRST, index, -1)]), axis=0)
        lasts = np.maximum.accumulate(
            np.vstack([stream.last[None], np.where(step_type == LAST, index, -1)]), axis=0)
        for t, b in zip(*np.nonzero(step_type == LAST)):
            first, last_before = firsts[t + 1, b], lasts[t, b]
            if first >= 0 and first > last_before:  # a FIRST since the last LAST
                self._finish(stream.steps(b, int(first), int(index[t, 0])))
        stream.first, stream.last = firsts[-1], lasts[-1]
        stream.trim()
        if self._done_steps >= self._steps_per_shard:
            self.flush()

    def _finish(self, episode: Dict[str, np.ndarray]) -> None:
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
