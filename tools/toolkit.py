"""What the tools share: gin flags, size flags, actor processes and a started driver.

Each tool is a script (`python tools/<name>.py`); this module sits next to
them, so `import toolkit` finds it. Its rate measurement lives in
`measure.py` (no flags) and is re-exported here.
"""

import contextlib
import os
import secrets
import signal
import subprocess
import sys
from typing import Callable, List

import gin
from absl import flags

# trainer: the configurables the gin files bind (`train` among them).
from alf_async import config  # noqa: F401  pylint: disable=unused-import
from alf_async.remote import run_secret
from alf_async.training import assembly
from alf_async.training import run as run_lib
from alf_async.training.settings import RunSettings
from measure import Tally, alternating_rates, cpu_seconds, rate, rate_and_cpu  # noqa: F401

flags.DEFINE_multi_string("gin_file", ["gin_configs/ppo_async.gin"], "Gin config(s).")
flags.DEFINE_multi_string("gin_param", [], "Extra gin bindings.")
flags.DEFINE_integer("num_envs", None, "E, env threads.")
flags.DEFINE_integer("num_parallel_environments", None, "B, sub-envs per env thread.")
flags.DEFINE_integer("unroll_length", None, "T.")
flags.DEFINE_integer("learn_queue_cap", None, "Q.")
flags.DEFINE_integer("actor_queue_cap", None, "A.")
flags.DEFINE_integer("num_actor_queues", None, "N.")
flags.DEFINE_string("env_name", None, "create_environment.env_name.")
flags.DEFINE_integer("num_workers", None, "create_environment.num_workers (env processes).")
FLAGS = flags.FLAGS
# The in-process learner and the actor processes a tool starts share one run secret.
os.environ.setdefault(run_secret.ENV_VAR, str(secrets.randbits(63)))

_SIZE_FLAGS = {
    "num_envs": "AsyncOffPolicyDriver.num_envs",
    "num_parallel_environments": "create_environment.num_parallel_environments",
    "unroll_length": "AsyncOffPolicyDriver.unroll_length",
    "learn_queue_cap": "AsyncOffPolicyDriver.learn_queue_cap",
    "actor_queue_cap": "AsyncOffPolicyDriver.actor_queue_cap",
    "num_actor_queues": "AsyncOffPolicyDriver.num_actor_queues",
    "num_workers": "create_environment.num_workers",
}


def size_bindings() -> List[str]:
    """Gin bindings of the size flags (and --env_name) that were given."""
    bindings = [f"{_SIZE_FLAGS[k]} = {FLAGS[k].value}" for k in _SIZE_FLAGS
                if FLAGS[k].value is not None]
    if FLAGS.env_name:
        bindings.append(f"create_environment.env_name = {FLAGS.env_name!r}")
    return bindings


def parse_gin(extra_bindings: List[str] = ()) -> None:
    """Applies --gin_file, then --gin_param, the size flags and `extra_bindings`."""
    gin.clear_config()
    config.parse_config(FLAGS.gin_file,
                         FLAGS.gin_param + size_bindings() + list(extra_bindings))


@contextlib.contextmanager
def actor_processes(num: int, port: int):
    """`num` `python -m alf_async.actor` processes with this run's gin, feeding `port`.

    Yields their PIDs; kills them by PID on exit.
    """
    params = [f"--gin_param={p}" for p in FLAGS.gin_param + size_bindings()]
    procs = [subprocess.Popen(
        [sys.executable, "-m", "alf_async.actor", f"--server=127.0.0.1:{port}", f"--task={k}",
         *[f"--gin_file={g}" for g in FLAGS.gin_file], *params],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for k in range(num)]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def with_driver(fn: Callable, serve_port=None):
    """Runs `fn(driver, learner)` on a started driver (from the gin config), then stops it.

    With `serve_port`, the driver serves remote actors there instead of stepping envs.
    """
    _, learner, driver, _ = assembly.build(
        assembly.run_settings(RunSettings(serve_port=serve_port)))
    driver.start()
    try:
        return fn(driver, learner)
    finally:
        driver.stop()


def end_to_end(duration: float, warmup: float) -> float:
    """Frames/s the learner consumes with the whole pipeline running."""
    return with_driver(lambda d, _: rate(d.run_async, duration, warmup))


def actor_only(duration: float, warmup: float) -> float:
    """Frames/s of collection, the learner only dequeuing."""
    return with_driver(lambda d, _: rate(lambda: d.get_training_exps().env_steps,
                                           duration, warmup))
