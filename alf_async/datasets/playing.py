"""Recording a trained policy's episodes (`python -m alf_async.play --record_dataset`):
epsilon-random actions around its greedy ones, and the steps to the recorder.

A dataset of the greedy policy is "expert" (or "medium", from a run stopped
early); `--epsilon=1` is random play. The recorded `log_prob` is that of the
epsilon-greedy behaviour for discrete actions; for `Box` actions, whose
mixture has no density, it is 0.
"""

import hashlib
from typing import Callable

import numpy as np

from alf_async.datasets.recorder import EpisodeRecorder, step_columns


def epsilon_greedy(policy_fn: Callable, action_spec, epsilon: float, seed=None):
    """`policy_fn` with each sub-env's action replaced, with probability `epsilon`, by
    a uniformly random one in `action_spec`'s bounds.

    Returns:
        `(act, log_probs)`: `act(observation, step_type) -> [B] actions`, and
        `log_probs()`, the behaviour's `[B]` log-probabilities of the last ones.
    """
    if not 0 <= epsilon <= 1:
        raise ValueError(f"--epsilon must be in [0, 1], got {epsilon}")
    rng = np.random.default_rng(seed)
    low, high = np.asarray(action_spec.minimum), np.asarray(action_spec.maximum)
    discrete = np.issubdtype(action_spec.dtype, np.integer)
    count = int(high - low + 1) if discrete else None
    last = {}

    def act(observation, step_type):
        greedy = np.asarray(policy_fn(observation, step_type))
        n = len(greedy)
        explore = rng.random(n) < epsilon
        if discrete:
            random = rng.integers(low, high + 1, size=greedy.shape)
        else:
            random = rng.uniform(low, high, size=greedy.shape)
        mask = explore.reshape((n,) + (1,) * (greedy.ndim - 1))
        action = np.where(mask, random, greedy).astype(action_spec.dtype)
        if discrete:
            prob = epsilon / count + np.where(action == greedy, 1 - epsilon, 0.0)
            last["log_prob"] = np.log(prob).astype(np.float32)
        else:
            last["log_prob"] = np.zeros(n, np.float32)
        return action

    return act, lambda: last["log_prob"]


def step_observer(recorder: EpisodeRecorder, log_probs: Callable) -> Callable:
    """An `evaluation.play_episodes` observer that gives `recorder` every counted
    sub-env's step and the action taken from it (policy version 0)."""
    def observe(time_step, action, counted):
        columns = step_columns(time_step, action, log_probs(),
                               np.zeros(len(action), np.int64))
        recorder.add_steps({k: np.asarray(v)[None] for k, v in columns.items()}, 0, counted)
    return observe


def variables_digest(policy) -> str:
    """sha256 of a loaded exported policy's variables, in their saved order."""
    digest = hashlib.sha256()
    for variable in getattr(policy, "_policy_variables", None) or policy.variables:
        digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
    return digest.hexdigest()
