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
(`tests/datasets/test_writer.py` holds the two equal). The value lists are
parsed from their packed bytes (`packed`, `varints`) rather than built from
Python lists of numbers, which TFDS's own path and `tolist()` both visit one
value at a time.
"""

import os
from typing import Callable, Dict, List, Optional

import numpy as np

from alf_async.datasets.rlds_format import SPLIT, step_features, tfds_held_back, tfds_module

SETTING = "train.record_dataset"  # what a missing [datasets] extra is named after


def varints(values: np.ndarray) -> bytes:
    """Integers as protobuf's int64 varints, one after another: 7 bits a byte, low
    first, the high bit set on all but a value's last byte (a negative value, as
    two's complement, takes 10 bytes)."""
    v = np.asarray(values).astype(np.int64).view(np.uint64)
    if not len(v) or v.max() < 128:
        return v.astype(np.uint8).tobytes()
    groups = (v[:, None] >> (7 * np.arange(10, dtype=np.uint64))) & np.uint64(0x7F)
    significant = groups != 0
    lengths = np.where(significant.any(1), 10 - np.argmax(significant[:, ::-1], axis=1), 1)
    used = np.arange(10) < lengths[:, None]
    more = np.arange(10) < lengths[:, None] - 1
    return (groups.astype(np.uint8) | (more * 0x80).astype(np.uint8))[used].tobytes()


def message_field(number: int, payload: bytes) -> bytes:
    """Protobuf's encoding of a length-delimited field `number` (a message, a string
    or a packed list) holding `payload`: its tag, its length as a varint, the bytes."""
    size, head = len(payload), bytearray([number << 3 | 2])
    while size > 0x7F:
        head.append(size & 0x7F | 0x80)
        size >>= 7
    head.append(size)
    return bytes(head) + payload


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
        `tf.train.Example`, the record TFDS's serializer makes of it.

        The bytes are put together here (`message_field`): an `Example`'s field
        1 is its `Features`, whose map entries (field 1) hold a key (1) and a
        `Feature` (2), whose `FloatList` (2) or `Int64List` (3) packs its values
        in field 1. Building the messages in Python costs 5 times as much.
        """
        entries = []
        for key, value in sorted(self.encode(steps)["steps"].items()):
            flat = value.reshape(-1)
            if flat.dtype.kind == "f":
                feature = message_field(2, message_field(1, flat.astype("<f4").tobytes()))
            else:  # ints and bools, as int64
                feature = message_field(3, message_field(1, varints(flat)))
            entries.append(message_field(1, message_field(1, f"steps/{key}".encode())
                                         + message_field(2, feature)))
        return message_field(1, b"".join(entries))

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
