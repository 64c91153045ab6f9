"""The weights table: the learner's variables and policy version, for actor processes.

One item holds a header, the `Stamp` as int64s, and the values of every
variable of the algorithm, in `tf.Module.variables` order (the same in every
process built from the same gin configuration). The table keeps only the
newest item.
"""

from typing import NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf

from alf_async.extras import import_reverb

TABLE = "weights"


def weights_table():
    """A table holding the newest weights; sampling waits until there are some."""
    reverb = import_reverb("remote actors")
    return reverb.Table(TABLE, sampler=reverb.selectors.Fifo(),
                        remover=reverb.selectors.Fifo(), max_size=1,
                        rate_limiter=reverb.rate_limiters.MinSize(1))


class Stamp(NamedTuple):
    """What comes with the weights.

    `learner_id` is drawn anew by every learner process, so that an actor
    takes the weights of a restarted learner even where its (restored)
    `version` is lower than the one the actor acted with before.
    """
    learner_id: int
    version: int
    max_actors: int


def publish(client, variables: Sequence[tf.Variable], stamp: Stamp) -> None:
    """Replaces the table's weights by `variables`' values, with `stamp`."""
    header = np.array(stamp, np.int64)
    client.insert([header, *[v.numpy() for v in variables]], priorities={TABLE: 1.0})


class IncompatibleWeights(ValueError):
    """The learner's variables do not match this process's algorithm."""


def pull(client, variables: Sequence[tf.Variable], timeout_secs: float,
         last: Optional[Stamp] = None) -> Optional[Stamp]:
    """Reads the newest weights into `variables` if there are any.

    Returns:
        The `Stamp` of the weights assigned, or None when the table is still
        empty or holds the weights of `last`'s learner at a version not
        above `last`'s.

    Raises:
        IncompatibleWeights: different variable count, shapes or dtypes
            (the actor was not built from the learner's gin configuration).
        Exception: reverb's or gRPC's own error when the server cannot be
            reached in `timeout_secs`.
    """
    if client.server_info(timeout=max(1, int(np.ceil(timeout_secs))))[TABLE].current_size < 1:
        return None
    header, *values = next(client.sample(TABLE, 1, emit_timesteps=False)).data
    header, values = header[0], [value[0] for value in values]  # insert() adds a time axis
    stamp = Stamp(*[int(x) for x in header])
    if last is not None and stamp.learner_id == last.learner_id and (
            stamp.version <= last.version):
        return None
    _check(values, variables)
    for variable, value in zip(variables, values):
        variable.assign(value)
    return stamp


def _check(values: Sequence[np.ndarray], variables: Sequence[tf.Variable]) -> None:
    mine = [(tuple(v.shape), v.dtype.as_numpy_dtype) for v in variables]
    theirs = [(tuple(x.shape), x.dtype.type) for x in values]
    if mine != theirs:
        first: Optional[int] = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b),
                                    min(len(mine), len(theirs)))
        raise IncompatibleWeights(
            f"the learner's weights do not fit this actor's algorithm ({len(theirs)} vs "
            f"{len(mine)} variables; first difference at variable {first}): start actors "
            f"with the learner's --gin_file and --gin_param")
