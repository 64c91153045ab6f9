"""Plays greedy episodes with a trained policy.

    python -m alf_async.play --root_dir=runs/ppo --num_episodes=10

Loads the policy exported at the end of training (`root_dir/policy`), makes
the env of the run's operative gin config and prints the mean return. With
`--gif=runs/ppo/episode.gif` it also records one episode of a gymnasium env of the
same name (rendered as `rgb_array`; Atari as the full screen). With
`--record_dataset=DIR` the episodes played are written as an RLDS dataset
(`[datasets]` extra), each action random with probability `--epsilon`:

    python -m alf_async.play --root_dir=runs/ppo --num_episodes=200 \
        --record_dataset=runs/datasets/cartpole_expert
"""

import os
import sys

from absl import flags, logging

from alf_async import config
from alf_async.runs import layout

flags.DEFINE_string("root_dir", None, "A training run's root_dir.")
flags.DEFINE_integer("num_episodes", 10, "Greedy episodes to play (in parallel).")
flags.DEFINE_integer("seed", None, "Env seed.")
flags.DEFINE_string("gif", None, "Save one rendered greedy episode to this GIF file.")
flags.DEFINE_string("record_dataset", None, "Write the episodes played as an RLDS dataset "
                    "(a TFDS directory) here.")
flags.DEFINE_float("epsilon", 0.0, "With --record_dataset: each action is uniformly random "
                   "with this probability (1: random play).")
flags.mark_flag_as_required("root_dir")
FLAGS = flags.FLAGS

def _policy_dir() -> str:
    """The run's complete exported policy; exits 2 in one line where it has none."""
    path = layout.readable_directory(os.path.join(FLAGS.root_dir, layout.POLICY_DIR))
    if path is None or not layout.complete_saved_model(path):
        logging.error("No complete exported policy in %s: a run exports it when it ends",
                      os.path.join(FLAGS.root_dir, layout.POLICY_DIR))
        sys.exit(2)
    if not os.path.isfile(os.path.join(FLAGS.root_dir, "operative_config.gin")):
        logging.error("No operative_config.gin in %s: not a training run's root_dir",
                      FLAGS.root_dir)
        sys.exit(2)
    return path


def _recording(policy, act, env, env_name: str):
    """`(act, observe, recorder)`: epsilon-greedy actions and their steps to an RLDS
    dataset at `--record_dataset`; exits 2 in one line where it cannot be written."""
    # pylint: disable=import-outside-toplevel
    from alf_async.config import project_version
    from alf_async.datasets import playing
    from alf_async.datasets.recorder import open_recorder
    producer = dict(kind="play", root_dir=os.path.abspath(FLAGS.root_dir),
                    commit=project_version() or "unknown", epsilon=FLAGS.epsilon,
                    run_settings=layout.read_settings(FLAGS.root_dir) or {})
    try:
        act, log_probs = playing.epsilon_greedy(act, env.action_spec(), FLAGS.epsilon,
                                                FLAGS.seed)
        recorder = open_recorder(FLAGS.record_dataset, env_name,
                                 env.time_step_spec().observation, env.action_spec(),
                                 producer, lambda: {"weights_digest":
                                                    playing.variables_digest(policy)})
    except ValueError as error:
        logging.error("%s", error)
        sys.exit(2)
    return act, playing.step_observer(recorder, log_probs), recorder


def main(argv) -> None:
    del argv
    policy_dir = _policy_dir()
    # pylint: disable=import-outside-toplevel
    import gin
    import tensorflow as tf

    from alf_async.environments import create_environment
    from alf_async.training import run  # noqa: F401  registers the gin configurables
    from alf_async.training.assembly import run_settings
    from alf_async.training import videos
    from alf_async.training.evaluation import episodes_summary, greedy_actions, play_episodes

    gin.parse_config_file(os.path.join(FLAGS.root_dir, "operative_config.gin"),
                          skip_unknown=True)
    try:
        policy = tf.saved_model.load(policy_dir)
    except (OSError, ValueError, tf.errors.OpError) as error:
        logging.error("Cannot load the policy in %s: %s", policy_dir,
                      str(error).strip().splitlines()[0])
        sys.exit(2)
    env = create_environment(num_parallel_environments=FLAGS.num_episodes, num_workers=0,
                             seed=FLAGS.seed)
    act, observe, recorder = greedy_actions(policy, FLAGS.num_episodes), None, None
    if FLAGS.record_dataset:
        act, observe, recorder = _recording(policy, act, env, run_settings().env.env_name)
    played = play_episodes(act, env, FLAGS.num_episodes, observe=observe)
    epsilon = FLAGS.epsilon if FLAGS.record_dataset else 0.0
    print(episodes_summary(played, f"epsilon-greedy ({epsilon:g})" if epsilon else "greedy"))
    if recorder is not None:
        recorder.close()
        print(f"wrote {recorder.writer.episodes} episodes ({recorder.writer.steps} steps) "
              f"to {recorder.writer.directory}")
    if FLAGS.gif:
        frames = videos.record_episode(policy, run_settings().env.env_name, FLAGS.seed)
        layout.write_bytes(FLAGS.gif, videos.gif_bytes(frames))
        print(f"wrote {FLAGS.gif} ({len(frames)} frames)")


if __name__ == "__main__":
    config.run_command(main)
