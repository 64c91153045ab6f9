"""Greedy evaluation episodes and the exported policy."""

import os
from typing import Callable, Optional, Tuple

import numpy as np
import tensorflow as tf
from absl import logging
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from alf_async import quiet
from alf_async.runs import layout


def run_episodes(policy_fn: Callable, env, num_episodes: int,
                 max_steps: int = 100_000) -> Tuple[float, float]:
    """Runs `num_episodes` episodes on a batched env; returns mean return and length
    (`play_episodes`, averaged)."""
    mean_return, mean_length = np.mean(play_episodes(policy_fn, env, num_episodes,
                                                     max_steps), axis=0)
    return float(mean_return), float(mean_length)


def episodes_summary(played: np.ndarray, how: str = "greedy") -> str:
    """One line of `play_episodes`' `[n, 2]` rows: the returns' mean ± std, min and max,
    the mean length; `how` the episodes were played."""
    returns, lengths = played[:, 0], played[:, 1]
    return (f"average_return={returns.mean():.1f} ± {returns.std():.1f} "
            f"(min {returns.min():.1f}, max {returns.max():.1f}) "
            f"average_length={lengths.mean():.1f} over {len(returns)} {how} episodes")


def play_episodes(policy_fn: Callable, env, num_episodes: int,
                  max_steps: int = 100_000, observe: Optional[Callable] = None) -> np.ndarray:
    """Runs `num_episodes` episodes on a batched env; returns `[n, 2]`: each finished
    episode's return and length.

    Each of the B sub-envs contributes a fixed number of its first episodes
    (`num_episodes / B`, the remainder to the first ones), whatever their
    length: counting the first episodes to *finish* would favour short ones.

    Args:
        policy_fn: `(observation [B, ...], step_type [B]) -> action [B]`.
        env: a batched tf-agents `PyEnvironment` whose sub-envs play in parallel.
        num_episodes: episodes to average.
        max_steps: bound on env steps, in case a policy never ends an episode;
            reaching it averages the episodes finished by then (with a warning).
        observe: `(time_step [B], action [B], counted [B] bool)`, called with
            every step and the action taken from it; `counted` marks the
            sub-envs whose step belongs to a counted episode (a recorder keeps
            exactly the episodes averaged).
    """
    batch_size = env.batch_size
    quota = np.full(batch_size, num_episodes // batch_size)
    quota[:num_episodes % batch_size] += 1
    time_step = env.reset()
    returns = np.zeros(batch_size)
    lengths = np.zeros(batch_size, np.int64)
    finished = []
    counted = np.zeros(batch_size, bool)  # sub-envs whose counted episode just ended
    for _ in range(max_steps):
        action = np.asarray(policy_fn(time_step.observation, time_step.step_type))
        if observe is not None:
            observe(time_step, action, (quota > 0) | counted)
        time_step = env.step(action)
        playing = time_step.step_type != ts.StepType.FIRST
        returns += np.where(playing, time_step.reward, 0.0)
        lengths += playing
        last = time_step.step_type == ts.StepType.LAST
        counted = last & (quota > 0)
        finished.extend(zip(returns[counted], lengths[counted]))
        quota -= counted
        returns[last] = 0.0
        lengths[last] = 0
        if not quota.any():
            break
    if observe is not None:  # the last counted episodes' LAST steps (their action unused)
        observe(time_step, action, counted)
    if not finished:
        raise RuntimeError(f"No episode finished within max_steps={max_steps}")
    if quota.any():
        logging.warning("%d of %d episodes unfinished after max_steps=%d: averaging the rest",
                        quota.sum(), num_episodes, max_steps)
    return np.asarray(finished, np.float64)


class GreedyPolicy(tf.Module):
    """The algorithm's greedy policy (`act(..., greedy=True)`), as a SavedModel.

    Feed-forward algorithms: one function, `action(observation)`, batched
    along the first axis. Recurrent ones: `initial_state(batch_size)` returns
    the policy state (a list of `[batch_size, ...]` tensors), and
    `action(observation, step_type, state)` returns `(action, next_state)`;
    the state resets itself where `step_type` is FIRST. Either needs only
    TensorFlow (TF Probability's ops are plain TF ops) to load and run.
    `greedy_actions()` hides the difference. Built from the `Algorithm`
    contract alone: whatever passes `check_algorithm` exports.
    """

    def __init__(self, algorithm):
        super().__init__(name="greedy_policy")
        # The variables alone are tracked (saved); the algorithm stays out of the
        # SavedModel's object graph, whose walk through every network and layer
        # was most of the export's time.
        self._policy_variables = tuple(algorithm.variables)
        self._act = algorithm.act
        self._state_spec = algorithm.policy_state_spec
        spec = tensor_spec.from_spec(algorithm.time_step_spec.observation)
        observation = tf.TensorSpec([None, *spec.shape], spec.dtype, name="observation")
        # autograph=False throughout: as the driver's functions, for start-up time.
        if not algorithm.recurrent:
            self.action = tf.function(self._action, input_signature=[observation],
                                      autograph=False)
            return
        state = [tf.TensorSpec([None, *s.shape], s.dtype)
                 for s in tf.nest.flatten(self._state_spec)]
        self.initial_state = tf.function(self._initial_state, autograph=False,
                                         input_signature=[tf.TensorSpec([], tf.int32)])
        self.action = tf.function(self._recurrent_action, autograph=False, input_signature=[
            observation, tf.TensorSpec([None], tf.int32, name="step_type"), state])

    def _initial_state(self, batch_size):
        return [tf.zeros(tf.concat([[batch_size], s.shape], 0), s.dtype)
                for s in tf.nest.flatten(self._state_spec)]

    def _action(self, observation):
        batch_size = tf.shape(tf.nest.flatten(observation)[0])[0]
        state = tf.nest.pack_sequence_as(self._state_spec, self._initial_state(batch_size))
        step_type = tf.fill([batch_size], tf.constant(ts.StepType.MID, tf.int32))
        action, _, _ = self._act(observation, step_type, state, greedy=True)
        return action

    def _recurrent_action(self, observation, step_type, state):
        first = tf.equal(step_type, ts.StepType.FIRST)
        state = [tf.where(tf.reshape(first, [-1] + [1] * (s.shape.rank - 1)), tf.zeros_like(s), s)
                 for s in state]
        state = tf.nest.pack_sequence_as(self._state_spec, state)
        action, state, _ = self._act(observation, step_type, state, greedy=True)
        return action, tf.nest.flatten(state)


def greedy_actions(policy, batch_size: int) -> Callable:
    """`(observation, step_type) -> action` for `run_episodes`.

    Args:
        policy: a `GreedyPolicy` or the SavedModel loaded from one; a
            recurrent one's state is carried from call to call.
        batch_size: observations per call.
    """
    if not hasattr(policy, "initial_state"):
        return lambda observation, _: policy.action(observation)
    state = policy.initial_state(batch_size)

    def act(observation, step_type):
        nonlocal state
        action, state = policy.action(observation, np.asarray(step_type, np.int32), state)
        return action

    return act


def export_policy(algorithm, directory: str) -> str:
    """Saves the greedy policy as a TensorFlow SavedModel at `directory/policy`.

    The SavedModel is written beside it and moved in place complete
    (`layout.replace_directory`): a stop part-way leaves the previous policy
    whole. TensorFlow's own INFO lines about the save (untraced Keras
    functions, renamed inputs, assets written) are held back; its warnings
    still show.
    """
    path = os.path.join(directory, layout.POLICY_DIR)
    staged = layout.staged_directory(path)
    with quiet.held_back("tensorflow/python"):
        tf.saved_model.save(GreedyPolicy(algorithm), staged)
    layout.replace_directory(staged, path)
    return path
