"""RLDS's step features for a run's specs, and the moves between conventions.

This project's time-step convention (`alf_async.experience`): step `t` holds
the observation, the reward and discount of *arriving* there, and the action
taken from it. RLDS's: step `t` holds the observation, the action taken from
it and the reward and discount of *that action* (the next arrival's); the
`is_last` step's reward, discount and action are not used. An episode of L
steps `[FIRST, MID..., LAST]` maps one to one, its rewards and discounts
shifted by one step. `is_terminal` marks a last step arrived at with discount
0 (a terminated episode; a truncated one ends with discount 1).

Steps are dicts of arrays with a leading `[L]` time dim. Besides RLDS's own
fields, a recorded step holds the behaviour policy's `log_prob` and the
`policy_version` (learner updates) of the weights that acted.
"""

import logging
from typing import Dict

import numpy as np
from tf_agents.specs import tensor_spec

from alf_async import extras, quiet

FIRST, MID, LAST = 0, 1, 2  # tf-agents' StepType values
POLICY_FIELDS = {"log_prob": np.float32, "policy_version": np.int64}
SPLIT = "train"  # the one split a recorded dataset has


def tfds_module(setting: str):
    """`tensorflow_datasets`, or `MissingExtraError` naming `setting` and `[datasets]`."""
    return extras.require("tensorflow_datasets", "datasets", setting)


def tfds_held_back():
    """Holds back TFDS's lines below ERROR for one call: its INFO lines on every read and
    write, and the warning `rlds`' own `tf.bool` features cause (expected, say nothing)."""
    return quiet.held_back("tensorflow_datasets", below=logging.ERROR)


def check_plain(spec, what: str) -> None:
    """Raises ValueError unless `spec` is one tensor spec (no nest)."""
    if not hasattr(spec, "dtype"):
        raise ValueError(f"an RLDS dataset here holds one {what} tensor per step, got a "
                         f"nested spec {spec}")


def step_features(observation_spec, action_spec, setting: str) -> Dict:
    """TFDS features of one step, `{name: feature}`, for unbatched tf-agents specs.

    Raises:
        ValueError: a nested observation or action spec.
        MissingExtraError: no `[datasets]` extra (names `setting`).
    """
    tfds = tfds_module(setting)
    observation_spec = tensor_spec.from_spec(observation_spec)
    action_spec = tensor_spec.from_spec(action_spec)
    check_plain(observation_spec, "observation")
    check_plain(action_spec, "action")
    tensor = lambda spec: tfds.features.Tensor(shape=tuple(spec.shape),
                                               dtype=spec.dtype.as_numpy_dtype)
    return dict(observation=tensor(observation_spec), action=tensor(action_spec),
                reward=np.float32, discount=np.float32, **POLICY_FIELDS)


def to_rlds(steps: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """One whole episode, this project's convention -> RLDS's.

    Args:
        steps: `[L]` arrays `observation`, `action`, `step_type`, `reward`,
            `discount`, `log_prob`, `policy_version`; step 0 is FIRST and
            step L - 1 is LAST.

    Returns:
        `[L]` arrays of the RLDS step features, `is_first`, `is_last` and
        `is_terminal` among them.
    """
    length = len(steps["step_type"])
    shift = lambda x: np.concatenate([x[1:], np.zeros_like(x[:1])]).astype(np.float32)
    index = np.arange(length)
    return dict(observation=steps["observation"], action=steps["action"],
                reward=shift(steps["reward"]), discount=shift(steps["discount"]),
                is_first=index == 0, is_last=index == length - 1,
                is_terminal=(index == length - 1) & (steps["discount"][-1] == 0),
                log_prob=np.asarray(steps["log_prob"], np.float32),
                policy_version=np.asarray(steps["policy_version"], np.int64))


def from_rlds(steps: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """RLDS steps of whole episodes, one after another (`[N]` arrays) -> this project's
    convention (the inverse of `to_rlds`).

    An episode ends before the next `is_first` step (or at the end). One that
    does not end with `is_last` (a log cut short) ends as if truncated there;
    steps without `log_prob` or `policy_version` (another tool's) get zeros.
    """
    first = np.asarray(steps["is_first"], bool)
    ends = np.concatenate([first[1:], [True]])
    previous = lambda x, at_first: np.where(
        first, at_first, np.concatenate([[at_first], x[:-1]])).astype(np.float32)
    discount = previous(steps["discount"], 1.0)
    discount[ends & ~np.asarray(steps["is_last"], bool)] = 1.0  # cut short: truncated
    zeros = lambda dtype: np.zeros(len(first), dtype)
    return dict(observation=steps["observation"], action=steps["action"],
                step_type=np.where(ends, LAST, np.where(first, FIRST, MID)).astype(np.int32),
                reward=previous(steps["reward"], 0.0), discount=discount,
                log_prob=steps.get("log_prob", zeros(np.float32)),
                policy_version=steps.get("policy_version", zeros(np.int64)))
