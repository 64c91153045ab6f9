"""Batched environments: one object steps B sub-envs with one call.

Every env thread owns one batched tf-agents `PyEnvironment` (`batched` is
True, `batch_size` is B, specs leave the batch dimension out). CartPole-v1
runs on a numpy-vectorised fast path (`cartpole.py`); every other registered
gymnasium id on `GymnasiumBatchedEnv` (`gymnasium_env.py`); EnvPool's C++
envs through `create_environment.env_load_fn = @load_envpool_env`
(`envpool_env.py`); anything else plugs in through `env_load_fn` too.
"""

import contextlib
from typing import Callable, Iterator, Optional

import gin

from alf_async.environments.cartpole import CartPoleBatchedEnv
from alf_async.environments.envpool_env import load_envpool_env  # gin: @load_envpool_env
from alf_async.environments.fault_injection import FaultInjectingEnv
from alf_async.environments.gymnasium_env import GymnasiumBatchedEnv

_CARTPOLES = ("CartPole-v1", "CartPoleNoVelocity-v1")


def load_batched_env(env_name: str, num_envs: int, seed: Optional[int] = None,
                     num_workers: int = 0):
    """Default `env_load_fn`: a batched env of `num_envs` sub-envs.

    CartPole-v1 (and `CartPoleNoVelocity-v1`, its partially observable twin)
    use the numpy-vectorised `CartPoleBatchedEnv` in this process; any other
    name, or any name with `num_workers > 0`, is a gymnasium id stepped by
    `GymnasiumBatchedEnv` (in `num_workers` worker processes if > 0).
    """
    if env_name in _CARTPOLES and not num_workers:
        return CartPoleBatchedEnv(num_envs, seed=seed,
                                  hide_velocity=env_name == "CartPoleNoVelocity-v1")
    return GymnasiumBatchedEnv(env_name, num_envs, seed=seed, num_workers=num_workers)


@gin.configurable(module="alf_async")
def create_environment(env_name: str = "CartPole-v1",
                       num_parallel_environments: int = 16,
                       env_load_fn: Callable = load_batched_env,
                       seed: Optional[int] = None,
                       num_workers: int = 0,
                       step_fault_probability: float = 0.0):
    """Creates one batched env of `num_parallel_environments` sub-envs.

    Args:
        env_name: name passed to `env_load_fn` (a gymnasium id by default).
        num_parallel_environments: B, sub-envs stepped together.
        env_load_fn: `fn(env_name, num_envs, seed)` returning a batched
            tf-agents `PyEnvironment` with `batch_size == num_envs`.
        seed: seed for the sub-envs (None: random).
        num_workers: W > 0 steps each batched env's sub-envs in W worker
            processes (B / W each; passed to `env_load_fn` as `num_workers`);
            0 steps them in the env thread.
        step_fault_probability: p > 0 makes each batched step raise an
            injected fault with probability p (`FaultInjectingEnv`: chaos
            runs, tests of fault tolerance).

    Returns:
        A batched `PyEnvironment`.

    Raises:
        ValueError: a bad size, an unknown id or an unsupported space (names
            the setting).
    """
    if num_parallel_environments < 1:
        raise ValueError(
            f"num_parallel_environments must be >= 1, got {num_parallel_environments}")
    workers = dict(num_workers=num_workers) if num_workers else {}
    env = env_load_fn(env_name, num_parallel_environments, seed, **workers)
    if not env.batched or env.batch_size != num_parallel_environments:
        raise ValueError(
            f"env_load_fn returned an env with batch_size={env.batch_size}, "
            f"expected num_parallel_environments={num_parallel_environments}")
    if step_fault_probability:
        env = FaultInjectingEnv(env, step_fault_probability,
                                None if seed is None else seed + 1_000_003)
    return env


@contextlib.contextmanager
def first_env(env_factory: Callable[[int], object]) -> Iterator[object]:
    """Env 0 of `env_factory`, built to read its specs and batch size, closed after."""
    env = env_factory(0)
    try:
        yield env
    finally:
        env.close()
