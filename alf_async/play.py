"""Plays greedy episodes with a trained policy.

    python -m alf_async.play --root_dir=runs/ppo --num_episodes=10

Loads the policy exported at the end of training (`root_dir/policy`), makes
the env of the run's operative gin config and prints the mean return. With
`--gif=runs/ppo/episode.gif` it also records one episode of a gymnasium env of the
same name (rendered as `rgb_array`; Atari as the full screen).
"""

import os
import sys

from absl import flags, logging

from alf_async import config
from alf_async.training import files

flags.DEFINE_string("root_dir", None, "A training run's root_dir.")
flags.DEFINE_integer("num_episodes", 10, "Greedy episodes to play (in parallel).")
flags.DEFINE_integer("seed", None, "Env seed.")
flags.DEFINE_string("gif", None, "Save one rendered greedy episode to this GIF file.")
flags.mark_flag_as_required("root_dir")
FLAGS = flags.FLAGS

def _policy_dir() -> str:
    """The run's complete exported policy; exits 2 in one line where it has none."""
    path = files.readable_directory(os.path.join(FLAGS.root_dir, files.POLICY_DIR))
    if path is None or not files.complete_saved_model(path):
        logging.error("No complete exported policy in %s: a run exports it when it ends",
                      os.path.join(FLAGS.root_dir, files.POLICY_DIR))
        sys.exit(2)
    if not os.path.isfile(os.path.join(FLAGS.root_dir, "operative_config.gin")):
        logging.error("No operative_config.gin in %s: not a training run's root_dir",
                      FLAGS.root_dir)
        sys.exit(2)
    return path


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
    played = play_episodes(greedy_actions(policy, FLAGS.num_episodes), env,
                           FLAGS.num_episodes)
    print(episodes_summary(played))
    if FLAGS.gif:
        frames = videos.record_episode(policy, run_settings().env.env_name, FLAGS.seed)
        files.write_bytes(FLAGS.gif, videos.gif_bytes(frames))
        print(f"wrote {FLAGS.gif} ({len(frames)} frames)")


if __name__ == "__main__":
    config.run_command(main)
