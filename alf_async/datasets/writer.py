"""`RldsWriter`: whole episodes into an RLDS dataset, a TFDS directory on disk.

The directory holds TFRecord shards of serialized episodes and TFDS's own
`dataset_info.json`, `features.json` and `metadata.json`, so that
`tfds.builder_from_directory(DIR).as_dataset(split="train")` reads it with
no code of this project. The metadata (TFDS's `MetadataDict`) holds what made
the dataset (`provenance`) and its episode and step counts.

Each `write()` is one new shard; the metadata is rewritten after it, so a
run that dies keeps every shard written before. An episode is one
`tf.train.Example` whose feature `steps/<field>` holds the field's `[L, ...]`
values flat, as TFDS's `ExampleSerializer` writes a `Dataset` feature
(`tests/datasets/test_writer.py` holds the two equal); TFDS's own path
visits every value in Python, 30 us a step against about 1 here.
"""

import os
from typing import Callable, Dict, List, Optional

import numpy as np

from alf_async.datasets.rlds_format import SPLIT, step_features, tfds_held_back, tfds_module

SETTING = "train.record_dataset"  # what a missing [datasets] extra is named after


class RldsWriter:
    """Writes episodes of RLDS steps as shards of one TFDS dataset.

    Thread-safety: one thread at a time.
    """

    def __init__(self, directory: str, observation_spec, action_spec, metadata: Dict,
                 same_producer: Optional[Callable[[Dict], Optional[str]]] = None,
                 name: str = "alf_async_episodes"):
        """
        Args:
            directory: the dataset's directory (made if missing).
            observation_spec, action_spec: unbatched tf-agents specs of a step.
            metadata: JSON values kept in the dataset's metadata (its provenance).
            same_producer: for a directory that already holds a dataset:
                `its metadata -> None` to append to it, or the reason it may
                not (None: never append).
            name: the TFDS dataset name (the shards' prefix).

        Raises:
            ValueError: the directory holds a dataset this writer may not append
                to, or another dataset's features (one line naming it).
        """
        from tensorflow_datasets.rlds import rlds_base  # pylint: disable=import-outside-toplevel
        tfds = tfds_module(SETTING)
        self._tfds = tfds
        self.directory = os.path.abspath(directory)
        features = step_features(observation_spec, action_spec, SETTING)
        config = rlds_base.DatasetConfig(
            name=name, observation_info=features.pop("observation"),
            action_info=features.pop("action"), reward_info=features.pop("reward"),
            discount_info=features.pop("discount"), step_metadata_info=features,
            overall_description="Episodes recorded by alf_async (RLDS).")
        identity = tfds.core.DatasetIdentity(name=name, version="1.0.0",
                                             data_dir=self.directory, module_name="")
        self._shard_lengths: List[int] = []
        self._num_bytes = 0
        self.episodes = self.steps = 0
        with tfds_held_back():
            self.info = rlds_base.build_info(config, identity, dict(metadata))
            self._resume(same_producer)
        self._steps_feature = self.info.features["steps"].feature
        for key, feature in self._steps_feature.items():
            if np.dtype(feature.np_dtype).kind not in "fiub":
                raise ValueError(f"{SETTING}: the step field {key} is {feature.np_dtype}; "
                                 f"a recorded dataset holds numbers only")
        self._template = tfds.core.ShardedFileTemplate(
            data_dir=self.directory, dataset_name=name, split=SPLIT,
            filetype_suffix="tfrecord", template="{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_INDEX}")

    def _resume(self, same_producer) -> None:
        """Continues the dataset already in the directory, or refuses it."""
        if not os.path.isfile(os.path.join(self.directory, "dataset_info.json")):
            return
        there = self._tfds.builder_from_directory(self.directory).info
        why = ("it is not appended to" if same_producer is None
               else same_producer(dict(there.metadata or {})))
        if why is None and there.features.to_json() != self.info.features.to_json():
            why = "its steps have other features"
        if why is not None:
            raise ValueError(f"{SETTING}={self.directory} already holds another dataset "
                             f"({why}): give a new directory")
        split = there.splits[SPLIT]
        self._shard_lengths = list(split.shard_lengths)
        self._num_bytes = int(split.num_bytes)
        self.episodes = int(there.metadata.get("episodes", 0))
        self.steps = int(there.metadata.get("steps", 0))

    def encode(self, steps: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """`[L]` arrays of one episode as TFDS's serializer takes them (dtype, shape
        checked): `{"steps": {field: [L, ...]}}`."""
        encoded = {}
        for key, feature in self._steps_feature.items():
            value = np.asarray(steps[key], dtype=feature.np_dtype)
            if value.shape[1:] != tuple(feature.shape):
                raise ValueError(f"an episode's {key} has steps of shape {value.shape[1:]}, "
                                 f"the dataset's are {tuple(feature.shape)}")
            encoded[key] = value
        return {"steps": encoded}

    def serialize(self, steps: Dict[str, np.ndarray]) -> bytes:
        """One episode (`rlds_format.to_rlds`'s `[L]` arrays) as a serialized
        `tf.train.Example`, the record TFDS's serializer makes of it."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        features = {}
        for key, value in self.encode(steps)["steps"].items():
            flat = value.reshape(-1)
            if flat.dtype.kind == "f":
                feature = tf.train.Feature(float_list=tf.train.FloatList(value=flat.tolist()))
            else:  # ints and bools, as int64
                feature = tf.train.Feature(int64_list=tf.train.Int64List(
                    value=flat.astype(np.int64).tolist()))
            features[f"steps/{key}"] = feature
        return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()

    def write(self, episodes: List[Dict[str, np.ndarray]]) -> None:
        """Writes `episodes` (each `rlds_format.to_rlds`'s `[L]` arrays) as one new shard,
        then the metadata."""
        if not episodes:
            return
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        os.makedirs(self.directory, exist_ok=True)
        path = self._template.sharded_filepath(shard_index=len(self._shard_lengths),
                                               num_shards=None)
        with tf.io.TFRecordWriter(os.fspath(path)) as shard:
            for episode in episodes:
                record = self.serialize(episode)
                shard.write(record)
                self._num_bytes += len(record)
        self._shard_lengths.append(len(episodes))
        self.episodes += len(episodes)
        self.steps += sum(len(e["reward"]) for e in episodes)
        self.write_metadata({})

    def write_metadata(self, more: Dict) -> None:
        """Rewrites TFDS's files of the dataset, its metadata updated with `more`."""
        if not self._shard_lengths:
            return
        tfds = self._tfds
        self.info.metadata.update(dict(more, episodes=self.episodes, steps=self.steps))
        self.info.set_splits(tfds.core.SplitDict([tfds.core.SplitInfo(
            name=SPLIT, shard_lengths=list(self._shard_lengths), num_bytes=self._num_bytes,
            filename_template=self._template)]))
        with tfds_held_back():
            self.info.write_to_directory(self.directory)
