"""Recorded greedy episodes: `play --gif` and `train.eval_video_interval`."""

import logging
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from alf_async.training import videos


class ConstantPolicy:
    """A stand-in greedy policy: the same action for every observation."""

    def __init__(self, action):
        self._action = np.asarray(action)
        self.observations = []

    def action(self, observation):
        self.observations.append(np.asarray(observation))
        return self._action[None]


def test_a_mujoco_episode_with_continuous_actions_is_recorded_off_screen():
    policy = ConstantPolicy(np.zeros(3, np.float32))
    frames = videos.record_episode(policy, "Hopper-v4", seed=0, max_steps=20)
    assert len(frames) == 21 and frames[0].size[1] >= 160
    assert len({f.tobytes() for f in frames}) > 1  # the hopper moves: a real render
    assert policy.observations[0].shape == (1, 11)


def test_a_pixel_episode_is_recorded_scaled_up():
    policy = ConstantPolicy(0)
    frames = videos.record_episode(policy, "MinAtar/Breakout-v1", seed=0, max_steps=5)
    assert 2 <= len(frames) <= 6 and frames[0].size[1] >= 160
    assert policy.observations[0].shape == (1, 10, 10, 4)


def test_every_nth_evaluation_writes_a_gif_and_an_animated_tensorboard_image(
        tmp_path, monkeypatch):
    monkeypatch.setattr(videos, "GreedyPolicy", lambda algorithm: algorithm)
    video = videos.EvalVideo(str(tmp_path), "CartPole-v1", every=2, seed=0)
    writer = tf.summary.create_file_writer(str(tmp_path / "train"))
    with writer.as_default():
        for evaluation in range(1, 5):
            video.after_evaluation(ConstantPolicy(0), evaluation, tf.constant(10 * evaluation,
                                                                             tf.int64),
                                   1000 * evaluation)
    writer.close()
    assert sorted(os.listdir(tmp_path / "videos")) == ["eval_000000002000.gif",
                                                      "eval_000000004000.gif"]
    assert (tmp_path / "videos" / "eval_000000002000.gif").read_bytes()[:6] == b"GIF89a"
    accumulator = event_accumulator.EventAccumulator(str(tmp_path / "train"),
                                                     size_guidance={"tensors": 0})
    accumulator.Reload()
    assert accumulator.SummaryMetadata("eval/video").plugin_data.plugin_name == "images"
    shown = accumulator.Tensors("eval/video")
    assert [e.step for e in shown] == [20, 40]
    assert shown[0].tensor_proto.string_val[2][:6] == b"GIF89a"


def test_a_recording_that_fails_warns_once_and_stops_the_videos(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(videos, "GreedyPolicy", lambda algorithm: algorithm)
    video = videos.EvalVideo(str(tmp_path), "NoSuchEnv-v0", every=1)
    with caplog.at_level(logging.WARNING, logger="absl"):
        for evaluation in range(1, 4):
            video.after_evaluation(ConstantPolicy(0), evaluation, 1, 100)
    assert len(caplog.records) == 1 and "Evaluation videos stop" in caplog.text
    assert "NoSuchEnv-v0" in caplog.text and not (tmp_path / "videos").exists()


def test_pyopengls_info_lines_are_held_back_where_videos_render():
    """MuJoCo's renderer imports PyOpenGL, which logs 'No OpenGL_accelerate module
    loaded' at INFO: not a line for the user's console."""
    import logging  # pylint: disable=import-outside-toplevel
    from alf_async.training import videos  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)  # as absl's commands set it
    try:
        assert not logging.getLogger("OpenGL.acceleratesupport").isEnabledFor(logging.INFO)
        assert logging.getLogger("OpenGL.acceleratesupport").isEnabledFor(logging.WARNING)
    finally:
        root.setLevel(level)
