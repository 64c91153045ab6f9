"""Choosing where TensorFlow computes: its op thread pools, and the learner's devices
(a `tf.distribute.Strategy`), from gin."""

import functools
import os
from typing import Optional, Sequence

import gin
import tensorflow as tf
from absl import logging


@gin.configurable(module="alf_async")
def op_threads(intra_op: int = 0, inter_op: int = 0) -> None:
    """Sizes TensorFlow's op thread pools for this process; 0 leaves a pool as it is.

    Takes effect before TensorFlow runs its first op (`assembly.build` and
    the actor process call it first); later, in a process already running
    (a notebook, a test), it logs one warning and changes nothing. Set here,
    the sizes win over the commands' `--tf_threads`.

    Args:
        intra_op: threads one op (a matmul) splits its work over; 1: each op
            on one thread, which small networks prefer (their ops lose more
            in the hand-offs than they gain: docs/off-policy.md).
        inter_op: threads that run the independent ops of compiled calls.

    Raises:
        ValueError: a size below 0 (one line naming the setting).
    """
    threading = tf.config.threading
    for name, size, get, set_ in [
            ("intra_op", intra_op, threading.get_intra_op_parallelism_threads,
             threading.set_intra_op_parallelism_threads),
            ("inter_op", inter_op, threading.get_inter_op_parallelism_threads,
             threading.set_inter_op_parallelism_threads)]:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"op_threads.{name} must be an integer >= 0, got {size!r}")
        if size and get() != size:
            try:
                set_(size)
            except RuntimeError:  # a speed setting: the run goes on, as this process runs
                logging.warning("op_threads.%s=%d not applied: TensorFlow already runs with "
                                "%d in this process (it applies to a new one)", name, size,
                                get())


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
                    num_logical_cpus: int = 0,
                    collective_timeout_secs: float = 300.0) -> tf.distribute.Strategy:
    """The learner's distribution strategy.

    Args:
        kind: 'default' (one device, no distribution), 'mirrored'
            (data-parallel over `devices`, all-reduced gradients) or
            'multi_worker' (data-parallel over the worker processes of
            `TF_CONFIG`, each over its own GPUs or CPU).
        devices: device names for 'mirrored'; None: every GPU, or every
            logical CPU when there is no GPU.
        num_logical_cpus: if > 0, first split the host CPU into this many
            logical devices (CPU-only multi-device runs and tests).
        collective_timeout_secs: 'multi_worker': a gradient all-reduce that
            waits this long for a worker fails (a dead worker stops the others).

    Returns:
        A `tf.distribute.Strategy`.
    """
    if num_logical_cpus > 0:
        split_host_cpu(num_logical_cpus)
    if kind == "default":
        return tf.distribute.get_strategy()
    if kind == "multi_worker":
        return _multi_worker_strategy(collective_timeout_secs)
    if kind != "mirrored":
        raise ValueError(f"create_strategy.kind must be 'default', 'mirrored' or "
                         f"'multi_worker', got {kind!r}")
    if devices is None:
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus or tf.config.list_logical_devices("CPU")]
    return _mirrored_strategy(tuple(devices))


@functools.lru_cache(maxsize=None)
def _mirrored_strategy(devices) -> tf.distribute.MirroredStrategy:
    # One strategy per device set and process: two MirroredStrategy objects
    # over the same devices can hand out clashing collective-op keys.
    return tf.distribute.MirroredStrategy(devices=list(devices))


@functools.lru_cache(maxsize=None)
def _multi_worker_strategy(timeout_secs: float) -> tf.distribute.MultiWorkerMirroredStrategy:
    if "TF_CONFIG" not in os.environ:
        raise ValueError("create_strategy.kind='multi_worker' needs TF_CONFIG (the cluster's "
                         "worker addresses and this worker's index) in the environment")
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=timeout_secs))


def worker_index(strategy: tf.distribute.Strategy) -> int:
    """This process's index among the learner's workers (0, the chief, when only one)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    return int(resolver.task_id or 0) if resolver is not None and resolver.task_type else 0


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """Worker processes of the learner (1 unless 'multi_worker')."""
    return getattr(strategy.extended, "_num_workers", 1)


def local_devices(strategy: tf.distribute.Strategy) -> list:
    """Names of this process's replica devices."""
    if isinstance(strategy, (tf.distribute.MirroredStrategy,
                             tf.distribute.MultiWorkerMirroredStrategy)):
        return list(strategy.extended.worker_devices)
    default = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    return [default[0].name]
