"""B gymnasium envs stepped with the project's time-step convention, here or in worker processes.

gymnasium 0.29's vector envs reset a finished sub-env inside the same
`step()`, so they cannot give the separate `FIRST` step of this project's
convention without stepping the new episode blind. `SubEnvs` runs the B
sub-envs' loop itself (the same Python loop as gymnasium's `SyncVectorEnv`):
a finished sub-env reports `LAST` with its real final observation, and is
reset on the next call, which reports `FIRST` with reward 0 and ignores its
action. `WorkerSubEnvs` splits the B sub-envs over W worker processes, each
running a `SubEnvs` of B / W, through gymnasium's `AsyncVectorEnv` (shared
memory); its episodes never end from gymnasium's point of view, so it never
resets anything itself.

Both return time steps as dicts of numpy arrays with leading dim B:
`observation`, `reward`, `discount`, `step_type` (tf-agents' values).
A MID step has discount 0 where the env's info says `life_lost`
(`atari.LifeLoss`).
"""

import functools
import multiprocessing
import os
import signal
import weakref
from typing import Dict, List, Optional

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv
from gymnasium.vector.utils import batch_space
from tf_agents.trajectories import time_step as ts

from alf_async import extras
from alf_async.environments import atari

Arrays = Dict[str, np.ndarray]


def make_gymnasium_env(env_name: str, **kwargs) -> gym.Env:
    """`gym.make(env_name, **kwargs)`, or the preprocessed game for an `ALE/...` id.

    Raises:
        ValueError: an unknown id (with gymnasium's suggestion, and the extra
            to install for Atari and MinAtar ids); names the setting.
    """
    try:
        if env_name.startswith("ALE/"):
            return atari.make_atari_env(env_name, **kwargs)
        return gym.make(env_name, **kwargs)
    except gym.error.DependencyNotInstalled:
        extra = extras.env_extra(env_name)
        if extra is None:
            raise
        raise extras.missing(f"create_environment.env_name={env_name!r}", extra) from None
    except gym.error.Error as error:
        extra = extras.env_extra(env_name)
        hint = f" (ids like it come with pip install '.[{extra}]')" if extra else ""
        message = str(error).splitlines()[0]  # gin appends the configurable's name below
        raise ValueError(f"create_environment.env_name={env_name!r}: {message}{hint}") from None


def observation_dtype(space: gym.spaces.Box) -> np.dtype:
    """Booleans become uint8 (TF queues and networks take numbers); others stay."""
    return np.dtype(np.uint8) if space.dtype == np.bool_ else space.dtype


class SubEnvs:
    """B gymnasium envs of one id in this process.

    Not thread-safe: one owner steps them.
    """

    def __init__(self, env_name: str, num_envs: int, seeds: List[Optional[int]]):
        """
        Args:
            env_name: a registered gymnasium id.
            num_envs: B.
            seeds: sub-env i is seeded with `seeds[i]` at its first reset.
        """
        self.envs = [make_gymnasium_env(env_name) for _ in range(num_envs)]
        space = self.envs[0].observation_space
        self._observation_shape, self._observation_dtype = space.shape, observation_dtype(space)
        self._discrete = isinstance(self.envs[0].action_space, gym.spaces.Discrete)
        self._seeds = list(seeds)
        self._done = np.zeros(num_envs, bool)

    def _buffers(self) -> Arrays:
        b = len(self.envs)
        return dict(observation=np.empty((b, *self._observation_shape), self._observation_dtype),
                    reward=np.zeros(b, np.float32), discount=np.ones(b, np.float32),
                    step_type=np.full(b, ts.StepType.MID, np.int32))

    def reset(self) -> Arrays:
        out = self._buffers()
        for i, env in enumerate(self.envs):
            out["observation"][i], _ = env.reset(seed=self._seeds[i])
            self._seeds[i] = None  # seed once: later resets continue the stream
        self._done[:] = False
        out["step_type"][:] = ts.StepType.FIRST
        return out

    def step(self, action: np.ndarray) -> Arrays:
        """Steps every sub-env with its `action[i]` (resets those that had finished)."""
        out = self._buffers()
        for i, env in enumerate(self.envs):
            if self._done[i]:
                out["observation"][i], _ = env.reset()
                out["step_type"][i] = ts.StepType.FIRST
                self._done[i] = False
                continue
            out["observation"][i], out["reward"][i], terminated, truncated, info = env.step(
                int(action[i]) if self._discrete else action[i])
            if info.get("life_lost"):  # Atari's end of life: no bootstrap, same episode
                out["discount"][i] = 0.0
            if terminated or truncated:
                out["step_type"][i] = ts.StepType.LAST
                out["discount"][i] = 0.0 if terminated else 1.0
                self._done[i] = True
        return out

    def close(self) -> None:
        for env in self.envs:
            env.close()


class _GroupEnv(gym.Env):
    """A `SubEnvs` as one gymnasium env, for a worker process of `AsyncVectorEnv`.

    Its observation is the whole time step of its sub-envs; it never
    terminates, so `AsyncVectorEnv` never resets it on its own.
    """

    def __init__(self, env_name: str, num_envs: int, seeds: List[Optional[int]]):
        if multiprocessing.parent_process() is not None:  # in the worker process
            # Ctrl-C, `timeout`, `kill -- -PGID` and job schedulers signal
            # every process of the run: the trainer handles it and closes the
            # workers; a worker must not die of it first (SIGKILL still ends it).
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, signal.SIG_IGN)
        self._subenvs = SubEnvs(env_name, num_envs, seeds)
        self.observation_space = group_observation_space(
            self._subenvs.envs[0].observation_space, num_envs)
        self.action_space = batch_space(self._subenvs.envs[0].action_space, num_envs)

    def reset(self, *, seed=None, options=None):
        del seed, options  # seeded per sub-env at construction
        return self._subenvs.reset(), {}

    def step(self, action):
        return self._subenvs.step(action), 0.0, False, False, {}

    def close(self):
        self._subenvs.close()


def group_observation_space(space: gym.spaces.Box, num_envs: int) -> gym.spaces.Dict:
    """The space of `num_envs` sub-envs' time steps, as `_GroupEnv` observes them."""
    dtype = observation_dtype(space)
    stack = lambda bound: np.repeat(np.asarray(bound)[None], num_envs, 0).astype(dtype)
    return gym.spaces.Dict(dict(
        observation=gym.spaces.Box(stack(space.low), stack(space.high), dtype=dtype),
        reward=gym.spaces.Box(-np.inf, np.inf, (num_envs,), np.float32),
        discount=gym.spaces.Box(0.0, 1.0, (num_envs,), np.float32),
        step_type=gym.spaces.Box(0, 2, (num_envs,), np.int32)))


class WorkerSubEnvs:
    """`SubEnvs`' interface over W worker processes of B / W sub-envs each.

    Workers are forked (they inherit the imported modules; they never call
    TensorFlow) and ignore SIGINT and SIGTERM: `close()` ends them, and so
    does the end of this object or process (with SIGKILL). A worker that dies
    makes `reset()`/`step()` raise a RuntimeError with its index, pid and exit
    code.

    Not thread-safe: one owner steps them.
    """

    def __init__(self, env_name: str, num_envs: int, num_workers: int,
                 seeds: List[Optional[int]], observation_space: gym.spaces.Box,
                 action_space: gym.Space):
        """
        Args:
            env_name, num_envs, seeds: as for `SubEnvs`.
            num_workers: W, a divisor of `num_envs`.
            observation_space, action_space: one sub-env's spaces.
        """
        k = num_envs // num_workers
        self._num_envs = num_envs
        self._vector = _WorkersKilledOnFailure(
            [functools.partial(_GroupEnv, env_name, k, seeds[w * k:(w + 1) * k])
             for w in range(num_workers)],
            observation_space=group_observation_space(observation_space, k),
            action_space=batch_space(action_space, k),
            shared_memory=True, context="fork", daemon=True)
        self._failed = False
        # Before gymnasium's and multiprocessing's own clean-ups, which send
        # SIGTERM and wait: an unclosed worker would ignore it and hang them.
        weakref.finalize(self, _kill, list(self._vector.processes), os.getpid())

    @property
    def pids(self) -> List[int]:
        """The worker processes' ids."""
        return [process.pid for process in self._vector.processes]

    def reset(self) -> Arrays:
        observation, _ = self._call(self._vector.reset)
        return self._merged(observation)

    def step(self, action: np.ndarray) -> Arrays:
        workers = len(self._vector.processes)
        observation = self._call(self._vector.step,
                                 action.reshape(workers, -1, *action.shape[1:]))[0]
        return self._merged(observation)

    def _merged(self, observation: Arrays) -> Arrays:
        return {k: v.reshape(self._num_envs, *v.shape[2:]) for k, v in observation.items()}

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except Exception as error:  # pylint: disable=broad-except
            self._failed = True
            for index, process in enumerate(self._vector.processes):
                process.join(timeout=0.1)
                if process.exitcode is not None:
                    raise RuntimeError(f"env worker {index} (pid {process.pid}) exited with "
                                       f"code {process.exitcode}") from error
            raise

    def close(self) -> None:
        """Ends the workers (killing them if one has failed, or dies meanwhile) and
        waits for them."""
        if not self._failed:
            try:
                self._vector.close()
                return
            except (OSError, EOFError):  # a worker died since the last step
                self._failed = True
        # A dead worker leaves a call pending that gymnasium's close() would wait on.
        _kill(self._vector.processes)
        for pipe in self._vector.parent_pipes:
            pipe.close()
        self._vector.closed = True


class _WorkersKilledOnFailure(AsyncVectorEnv):
    """`AsyncVectorEnv` whose construction, when it fails after the workers started
    (one killed while it makes its env), kills the others: they ignore SIGTERM, so
    multiprocessing's exit would wait on them forever (an actor process that hung
    at its exit)."""

    def _check_spaces(self):
        try:
            return super()._check_spaces()
        except BaseException:
            _kill(self.processes)
            raise


def _kill(processes: List[multiprocessing.Process], owner: Optional[int] = None) -> None:
    """SIGKILLs the live worker processes and waits for them (10 s at most each).

    Does nothing in a process other than `owner` (a fork of it) when given.
    """
    if owner is not None and owner != os.getpid():
        return
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:
        process.join(timeout=10)
