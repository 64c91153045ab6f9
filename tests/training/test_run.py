import json
import os
import re
import signal
import subprocess
import sys
import threading
import types
import time

import gin
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from alf_async import events
from alf_async.runs import layout
from alf_async.training import checkpoints

from alf_async.training import assembly
from alf_async.training import run as run_lib
from alf_async.training.settings import RunSettings
from test_assembly import SETTINGS_ERRORS
from fakes import read_scalars
from alf_async.environments import CartPoleBatchedEnv
from alf_async.errors import ThreadError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REQUIRED_TAGS = {
    "Metrics/AverageReturn", "Metrics/AverageEpisodeLength", "Metrics/EnvironmentSteps",
    "Metrics/NumberOfEpisodes", "Metrics_vs_EnvironmentSteps/AverageReturn",
    "loss/loss", "loss/pg_loss", "loss/value_loss", "loss/entropy",
    "driver/env_frames_per_sec", "driver/learn_queue_size", "learner/policy_lag_min", "learner/policy_lag_mean",
    "learner/dequeue_wait_ms", "learner/load_ms", "learner/grad_ms", "learner/busy",
    "learner/num_replicas", "learner/learning_rate", "learner/entropy_coeff",
    "learner/learn_queue_depth_mean", "learner/learn_queue_depth_min",
    "learner/learn_queue_depth_max", "learner/dropped_unrolls", "learner/skipped_updates",
    "faults/env_restarts", "driver/env_busy", "driver/actor_busy",
}


def text_tags(root_dir):
    acc = event_accumulator.EventAccumulator(os.path.join(root_dir, "train"))
    acc.Reload()
    return acc.Tags()["tensors"]


@pytest.mark.slow
def test_second_run_resumes_counters(tmp_path):
    root = str(tmp_path / "run")
    first = run_lib.train(root, RunSettings(num_iterations=3, num_env_steps=None, summary_interval=1))
    assert first["iteration"] == 3 and first["env_steps"] == 3 * 4 * 32 * 16  # iterations * Q * T * B
    second = run_lib.train(root, RunSettings(num_iterations=5, num_env_steps=None, summary_interval=1,
                           eval_interval=2, num_eval_episodes=3))
    assert second["iteration"] == 5
    assert second["env_steps"] == 5 * first["env_steps"] // 3
    assert second["episodes"] >= first["episodes"]
    with open(os.path.join(root, "result.json")) as f:  # the completed run's final metrics
        assert json.load(f) == json.loads(json.dumps(second))
    scalars = read_scalars(root)
    steps = [s for s, _ in scalars["Metrics/EnvironmentSteps"]]
    assert sorted(set(steps)) == [1, 2, 3, 4, 5]
    assert [s for s, _ in scalars["eval/AverageReturn"]] == [4]
    assert "config/operative_gin" in text_tags(root)
    assert os.path.exists(os.path.join(root, "operative_config.gin"))
    recorded = layout.read_settings(root)  # the records the run was built from, as JSON
    assert recorded["run"]["num_iterations"] == 5 and recorded["run"]["eval_interval"] == 2
    assert recorded["run"]["algorithm_class"] == "PPOAlgorithm"
    assert recorded["sizes"] == dict(num_envs=4, num_actor_queues=1, unroll_length=32,
                                     learn_queue_cap=4, actor_queue_cap=2)
    assert recorded["env"] == dict(env_name="CartPole-v1", num_parallel_environments=16)
    gif = tmp_path / "episode.gif"
    play = subprocess.run([sys.executable, "-m", "alf_async.play", f"--root_dir={root}",
                           "--num_episodes=3", f"--gif={gif}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert play.returncode == 0, play.stderr[-2000:]
    played = float(play.stdout.split("average_return=")[1].split()[0])
    assert 8 <= played <= 500
    frames = int(play.stdout.split("wrote")[1].split("(")[1].split()[0])
    assert gif.read_bytes()[:6] == b"GIF89a" and frames >= 9


def _cli(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "alf_async.train", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_a_warm_train_spare_builds_and_warms_up_ahead_but_touches_the_run_only_once_promoted(
        tmp_path):
    """`python -m alf_async.supervision.spare alf_async.train ...` (the launch's hot spare): ready
    at idle priority with nothing of the run read or written; promoted, it resumes
    from the checkpoint written meanwhile and trains without compiling again."""
    root = tmp_path / "run"
    args = ["--gin_file=gin_configs/ppo_async.gin", f"--root_dir={root}",
            "--gin_param=create_environment.num_parallel_environments=4"]
    assert _cli(*args, "--gin_param=train.num_iterations=2").returncode == 0
    os.remove(root / "result.json")  # as if the first run was killed after its checkpoint
    before = sorted(os.listdir(root))
    spare = subprocess.Popen(
        [sys.executable, "-m", "alf_async.supervision.spare", "alf_async.train", *args,
         "--gin_param=train.num_iterations=4"],
        cwd=ROOT, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, log = time.time() + 180, []
        for line in spare.stderr:
            log.append(line)
            if "Warm spare ready" in line or time.time() > deadline:
                break
        assert "Warm spare ready" in log[-1], "".join(log)
        assert os.sched_getscheduler(spare.pid) == os.SCHED_IDLE
        assert sorted(os.listdir(root)) == before  # no summaries, checkpoint or result yet
        spare.stdin.write("go\n")
        spare.stdin.flush()
        _, rest = spare.communicate(timeout=180)  # closes its input: it has the word
    finally:
        spare.kill()
    log = "".join(log) + rest
    assert spare.returncode == 0, log
    assert "Resumed from" in log and "at iteration 2" in log
    assert json.load(open(root / "result.json"))["iteration"] == 4
    timeline = re.search(r"Timeline: (.*)", log).group(1)
    assert "update warmed up" in timeline and "wait for the promotion" in timeline
    # The first update after the promotion neither traced nor instantiated the update.
    assert float(re.search(r"update compiled ([0-9.]+) s", timeline).group(1)) < 0.2


def test_a_warm_spare_builds_ahead_only_when_building_touches_nothing_of_the_run(
        monkeypatch):
    """A buffer kept on disk is read, and a multi-worker learner's port bound, while
    building: a spare must not do either before the learner it replaces is gone."""
    monkeypatch.delenv("TF_CONFIG", raising=False)
    touches = lambda: run_lib._build_touches_the_run(assembly.run_settings())  # noqa: E731  # pylint: disable=protected-access
    assert not touches()
    gin.bind_parameter("alf_async.ReplayBuffer.save_buffer", True)
    try:
        assert touches()
    finally:
        gin.clear_config()
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {}}')
    assert touches()


@pytest.mark.slow
def test_a_finished_run_keeps_its_result_and_a_raised_budget_continues_it(tmp_path):
    root = str(tmp_path / "run")
    kwargs = dict(num_env_steps=None, summary_interval=10, report_return=15.0)
    first = run_lib.train(root, RunSettings(num_iterations=3, **kwargs))
    assert first["env_steps_to_report_return"] is not None  # random play averages ~22
    result_file = os.path.join(root, "result.json")
    written = open(result_file).read()
    again = run_lib.train(root, RunSettings(num_iterations=3, **kwargs))
    assert again == json.loads(written) and open(result_file).read() == written
    assert tf.train.latest_checkpoint(os.path.join(root, "checkpoints")).endswith("ckpt-3")
    more = run_lib.train(root, RunSettings(num_iterations=5, **kwargs))
    assert more["iteration"] == 5
    for key in ("env_steps_to_report_return", "seconds_to_report_return"):
        assert more[key] == first[key], key  # the first crossing, not the resumed part's
    assert more["seconds"] > first["seconds"]
    # Both whole-run figures: a rate of this process alone would leave out the first run.
    assert more["frames_per_sec"] == pytest.approx(more["env_steps"] / more["seconds"], rel=0.05)
    # The average return against env steps is written every iteration, whatever the
    # summary interval: the report finds a crossing to one learn batch.
    returns = read_scalars(root)["Metrics_vs_EnvironmentSteps/AverageReturn"]
    assert sorted({step for step, _ in returns}) == [k * first["env_steps"] // 3
                                                     for k in range(1, 6)]


def test_ctrl_c_while_importing_is_one_line_and_exit_130(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "alf_async.train",
                             "--gin_file=gin_configs/ppo_async.gin", f"--root_dir={tmp_path}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.8)  # TensorFlow's import alone takes longer
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert (stdout + stderr).strip().splitlines() == ["Interrupted by SIGINT: exiting"], stderr
    assert not os.listdir(tmp_path)


# The CLI turns each kind of bad input into one line and exit 2: a bad gin configuration,
# a bad setting (every one above; one runs outside CI's slow part), a bad flag.
_CLI_SETTINGS = [pytest.param(
    [f"--gin_param={b}" for b in bindings] + ([f"--gin_param=train.seed={seed}"] if seed else []),
    f"Bad setting: .*{message}", marks=() if k == 0 else pytest.mark.slow)
    for k, (bindings, seed, message) in enumerate(SETTINGS_ERRORS)]


@pytest.mark.parametrize("args, message", [
    (["--gin_param=AsyncOffPolicyDriver.learn_queue_capp=4"], "Bad gin configuration"),
    (["--gin_file=gin_configs/ppo_asyn.gin"],
     "Bad setting: --gin_file=gin_configs/ppo_asyn.gin does not exist; did you mean "
     "gin_configs/ppo_async.gin\\?$"),
    pytest.param(["--gin_param=AsyncOffPolicyDriver.learn_queue_cap="], "Bad gin configuration",
                 marks=pytest.mark.slow),
    *_CLI_SETTINGS,
    (["--tf_threads=-1"], "Bad setting: --tf_threads must be >= 0, got -1"),
])
def test_cli_bad_input_is_one_line_and_nonzero(tmp_path, args, message):
    result = _cli("--gin_file=gin_configs/ppo_async.gin", f"--root_dir={tmp_path}", *args,
                  timeout=120)
    assert result.returncode == 2
    errors = [l for l in result.stderr.splitlines() if l.startswith("E")]
    assert len(errors) == 1, result.stderr
    assert re.search(message, errors[0]), errors[0]
    if message == "Bad gin configuration":  # its line is the run's typed event too
        failed = [e["error"] for e in events.read_events(str(tmp_path))
                  if e["event"] == "failed"]
        assert failed == [errors[0].split("] ", 1)[1]]


@pytest.mark.slow
def test_tf_threads_flag_sizes_both_op_pools_and_training_runs(tmp_path):
    result = _cli("--gin_file=gin_configs/ppo_async.gin", f"--root_dir={tmp_path}",
                  "--tf_threads=1", "--gin_param=train.num_iterations=3",
                  "--gin_param=train.num_env_steps=None", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    # The line reads the pools' sizes back from TensorFlow after setting them.
    assert "TensorFlow op threads: 1 intra-op, 1 inter-op" in result.stderr
    assert "'iteration': 3" in result.stderr


@pytest.mark.slow
def test_a_first_run_and_its_resume_print_our_lines_only(tmp_path):
    """No TensorFlow banner, old-gym notice, SavedModel chatter or gin include miss."""
    args = ("--gin_file=gin_configs/impala_async.gin", f"--root_dir={tmp_path}",
            "--gin_param=train.num_env_steps=None", "--gin_param=train.log_interval_secs=0.0")
    first = _cli(*args, "--gin_param=train.num_iterations=2", timeout=180)
    # In the reproducible mode envs step only for the batch: 2 steps per sub-env, too
    # few for a CartPole episode to end within the resumed iteration.
    again = _cli(*args, "--gin_param=train.num_iterations=3", "--gin_param=train.seed=1",
                 "--gin_param=AsyncOffPolicyDriver.unroll_length=2",
                 "--gin_param=AsyncOffPolicyDriver.deterministic=True", timeout=180)
    for result in (first, again):
        assert result.returncode == 0, result.stderr[-3000:]
        lines = [l for l in (result.stdout + result.stderr).splitlines() if l.strip()]
        foreign = [l for l in lines if not re.match(
            r"I\d{4} .* (train|run|loop|checkpoints)\.py:\d+\]", l)]
        assert not foreign, foreign
    progress = [l for l in first.stderr.splitlines() if "| env steps" in l]
    assert "ETA" not in progress[0]  # not from the compile-heavy first iteration
    resumed = [l for l in again.stderr.splitlines() if "| env steps" in l]
    # No episode ends in the resumed iteration: its average is the first run's
    # window, kept in the checkpoint (not "no episode finished yet").
    average = float(re.search(r"'average_return': ([\d.]+)", first.stderr).group(1))
    assert len(resumed) == 1 and f"average return {average:.1f} |" in resumed[0], resumed


@pytest.mark.slow
@pytest.mark.parametrize("config, seed", [("ppo_async", 1), ("impala_async", 1),
                                          ("impala_async", 2), ("ppo_async_multi_device", 1)])
def test_cli_trains_cartpole_to_475(tmp_path, config, seed):
    root = str(tmp_path / config)
    result = _cli(f"--gin_file=gin_configs/{config}.gin", f"--root_dir={root}",
                  "--gin_param=train.stop_at_return=475", "--gin_param=train.num_env_steps=3000000",
                  f"--gin_param=train.seed={seed}")
    assert result.returncode == 0, result.stderr[-3000:]
    scalars = read_scalars(root)
    missing = REQUIRED_TAGS - set(scalars)
    assert not missing, missing
    # The run stopped on reaching 475; episodes that ended while it stopped may move
    # the final 100-episode average a little.
    assert "Average return reached 475.0" in result.stderr
    assert scalars["Metrics/AverageReturn"][-1][1] >= 450
    replicas = 2 if config.endswith("multi_device") else 1
    assert scalars["learner/num_replicas"][-1][1] == replicas


@pytest.mark.parametrize("config, frame, overrides", [
    ("ppo_minatar", (10, 10, 4), []),
    ("impala_atari", (84, 84, 4), ["--gin_param=make_atari_env.max_episode_steps=40",
                                   "--gin_param=create_environment.num_workers=2"]),
])
@pytest.mark.slow
def test_pixel_configs_train_evaluate_export_and_play_on_uint8_frames(tmp_path, config, frame,
                                                                     overrides):
    root = tmp_path / config
    b, t = 4, 8
    result = _cli(f"--gin_file=gin_configs/{config}.gin", f"--root_dir={root}",
                  "--gin_param=train.num_iterations=2", "--gin_param=train.num_env_steps=None",
                  f"--gin_param=create_environment.num_parallel_environments={b}",
                  f"--gin_param=AsyncOffPolicyDriver.unroll_length={t}",
                  "--gin_param=train.eval_interval=2", "--gin_param=train.num_eval_episodes=2",
                  "--gin_param=train.seed=1", *overrides, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # The learn batch's size proves its frames are uint8: float32 would be 4x the pixels.
    mib = float(re.search(r"([\d.e+-]+) MiB per learn batch", result.stderr).group(1))
    pixels = 2 * t * b * int(np.prod(frame))  # Q * T * B frames
    assert pixels <= mib * 2**20 * 1.05 and mib * 2**20 < 1.5 * pixels
    assert [s for s, _ in read_scalars(str(root))["eval/AverageReturn"]] == [2]
    gif = tmp_path / "episode.gif"
    play = subprocess.run([sys.executable, "-m", "alf_async.play", f"--root_dir={root}",
                           "--num_episodes=2", f"--gif={gif}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert play.returncode == 0, play.stderr[-2000:]
    frames = int(play.stdout.split("wrote")[1].split("(")[1].split()[0])
    assert gif.read_bytes()[:6] == b"GIF89a" and frames >= 2


@pytest.mark.slow
@pytest.mark.parametrize("config", ["dqn_cartpole", "dqn_minatar", "sac_pendulum", "sac_mujoco",
                                    "dqn_apex", "sac_pendulum_prioritized", "r2d2_cartpole"])
def test_replay_configs_train_evaluate_export_and_play(tmp_path, config):
    root = tmp_path / config
    # Ape-X without actor processes: 4 env threads for its 4 env ids (as its gin file says).
    apex = (["--gin_param=AsyncOffPolicyDriver.num_envs=4",
             "--gin_param=AsyncOffPolicyDriver.learn_queue_cap=4"] if config == "dqn_apex"
            else [])
    result = _cli(f"--gin_file=gin_configs/{config}.gin", f"--root_dir={root}", *apex,
                  "--gin_param=train.num_iterations=6", "--gin_param=train.num_env_steps=None",
                  "--gin_param=ReplayBuffer.min_size=64", "--gin_param=ReplayBuffer.batch_size=64",
                  "--gin_param=alf_async.Learner.num_minibatches=2",
                  "--gin_param=train.summary_interval=3", "--gin_param=train.eval_interval=3",
                  "--gin_param=train.num_eval_episodes=2", "--gin_param=train.seed=1",
                  timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    prioritized = config.endswith("prioritized") or config in ("dqn_apex", "r2d2_cartpole")
    alpha = "0.4" if config == "dqn_apex" else "0.6"  # as each gin file sets it
    assert (f"prioritized replay (alpha {alpha})" if prioritized else "uniform replay at") \
        in result.stderr
    # Reverb's C++ INFO lines (server start and stop, in-process sampler) are held back.
    assert not [l for l in result.stderr.splitlines() if l.startswith("[reverb/")]
    scalars = read_scalars(str(root))
    assert [s for s, _ in scalars["eval/AverageReturn"]] == [3, 6]
    assert scalars["replay/achieved_ratio"][-1][1] > 0
    assert scalars["loss/loss"]  # the learner trained on sampled windows
    if prioritized:  # every update wrote its segments' priorities back
        # 64 trained steps: segments of T windows (r2d2: sequences of T steps)
        unroll_length = 8 if config == "sac_pendulum_prioritized" else 16
        assert scalars["replay/priority_updates"][-1][1] >= 64 // unroll_length * 2
    if config == "dqn_apex":  # each env's own returns
        assert {f"Metrics_by_env/AverageReturn_env{i}" for i in range(4)} <= set(scalars)
    play = subprocess.run([sys.executable, "-m", "alf_async.play", f"--root_dir={root}",
                           "--num_episodes=2"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert play.returncode == 0, play.stderr[-2000:]
    assert "average_return=" in play.stdout


@pytest.mark.slow
def test_replay_buffer_is_saved_only_when_asked_and_a_resumed_run_starts_from_it(tmp_path):
    def run(root, iterations, *params):
        result = _cli("--gin_file=gin_configs/dqn_cartpole.gin", f"--root_dir={root}",
                      f"--gin_param=train.num_iterations={iterations}",
                      "--gin_param=train.num_env_steps=None", "--gin_param=train.seed=1",
                      "--gin_param=ReplayBuffer.min_size=64", *params, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stderr
    run(tmp_path / "off", 2)
    assert not (tmp_path / "off" / "replay").exists()
    on = ["--gin_param=ReplayBuffer.save_buffer=True"]
    assert "Saved the replay buffer" in run(tmp_path / "on", 2, *on)
    assert len(os.listdir(tmp_path / "on" / "replay")) == 1  # the latest copy only
    resumed = re.search(r"Resumed the replay buffer from .*: (\d+) segments",
                        run(tmp_path / "on", 4, *on))
    assert resumed and int(resumed.group(1)) >= 64 // 16  # min_size in segments of T = 16


@pytest.mark.slow
def test_a_resumed_prioritized_run_keeps_its_buffer_and_beta(tmp_path):
    root = str(tmp_path / "per")

    def run(iterations):
        result = _cli("--gin_file=gin_configs/dqn_cartpole_prioritized.gin",
                      f"--root_dir={root}", f"--gin_param=train.num_iterations={iterations}",
                      "--gin_param=train.num_env_steps=None", "--gin_param=train.seed=1",
                      "--gin_param=train.summary_interval=1",
                      "--gin_param=ReplayBuffer.min_size=64",
                      "--gin_param=ReplayBuffer.save_buffer=True",
                      "--gin_param=PrioritizedReplayBatches.priority_replay_beta="
                      "[(0, 0.0), (400, 1.0)]", timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stderr

    run(3)
    before = read_scalars(root)
    resumed = re.search(r"Resumed the replay buffer from .*: (\d+) segments", run(5))
    assert resumed and int(resumed.group(1)) >= 64 // 16  # segments of T = 16
    after = read_scalars(root)
    beta = dict(after["replay/priority_beta"])
    env_steps = dict(after["Metrics/EnvironmentSteps"])
    # Beta follows the learner's env steps across the restart, not a fresh schedule.
    for iteration in (4, 5):
        assert beta[iteration] == pytest.approx(min(env_steps[iteration] / 400, 1.0), abs=0.01)
    assert beta[4] >= dict(before["replay/priority_beta"])[3] > 0


@pytest.mark.alone
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dqn_cartpole_learns_far_beyond_random_play(tmp_path):
    root = str(tmp_path / "dqn")
    result = _cli("--gin_file=gin_configs/dqn_cartpole.gin", f"--root_dir={root}",
                  "--gin_param=train.num_env_steps=100000", "--gin_param=train.seed=1")
    assert result.returncode == 0, result.stderr[-3000:]
    scalars = read_scalars(root)
    returns = [value for _, value in scalars["Metrics/AverageReturn"]]
    # random play: ~22. The 100-episode average dips near 20k-60k steps; published fresh
    # seeds are at 234-500 by 100k (docs/results.md). This run (seed 1, its threads'
    # timing free) ended below 150 in 3 of 12 runs (144, 144 and, in a CI run, 92.9 over
    # its last 3 points), so the test asks for 100 anywhere in the last quarter of the
    # run, not at its very end: it learned, whatever its last dip.
    quarter = returns[-max(3, len(returns) // 4):]
    assert returns[0] < 40 and max(quarter) >= 100, quarter
    assert abs(scalars["replay/achieved_ratio"][-1][1] - 32) < 3


@pytest.mark.alone
@pytest.mark.slow
@pytest.mark.timeout(600)  # learner-bound: one optimizer step per env step
def test_sac_pendulum_learns_to_swing_up(tmp_path):
    root = str(tmp_path / "sac")
    result = _cli("--gin_file=gin_configs/sac_pendulum.gin", f"--root_dir={root}",
                  "--gin_param=train.num_env_steps=10000", "--gin_param=train.seed=1")
    assert result.returncode == 0, result.stderr[-3000:]
    returns = [value for _, value in read_scalars(root)["Metrics/AverageReturn"]]
    assert returns[0] < -900 and max(returns[-3:]) >= -500, (returns[0], returns[-3:])


@pytest.mark.alone
@pytest.mark.slow
def test_pendulum_config_improves_by_600_over_its_first_evaluation(tmp_path):
    root = str(tmp_path / "pendulum")
    result = _cli("--gin_file=gin_configs/ppo_pendulum.gin", f"--root_dir={root}",
                  "--gin_param=train.num_env_steps=300000", "--gin_param=train.eval_interval=5",
                  "--gin_param=train.seed=1")
    assert result.returncode == 0, result.stderr[-3000:]
    evaluations = [value for _, value in read_scalars(root)["eval/AverageReturn"]]
    assert len(evaluations) >= 10
    assert evaluations[0] < -900  # the untrained policy swings the pendulum little
    assert evaluations[-1] - evaluations[0] >= 600, evaluations


def _random_play_return(env_name, episodes=200, seed=0):
    import gymnasium as gym
    env = gym.make(env_name)
    env.action_space.seed(seed)
    total = 0.0
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += reward
            done = terminated or truncated
    return total / episodes


@pytest.mark.alone
@pytest.mark.slow
def test_minatar_breakout_learns_to_5x_what_random_play_reaches(tmp_path):
    random_return = _random_play_return("MinAtar/Breakout-v1")
    root = str(tmp_path / "minatar")
    result = _cli("--gin_file=gin_configs/ppo_minatar.gin", f"--root_dir={root}",
                  "--gin_param=train.num_env_steps=400000", "--gin_param=train.seed=1")
    assert result.returncode == 0, result.stderr[-3000:]
    returns = [value for _, value in read_scalars(root)["Metrics/AverageReturn"]]
    assert 0.1 < random_return < 1.0  # a random paddle rarely hits the ball
    assert max(returns[-3:]) >= 5 * random_return, (random_return, returns[-3:])


@pytest.mark.alone
@pytest.mark.timeout(900)  # two runs of up to 3M env steps on a slow 2-core machine
@pytest.mark.slow
def test_memory_task_is_solved_by_the_recurrent_config_only(tmp_path):
    """CartPole without velocities: LSTM PPO reaches 475; feed-forward PPO stays far below."""
    rnn = _cli("--gin_file=gin_configs/ppo_rnn_async.gin", f"--root_dir={tmp_path / 'rnn'}",
               "--gin_param=train.stop_at_return=475", "--gin_param=train.num_env_steps=3000000",
               "--gin_param=train.seed=1")
    assert rnn.returncode == 0, rnn.stderr[-3000:]
    assert "Average return reached 475.0" in rnn.stderr
    budget = int(read_scalars(str(tmp_path / "rnn"))["Metrics/EnvironmentSteps"][-1][1])
    feed_forward = _cli("--gin_file=gin_configs/ppo_async.gin", f"--root_dir={tmp_path / 'ff'}",
                        "--gin_param=create_environment.env_name='CartPoleNoVelocity-v1'",
                        f"--gin_param=train.num_env_steps={budget}", "--gin_param=train.seed=1")
    assert feed_forward.returncode == 0, feed_forward.stderr[-3000:]
    scalars = read_scalars(str(tmp_path / "ff"))
    assert scalars["Metrics/EnvironmentSteps"][-1][1] >= budget
    assert max(value for _, value in scalars["Metrics/AverageReturn"]) < 150


def _deterministic_losses(root, seed):
    result = _cli("--gin_file=gin_configs/ppo_async.gin", f"--root_dir={root}",
                  "--gin_param=AsyncOffPolicyDriver.deterministic=True",
                  f"--gin_param=train.seed={seed}", "--gin_param=train.num_iterations=20",
                  "--gin_param=train.num_env_steps=None", "--gin_param=train.summary_interval=1",
                  timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    scalars = read_scalars(root)
    assert [step for step, _ in scalars["loss/loss"]] == list(range(1, 21))
    # Acting never overlaps an update: every step was acted on by the latest weights.
    assert {lag for _, lag in scalars["learner/policy_lag_max"]} == {0.0}
    return [value for _, value in scalars["loss/loss"]]


@pytest.mark.slow
def test_deterministic_mode_repeats_losses_exactly_and_depends_on_the_seed(tmp_path):
    first = _deterministic_losses(tmp_path / "a", seed=1)
    again = _deterministic_losses(tmp_path / "b", seed=1)
    other = _deterministic_losses(tmp_path / "c", seed=2)
    assert first == again
    assert all(a != b for a, b in zip(first, other))


@pytest.mark.parametrize("signum,moment", [
    (signal.SIGINT, "| env steps"), (signal.SIGTERM, "| env steps"),
    (signal.SIGTERM, "learner replica(s) on")])  # training, or start-up: before compiling
@pytest.mark.slow
def test_signal_stops_saves_a_checkpoint_and_exits_with_the_conventional_code(
        tmp_path, signum, moment):
    root = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "alf_async.train", "--gin_file=gin_configs/ppo_async.gin",
         f"--root_dir={root}", "--gin_param=train.num_env_steps=100000000",
         "--gin_param=train.log_interval_secs=0.5"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        for line in proc.stderr:  # wait until that moment
            if moment in line or time.time() > deadline:
                break
        proc.send_signal(signum)
        start = time.time()
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert time.time() - start < 10
    assert proc.returncode == 128 + signum
    name = signal.Signals(signum).name
    assert f"Interrupted by {name} at iteration" in stderr
    assert "In call to configurable" not in stderr  # gin's addition to the message
    saved = tf.train.latest_checkpoint(str(root / "checkpoints"))
    assert saved is not None
    iteration = int(stderr.split("at iteration ")[1].split(";")[0])
    assert saved.endswith(f"ckpt-{iteration}") and (iteration > 0) == (moment == "| env steps")
    assert os.path.isfile(os.path.join(root, "policy", "saved_model.pb"))
    assert not os.path.exists(root / "result.json")  # an interrupted run is not complete


@pytest.mark.slow
def test_a_signal_stop_whose_checkpoint_cannot_be_written_still_exits_as_a_signal_stop(
        tmp_path):
    """Exit 143, not 1: a supervisor restarts a learner stopped by a signal at once, and
    backs off from one that crashed (a SIGTERM during a full disk cost a chaos run a
    second per learner fault)."""
    root = tmp_path / "run"
    for number in range(1, 400):  # every checkpoint this run could write
        _block_checkpoint(str(root), number)
    proc = subprocess.Popen(
        [sys.executable, "-m", "alf_async.train", "--gin_file=gin_configs/ppo_async.gin",
         f"--root_dir={root}", "--gin_param=train.num_env_steps=100000000",
         "--gin_param=train.checkpoint_retries=1000", "--gin_param=train.log_interval_secs=0.5"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        for line in proc.stderr:
            if "| env steps" in line or time.time() > deadline:
                break
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert re.search(r"Interrupted by SIGTERM at iteration \d+; its checkpoint could not be "
                     r"written", stderr)
    assert "checkpoint saved" not in stderr
    assert tf.train.latest_checkpoint(str(root / "checkpoints")) is None


@pytest.mark.slow
def test_stopping_and_resuming_ends_where_one_straight_run_ends(tmp_path):
    with gin.unlock_config():
        gin.bind_parameter("alf_async.Learner.learning_rate", [(0, 1e-3), (20000, 1e-4)])
    try:
        kwargs = dict(num_env_steps=None, summary_interval=1)
        run_lib.train(str(tmp_path / "resumed"), RunSettings(num_iterations=2, **kwargs))
        resumed = run_lib.train(str(tmp_path / "resumed"), RunSettings(num_iterations=4, **kwargs))
        straight = run_lib.train(str(tmp_path / "straight"), RunSettings(num_iterations=4, **kwargs))
    finally:
        gin.clear_config()
    for key in ("iteration", "env_steps", "optimizer_steps", "learning_rate"):
        assert resumed[key] == straight[key], key
    assert resumed["optimizer_steps"] == 4 * 4 * 4  # iterations * epochs * minibatches
    # The schedule moved with the restored env steps, not from zero.
    assert resumed["learning_rate"] < 1e-3


class _BreakingCartPole(CartPoleBatchedEnv):
    """CartPole whose step 40 raises."""

    def __init__(self, num_envs, seed):
        super().__init__(num_envs, seed=seed)
        self._steps = 0

    def _step(self, action):
        self._steps += 1
        if self._steps == 40:
            raise RuntimeError("sub-env broke")
        return super()._step(action)


@pytest.mark.slow
def test_env_error_stops_training_and_keeps_the_last_checkpoint(tmp_path):
    root = str(tmp_path / "run")
    run_lib.train(root, RunSettings(num_iterations=2, num_env_steps=None, checkpoint_interval=1))
    saved = tf.train.latest_checkpoint(os.path.join(root, "checkpoints"))
    with gin.unlock_config():
        gin.bind_parameter("create_environment.env_load_fn",
                           lambda name, n, seed: _BreakingCartPole(n, seed))
    try:
        with pytest.raises(ThreadError, match=r"EnvThread\d failed: RuntimeError: sub-env broke"):
            run_lib.train(root, RunSettings(num_iterations=1000, num_env_steps=None))
    finally:
        gin.clear_config()
    assert tf.train.latest_checkpoint(os.path.join(root, "checkpoints")) == saved
    assert not [t for t in threading.enumerate() if t.name.startswith("EnvThread")]


def _checkpoint_files(root, number):
    return [os.path.join(root, "checkpoints", name)
            for name in os.listdir(os.path.join(root, "checkpoints"))
            if name.startswith(f"ckpt-{number}.")]


def _tear(path):
    """Cuts the file to half, as a kill or a full disk mid-write would leave it."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)


@pytest.mark.slow
def test_a_torn_latest_checkpoint_resumes_from_the_newest_readable_one(tmp_path, caplog):
    root = str(tmp_path / "run")
    run_lib.train(root, RunSettings(num_iterations=2, num_env_steps=None, checkpoint_interval=1))
    for path in _checkpoint_files(root, 2):
        _tear(path)
    caplog.set_level("INFO", logger="absl")
    result = run_lib.train(root, RunSettings(num_iterations=3, num_env_steps=None, checkpoint_interval=1))
    warnings = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(warnings) == 1 and "ckpt-2 cannot be read" in warnings[0]
    assert re.search(r"Resumed from .*ckpt-1 at iteration 1$", caplog.text, re.M)
    assert result["iteration"] == 3


@pytest.mark.slow
def test_no_readable_checkpoint_is_one_error_not_a_silent_fresh_start(tmp_path):
    root = str(tmp_path / "run")
    run_lib.train(root, RunSettings(num_iterations=1, num_env_steps=None, checkpoint_interval=1))
    for path in _checkpoint_files(root, 1):
        _tear(path)
    with pytest.raises(ValueError, match=r"none of the 1 checkpoints in .* can be read"):
        run_lib.train(root, RunSettings(num_iterations=3, num_env_steps=None))


def _block_checkpoint(root, number):
    """A directory where checkpoint `number`'s index file goes: its write fails."""
    os.makedirs(os.path.join(root, "checkpoints", f"ckpt-{number}.index"))


@pytest.mark.slow
def test_a_failed_checkpoint_write_is_retried_and_the_previous_one_stays(tmp_path, caplog):
    root = str(tmp_path / "run")
    run_lib.train(root, RunSettings(num_iterations=1, num_env_steps=None, checkpoint_interval=1))
    _block_checkpoint(root, 2)
    events.configure(root, "learner")
    try:
        result = run_lib.train(root, RunSettings(num_iterations=3, num_env_steps=None,
                               checkpoint_interval=1, checkpoint_retries=1))
    finally:
        events.configure(None, "learner")
    failed = [e for e in events.read_events(root) if e["event"] == "checkpoint_failed"]
    assert [e["iteration"] for e in failed] == [2] and "could not be written" in failed[0]["error"]
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and errors[0].startswith(
        "the checkpoint of iteration 2 could not be written to ")
    assert "(failure 1 of train.checkpoint_retries=1)" in errors[0]
    assert result["iteration"] == 3
    assert tf.train.latest_checkpoint(os.path.join(root, "checkpoints")).endswith("ckpt-3")
    assert checkpoints.unreadable(os.path.join(root, "checkpoints", "ckpt-1")) is None


@pytest.mark.slow
def test_checkpoint_failures_past_the_retries_stop_training_with_one_line(tmp_path):
    root = str(tmp_path / "run")
    run_lib.train(root, RunSettings(num_iterations=1, num_env_steps=None, checkpoint_interval=1))
    _block_checkpoint(root, 2)
    with pytest.raises(checkpoints.CheckpointWriteError,
                       match="the checkpoint of iteration 2 could not be written"):
        run_lib.train(root, RunSettings(num_iterations=5, num_env_steps=None, checkpoint_interval=1,
                      checkpoint_retries=0))
    assert checkpoints.saved_checkpoints(os.path.join(root, "checkpoints"))[0].endswith(
        "ckpt-1")
    assert checkpoints.unreadable(os.path.join(root, "checkpoints", "ckpt-1")) is None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_worker_learner_trains_in_step_and_only_the_chief_writes(tmp_path):
    portpicker = pytest.importorskip("portpicker")
    root = tmp_path / "run"
    cluster = {"worker": [f"127.0.0.1:{portpicker.pick_unused_port()}" for _ in range(2)]}
    params = ["create_strategy.kind='multi_worker'", "train.num_iterations=4",
              "train.num_env_steps=None", "train.checkpoint_interval=2",
              "train.summary_interval=1", "create_environment.num_parallel_environments=8",
              "AsyncOffPolicyDriver.unroll_length=8", "alf_async.Learner.num_minibatches=2"]
    procs = []
    try:
        for index in range(2):
            env = dict(os.environ, TF_CONFIG=json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}))
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "alf_async.train", "--gin_file=gin_configs/ppo_async.gin",
                 f"--root_dir={root}", *[f"--gin_param={p}" for p in params]],
                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        logs = [proc.communicate(timeout=400)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    for proc, log in zip(procs, logs):
        assert proc.returncode == 0, log[-3000:]
    done = [re.search(r"Training done: \{'iteration': (\d+), 'env_steps': (\d+)", log).groups()
            for log in logs]
    assert done[0] == done[1] == ("4", str(4 * 2 * 2 * 8 * 8))  # both workers' batches count
    assert sorted(os.listdir(root)) == ["checkpoints", "events", "operative_config.gin",
                                         "policy", "result.json", "run_settings.json", "train"]
    assert len(os.listdir(root / "events")) == 2  # run events: each process its own file
    assert tf.train.latest_checkpoint(str(root / "checkpoints")).endswith("ckpt-4")
    assert len(os.listdir(root / "train")) == 1  # one event file: the chief's
    assert read_scalars(str(root))["Metrics/EnvironmentSteps"][-1] == (4, 4 * 2 * 2 * 8 * 8)


def test_a_spare_promoted_while_it_built_becomes_its_command_once(monkeypatch):
    """A spare promoted before it was ready (the word came while it built) used to stay
    named `alf-spare`: the chaos tool then saw no learner, and no learner fault fired
    again. It becomes its command (name, priority) once, after the build."""
    from alf_async.supervision import promotion  # pylint: disable=import-outside-toplevel
    gate, calls = threading.Event(), []
    monkeypatch.setattr(promotion, "_gate", gate)
    monkeypatch.setattr(promotion, "_on_promotion", lambda: calls.append("become"))
    monkeypatch.setattr(run_lib, "_build_touches_the_run", lambda settings: False)
    monkeypatch.setattr(run_lib, "build", lambda *args: (gate.set(), "learner", "driver", None))

    class _Timeline:
        def mark(self, name):
            calls.append(name)

    settings = types.SimpleNamespace(run=None, to_json=dict)
    built = run_lib._build(settings, "/nowhere", _Timeline())  # pylint: disable=protected-access
    assert built[1:3] == ("learner", "driver")
    assert calls == ["become"]  # no warm-up: it was promoted already
    promotion.await_promotion()
    assert calls == ["become"]  # once
