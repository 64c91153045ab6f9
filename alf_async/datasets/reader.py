"""`load_steps`: an RLDS dataset's steps in memory, checked against a run's specs.

The dataset is read with TFDS alone (`tfds.builder_from_directory`), whoever
wrote it: this project's recorder, EnvLogger or another RLDS writer. Every
check fails with one line that names the setting (`DatasetBatches.dataset_dir`)
and what is wrong, before anything trains.
"""

import glob
import os
from typing import Dict, NamedTuple

import numpy as np
from tf_agents.specs import tensor_spec

from alf_async.datasets.rlds_format import (LAST, check_plain, from_rlds, tfds_held_back,
                                            tfds_module)

SETTING = "DatasetBatches.dataset_dir"
NEEDED = ("observation", "action", "reward", "discount", "is_first", "is_last")
READ_BATCH = 65_536  # steps per tf.data batch while loading


class Steps(NamedTuple):
    """A dataset's steps, episodes one after another, in this project's convention.

    Attributes:
        fields: `[N, ...]` arrays: `observation`, `action`, `step_type`,
            `reward`, `discount`, `log_prob`, `policy_version`.
        episode_last: `[N]` int64, the index of the `LAST` step of each
            step's episode.
        metadata: the dataset's metadata (its provenance; {} if none).
    """
    fields: Dict[str, np.ndarray]
    episode_last: np.ndarray
    metadata: Dict

    @property
    def num_episodes(self) -> int:
        return int(np.sum(self.fields["step_type"] == LAST))


def _builder(directory: str):
    tfds = tfds_module(SETTING)
    if not os.path.isfile(os.path.join(directory, "dataset_info.json")):
        raise ValueError(f"{SETTING}={directory} is not a dataset directory (no "
                         f"dataset_info.json there)")
    return tfds.builder_from_directory(directory)


def _check_features(directory: str, features, observation_spec, action_spec) -> None:
    """Raises ValueError naming a missing field or a spec that differs from the run's."""
    steps = features["steps"].feature
    for key in NEEDED:
        if key not in steps:
            raise ValueError(f"{SETTING}={directory} has no step field {key!r}, which "
                             f"learning from it needs (its fields: {sorted(steps)})")
    for key, spec in (("observation", observation_spec), ("action", action_spec)):
        spec = tensor_spec.from_spec(spec)
        check_plain(spec, key)
        feature = steps[key]
        theirs = (tuple(feature.shape), np.dtype(feature.np_dtype).name)
        ours = (tuple(spec.shape), spec.dtype.name)
        if theirs != ours:
            raise ValueError(f"{SETTING}={directory} holds {key}s of shape {theirs[0]} and "
                             f"dtype {theirs[1]}; this run's {key} spec is {ours[0]} "
                             f"{ours[1]}")


def _read(directory: str, builder) -> Dict[str, np.ndarray]:
    """Every step of the train split, `[N]` arrays, episodes in order."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    tfds = tfds_module(SETTING)
    episodes = builder.as_dataset(split="train", shuffle_files=False)
    steps = episodes.flat_map(lambda episode: episode["steps"]).batch(READ_BATCH)
    try:
        parts = list(tfds.as_numpy(steps))
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as error:
        raise ValueError(f"{SETTING}={directory}: {_bad_shard(directory)} cannot be read "
                         f"({type(error).__name__}: {str(error).splitlines()[0]})") from None
    if not parts:
        raise ValueError(f"{SETTING}={directory} holds no steps")
    return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}


def _bad_shard(directory: str) -> str:
    """The first shard in `directory` whose records do not read back, by name."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    for path in sorted(glob.glob(os.path.join(directory, "*.tfrecord-*"))):
        try:
            for _ in tf.data.TFRecordDataset(path):
                pass
        except tf.errors.OpError:
            return f"shard {os.path.basename(path)}"
    return "a shard"


def _episode_last(step_type: np.ndarray) -> np.ndarray:
    """`[N]` index of the LAST step that ends each step's episode."""
    lasts = np.flatnonzero(step_type == LAST)
    return lasts[np.searchsorted(lasts, np.arange(len(step_type)))]


def load_steps(directory, observation_spec, action_spec, env_name: str = None) -> Steps:
    """Reads an RLDS dataset's steps, checked against a run's env and specs.

    Args:
        directory: the dataset's directory (`tfds.builder_from_directory`'s), or
            a list of them: their steps one after the other (a mixed dataset,
            e.g. random and medium play), with the metadata of each in `parts`.
        observation_spec, action_spec: the run's unbatched specs.
        env_name: the run's env; refused if a dataset names another.

    Raises:
        ValueError: a directory that is not a dataset, another env, other
            specs, a missing field or a shard that does not read (one line).
        MissingExtraError: no `[datasets]` extra.
    """
    directories = [directory] if isinstance(directory, str) else list(directory)
    if not directories:
        raise ValueError(f"{SETTING} is an empty list: give one dataset directory or more")
    with tfds_held_back():
        loaded = [_load(os.path.abspath(d), observation_spec, action_spec, env_name)
                  for d in directories]
    if len(loaded) == 1:
        return loaded[0]
    fields = {key: np.concatenate([part.fields[key] for part in loaded])
              for key in loaded[0].fields}
    return Steps(fields, _episode_last(fields["step_type"]),
                 dict(parts=[part.metadata for part in loaded]))


def _load(directory: str, observation_spec, action_spec, env_name) -> Steps:
    builder = _builder(directory)
    metadata = dict(builder.info.metadata or {})
    theirs = metadata.get("env_name")
    if env_name is not None and theirs is not None and theirs != env_name:
        raise ValueError(f"{SETTING}={directory} was recorded on {theirs}, not on this "
                         f"run's {env_name}")
    _check_features(directory, builder.info.features, observation_spec, action_spec)
    fields = from_rlds(_read(directory, builder))
    return Steps(fields, _episode_last(fields["step_type"]), metadata)
