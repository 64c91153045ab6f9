"""Recorded greedy episodes: `play --gif` and `train.eval_video_interval`."""

import logging
import os
import signal

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


class FakeVideoProcess:
    """A `VideoProcess` that records nothing until `answer()`: what was submitted, and
    when it answers, a real GIF of two frames for each request."""

    def __init__(self, root_dir, config, env_name, seed):
        self.folder, self.submitted, self._answers, self.closed = root_dir, [], [], False

    def submit(self, iteration, env_steps, weights):
        self.submitted.append((iteration, env_steps, weights))

    def answer(self, failure=None):
        if failure:
            self._answers.append(videos.VideoFailed(failure))
            return
        iteration, env_steps, _ = self.submitted[-1]
        path = os.path.join(self.folder, f"eval_{env_steps:012d}.gif")
        frames = [videos._image(np.full((8, 8, 3), shade, np.uint8)) for shade in (0, 255)]
        with open(path, "wb") as f:
            f.write(videos.gif_bytes(frames))
        self._answers.append(videos.Video(iteration, path, *frames[0].size, len(frames)))

    def poll(self, timeout=0.0):
        answers, self._answers = self._answers, []
        return answers

    def close(self):
        self.closed = True


class _Variables:
    """An algorithm as the videos see it: its variables."""

    def __init__(self, value):
        self.variables = [tf.Variable(value)]


def _video_images(train_dir):
    accumulator = event_accumulator.EventAccumulator(str(train_dir), size_guidance={"tensors": 0})
    accumulator.Reload()
    assert accumulator.SummaryMetadata("eval/video").plugin_data.plugin_name == "images"
    return accumulator.Tensors("eval/video")


def test_a_due_evaluation_hands_its_weights_over_and_returns_before_the_video_is_made(
        tmp_path):
    processes = []
    video = videos.EvalVideo(str(tmp_path), "", "CartPole-v1", every=2,
                             process_factory=lambda *a: processes.append(
                                 FakeVideoProcess(*a)) or processes[-1])
    process = processes[0]
    writer = tf.summary.create_file_writer(str(tmp_path / "train"))
    with writer.as_default():
        video.after_evaluation(_Variables(1.0), 1, tf.constant(10, tf.int64), 1000)
        assert process.submitted == []  # not due
        video.after_evaluation(_Variables(2.0), 2, tf.constant(20, tf.int64), 2000)
        assert [(i, steps, [w.tolist() for w in weights])
                for i, steps, weights in process.submitted] == [(20, 2000, [2.0])]
        video.after_evaluation(_Variables(4.0), 4, tf.constant(40, tf.int64), 4000)
        assert len(process.submitted) == 1  # the last one still being recorded: skipped
        process.answer()
        video.after_evaluation(_Variables(5.0), 5, tf.constant(50, tf.int64), 5000)
        video.after_evaluation(_Variables(6.0), 6, tf.constant(60, tf.int64), 6000)
        assert [i for i, _, _ in process.submitted] == [20, 60]
        process.answer()
        video.close()
    writer.close()
    assert process.closed
    shown = _video_images(tmp_path / "train")
    assert [e.step for e in shown] == [20, 60]  # at the evaluations' iterations
    assert shown[0].tensor_proto.string_val[2][:6] == b"GIF89a"


def test_a_recording_that_fails_warns_once_and_stops_the_videos(tmp_path, caplog):
    processes = []
    video = videos.EvalVideo(str(tmp_path), "", "NoSuchEnv-v0", every=1,
                             process_factory=lambda *a: processes.append(
                                 FakeVideoProcess(*a)) or processes[-1])
    with caplog.at_level(logging.WARNING, logger="absl"):
        video.after_evaluation(_Variables(0.0), 1, 1, 100)
        processes[0].answer(failure="no such env")
        for evaluation in range(2, 5):
            video.after_evaluation(_Variables(0.0), evaluation, evaluation, 100 * evaluation)
    assert len(caplog.records) == 1 and "Evaluation videos stop" in caplog.text
    assert "NoSuchEnv-v0" in caplog.text and "no such env" in caplog.text
    assert len(processes[0].submitted) == 1 and processes[0].closed


_OPERATIVE_CONFIG = """
import alf_async
create_environment.env_name = 'CartPole-v1'
train.algorithm_class = @PPOAlgorithm
PPOAlgorithm.actor_fc_layers = (8,)
PPOAlgorithm.value_fc_layers = (8,)
"""


@pytest.fixture(name="cartpole_run")
def _cartpole_run(tmp_path):
    """A run's root_dir, and a PPO algorithm built from `_OPERATIVE_CONFIG`."""
    import gin  # pylint: disable=import-outside-toplevel

    from alf_async.environments import create_environment  # pylint: disable=import-outside-toplevel
    from alf_async.training.settings import RunSettings  # pylint: disable=import-outside-toplevel
    gin.clear_config()
    gin.parse_config(_OPERATIVE_CONFIG)
    try:
        env = create_environment(num_parallel_environments=1, num_workers=0)
        algorithm = RunSettings().algorithm_class(env.time_step_spec(), env.action_spec())
    finally:
        gin.clear_config()
    return tmp_path, algorithm


def test_the_video_process_plays_the_weights_it_is_handed(cartpole_run):
    """Its episode, from the same seed, is the episode this process's greedy policy with
    those weights plays: as long, frame for frame."""
    root_dir, algorithm = cartpole_run
    rng = np.random.default_rng(0)
    for variable in algorithm.variables:
        variable.assign(rng.normal(0.0, 0.5, variable.shape).astype(variable.dtype.as_numpy_dtype))
    expected = videos.record_episode(videos.GreedyPolicy(algorithm), "CartPole-v1", seed=3)
    process = videos.VideoProcess(str(root_dir), _OPERATIVE_CONFIG, "CartPole-v1", seed=3)
    try:
        process.submit(7, 700, [v.numpy() for v in algorithm.variables])
        answers = process.poll(timeout=120)
    finally:
        process.close()
    assert answers == [videos.Video(7, str(root_dir / "videos" / "eval_000000000700.gif"),
                                    *expected[0].size, len(expected))]
    with open(answers[0].path, "rb") as gif:
        assert gif.read(6) == b"GIF89a"
    assert not process._process.is_alive()


def test_a_video_process_that_dies_answers_a_failure_naming_its_exit(cartpole_run):
    root_dir, _ = cartpole_run
    process = videos.VideoProcess(str(root_dir), _OPERATIVE_CONFIG, "CartPole-v1")
    try:
        os.kill(process._process.pid, signal.SIGKILL)
        answers = process.poll(timeout=30)
    finally:
        process.close()
    assert answers == [videos.VideoFailed("the video process ended (exit code -9)")]


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


class _Clock:
    """Fake `time`: CPU and wall seconds set by the test; `sleep` advances the wall."""

    def __init__(self):
        self.cpu, self.wall, self.slept = 0.0, 0.0, []

    def process_time(self):
        return self.cpu

    def monotonic(self):
        return self.wall

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.wall += seconds


def test_a_paced_recording_sleeps_until_its_cpu_is_its_share_of_the_wall(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(videos, "time", clock)
    pace = videos.CpuShare(0.25)
    clock.cpu, clock.wall = 0.5, 0.5  # half a second of CPU in half a second
    pace()
    assert clock.slept == [1.5]  # 0.5 CPU s is a quarter of 2 wall s
    clock.cpu, clock.wall = 0.6, 3.0  # under its share: no sleep
    pace()
    assert clock.slept == [1.5]
    pace.start()  # a new recording counts from here
    clock.cpu += 0.1
    pace()
    assert clock.slept == [1.5, pytest.approx(0.4)]
