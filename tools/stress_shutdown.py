"""Starts and stops the driver many times at random moments; reports the slowest stop.

    python tools/stress_shutdown.py --cycles=50 --max_run_secs=1.0

Each cycle builds a driver from the gin config, starts it, lets it run for a
random time (sometimes training, sometimes not consuming at all, so that
threads block on a full learn queue), stops it, and checks that no driver
thread survived. Exits non-zero if a stop took longer than `--stop_bound`
or a thread leaked.
"""

import json
import random
import sys
import time

from absl import app, flags

import toolkit  # tools/toolkit.py: gin and size flags
from alf_async.training import assembly
from alf_async.collection.driver_thread import live_driver_threads
flags.DEFINE_integer("cycles", 20, "Start/stop cycles.")
flags.DEFINE_float("max_run_secs", 1.0, "Longest random run time before a stop.")
flags.DEFINE_float("stop_bound", 2.0, "Seconds a stop may take.")
flags.DEFINE_integer("seed", 0, "Seed of the random moments.")
FLAGS = flags.FLAGS

def cycle(rng: random.Random) -> dict:
    """One start / run / stop cycle; returns its stop time and leaked threads."""
    _, _, driver, _ = assembly.build()
    driver.start()
    consume = rng.random() < 0.5
    deadline = time.perf_counter() + rng.uniform(0, FLAGS.max_run_secs)
    while time.perf_counter() < deadline:
        if consume:
            driver.run_async()
        else:
            time.sleep(0.01)
    start = time.perf_counter()
    driver.stop()
    return dict(stop_secs=time.perf_counter() - start, consumed=consume,
                leaked=[t.name for t in live_driver_threads()])


def main(argv) -> None:
    del argv
    toolkit.parse_gin()
    rng = random.Random(FLAGS.seed)
    results = [cycle(rng) for _ in range(FLAGS.cycles)]
    slowest = max(r["stop_secs"] for r in results)
    leaks = sorted({name for r in results for name in r["leaked"]})
    print(json.dumps(dict(cycles=len(results), slowest_stop_secs=round(slowest, 3),
                          leaked_threads=leaks)))
    if slowest > FLAGS.stop_bound or leaks:
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
