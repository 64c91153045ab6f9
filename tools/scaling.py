"""How throughput scales with the number of sub-envs and of actor threads.

Two sweeps over `gin_configs/ppo_async.gin`, measuring end-to-end and
actor-only frames/s (as `tools/benchmark.py` does) at each point:
  1. total sub-envs E * B, with E = 2 env threads (B = total / 2);
  2. num_actor_queues N, with E = --envs_for_actor_sweep env threads of
     --sub_envs_for_actor_sweep sub-envs each.
Prints a table, writes JSON (--out) and a two-panel PNG (--plot).

    python tools/scaling.py --duration=5 --warmup=3 --plot=docs/scaling.png
"""

import json
import sys

from absl import app, flags, logging

import toolkit  # tools/toolkit.py: gin and size flags, end_to_end(), actor_only()
from alf_async import extras
from alf_async.errors import MissingExtraError

flags.DEFINE_float("duration", 6.0, "Seconds measured per point and figure.")
flags.DEFINE_float("warmup", 3.0, "Seconds of warm-up before each measurement.")
flags.DEFINE_string("out", None, "Write the figures as JSON here.")

flags.DEFINE_list("total_sub_envs", ["32", "64", "128", "256", "512", "1024"],
                  "Sweep 1: total sub-envs E * B (E = 2).")
flags.DEFINE_list("actor_queues", ["1", "2", "4"], "Sweep 2: num_actor_queues N.")
flags.DEFINE_integer("envs_for_actor_sweep", 4, "Sweep 2: env threads E.")
flags.DEFINE_integer("sub_envs_for_actor_sweep", 64, "Sweep 2: sub-envs per env thread B.")
flags.DEFINE_string("plot", None, "Write the two sweeps as a PNG here.")
FLAGS = flags.FLAGS


def _measure(bindings):
    """End-to-end and actor-only frames/s with the sweep's gin `bindings`.

    The sweep's bindings override the size flags, which override --gin_param.
    """
    toolkit.parse_gin(bindings)
    return {"end_to_end": toolkit.end_to_end(FLAGS.duration, FLAGS.warmup),
            "actor_only": toolkit.actor_only(FLAGS.duration, FLAGS.warmup)}


def sweep_sub_envs():
    points = []
    for total in map(int, FLAGS.total_sub_envs):
        figures = _measure(["AsyncOffPolicyDriver.num_envs = 2",
                            f"create_environment.num_parallel_environments = {total // 2}"])
        points.append(dict(total_sub_envs=total, **figures))
        print(f"E*B = {total:5d}: " + _row(figures), flush=True)
    return points


def sweep_actor_queues():
    points = []
    e, b = FLAGS.envs_for_actor_sweep, FLAGS.sub_envs_for_actor_sweep
    for n in map(int, FLAGS.actor_queues):
        figures = _measure([f"AsyncOffPolicyDriver.num_envs = {e}",
                            f"create_environment.num_parallel_environments = {b}",
                            f"AsyncOffPolicyDriver.num_actor_queues = {n}",
                            "AsyncOffPolicyDriver.actor_queue_cap = 1"])
        points.append(dict(num_actor_queues=n, **figures))
        print(f"N = {n} (E = {e}, B = {b}): " + _row(figures), flush=True)
    return points


def _row(figures) -> str:
    return ", ".join(f"{name} {value:,.0f} frames/s" for name, value in figures.items())


def plot(plt, sub_envs, actor_queues, path: str) -> None:

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, points, key, label in [(axes[0], sub_envs, "total_sub_envs", "total sub-envs E·B (E = 2)"),
                                   (axes[1], actor_queues, "num_actor_queues",
                                    f"actor threads N (E = {FLAGS.envs_for_actor_sweep}, "
                                    f"B = {FLAGS.sub_envs_for_actor_sweep})")]:
        xs = [p[key] for p in points]
        for figure in ("end_to_end", "actor_only"):
            ax.plot(xs, [p[figure] for p in points], marker="o", label=figure.replace("_", " "))
        ax.set_xlabel(label)
        ax.set_ylabel("env frames/s")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv) -> None:
    del argv
    try:  # before minutes of sweeps
        plt = extras.pyplot("tools/scaling.py --plot") if FLAGS.plot else None
    except MissingExtraError as error:
        logging.error("%s", error)
        sys.exit(2)
    sub_envs, actor_queues = sweep_sub_envs(), sweep_actor_queues()
    if FLAGS.out:
        with open(FLAGS.out, "w") as f:
            json.dump({"total_sub_envs": sub_envs, "num_actor_queues": actor_queues}, f,
                      indent=2)
    if FLAGS.plot:
        plot(plt, sub_envs, actor_queues, FLAGS.plot)


if __name__ == "__main__":
    app.run(main)
