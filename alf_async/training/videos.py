"""Greedy episodes recorded as GIFs a user can watch: `play --gif` and, during
training, `train.eval_video_interval`.

An episode is played on a gymnasium env of the run's id made with
`render_mode="rgb_array"` (Atari: preprocessed as in training, the frames the
full screen; MuJoCo renders off-screen through EGL where no display is set).
During training the episodes are played, rendered and encoded by a
`VideoProcess`, a child process at the lowest CPU priority: the trainer hands
it the greedy policy's weights and goes on training.
"""

import io
import logging as std_logging
import multiprocessing
import os
import time
from typing import Callable, List, NamedTuple, Optional

import numpy as np
import tensorflow as tf
from absl import logging
from tensorboard.plugins.image import metadata as image_metadata
from tf_agents.trajectories import time_step as ts

from alf_async.environments.subenvs import make_gymnasium_env, observation_dtype
from alf_async.runs import layout
from alf_async.training.evaluation import GreedyPolicy, greedy_actions

VIDEO_DIR = "videos"  # in a run's root_dir
# PyOpenGL (MuJoCo's off-screen renderer) says "No OpenGL_accelerate module loaded" at INFO.
std_logging.getLogger("OpenGL").setLevel(std_logging.WARNING)
# Our envs without a gymnasium id of their own: (gymnasium id, observed components).
_GYM_TWINS = {"CartPoleNoVelocity-v1": ("CartPole-v1", [0, 2])}


def record_episode(policy, env_name: str, seed: Optional[int] = None,
                   max_steps: int = 10_000, pace: Callable[[], None] = lambda: None) -> List:
    """Frames (PIL images) of one greedy episode of `policy` on gymnasium's `env_name`.

    Args:
        policy: a `GreedyPolicy` or the exported SavedModel of one.
        env_name: the run's env id.
        seed: the episode's reset seed (None: random).
        max_steps: the episode is cut here.
        pace: called after each frame (`CpuShare`: the video process's pacing).
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
            pace()
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


def gif_bytes(frames: List, frame_ms: int = 20, pace: Callable[[], None] = lambda: None) -> bytes:
    """`frames` as an animated GIF that loops, each frame's palette its own (fast
    octree: ~4x less CPU than PIL's default median cut, for 501 CartPole frames)."""
    from PIL import Image  # pylint: disable=import-outside-toplevel

    quantized = []
    for frame in frames:
        quantized.append(frame.quantize(255, method=Image.Quantize.FASTOCTREE))
        pace()
    frames = quantized
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:],
                   duration=frame_ms, loop=0)
    return out.getvalue()


class Video(NamedTuple):
    """A recorded evaluation episode: its GIF at `path`, the evaluation's iteration."""
    iteration: int
    path: str
    width: int
    height: int
    frames: int


class VideoFailed(NamedTuple):
    """The video process could not record (`message`: the error's first line)."""
    message: str


class VideoProcess:
    """A child process that records and encodes greedy episodes of the run's policy.

    It builds the run's algorithm from its operative gin config once, then, for
    each `submit()`, assigns the weights it is given, plays one greedy episode,
    writes it as a GIF and answers with a `Video` (or one `VideoFailed` and
    ends). It runs in Linux's idle scheduling class with one TensorFlow thread,
    so it takes only the CPU time that training leaves, and a recording is paced
    to `cpu_share` of one CPU. It ends when told (`close`) or when its parent's
    end of the pipe closes (the trainer died).

    Not thread-safe: one trainer thread drives it.
    """

    def __init__(self, root_dir: str, config: str, env_name: str, seed: Optional[int] = None,
                 cpu_share: float = 0.25):
        """`config`: the run's operative gin config (text); `cpu_share`: the most of one
        CPU a recording takes (`CpuShare`)."""
        context = multiprocessing.get_context("spawn")  # no copy of the trainer's threads
        self._connection, child = context.Pipe()
        self._process = context.Process(
            target=_serve, name="EvalVideo", daemon=True,
            args=(child, config, os.path.join(root_dir, VIDEO_DIR), env_name, seed, cpu_share))
        self._process.start()
        child.close()
        _lowest_priority(self._process.pid)  # before it imports TensorFlow: from its start

    def submit(self, iteration: int, env_steps: int, weights: List[np.ndarray]) -> None:
        """Asks for one episode played with `weights` (the algorithm's variables)."""
        self._connection.send((iteration, env_steps, weights))

    def poll(self, timeout: float = 0.0) -> list:
        """The answers (`Video`, `VideoFailed`) come within `timeout` seconds; a process
        that ended without one answers `VideoFailed`."""
        answers = []
        try:
            while self._connection.poll(timeout):
                answers.append(self._connection.recv())
                timeout = 0.0
        except (EOFError, OSError):
            self._process.join(5)
            answers.append(VideoFailed(f"the video process ended (exit code "
                                       f"{self._process.exitcode})"))
        return answers

    def close(self) -> None:
        """Ends the process (at once: a recording under way is dropped)."""
        self._connection.close()
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)


class CpuShare:
    """Paces a process to at most `share` of one CPU: `__call__` sleeps while the
    process's CPU seconds since `start()` exceed `share` of the wall seconds.

    On a machine that training keeps busy, even CPU time it leaves idle is not free
    (shared caches, the host's other threads): paced, a video takes longer to make
    and costs training less.
    """

    def __init__(self, share: float):
        self._share = share
        self.start()

    def start(self) -> None:
        self._cpu, self._wall = time.process_time(), time.monotonic()

    def __call__(self) -> None:
        ahead = ((time.process_time() - self._cpu) / self._share
                 - (time.monotonic() - self._wall))
        if ahead > 0:
            time.sleep(ahead)


def _lowest_priority(pid: int) -> None:
    """Linux's idle scheduling class for `pid` (its threads to come inherit it): it runs
    only on CPU time nothing else wants. Elsewhere: the highest niceness."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, pid, 19)


def _serve(connection, config: str, folder: str, env_name: str,
           seed: Optional[int], cpu_share: float) -> None:
    """The video process: builds the policy, then records one episode per request,
    paced to `cpu_share` of a CPU."""
    pace = CpuShare(cpu_share)
    try:
        policy, variables = _greedy_policy(config)
    except Exception as error:  # pylint: disable=broad-except
        connection.send(VideoFailed(_first_line(error)))
        return
    while True:
        try:
            iteration, env_steps, weights = connection.recv()
        except (EOFError, OSError):
            return  # the trainer closed its end, or died
        try:
            for variable, value in zip(variables, weights, strict=True):
                variable.assign(value)
            pace.start()
            frames = record_episode(policy, env_name, seed, pace=pace)
            path = os.path.join(folder, f"eval_{env_steps:012d}.gif")
            layout.write_bytes(path, gif_bytes(frames, pace=pace))
        except Exception as error:  # pylint: disable=broad-except
            connection.send(VideoFailed(_first_line(error)))
            return
        connection.send(Video(iteration, path, *frames[0].size, len(frames)))


def _greedy_policy(config: str):
    """`(GreedyPolicy, its variables)` of the algorithm the run's operative gin config builds."""
    # pylint: disable=import-outside-toplevel
    import gin

    from alf_async.environments import create_environment
    from alf_async.learning.devices import op_threads
    from alf_async.training import assembly  # noqa: F401  registers the gin configurables
    from alf_async.training.settings import RunSettings

    op_threads(intra_op=1, inter_op=1)
    gin.parse_config(config, skip_unknown=True)
    env = create_environment(num_parallel_environments=1, num_workers=0)
    try:
        algorithm = RunSettings().algorithm_class(env.time_step_spec(), env.action_spec())
    finally:
        env.close()
    return GreedyPolicy(algorithm), algorithm.variables


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class EvalVideo:
    """Records one greedy episode every `every` evaluations: `root_dir/videos/
    eval_<env steps>.gif`, and TensorBoard's `eval/video` image (animated) at the
    evaluation's iteration.

    A due evaluation hands the greedy weights to a `VideoProcess` and returns:
    training does not wait for the episode, its rendering or its encoding. A
    video is shown in TensorBoard at the next evaluation after it is ready, or
    at `close()`. While one is being recorded, a newly due one is skipped. A
    recording that fails (no OpenGL for MuJoCo, a missing renderer) logs one
    warning and stops the videos; training goes on. Not thread-safe: the
    trainer's hooks call it.
    """

    def __init__(self, root_dir: str, config: str, env_name: str, every: int,
                 seed: Optional[int] = None, process_factory=VideoProcess):
        """`config`: the run's operative gin config (text); `process_factory(root_dir,
        config, env_name, seed)`: what records (a `VideoProcess`)."""
        self._every, self._env_name = every, env_name
        self._process = process_factory(root_dir, config, env_name, seed) if every else None
        self._pending = False

    def after_evaluation(self, algorithm, evaluation: int, iteration, env_steps: int) -> None:
        """Shows the videos ready; asks for one if `evaluation` (counted from 1) is due."""
        self._show(self._process.poll() if self._process else [])
        if not self._process or evaluation % self._every:
            return
        if self._pending:
            logging.info("Evaluation video at iteration %d skipped: the last one is still "
                         "being recorded", int(iteration))
            return
        self._process.submit(int(iteration), env_steps,
                             [variable.numpy() for variable in algorithm.variables])
        self._pending = True

    def close(self, wait_secs: float = 0.0) -> None:
        """Shows the video being recorded if it is ready within `wait_secs`; ends the process."""
        if self._process is None:
            return
        if self._pending:
            self._show(self._process.poll(wait_secs))
        if self._process is not None:
            self._process.close()
            self._process = None

    def _show(self, answers: list) -> None:
        for answer in answers:
            self._pending = False
            if isinstance(answer, VideoFailed):
                logging.warning("Evaluation videos stop: recording %s failed (%s)",
                                self._env_name, answer.message)
                self._process.close()
                self._process = None
                return
            _summary(answer)
            logging.info("Evaluation video: %s (%d frames)", answer.path, answer.frames)


def _summary(video: Video) -> None:
    """TensorBoard's `eval/video`: the GIF as an (animated) image at the video's iteration."""
    with open(video.path, "rb") as f:
        encoded = f.read()
    with tf.summary.record_if(True):
        tf.summary.write("eval/video", tf.constant([str(video.width), str(video.height),
                                                    encoded]),
                         step=video.iteration, metadata=image_metadata.create_summary_metadata(
                             display_name="eval/video", description="one greedy episode"))
