"""Episode statistics gathered from the per-unroll log records, and user metrics."""

import collections
import threading
import time
from typing import Optional, Sequence

import gin
import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts


@gin.configurable(module="alf_async")
class EpisodeStats:
    """Returns and lengths of finished episodes over all sub-envs (of the counted envs).

    An episode's return is the sum of the rewards of its non-FIRST steps and
    its length the number of those steps (CartPole-v1's best is 500 / 500).
    A FIRST step starts a new count: an episode cut short by a replaced env
    or a restarted actor process is dropped, never added to the next one. An
    episode whose FIRST step was not seen (a restarted learner joins actors
    mid-episode) is not counted either: its return would be a part's.

    Thread-safety: `update()` is called by the log thread; the readers may be
    called from any thread.
    """

    def __init__(self, num_envs: int, batch_size: int, window: int = 100,
                 counted_envs: Optional[Sequence[int]] = None):
        """
        Args:
            num_envs: number of env ids (env threads, of all actor processes).
            batch_size: B, sub-envs per env thread.
            window: number of most recent episodes the averages cover.
            counted_envs: the env ids whose episodes make `averages()` (what the
                console, `*/AverageReturn`, `train.report_return` and
                `train.stop_at_return` read); None: all. Ape-X leaves out the
                envs that explore most, whose returns measure their epsilon,
                not the policy. Every env still counts in `returns_by_env()`.

        Raises:
            ValueError: a counted env id outside `[0, num_envs)`, or none.
        """
        self._counted = self._check_counted(counted_envs, num_envs)
        self._lock = threading.Lock()
        self._returns = np.zeros((num_envs, batch_size), np.float64)
        self._lengths = np.zeros((num_envs, batch_size), np.int64)
        self._whole = np.zeros((num_envs, batch_size), bool)  # its FIRST step was seen
        self._recent = collections.deque(maxlen=window)
        self._recent_by_env = [collections.deque(maxlen=window) for _ in range(num_envs)]
        self._num_episodes = 0
        self._num_env_steps = 0

    @staticmethod
    def _check_counted(counted_envs, num_envs: int) -> frozenset:
        if counted_envs is None:
            return frozenset(range(num_envs))
        counted = frozenset(counted_envs)
        if not counted or not counted <= set(range(num_envs)):
            raise ValueError(f"EpisodeStats.counted_envs must name env ids of this run "
                             f"(0 ... {num_envs - 1}), got {list(counted_envs)!r}")
        return counted

    def update(self, reward, step_type, env_id: int) -> None:
        """Accounts one unroll of env `env_id`; `reward`, `step_type`: `[T, B]`."""
        returns, lengths = self._returns[env_id], self._lengths[env_id]
        whole = self._whole[env_id]
        finished = []
        for r, s in zip(reward, step_type):
            playing = s != ts.StepType.FIRST
            returns[~playing] = 0.0  # an unfinished episode before it is dropped
            lengths[~playing] = 0
            whole |= ~playing
            returns += np.where(playing, r, 0.0)
            lengths += playing
            last = s == ts.StepType.LAST
            if last.any():
                finished.extend(zip(returns[last & whole], lengths[last & whole]))
                returns[last] = 0.0
                lengths[last] = 0
        with self._lock:
            if env_id in self._counted:
                self._recent.extend(finished)
            self._recent_by_env[env_id].extend(finished)
            self._num_episodes += len(finished)
            self._num_env_steps += reward.size

    @property
    def num_episodes(self) -> int:
        with self._lock:
            return self._num_episodes

    @property
    def num_env_steps(self) -> int:
        """Env steps of all unrolls accounted so far."""
        with self._lock:
            return self._num_env_steps

    def returns_by_env(self) -> list:
        """Each env's average return over its last `window` episodes (NaN: none yet):
        how envs that act differently (Ape-X's epsilons) fare."""
        with self._lock:
            return [float(np.mean([r for r, _ in recent])) if recent else float("nan")
                    for recent in self._recent_by_env]

    @property
    def window(self) -> int:
        return self._recent.maxlen

    def recent(self) -> np.ndarray:
        """`[n, 2]` float64 (return, length) of the window's episodes, oldest first."""
        with self._lock:
            return np.asarray(self._recent, np.float64).reshape(-1, 2)

    def resume(self, episodes: np.ndarray) -> None:
        """Starts the window with `episodes` (`recent()` of the run before a restart):
        a resumed learner's averages go on from where they were, not from the few
        (short) episodes that end first after it."""
        with self._lock:
            self._recent.extend((float(r), float(n)) for r, n in episodes)

    def averages(self):
        """`(average_return, average_episode_length)` over the window, NaN if empty."""
        with self._lock:
            if not self._recent:
                return float("nan"), float("nan")
            mean_return, mean_length = np.mean(np.asarray(self._recent), axis=0)
            return float(mean_return), float(mean_length)


class StepMetrics:
    """Feeds tf-agents step metrics (e.g. `tf_metrics.AverageReturnMetric`) from unrolls.

    The metrics see one batch of E * B sub-envs (build them with `batch_size =
    num_envs * num_parallel_environments`): an unroll of env i updates
    columns `i * B ... i * B + B - 1`, step by step, while every other column
    gets a neutral boundary step (LAST to FIRST, reward 0), which changes no
    tf-agents episode metric.

    Thread-safety: called by the log thread only; the trainer may read the
    metrics' results meanwhile.
    """

    def __init__(self, metrics: Sequence, num_envs: int, batch_size: int):
        self.metrics = list(metrics)
        self._num_envs, self._batch_size = num_envs, batch_size
        self._update = tf.function(self._update_all, autograph=False)

    def __call__(self, trajectory, env_id) -> None:
        """Updates every metric with one env's `[B, T]` `Trajectory`, T steps in order."""
        self._update(trajectory, tf.convert_to_tensor(env_id, tf.int32))

    def _update_all(self, trajectory, env_id):
        columns = (env_id * self._batch_size + tf.range(self._batch_size))[:, None]
        width = self._num_envs * self._batch_size
        neutral = tf.nest.map_structure(
            lambda x: tf.zeros(tf.concat([[width], tf.shape(x)[2:]], 0), x.dtype), trajectory)
        neutral = neutral._replace(
            step_type=tf.fill([width], tf.cast(ts.StepType.LAST, neutral.step_type.dtype)),
            next_step_type=tf.fill([width], tf.cast(ts.StepType.FIRST,
                                                    neutral.next_step_type.dtype)))
        for t in range(trajectory.step_type.shape[1]):
            step = tf.nest.map_structure(
                lambda fill, x, t=t: tf.tensor_scatter_nd_update(fill, columns, x[:, t]),
                neutral, trajectory)
            for metric in self.metrics:
                metric(step)


class StageClock:
    """Wall time spent in named stages of the training loop, and sampled gauges.

    `busy` is the share of wall time spent in the `grad` stage since the last
    `read_and_reset()`; a gauge (e.g. the learn-queue depth before each
    dequeue) is reported as its mean, min and max over the same window.

    Thread-safety: any thread may add and observe (the prefetch thread adds
    `load`); one thread reads.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._totals = collections.defaultdict(float)
        self._gauges = collections.defaultdict(list)
        self._count = 0
        self._since = time.perf_counter()

    def add(self, stage: str, seconds: float) -> None:
        with self._lock:
            self._totals[stage] += seconds

    def observe(self, gauge: str, value: float) -> None:
        with self._lock:
            self._gauges[gauge].append(value)

    def tick(self) -> None:
        """Marks the end of one iteration."""
        with self._lock:
            self._count += 1

    def read_and_reset(self) -> dict:
        """Per-iteration `{stage}_ms`, `busy` and `{gauge}_mean|min|max` since last read."""
        with self._lock:
            wall = time.perf_counter() - self._since
            count = max(self._count, 1)
            out = {f"{stage}_ms": 1000 * total / count for stage, total in self._totals.items()}
            out["busy"] = self._totals.get("grad", 0.0) / max(wall, 1e-9)
            for gauge, values in self._gauges.items():
                out.update({f"{gauge}_mean": float(np.mean(values)),
                            f"{gauge}_min": float(np.min(values)),
                            f"{gauge}_max": float(np.max(values))})
            self._reset()
        return out
