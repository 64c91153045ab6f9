"""Choosing the learner's devices: a `tf.distribute.Strategy` from gin."""

import functools
from typing import Optional, Sequence

import gin
import tensorflow as tf


def split_host_cpu(num_logical_cpus: int) -> None:
    """Splits the host CPU into `num_logical_cpus` logical devices.

    Lets the multi-device learner run (and be tested) without GPUs. Must run
    before TensorFlow initialises its devices, i.e. before the first op.

    Raises:
        RuntimeError: TensorFlow's devices are already initialised with a
            different split.
    """
    cpu = tf.config.list_physical_devices("CPU")[0]
    wanted = [tf.config.LogicalDeviceConfiguration()] * num_logical_cpus
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == num_logical_cpus:
        return
    try:
        tf.config.set_logical_device_configuration(cpu, wanted)
    except RuntimeError as error:
        raise RuntimeError(
            f"create_strategy.num_logical_cpus={num_logical_cpus} must be set before "
            f"TensorFlow initialises its devices: {error}") from None


@gin.configurable(module="alf_async")
def create_strategy(kind: str = "default", devices: Optional[Sequence[str]] = None,
                    num_logical_cpus: int = 0) -> tf.distribute.Strategy:
    """The learner's distribution strategy.

    Args:
        kind: 'default' (one device, no distribution) or 'mirrored'
            (data-parallel over `devices`, all-reduced gradients).
        devices: device names for 'mirrored'; None: every GPU, or every
            logical CPU when there is no GPU.
        num_logical_cpus: if > 0, first split the host CPU into this many
            logical devices (CPU-only multi-device runs and tests).

    Returns:
        A `tf.distribute.Strategy`.
    """
    if num_logical_cpus > 0:
        split_host_cpu(num_logical_cpus)
    if kind == "default":
        return tf.distribute.get_strategy()
    if kind != "mirrored":
        raise ValueError(f"create_strategy.kind must be 'default' or 'mirrored', got {kind!r}")
    if devices is None:
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus or tf.config.list_logical_devices("CPU")]
    return _mirrored_strategy(tuple(devices))


@functools.lru_cache(maxsize=None)
def _mirrored_strategy(devices) -> tf.distribute.MirroredStrategy:
    # One strategy per device set and process: two MirroredStrategy objects
    # over the same devices can hand out clashing collective-op keys.
    return tf.distribute.MirroredStrategy(devices=list(devices))
