"""The learn-batch sources by name: `AsyncOffPolicyDriver.exp_replayer`.

A new kind of source is a class behind `contract.BatchSource` and one entry
in `SOURCES`: its class (whose gin options must stay unset when another
source is chosen) and a builder from the `SourceNeeds` the driver offers.
The per-item terms a class `wants_back` after each update are checked
against the algorithm's `item_terms` here, before anything is built.
"""

import inspect
from typing import Any, Callable, Dict, NamedTuple, Optional

import tensorflow as tf

from alf_async.batches.dataset import DatasetBatches
from alf_async.batches.fresh import FreshBatches
from alf_async.batches.hybrid import HybridBatches
from alf_async.batches.prioritized import PrioritizedReplayBatches
from alf_async.batches.uniform import UniformReplayBatches


class SourceNeeds(NamedTuple):
    """What the driver offers a source's builder.

    Attributes:
        collector: the `Collector`: `take(n)` unrolls, its `queues` (the learn
            queue's spec, unroll permits) and `coord`.
        algorithm: the `Algorithm` (replay stores what its `preprocess` needs).
        version: int64 scalar variable, the learner's update count.
        env_steps: int64 scalar variable, the learner's env steps.
        learn_queue_cap: Q, new unrolls per learn batch.
        pace: `pacing.Lockstep` or `pacing.FreeRunning`.
        seed: seeds sampling (None: random).
        replay_dir: where a replay buffer keeps its content (None: nowhere).
        env_name: the run's env id (a dataset of another env is refused).
    """
    collector: Any
    algorithm: Any
    version: tf.Variable
    env_steps: tf.Variable
    learn_queue_cap: int
    pace: Any
    seed: Optional[int]
    replay_dir: Optional[str]
    env_name: Optional[str] = None


class Source(NamedTuple):
    """A registered source: its class and how to build it."""
    source_class: type
    build: Callable[[SourceNeeds], Any]


def _fresh(needs: SourceNeeds) -> FreshBatches:
    return FreshBatches(needs.collector.take, needs.version, needs.learn_queue_cap,
                        needs.collector.queues.unroll_permits, needs.pace, needs.seed)


def _uniform(needs: SourceNeeds) -> UniformReplayBatches:
    return UniformReplayBatches(needs.collector.queues.learn_queue.spec, needs.algorithm,
                                needs.collector.coord.should_stop, needs.replay_dir)


def _prioritized(needs: SourceNeeds) -> PrioritizedReplayBatches:
    return PrioritizedReplayBatches(needs.collector.queues.learn_queue.spec, needs.algorithm,
                                    needs.collector.coord.should_stop,
                                    lambda: int(needs.env_steps), needs.replay_dir)


def _dataset(needs: SourceNeeds) -> DatasetBatches:
    return DatasetBatches(needs.collector.queues.learn_queue.spec, needs.algorithm,
                          needs.env_name, needs.seed)


def _hybrid(needs: SourceNeeds) -> HybridBatches:
    return HybridBatches(needs.collector.queues.learn_queue.spec, needs.algorithm,
                         needs.collector.coord.should_stop, needs.replay_dir, needs.env_name,
                         needs.seed)


SOURCES: Dict[str, Source] = {
    "one_time": Source(FreshBatches, _fresh),
    "uniform": Source(UniformReplayBatches, _uniform),
    "prioritized": Source(PrioritizedReplayBatches, _prioritized),
    "dataset": Source(DatasetBatches, _dataset),
    "hybrid": Source(HybridBatches, _hybrid),
}


def check_name(name: str) -> None:
    """Raises ValueError naming the setting unless `name` is a registered source."""
    if name not in SOURCES:
        raise ValueError(f"AsyncOffPolicyDriver.exp_replayer must be one of "
                         f"{', '.join(repr(n) for n in SOURCES)}, got {name!r}")


def check_options_unused(name: str, bound: Callable[[type], dict]) -> None:
    """Raises ValueError if an option of a source class that `name` does not build is
    set (`FreshBatches`' with replay, `PrioritizedReplayBatches`' without).

    Args:
        name: the chosen source.
        bound: `source_class -> {option: value}` of the options set (gin's
            bindings: `training.assembly` reads them); {} where none can be.
    """
    chosen = SOURCES[name].source_class
    for source in SOURCES.values():
        source_class = source.source_class
        if source_class is chosen:
            continue
        defaults = inspect.signature(source_class.__init__).parameters
        for option, value in bound(source_class).items():
            if value != defaults[option].default:
                raise ValueError(f"{source_class.__name__}.{option}={value!r} does not apply "
                                 f"to exp_replayer={name!r}; leave it unset")


def check_wants_back(name: str, algorithm) -> None:
    """Raises ValueError unless the algorithm's loss supplies every per-item term the
    source registered as `name` wants back (`wants_back` among its `item_terms`)."""
    wanted = SOURCES[name].source_class.wants_back
    missing = [term for term in wanted if term not in algorithm.item_terms]
    if missing:
        raise ValueError(f"exp_replayer={name!r} wants the per-item loss term "
                         f"{', '.join(repr(t) for t in missing)} back after each update, which "
                         f"{type(algorithm).__name__}'s loss does not supply (its item_terms: "
                         f"{tuple(algorithm.item_terms)}); use an algorithm that does "
                         f"(DQN, SAC)")


def build_source(name: str, needs: SourceNeeds):
    """The learn-batch source registered as `name`, built from `needs`.

    Raises:
        ValueError: an unknown name, or an algorithm whose loss lacks a term
            the source wants back (one line).
    """
    check_name(name)
    check_wants_back(name, needs.algorithm)
    return SOURCES[name].build(needs)
