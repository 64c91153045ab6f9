"""`ColumnPacking`: a nest stored in Reverb as one column per dtype.

Reverb's cost per inserted or sampled item grows with the item's columns:
each column is a chunk to compress, send, look up and decompress. A DQN
`Segment` has eight leaves of three dtypes; packed into three columns, a
sampled item costs a third of the CPU and an insert under half
(docs/off-policy.md, "DQN at the learner's speed"). Packing is lossless: the leaves of one
dtype are flattened and concatenated in the nest's order, and cut apart
again by their static sizes.
"""

from typing import Any, Dict, List, Tuple

import numpy as np
import tensorflow as tf


class ColumnPacking:
    """Packs nests of one spec into `{dtype name: [L]}` and unpacks batches of them.

    Thread-safety: stateless after construction; safe from any thread.
    """

    def __init__(self, spec: Any):
        """
        Args:
            spec: nest of fully defined `tf.TensorSpec`s (one item's leaves).
        """
        self._structure = spec
        flat = tf.nest.flatten(spec)
        for leaf in flat:
            if not leaf.shape.is_fully_defined():
                raise ValueError(f"ColumnPacking needs static shapes, got {leaf}")
        names = sorted({leaf.dtype.name for leaf in flat})
        # Per column: its dtype and the (leaf index, shape) it holds, in nest order.
        self._columns: Dict[str, Tuple[tf.DType, List[Tuple[int, tf.TensorShape]]]] = {
            name: (tf.as_dtype(name), [(i, leaf.shape) for i, leaf in enumerate(flat)
                                       if leaf.dtype.name == name])
            for name in names}
        self.spec = {name: tf.TensorSpec([sum(shape.num_elements() for _, shape in leaves)],
                                         dtype)
                     for name, (dtype, leaves) in self._columns.items()}

    def pack(self, nest: Any) -> Dict[str, np.ndarray]:
        """One item's numpy nest -> `{dtype name: [L] array}` (the Reverb columns)."""
        flat = tf.nest.flatten(nest)
        return {name: np.concatenate([np.ravel(flat[i]) for i, _ in leaves]).astype(
                    dtype.as_numpy_dtype, copy=False)
                for name, (dtype, leaves) in self._columns.items()}

    def unpack(self, columns: Dict[str, tf.Tensor]) -> Any:
        """A sampled batch `{dtype name: [S, L]}` -> the nest with `[S, ...]` leaves (TF ops)."""
        flat = [None] * sum(len(leaves) for _, leaves in self._columns.values())
        for name, (_, leaves) in self._columns.items():
            parts = tf.split(columns[name], [shape.num_elements() for _, shape in leaves],
                             axis=1)
            for (i, shape), part in zip(leaves, parts):
                flat[i] = tf.reshape(part, [-1] + shape.as_list())
        return tf.nest.pack_sequence_as(self._structure, flat)
