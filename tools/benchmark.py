"""Throughput of alf_async against its own ceilings and tf-agents' sync PPO.

Measures, in one run on one machine, env frames per second of:
  1. end_to_end:   the async PPO trainer (frames consumed by the learner);
  2. learner_only: the same learner on one in-memory batch, over and over;
  3. actor_only:   the driver collecting, the learner only dequeuing;
  4. raw_env:      the batched env stepped with random actions, no TF;
  5. tf_agents:    PPOClipAgent + DynamicStepDriver, same env count,
                   unroll length, networks and epochs.
and prints the ratios 1/5, 1/2 and 3/4. Absolute figures are noisy on
shared machines (+-15 % here); ratios taken in one run are steadier, and
--repeats=N interleaves N rounds and reports the medians.

    python tools/benchmark.py --duration=10 --repeats=3 --out=bench.json

With --remote=K it measures instead, for K actor processes
(`python -m alf_async.actor`) feeding the learner through Reverb on
127.0.0.1 against the same env threads in the learner's process: collection
(3) and end to end (1) each way, their ratios, and the CPU time per frame of
all processes together (the transport's overhead is the difference).

With --off_policy (a replay config: dqn_cartpole.gin, sac_pendulum.gin) it
counts optimizer steps instead of frames, since the replay ratio ties
frames to updates: optimizer steps/s end to end against the learner alone
training on one sampled batch over and over (its ceiling), and the replay's
insert (env steps/s) and sample (windows/s) rates during the end-to-end run.
The two alternate in --slices slices of one driver (while the learner trains
alone, the data path runs on until the replay's rate limiter holds it), so
that the machine's drift during the run slows both alike.
It also counts the CPU time per optimizer step of each: end to end cannot
outrun `cores / CPU per step`, so it prints the highest end-to-end/learner
ratio this machine's cores allow (the collection's and the sampling's CPU
share the cores with the learner's). And the data path alone (collection,
the replay writer and sampling at the replay ratio, no learner): batches/s
in optimizer steps, and its CPU per optimizer step, against the learner's.

    python tools/benchmark.py --gin_file=gin_configs/dqn_cartpole.gin --off_policy
"""

import json
import os

# First: importing alf_async keeps TensorFlow's start-up banner off.
from alf_async.training.gc_policy import imports_uncollected

with imports_uncollected():  # the process as the train command runs it
    import toolkit  # tools/toolkit.py: gin and size flags, rate(), with_driver()

    import gin  # pylint: disable=wrong-import-order
    import gymnasium as gym  # pylint: disable=wrong-import-order
    import numpy as np  # pylint: disable=wrong-import-order
    import tensorflow as tf  # pylint: disable=wrong-import-order
    from absl import app, flags  # pylint: disable=wrong-import-order

    from alf_async.training.settings import RunSettings
    from alf_async.environments import create_environment
    from alf_async.environments.subenvs import make_gymnasium_env

flags.DEFINE_float("duration", 15.0, "Seconds measured per figure.")
flags.DEFINE_float("warmup", 5.0, "Seconds of warm-up before each measurement.")
flags.DEFINE_integer("repeats", 1, "Rounds of all measurements; each figure and ratio is "
                     "the median over the rounds (interleaved, so a machine that slows "
                     "down for a while slows every figure alike).")
flags.DEFINE_boolean("tf_agents", True, "Also measure tf-agents' synchronous PPO.")
flags.DEFINE_string("out", None, "Write the figures as JSON here.")
flags.DEFINE_boolean("off_policy", False, "Optimizer steps/s of a replay config end to end "
                     "against the learner alone, and the replay's insert and sample rates.")
flags.DEFINE_integer("slices", 5, "With --off_policy: end to end and the learner alone are "
                     "measured in this many alternating slices of duration/slices seconds, "
                     "each after warmup/slices seconds of settling, so that a machine's "
                     "drift slows both alike.")
flags.DEFINE_integer("remote", 0, "Compare K actor processes through Reverb with in-process "
                     "collection instead (0: the usual figures).")
FLAGS = flags.FLAGS


def end_to_end() -> float:
    return toolkit.end_to_end(FLAGS.duration, FLAGS.warmup)


def actor_only() -> float:
    return toolkit.actor_only(FLAGS.duration, FLAGS.warmup)


def learner_only() -> float:
    def measure(driver, learner):
        batch = driver.get_training_exps()
        driver.stop()

        def step():
            learner.train(batch)
            return batch.env_steps

        return toolkit.rate(step, FLAGS.duration, FLAGS.warmup)

    return toolkit.with_driver(measure)


def _bound(parameter: str) -> bool:
    try:
        gin.query_parameter(parameter)
        return True
    except ValueError:
        return False


def raw_env() -> float:
    """The env alone with random actions, no TF: CartPole's numpy fast path, the
    sub-envs in their worker processes (with --num_workers), a gin-bound
    `env_load_fn` (e.g. EnvPool's), or else gymnasium's own `SyncVectorEnv` of
    the same B sub-envs (Atari ids preprocessed as in training)."""
    name = gin.query_parameter("create_environment.env_name")
    b = gin.query_parameter("create_environment.num_parallel_environments")
    custom_loader = _bound("create_environment.env_load_fn")
    if name.startswith("CartPole") or FLAGS.num_workers or custom_loader:
        env = create_environment(seed=0)
        env.reset()
        spec, rng = env.action_spec(), np.random.default_rng(0)
        if np.issubdtype(spec.dtype, np.integer):
            sample = lambda: rng.integers(spec.minimum, spec.maximum + 1, (b, *spec.shape))
        else:
            sample = lambda: rng.uniform(spec.minimum, spec.maximum,
                                         (b, *spec.shape)).astype(spec.dtype)
        step = lambda: env.step(sample())
    else:
        env = gym.vector.SyncVectorEnv([lambda: make_gymnasium_env(name)] * b)
        env.reset(seed=0)
        env.action_space.seed(0)
        step = lambda: env.step(env.action_space.sample())
    frames_per_sec = toolkit.rate(lambda: step() and b, FLAGS.duration, min(FLAGS.warmup, 1.0))
    env.close()
    return frames_per_sec


def tf_agents_ppo() -> float:
    """tf-agents' synchronous PPO on the same env, sizes and networks."""
    from tf_agents.agents.ppo import ppo_clip_agent
    from tf_agents.drivers import dynamic_step_driver
    from tf_agents.environments import tf_py_environment
    from tf_agents.networks import actor_distribution_network, value_network
    from tf_agents.replay_buffers import tf_uniform_replay_buffer
    from tf_agents.utils import common

    num_envs = gin.query_parameter("AsyncOffPolicyDriver.num_envs")
    b = gin.query_parameter("create_environment.num_parallel_environments")
    unroll = gin.query_parameter("AsyncOffPolicyDriver.unroll_length")
    epochs = gin.query_parameter("alf_async.Learner.num_epochs")
    layers = gin.query_parameter("PPOAlgorithm.actor_fc_layers")
    env = tf_py_environment.TFPyEnvironment(
        create_environment(num_parallel_environments=num_envs * b, seed=0))
    actor = actor_distribution_network.ActorDistributionNetwork(
        env.observation_spec(), env.action_spec(), fc_layer_params=layers,
        activation_fn=tf.keras.activations.tanh)
    value = value_network.ValueNetwork(env.observation_spec(), fc_layer_params=layers,
                                       activation_fn=tf.keras.activations.tanh)
    agent = ppo_clip_agent.PPOClipAgent(
        env.time_step_spec(), env.action_spec(), tf.keras.optimizers.Adam(1e-3),
        actor_net=actor, value_net=value, importance_ratio_clipping=0.2, num_epochs=epochs,
        use_gae=True, normalize_observations=False, normalize_rewards=False)
    agent.initialize()
    buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=env.batch_size, max_length=unroll + 1)
    driver = dynamic_step_driver.DynamicStepDriver(
        env, agent.collect_policy, observers=[buffer.add_batch],
        num_steps=unroll * env.batch_size)
    collect, train = common.function(driver.run), common.function(agent.train)

    def iteration():
        collect()
        train(buffer.gather_all())
        buffer.clear()
        return unroll * env.batch_size

    return toolkit.rate(iteration, FLAGS.duration, FLAGS.warmup)


def collection(remote: bool, train: bool) -> dict:
    """Frames/s and CPU us per frame of learning (`train`) or only dequeuing, with
    the envs in this process or in --remote actor processes."""
    name = ("remote_" if remote else "") + ("end_to_end" if train else "actor_only")

    def measure(driver, unused_learner):
        step = driver.run_async if train else lambda: driver.get_training_exps().env_steps
        if not remote:
            fps, cpu = toolkit.rate_and_cpu(step, FLAGS.duration, FLAGS.warmup)
            return {name: fps, f"{name}_cpu_us_per_frame": cpu}
        with toolkit.actor_processes(FLAGS.remote, driver.remote.port) as pids:
            driver.get_training_exps()  # the actors have started
            fps, cpu = toolkit.rate_and_cpu(step, FLAGS.duration, FLAGS.warmup, pids)
        return {name: fps, f"{name}_cpu_us_per_frame": cpu}

    return toolkit.with_driver(measure, serve_port=0 if remote else None)


def off_policy() -> dict:
    """Optimizer steps/s and CPU us per step end to end and of the learner alone, in
    --slices alternating slices of one driver; the replay's insert and sample rates
    end to end; and the data path alone."""
    steps = gin.query_parameter("alf_async.Learner.num_epochs") * gin.query_parameter(
        "alf_async.Learner.num_minibatches")

    def measure(driver, learner):
        replay = driver.batches.replay
        toolkit.rate(driver.run_async, FLAGS.warmup, 0.0)  # min_size stored, update compiled
        placed = learner.place(driver.get_training_exps())
        # While the learner trains alone, the data path runs on until the rate
        # limiter holds it: it shares the cores only while settling.
        tallies = toolkit.alternating_rates(
            {"end_to_end": lambda: (driver.run_async(), steps)[1],
             "learner_only": lambda: (learner.update(placed), steps)[1]},
            FLAGS.duration, FLAGS.warmup / FLAGS.slices, FLAGS.slices,
            counters=lambda: {"inserted": replay.inserted_steps,
                              "sampled": replay.sampled_windows})
        end_to_end, alone = tallies["end_to_end"], tallies["learner_only"]
        return {"end_to_end_steps": end_to_end.rate,
                "end_to_end_cpu_us_per_step": end_to_end.cpu_us_per_unit,
                "insert_env_steps": end_to_end.count_rate("inserted"),
                "sample_windows": end_to_end.count_rate("sampled"),
                "learner_only_steps": alone.rate,
                "learner_only_cpu_us_per_step": alone.cpu_us_per_unit}

    def data_path(driver, unused_learner):
        return dict(zip(("data_path_steps", "data_path_cpu_us_per_step"), toolkit.rate_and_cpu(
            lambda: (driver.get_training_exps(), steps)[1], FLAGS.duration, FLAGS.warmup)))

    return {**toolkit.with_driver(measure), **toolkit.with_driver(data_path)}


def off_policy_ratios(figures: dict) -> dict:
    """The end-to-end/learner ratio, and the most this machine's cores allow it: end to
    end cannot run faster than `cores / (its CPU per step)` optimizer steps/s. With the
    cores full and sharing them free, end to end would spend the learner's and the data
    path's CPU per step: its speed against the learner's is then at most the learner's
    share of the two (where the learner alone keeps the cores full)."""
    ceiling = os.cpu_count() * 1e6 / figures["end_to_end_cpu_us_per_step"]
    learner, data = (figures["learner_only_cpu_us_per_step"],
                     figures["data_path_cpu_us_per_step"])
    return {"end_to_end/learner_only (optimizer steps)":
            figures["end_to_end_steps"] / figures["learner_only_steps"],
            f"CPU ceiling of that ratio on {os.cpu_count()} cores":
            ceiling / figures["learner_only_steps"],
            "learner CPU / (learner + data path CPU) per step": learner / (learner + data)}


def measure_round() -> dict:
    """Every figure once, in the order of the module docstring (or the --remote ones)."""
    if FLAGS.off_policy:
        return off_policy()
    if FLAGS.remote:
        figures = {}
        for train in (False, True):
            for remote in (False, True):
                figures.update(collection(remote, train))
        return figures
    fns = {"end_to_end": end_to_end, "learner_only": learner_only,
           "actor_only": actor_only, "raw_env": raw_env}
    if FLAGS.tf_agents:
        fns["tf_agents"] = tf_agents_ppo
    return {name: fn() for name, fn in fns.items()}


def ratios_of(figures: dict) -> dict:
    if FLAGS.off_policy:
        return off_policy_ratios(figures)
    if FLAGS.remote:
        return {"remote/in_process actor_only": figures["remote_actor_only"] /
                figures["actor_only"],
                "remote/in_process end_to_end": figures["remote_end_to_end"] /
                figures["end_to_end"],
                "transport us/frame (actor_only)": figures["remote_actor_only_cpu_us_per_frame"]
                - figures["actor_only_cpu_us_per_frame"]}
    ratios = {"end_to_end/learner_only": figures["end_to_end"] / figures["learner_only"],
              "actor_only/raw_env": figures["actor_only"] / figures["raw_env"]}
    if "tf_agents" in figures:
        ratios["end_to_end/tf_agents"] = figures["end_to_end"] / figures["tf_agents"]
    return ratios


def medians(rounds) -> dict:
    return {key: float(np.median([r[key] for r in rounds])) for key in rounds[0]}


def main(argv) -> None:
    del argv
    toolkit.parse_gin()
    rounds = [measure_round() for _ in range(FLAGS.repeats)]
    figures = medians(rounds)
    ratios = medians([ratios_of(r) for r in rounds])
    spread = lambda key: (f"{min(r[key] for r in rounds):>14,.0f}"
                          f"{max(r[key] for r in rounds):>14,.0f}")
    width = max(len(name) for name in [*figures, *ratios]) + 2
    unit = "per second" if FLAGS.off_policy else "frames/s"
    print(f"{'measurement':<{width}}{unit:>14}" + (f"{'min':>14}{'max':>14}"
                                                         if FLAGS.repeats > 1 else ""))
    for name, value in figures.items():
        print(f"{name:<{width}}{value:>14,.0f}" + (spread(name) if FLAGS.repeats > 1 else ""))
    for name, value in ratios.items():
        print(f"{name:<{width}}{value:>14.2f}")
    if FLAGS.out:
        with open(FLAGS.out, "w") as f:
            algorithm = RunSettings().algorithm_class
            json.dump({"frames_per_sec": figures, "ratios": ratios, "rounds": rounds,
                       "algorithm": algorithm.__name__, "bindings": gin.config_str()}, f,
                      indent=2)


if __name__ == "__main__":
    app.run(main)
