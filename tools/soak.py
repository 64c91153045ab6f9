"""Trains for a while and reports resident memory and thread count over time.

    python tools/soak.py --minutes=30 --out=soak.json

Resident memory should be flat once warm-up is over: the report gives the
growth from the sample at `--warmup_minutes` to the last one. With env worker
processes (`--num_workers`), their memory is sampled too.
"""

import json
import multiprocessing
import threading
import time

from absl import app, flags

import toolkit  # tools/toolkit.py: gin and size flags
from alf_async.training import assembly
flags.DEFINE_float("minutes", 30.0, "How long to train.")
flags.DEFINE_float("warmup_minutes", 2.0, "Growth is measured from this point on.")
flags.DEFINE_float("sample_secs", 30.0, "Seconds between samples.")
flags.DEFINE_string("out", None, "Write the samples and the summary as JSON here.")
FLAGS = flags.FLAGS


def resident_mib() -> float:
    """This process's resident set size, from /proc (Linux)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


def workers_pss_mib() -> float:
    """The env worker processes' proportional set size (their own share of memory:
    forked children map much of this process's memory too), from /proc (Linux)."""
    total = 0
    for child in multiprocessing.active_children():
        try:
            with open(f"/proc/{child.pid}/smaps_rollup") as rollup:
                total += sum(int(line.split()[1]) for line in rollup if line.startswith("Pss:"))
        except FileNotFoundError:  # it ended meanwhile
            continue
    return total / 1024


def main(argv) -> None:
    del argv
    toolkit.parse_gin()
    _, _, driver, _ = assembly.build()
    driver.start()
    start = last = time.time()
    samples = []
    try:
        while time.time() - start < 60 * FLAGS.minutes:
            driver.run_async()
            if time.time() - last >= FLAGS.sample_secs:
                last = time.time()
                samples.append(dict(minutes=round((last - start) / 60, 2),
                                    rss_mib=round(resident_mib(), 1),
                                    workers_pss_mib=round(workers_pss_mib(), 1),
                                    threads=threading.active_count()))
                print(json.dumps(samples[-1]), flush=True)
    finally:
        driver.stop()
    after_warmup = [s for s in samples if s["minutes"] >= FLAGS.warmup_minutes] or samples
    growth = after_warmup[-1]["rss_mib"] / after_warmup[0]["rss_mib"] - 1
    summary = dict(minutes=FLAGS.minutes, rss_growth_after_warmup=round(growth, 4),
                   last_rss_mib=samples[-1]["rss_mib"],
                   last_workers_pss_mib=samples[-1]["workers_pss_mib"],
                   max_threads=max(s["threads"] for s in samples))
    print(json.dumps(summary))
    if FLAGS.out:
        with open(FLAGS.out, "w") as f:
            json.dump(dict(samples=samples, summary=summary), f, indent=2)


if __name__ == "__main__":
    app.run(main)
