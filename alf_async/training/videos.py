"""Greedy episodes recorded as GIFs a user can watch: `play --gif` and, during
training, `train.eval_video_interval`.

An episode is played on a gymnasium env of the run's id made with
`render_mode="rgb_array"` (Atari: preprocessed as in training, the frames the
full screen; MuJoCo renders off-screen through EGL where no display is set).
"""

import io
import logging as std_logging
import os
from typing import List, Optional

import numpy as np
import tensorflow as tf
from absl import logging
from tensorboard.plugins.image import metadata as image_metadata
from tf_agents.trajectories import time_step as ts

from alf_async.environments.subenvs import make_gymnasium_env, observation_dtype
from alf_async.training import files
from alf_async.training.evaluation import GreedyPolicy, greedy_actions

VIDEO_DIR = "videos"  # in a run's root_dir
# PyOpenGL (MuJoCo's off-screen renderer) says "No OpenGL_accelerate module loaded" at INFO.
std_logging.getLogger("OpenGL").setLevel(std_logging.WARNING)
# Our envs without a gymnasium id of their own: (gymnasium id, observed components).
_GYM_TWINS = {"CartPoleNoVelocity-v1": ("CartPole-v1", [0, 2])}


def record_episode(policy, env_name: str, seed: Optional[int] = None,
                   max_steps: int = 10_000) -> List:
    """Frames (PIL images) of one greedy episode of `policy` on gymnasium's `env_name`.

    Args:
        policy: a `GreedyPolicy` or the exported SavedModel of one.
        env_name: the run's env id.
        seed: the episode's reset seed (None: random).
        max_steps: the episode is cut here.
    """
    gym_name, observed = _GYM_TWINS.get(env_name, (env_name, slice(None)))
    env = make_gymnasium_env(gym_name, render_mode="rgb_array")
    try:
        dtype = observation_dtype(env.observation_space)
        discrete = np.issubdtype(env.action_space.dtype, np.integer)
        observation, _ = env.reset(seed=seed)
        frames = [_image(env.render())]
        act = greedy_actions(policy, 1)
        for step in range(max_steps):
            step_type = ts.StepType.FIRST if step == 0 else ts.StepType.MID
            observation = np.asarray(observation).astype(dtype)[observed]
            action = np.asarray(act(observation[None], [step_type]))[0]
            observation, _, terminated, truncated, _ = env.step(
                int(action) if discrete else np.clip(action, env.action_space.low,
                                                     env.action_space.high))
            frames.append(_image(env.render()))
            if terminated or truncated:
                break
    finally:
        env.close()
    return frames


def _image(frame, min_size: int = 160):
    """An `[H, W, 3]` rgb frame (uint8, or float in [0, 1]) as a PIL image >= `min_size` high."""
    from PIL import Image  # pylint: disable=import-outside-toplevel

    if np.issubdtype(frame.dtype, np.floating):
        frame = (np.clip(frame, 0.0, 1.0) * 255).astype(np.uint8)
    image = Image.fromarray(frame)
    scale = max(1, -(-min_size // frame.shape[0]))
    return image.resize((frame.shape[1] * scale, frame.shape[0] * scale), Image.NEAREST)


def gif_bytes(frames: List, frame_ms: int = 20) -> bytes:
    """`frames` as an animated GIF that loops."""
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:],
                   duration=frame_ms, loop=0)
    return out.getvalue()


class EvalVideo:
    """Records one greedy episode every `every` evaluations: `root_dir/videos/
    eval_<env steps>.gif`, and TensorBoard's `eval/video` image (animated).

    A recording that fails (no OpenGL for MuJoCo, a missing renderer) logs one
    warning and stops the videos; training goes on. Not thread-safe: the
    trainer's hooks call it.
    """

    def __init__(self, root_dir: str, env_name: str, every: int, seed: Optional[int] = None):
        self._folder = os.path.join(root_dir, VIDEO_DIR)
        self._env_name, self._every, self._seed = env_name, every, seed

    def after_evaluation(self, algorithm, evaluation: int, iteration, env_steps: int) -> None:
        """Records if `evaluation` (counted from 1) is due."""
        if not self._every or evaluation % self._every:
            return
        try:
            frames = record_episode(GreedyPolicy(algorithm), self._env_name, self._seed)
        except Exception as error:  # pylint: disable=broad-except
            logging.warning("Evaluation videos stop: recording %s failed (%s)", self._env_name,
                            str(error).strip().splitlines()[0] if str(error).strip() else
                            type(error).__name__)
            self._every = 0
            return
        path = os.path.join(self._folder, f"eval_{env_steps:012d}.gif")
        encoded = gif_bytes(frames)
        files.write_bytes(path, encoded)
        width, height = frames[0].size
        with tf.summary.record_if(True):
            tf.summary.write("eval/video", tf.constant([str(width), str(height), encoded]),
                             step=iteration, metadata=image_metadata.create_summary_metadata(
                                 display_name="eval/video", description="one greedy episode"))
        logging.info("Evaluation video: %s (%d frames)", path, len(frames))
