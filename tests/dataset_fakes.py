"""Synthetic episodes and unrolls for the dataset tests: every step's observation names
its column and position, so that a read-back can be matched step for step."""

import types

import numpy as np
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts

from alf_async.experience import Experience, Unroll

OBSERVATION_SPEC = array_spec.ArraySpec((2,), np.float32)
ACTION_SPEC = array_spec.BoundedArraySpec((), np.int64, 0, 2)


def episode(length: int, terminated: bool, tag: float) -> dict:
    """One episode of `length` steps in this project's convention (`[L]` arrays):
    observation `(tag, t)`, reward `t` on arrival, the last discount 0 if `terminated`."""
    t = np.arange(length)
    step_type = np.full(length, ts.StepType.MID, np.int32)
    step_type[0], step_type[-1] = ts.StepType.FIRST, ts.StepType.LAST
    discount = np.ones(length, np.float32)
    discount[-1] = 0.0 if terminated else 1.0
    return dict(observation=np.stack([np.full(length, tag), t], 1).astype(np.float32),
                action=(t % 3).astype(np.int64), step_type=step_type,
                reward=np.where(t == 0, 0, t).astype(np.float32), discount=discount,
                log_prob=np.full(length, -0.5, np.float32),
                policy_version=(t // 4).astype(np.int64))


def concatenated(episodes) -> dict:
    return {k: np.concatenate([e[k] for e in episodes]) for k in episodes[0]}


def unrolls(columns, unroll_length: int, env_id: int = 0):
    """Numpy `Unroll`s `[T, B]` of B columns' step streams (each a dict of `[N]` arrays,
    cut to a multiple of T)."""
    n = min(len(c["step_type"]) for c in columns) // unroll_length * unroll_length
    stacked = {k: np.stack([c[k][:n] for c in columns], 1) for k in columns[0]}
    for start in range(0, n, unroll_length):
        part = {k: v[start:start + unroll_length] for k, v in stacked.items()}
        time_step = ts.TimeStep(part["step_type"], part["reward"], part["discount"],
                                part["observation"])
        yield Unroll(Experience(time_step, part["action"], part["log_prob"], (),
                                part["policy_version"]),
                     bootstrap=None, env_id=np.int32(env_id))


def algorithm_stub(recurrent: bool = False):
    """What a dataset source reads of an algorithm: its specs and whether it is recurrent."""
    return types.SimpleNamespace(
        time_step_spec=ts.time_step_spec(OBSERVATION_SPEC), action_spec=ACTION_SPEC,
        recurrent=recurrent)
