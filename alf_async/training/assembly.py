"""Assembly: the run's settings records, read from gin, and the algorithm, learner,
driver and learner loop, built from those records.

The one place that reads gin's bindings for settings: `run_settings()`
builds the records (`training.settings`) that the trainer and an actor
process hand to their readers. Every size rule is checked while building,
before any thread starts.
"""

import dataclasses
import functools
import inspect
import os
from typing import Optional

import gin
import tensorflow as tf

from alf_async.batches import registry
from alf_async.batches.replay_buffer import ReplayBuffer
from alf_async.learning.devices import create_strategy, op_threads, worker_index
from alf_async.drivers import AsyncOffPolicyDriver
from alf_async.environments import create_environment, first_env
from alf_async.learning.learner import Learner
from alf_async.learning.prefetch import LearnerLoop
from alf_async.remote import ReverbService, run_secret
# Registers `ActorProcess`: the remote configs bind it (for their actors) beside the learner's.
from alf_async.remote import actor_process  # noqa: F401  pylint: disable=unused-import
from alf_async.training.settings import (DriverSizes, EnvSettings, ReplaySettings, RunSettings,
                                         Settings)


def configured(configurable, names) -> dict:
    """`{name: value}` of `configurable`'s parameters `names`: gin's bindings, else
    the defaults of its signature (a class's: its `__init__`'s)."""
    defaults = inspect.signature(configurable).parameters
    bound = _bindings(configurable)
    return {name: bound.get(name, defaults[name].default) for name in names}


def _bindings(configurable) -> dict:
    """gin's bindings of `configurable` ({} where it is not gin-configurable)."""
    try:
        return gin.get_bindings(configurable)
    except ValueError:
        return {}


def _fields(record) -> list:
    return [field.name for field in dataclasses.fields(record)]


def run_settings(run: Optional[RunSettings] = None) -> Settings:
    """The run's settings records, read from gin once.

    Args:
        run: the `RunSettings` (None: gin's `train.*` bindings, `RunSettings()`).

    Raises:
        ValueError: gin sets an option of a learn-batch source that the run does
            not build (`batches.registry.check_options_unused`; names it).
    """
    driver = configured(AsyncOffPolicyDriver, _fields(DriverSizes) + ["exp_replayer"])
    registry.check_name(driver["exp_replayer"])
    registry.check_options_unused(driver["exp_replayer"], _bindings)
    return Settings(
        run=run or RunSettings(),
        sizes=DriverSizes(**{name: driver[name] for name in _fields(DriverSizes)}),
        replay=ReplaySettings(driver["exp_replayer"],
                              configured(ReplayBuffer, ["save_buffer"])["save_buffer"]),
        env=EnvSettings(**configured(create_environment, _fields(EnvSettings))))


def _check_records_are_gins(settings: Settings) -> None:
    """Raises ValueError where `settings`' driver, replay or env record is not what gin's
    bindings build (a record edited after `run_settings()` read it)."""
    built = run_settings(settings.run)
    for name in ("sizes", "replay", "env"):
        if getattr(built, name) != getattr(settings, name):
            raise ValueError(f"the run's {name} record {getattr(settings, name)} is not what "
                             f"gin's bindings build ({getattr(built, name)})")


def _recorder(settings: RunSettings, env_name: str, algorithm, learner, worker: int,
              provenance: Optional[dict]):
    """The run's `EpisodeRecorder` (`train.record_dataset`; the chief's alone), or None."""
    if not settings.record_dataset or worker:
        return None
    from alf_async.datasets.recorder import open_recorder  # pylint: disable=import-outside-toplevel
    final = lambda: {"weights_digest": learner.mutable.weights_digest(),
                     "policy_version": int(learner.train_step.numpy())}
    return open_recorder(settings.record_dataset, env_name,
                         algorithm.time_step_spec.observation, algorithm.action_spec,
                         dict(kind="train", **(provenance or {})), final)


def build(settings: Optional[Settings] = None, root_dir: Optional[str] = None,
          provenance: Optional[dict] = None):
    """Builds the algorithm, learner, driver and learner loop of the run's records.

    The records are what runs: the algorithm, seed and serve port come from
    `settings.run` (None: `run_settings()`, gin's bindings); gin configures
    the components, and records that differ from what gin would build (the
    driver's sizes, its learn-batch source, the env) are refused first, so
    that gin's operative config (what `play` and the report read) stays
    whole. With `serve_port`, the driver takes its unrolls from actor
    processes through a `ReverbService` listening there (0: a free port). In
    `root_dir` (None: nowhere) go a replay buffer saved with
    `ReplayBuffer.save_buffer` (`replay/`; a worker of a multi-worker learner
    other than the chief adds `_worker<i>`) and the stacks of a learner's
    stalls (`stalls/`). `provenance` (the run's commit, gin files and
    settings) goes into the metadata of a dataset recorded with
    `train.record_dataset`.

    Returns:
        `(algorithm, learner, driver, loop)`; the driver is not started.

    Raises:
        ValueError: records that gin's bindings do not build (names the record).
    """
    settings = settings or run_settings()
    _check_records_are_gins(settings)
    run, env_settings = settings.run, settings.env
    op_threads()  # first: TensorFlow's pools are sized before its first op
    strategy = create_strategy()  # a multi-worker strategy must precede other ops
    worker = worker_index(strategy)
    seed = run.seed
    if seed is not None:
        tf.random.set_seed(seed)
        seed += 1_000_000 * worker  # each worker's envs their own
    replay_dir = root_dir and os.path.join(root_dir, "replay")
    if replay_dir and worker:
        replay_dir = f"{replay_dir}_worker{worker}"  # each worker's buffer its own
    env_factory = lambda i: create_environment(seed=None if seed is None else seed + 1000 * i)
    with first_env(env_factory) as env, strategy.scope():
        algorithm = run.algorithm_class(env.time_step_spec(), env.action_spec())
    learner = Learner(algorithm, strategy, seed=seed)
    remote = None
    if run.serve_port is not None:
        remote = functools.partial(ReverbService, variables=algorithm.variables,
                                   version=learner.train_step, port=run.serve_port,
                                   secret=run_secret.for_learner(root_dir))
    recorder = _recorder(run, env_settings.env_name, algorithm, learner, worker, provenance)
    driver = AsyncOffPolicyDriver(env_factory, algorithm, learner.counters, seed=seed,
                                  remote=remote, replay_dir=replay_dir,
                                  env_name=env_settings.env_name, recorder=recorder)
    learner.check_batch_shape(*driver.learn_batch_shape)
    loop = LearnerLoop(learner, driver.feed,
                       stacks_dir=root_dir and os.path.join(root_dir, "stalls"),
                       diagnose=driver.diagnose)
    driver.attach(loop)  # run_async() (ALF's name) runs the loop
    driver.pace.configure_ops()  # deterministic mode: ops that reduce in a fixed order
    return algorithm, learner, driver, loop
