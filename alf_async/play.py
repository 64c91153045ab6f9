"""Plays greedy episodes with a trained policy.

    python -m alf_async.play --root_dir=runs/ppo --num_episodes=10

Loads the policy exported at the end of training (`root_dir/policy`), makes
the env of the run's operative gin config and prints the mean return. With
`--gif=episode.gif` it also records one episode of a gymnasium env of the
same name (rendered as `rgb_array`).
"""

import os

import gin
import gymnasium as gym
import numpy as np
import tensorflow as tf
from absl import app, flags, logging
from tf_agents.trajectories import time_step as ts

from alf_async import trainer  # noqa: F401  (registers the configurables)
from alf_async.environments import create_environment
from alf_async.evaluation import greedy_actions, run_episodes

flags.DEFINE_string("root_dir", None, "A training run's root_dir.")
flags.DEFINE_integer("num_episodes", 10, "Greedy episodes to play (in parallel).")
flags.DEFINE_integer("seed", None, "Env seed.")
flags.DEFINE_string("gif", None, "Save one rendered greedy episode to this GIF file.")
flags.mark_flag_as_required("root_dir")
FLAGS = flags.FLAGS

# Our envs without a gymnasium id of their own: (gymnasium id, observed components).
_GYM_TWINS = {"CartPoleNoVelocity-v1": ("CartPole-v1", [0, 2])}


def main(argv) -> None:
    del argv
    policy_dir = os.path.join(FLAGS.root_dir, "policy")
    if not os.path.isdir(policy_dir):
        raise app.UsageError(f"No exported policy in {policy_dir}: train first")
    gin.parse_config_file(os.path.join(FLAGS.root_dir, "operative_config.gin"),
                          skip_unknown=True)
    policy = tf.saved_model.load(policy_dir)
    env = create_environment(num_parallel_environments=FLAGS.num_episodes, num_workers=0,
                             seed=FLAGS.seed)
    mean_return, mean_length = run_episodes(greedy_actions(policy, FLAGS.num_episodes), env,
                                            FLAGS.num_episodes)
    logging.info("Played %d greedy episodes: average return %.1f, average length %.1f",
                 FLAGS.num_episodes, mean_return, mean_length)
    print(f"average_return={mean_return:.1f} average_length={mean_length:.1f}")
    if FLAGS.gif:
        frames = record_episode(policy, gin.query_parameter("create_environment.env_name"),
                                FLAGS.seed)
        frames[0].save(FLAGS.gif, save_all=True, append_images=frames[1:], duration=20,
                       loop=0)
        print(f"wrote {FLAGS.gif} ({len(frames)} frames)")


def record_episode(policy, env_name: str, seed=None, max_steps: int = 10_000):
    """Frames (PIL images) of one greedy episode of gymnasium's `env_name`."""
    from PIL import Image  # pylint: disable=import-outside-toplevel

    gym_name, observed = _GYM_TWINS.get(env_name, (env_name, slice(None)))
    env = gym.make(gym_name, render_mode="rgb_array")
    observation, _ = env.reset(seed=seed)
    frames = [Image.fromarray(env.render())]
    act = greedy_actions(policy, 1)
    for step in range(max_steps):
        step_type = ts.StepType.FIRST if step == 0 else ts.StepType.MID
        observation = np.asarray(observation, np.float32)[observed]
        action = np.asarray(act(observation[None], [step_type]))[0]
        observation, _, terminated, truncated, _ = env.step(int(action))
        frames.append(Image.fromarray(env.render()))
        if terminated or truncated:
            break
    env.close()
    return frames


if __name__ == "__main__":
    app.run(main)
