import time

import numpy as np
import pytest
from tf_agents.trajectories import time_step as ts

from alf_async.metrics import EpisodeStats, StageClock

F, M, L = ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST


def test_episode_stats_span_unrolls_and_ignore_first_rewards():
    stats = EpisodeStats(num_envs=2, batch_size=2, window=10)
    # env 0, sub-env 0: an episode of 3 rewarded steps split over two unrolls.
    stats.update(np.array([[5, 0], [1, 0], [1, 0]], np.float32),
                 np.array([[F, F], [M, M], [M, M]], np.int32), env_id=0)
    assert stats.num_episodes == 0 and np.isnan(stats.averages()[0])
    stats.update(np.array([[1, 0], [0, 2]], np.float32),
                 np.array([[L, M], [F, L]], np.int32), env_id=0)
    assert stats.num_episodes == 2
    # (1 + 1 + 1) over 3 steps and (0 + 0 + 0 + 2) over 4 steps.
    assert stats.averages() == (2.5, 3.5)
    assert stats.num_env_steps == 10


def test_an_episode_cut_short_by_a_restart_is_dropped_not_added_to_the_next():
    stats = EpisodeStats(num_envs=1, batch_size=1, window=10)
    # An env (or actor process) dies mid-episode after 3 rewards ...
    stats.update(np.ones((4, 1), np.float32), np.array([[F], [M], [M], [M]], np.int32), 0)
    # ... and its replacement plays a whole episode of 2 on the same stream.
    stats.update(np.ones((3, 1), np.float32), np.array([[F], [M], [L]], np.int32), 0)
    assert stats.num_episodes == 1
    assert stats.averages() == (2.0, 2.0)


def test_an_episode_joined_mid_way_by_a_restarted_learner_is_not_counted():
    stats = EpisodeStats(num_envs=1, batch_size=2, window=10)
    # The learner restarts while its actors play on: sub-env 0 is 400 steps into an
    # episode (its last 3 are seen), sub-env 1 starts a whole one of 2 rewards.
    stats.update(np.ones((4, 2), np.float32),
                 np.array([[M, F], [M, M], [L, L], [F, F]], np.int32), 0)
    assert stats.num_episodes == 1 and stats.averages() == (2.0, 2.0)
    stats.update(np.ones((2, 2), np.float32), np.array([[L, M], [F, L]], np.int32), 0)
    assert stats.num_episodes == 3  # from their FIRST steps on, both count
    assert stats.averages() == (5.0 / 3, 5.0 / 3)  # 2, then 1 and 2


def test_stage_clock_reports_per_iteration_times_busy_share_and_gauges():
    clock = StageClock()
    for depth in (0, 2, 4):
        clock.add("grad", 0.01)
        clock.add("dequeue_wait", 0.002)
        clock.observe("learn_queue_depth", depth)
        clock.tick()
    time.sleep(0.05)
    out = clock.read_and_reset()
    assert abs(out["grad_ms"] - 10) < 1e-6 and abs(out["dequeue_wait_ms"] - 2) < 1e-6
    assert 0 < out["busy"] < 0.03 / 0.05 + 1e-6
    assert (out["learn_queue_depth_mean"], out["learn_queue_depth_min"],
            out["learn_queue_depth_max"]) == (2, 0, 4)
    assert clock.read_and_reset() == {"busy": 0.0}


def _episodes_step_by_step(rewards, step_types):
    """Reference: (return, length) of each finished episode, walking every step."""
    returns, lengths, finished = {}, {}, []
    for reward, step_type in zip(rewards, step_types):
        for t in range(len(reward)):
            for b in range(reward.shape[1]):
                if step_type[t, b] != F:
                    returns[b] = returns.get(b, 0.0) + reward[t, b]
                    lengths[b] = lengths.get(b, 0) + 1
                if step_type[t, b] == L:
                    finished.append((returns.pop(b, 0.0), lengths.pop(b, 0)))
    return finished


def test_episode_stats_match_a_step_by_step_count_on_random_episodes():
    rng = np.random.default_rng(0)
    b, t, num_unrolls = 5, 7, 12
    # Episodes of random lengths (1..9 steps after FIRST), laid end to end per sub-env.
    columns = []
    for _ in range(b):
        types = []
        while len(types) < t * num_unrolls:
            types += [F] + [M] * int(rng.integers(0, 9)) + [L]
        columns.append(types[:t * num_unrolls])
    step_types = np.array(columns, np.int32).T.reshape(num_unrolls, t, b)
    rewards = rng.integers(0, 5, step_types.shape).astype(np.float32)
    expected = np.array(_episodes_step_by_step(rewards, step_types))
    everything = EpisodeStats(num_envs=1, batch_size=b, window=1000)
    recent = EpisodeStats(num_envs=1, batch_size=b, window=3)
    for reward, step_type in zip(rewards, step_types):
        everything.update(reward, step_type, env_id=0)
        recent.update(reward, step_type, env_id=0)
    assert everything.num_episodes == recent.num_episodes == len(expected) > 20
    assert everything.averages() == tuple(np.mean(expected, axis=0))
    assert recent.averages() == tuple(np.mean(expected[-3:], axis=0))  # in order


def test_returns_by_env_average_each_envs_own_episodes():
    stats = EpisodeStats(num_envs=3, batch_size=1, window=2)
    for env_id, rewards in [(0, [1, 1]), (0, [3, 3]), (0, [5, 5]), (2, [0, 4])]:
        stats.update(np.array([[0], [rewards[0]], [rewards[1]]], np.float32),
                     np.array([[F], [M], [L]], np.int32), env_id=env_id)
    by_env = stats.returns_by_env()
    assert by_env[0] == 8.0  # its last two episodes: 6 and 10
    assert np.isnan(by_env[1]) and by_env[2] == 4.0


def test_only_the_counted_envs_make_the_average_but_every_env_has_its_own():
    stats = EpisodeStats(num_envs=3, batch_size=1, window=10, counted_envs=[1, 2])
    episode = np.array([[F], [M], [L]], np.int32)
    for env_id, reward in [(0, 1.0), (1, 4.0), (2, 6.0)]:
        stats.update(np.full((3, 1), reward, np.float32), episode, env_id)
    assert stats.averages() == (10.0, 2.0)  # (8 + 12) / 2: env 0's return of 2 left out
    assert stats.returns_by_env() == [2.0, 8.0, 12.0]
    assert stats.num_episodes == 3


@pytest.mark.parametrize("counted", [[], [0, 3], [-1]])
def test_counted_envs_outside_the_run_get_one_line_naming_the_setting(counted):
    with pytest.raises(ValueError, match=r"EpisodeStats.counted_envs .*0 \.\.\. 2"):
        EpisodeStats(num_envs=3, batch_size=1, counted_envs=counted)
