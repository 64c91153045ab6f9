import types

import pytest
import tensorflow as tf

from alf_async.training import loop
from alf_async.training.checkpoints import Counters
from alf_async.training.loop import Budget, ConsoleLine, Progress, busy_text


def _counters():
    learner = types.SimpleNamespace(train_step=tf.Variable(0, dtype=tf.int64),
                                    env_steps=tf.Variable(0, dtype=tf.int64))
    return Counters(learner)


def _score(value):
    return types.SimpleNamespace(label="average return", last=value)


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def time(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = _Clock()
    monkeypatch.setattr(loop.time, "time", fake.time)
    return fake


def test_budget_needs_a_limit_and_an_unknown_return_never_spends_it():
    with pytest.raises(ValueError, match="num_iterations, num_env_steps or stop_at_return"):
        Budget(None, None, None)
    budget = Budget(num_iterations=None, num_env_steps=1000, stop_at_return=475.0)
    assert not budget.spent(5, 999, None)
    assert not budget.spent(5, 999, float("nan"))
    assert budget.spent(5, 1000, None)
    assert budget.spent(5, 10, 475.0)
    assert Budget(3, None, None).spent(3, 0, None) and not Budget(3, None, None).spent(2, 0, 9)


def test_the_first_crossing_is_kept_in_the_counters_and_not_reported_again(clock, monkeypatch):
    logged = []
    monkeypatch.setattr(loop.logging, "info", lambda *args: logged.append(args))
    counters = _counters()
    first = Progress(counters, report_return=100.0)
    counters.env_steps.assign(4096)
    clock.now += 7.0
    first.check_target(99.0)
    assert first.reached() is None and int(counters.reached_env_steps) == -1
    counters.env_steps.assign(8192)
    clock.now += 3.0
    first.check_target(120.0)
    assert first.reached() == pytest.approx(10.0) and int(counters.reached_env_steps) == 8192
    first.sync()  # as a checkpoint does
    clock.now += 100.0  # the pause between two runs of the root_dir
    resumed = Progress(counters, report_return=100.0)
    clock.now += 5.0
    counters.env_steps.assign(20000)
    resumed.check_target(130.0)
    assert resumed.reached() == pytest.approx(10.0) and int(counters.reached_env_steps) == 8192
    assert resumed.elapsed() == pytest.approx(15.0)  # the pause is not training time
    assert resumed.frames_per_sec() == pytest.approx((20000 - 8192) / 5.0)  # this run's
    assert resumed.whole_run_frames_per_sec() == pytest.approx(20000 / 15.0)  # result.json's
    assert len([a for a in logged if "reached" in a[0]]) == 1


def test_eta_follows_the_recent_rate_not_the_average_since_the_start(clock):
    counters = _counters()
    progress = Progress(counters, report_return=None, eta_window_secs=60.0)
    assert progress.eta(10_000) == ""
    steps = 0
    for second in range(120):  # 1,000 env steps/s for 60 s, then 100/s
        steps += 1000 if second < 60 else 100
        clock.now += 1.0
        counters.env_steps.assign(steps)
        progress.mark_iteration()
    left = 100_000 - steps
    eta = float(progress.eta(100_000).split("ETA ")[1].split()[0])
    assert eta == pytest.approx(left / 100, rel=0.05)  # the average since the start: 1/5 of it
    bounded = progress.eta(100_000, stop_at_return=475.0)  # the target may end it sooner
    assert bounded == f" | ETA at most {left / 100:.0f} s (or at return 475)"


def test_the_starvation_hint_is_printed_once_then_only_every_few_minutes(clock, monkeypatch):
    logged = []
    monkeypatch.setattr(loop.logging, "info", lambda fmt, *a: logged.append(fmt))
    console = ConsoleLine()
    starved = dict(dequeue_wait_ms=50.0, grad_ms=10.0)
    hints = lambda: len([line for line in logged if "waits for data" in line])
    for _ in range(20):
        console.log(_counters(), 1.0, _score(float("nan")), 0, starved, "")
        clock.now += 5.0
    assert hints() == 1 and len(logged) == 21
    clock.now += loop.HINT_REPEAT_SECS
    console.log(_counters(), 1.0, _score(10.0), 0, starved, "")
    console.log(_counters(), 1.0, _score(10.0), 0, dict(dequeue_wait_ms=1.0, grad_ms=10.0), "")
    assert hints() == 2


def test_the_average_returns_episodes_survive_a_checkpoint_and_seed_the_resumed_window(
        tmp_path):
    """A restarted learner's average return goes on from the saved window instead of
    averaging the few (short) episodes that end first after the restart."""
    import numpy as np
    from tf_agents.trajectories import time_step as ts
    from alf_async.metrics import EpisodeStats
    stats = EpisodeStats(num_envs=1, batch_size=1, window=3)
    for length in (500, 400, 300, 200):  # the window keeps the last 3: 400, 300, 200
        steps = [ts.StepType.FIRST] + [ts.StepType.MID] * (length - 1) + [ts.StepType.LAST]
        stats.update(np.ones((length + 1, 1), np.float32), np.array(steps)[:, None], 0)
    counters = Counters(types.SimpleNamespace(train_step=tf.Variable(0, dtype=tf.int64),
                                              env_steps=tf.Variable(0, dtype=tf.int64)),
                        window=stats.window)
    counters.keep_episodes(stats.recent())
    path = tf.train.Checkpoint(counters=counters).save(str(tmp_path / "ckpt"))
    restored = Counters(types.SimpleNamespace(train_step=tf.Variable(0, dtype=tf.int64),
                                              env_steps=tf.Variable(0, dtype=tf.int64)),
                        window=3)
    tf.train.Checkpoint(counters=restored).restore(path).assert_consumed()
    resumed = EpisodeStats(num_envs=1, batch_size=1, window=3)
    resumed.resume(restored.kept_episodes())
    assert resumed.averages() == stats.averages() == (300.0, 300.0)
    resumed.update(np.ones((3, 1), np.float32), np.array(
        [[ts.StepType.FIRST], [ts.StepType.MID], [ts.StepType.LAST]]), 0)  # a short one
    assert resumed.averages() == (502.0 / 3, 502.0 / 3)  # 300, 200 and 2


def test_the_busy_figures_name_only_the_stages_that_run_here():
    assert busy_text(dict(env_busy=0.8, actor_busy=0.3, busy=0.95)) == (
        "env 80%, actor 30%, learner 95%")
    assert busy_text(dict(env_busy=0.5, busy=0.9)) == "env 50%, learner 90%"  # acting envs
    assert busy_text(dict(busy=0.9)) == "learner 90%"  # collection in actor processes


def test_the_progress_line_has_no_empty_busy_part_before_the_first_timings(monkeypatch):
    logged = []
    monkeypatch.setattr(loop.logging, "info", lambda fmt, *a: logged.append(fmt % a))
    console = ConsoleLine()
    console.log(_counters(), 650.0, _score(22.1), 2, {}, "")  # the first line: no timings yet
    console.log(_counters(), 650.0, _score(22.1), 2, dict(busy=0.5), " | ETA 25 s")
    assert logged[0].endswith("| learn queue 2") and "busy" not in logged[0]
    assert logged[1].endswith("| learn queue 2 | busy: learner 50% | ETA 25 s")


def test_console_lines_and_progress_events_keep_their_own_intervals(clock):
    """ppo_chaos.gin: a line every 5 s for people, an event every second for the ledger."""
    progress = Progress(_counters(), report_return=None)
    lines = events_ = 0
    for _ in range(20):  # 20 s
        clock.now += 1.0
        lines += progress.due(5.0, "line")
        events_ += progress.due(1.0, "event")
    assert (lines, events_) == (4, 20)
