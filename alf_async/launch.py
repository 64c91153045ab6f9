"""One supervised command: a learner and K actor processes on this host, kept alive.

    python -m alf_async.launch --gin_file=gin_configs/ppo_remote.gin --root_dir=runs/x \\
        --actors=2

The learner (`python -m alf_async.train --serve_port=PORT`, its output on this
console) serves a free port; actor task i (`python -m alf_async.actor
--server=127.0.0.1:PORT --task=i`, its output in `ROOT_DIR/logs/actor_<i>.log`)
connects to it. A process that exits abnormally is restarted with backoff
within `--max_restarts` per `--restart_window_secs`; a restarted learner
resumes from its latest checkpoint and the actors, which wait for it as long
as the launch runs, rejoin it. With `--warm_spares` each process has a
spare beside it that imports everything and waits (`alf_async.supervision.spare`; the
learner's also builds and runs its update once, at normal priority, the
actors' at idle priority); its next restart is that spare's promotion,
seconds sooner than a cold start. Ctrl-C or SIGTERM stops everything, the learner
checkpointing first; whatever is left after 6 s (`Supervisor.stop_grace_secs`) gets
SIGKILL.

With `--backend=ray` the same processes run as Ray actors on a Ray cluster
(`--address=auto` or HOST:PORT; none: a Ray of its own on this host), placed
by `--learner_resources` and `--actor_resources` (JSON, e.g. '{"GPU": 1}');
Ray moves a process whose node is lost and the launch restarts its command
there (`alf_async.supervision.ray_backend`). With `--learner_workers=N` the
learner is N worker processes of one MultiWorkerMirroredStrategy, their
TF_CONFIG built here, each serving its own actors (task i: worker i mod N).

Exit status: the learner's when it finishes (0), 1 when a process's restart
budget ran out, 2 for a bad setting (here or in a process), 128 + the signal
when stopped by one. See docs/reliability.md.
"""

import os
import shutil
import sys
from typing import Dict, List, Tuple

from absl import flags, logging

from alf_async import config, events, extras
from alf_async.extras import MissingExtraError
from alf_async.remote import run_secret
from alf_async.supervision.backend import Backend
from alf_async.supervision.backends import (BACKENDS, LaunchSettings, make_backend,
                                            parse_resources)
from alf_async.supervision.commands import LearnerWorker, child_specs, log_dir
from alf_async.supervision.spare import can_wait_idle
from alf_async.tracking import settings as tracker_settings
from alf_async.supervision.supervisor import ChildSpec, RestartPolicy, Supervisor
from alf_async.supervision.signals import SignalStop

flags.DEFINE_string("root_dir", None, "The learner's run directory (as for alf_async.train).")
flags.DEFINE_multi_string("gin_file", [], "Gin config file(s), for the learner and the actors.")
flags.DEFINE_multi_string("gin_param", [], "Gin bindings, applied last, in every process.")
flags.DEFINE_integer("actors", 2, "K, the actor processes to run (tasks 0 ... K - 1).")
flags.DEFINE_integer("learner_workers", 1, "N, the learner's worker processes: one "
                     "MultiWorkerMirroredStrategy over them (TF_CONFIG built here), each "
                     "serving its own actors (task i: worker i mod N); on Ray each placed "
                     "by --learner_resources.")
flags.DEFINE_integer("port", 0, "The learner's Reverb port (0: a free one). Reverb's server "
                     "listens on every interface of the learner's host: keep the port "
                     "behind a firewall or a private network (docs/reliability.md).")
flags.DEFINE_integer("max_restarts", 5, "Restarts allowed to each process within "
                     "--restart_window_secs; one more and the launch stops (exit status 1).")
flags.DEFINE_float("restart_window_secs", 600.0, "The window of --max_restarts, in seconds.")
flags.DEFINE_integer("tf_threads", 0, "The learner's --tf_threads.")
flags.DEFINE_bool("warm_spares", True, "Keep a warm spare of every process (imports done; "
                  "the learner's also built and its update run once) that a restart "
                  "promotes instead of starting cold.")
flags.DEFINE_integer("learner_spares", 1, "With --warm_spares, the learner's spares kept "
                     "ready (each built, at normal priority, one after the other): 2 covers "
                     "learner faults that come sooner than a spare gets ready (~9 s on a "
                     "busy 2-core machine), at the memory of one more built learner.")
flags.DEFINE_integer("actor_spares", 1, "With --warm_spares, each actor's spares kept "
                     "ready (0 or 1; imports only, at idle priority).")
flags.DEFINE_string("backend", "local", "Where the processes run, a name in "
                    f"supervision.backends.BACKENDS ({', '.join(sorted(BACKENDS))}): local, "
                    "subprocesses of this launch; ray, Ray actors on a Ray cluster.")
flags.DEFINE_string("address", None, "--backend=ray: the cluster to join ('auto' or "
                    "HOST:PORT); None: a Ray of its own on this host, shut down at the end.")
flags.DEFINE_string("learner_resources", "{}", "--backend=ray: the learner's Ray resources, "
                    'as JSON (e.g. \'{"GPU": 1}\' or \'{"learner": 1}\').')
flags.DEFINE_string("actor_resources", "{}", "--backend=ray: each actor process's Ray "
                    "resources, as JSON; the actors spread over the nodes that have them.")
flags.mark_flag_as_required("root_dir")
tracker_settings.define_flags()
FLAGS = flags.FLAGS

def _resources(flag: str) -> Dict[str, float]:
    """The JSON object of the resources flag `flag`; ValueError naming it otherwise."""
    return parse_resources(f"--{flag}", getattr(FLAGS, flag))


def _run_dir(root_dir: str) -> str:
    """`root_dir`, absolute, once this host can write it; a URL as it is (the learner's
    host checks a path on its node, the learner a bucket with its first write)."""
    return root_dir if "://" in root_dir else config.check_writable(root_dir)


def _check_flags() -> RestartPolicy:
    """The restart policy of the flags; exits 2 with one line for a bad flag."""
    try:
        if FLAGS.backend not in BACKENDS:
            raise ValueError(f"--backend must be one of {', '.join(sorted(BACKENDS))}, got "
                             f"{FLAGS.backend!r}")
        if FLAGS.backend == "local" and FLAGS.address:
            raise ValueError("--address needs --backend=ray")
        _resources("learner_resources"), _resources("actor_resources")
        if FLAGS.actors < 1:
            raise ValueError(f"--actors must be >= 1, got {FLAGS.actors}")
        if not 1 <= FLAGS.learner_workers <= FLAGS.actors:
            raise ValueError(f"--learner_workers must be in [1, --actors={FLAGS.actors}] "
                             f"(each worker serves its own actors), got {FLAGS.learner_workers}")
        if FLAGS.learner_spares < 1:
            raise ValueError(f"--learner_spares must be >= 1 (--nowarm_spares: none), got "
                             f"{FLAGS.learner_spares}")
        if FLAGS.actor_spares not in (0, 1):
            raise ValueError(f"--actor_spares must be 0 or 1, got {FLAGS.actor_spares}")
        if not 0 <= FLAGS.port < 65536:
            raise ValueError(f"--port must be in [0, 65535], got {FLAGS.port}")
        config.check_gin_files(FLAGS.gin_file, required=True)
        extras.check_installed("reverb", "replay", "python -m alf_async.launch (the learner "
                               "serves its actors through Reverb)")
        tracker_settings.from_flags().check()
        return RestartPolicy(max_restarts=FLAGS.max_restarts,
                             window_secs=FLAGS.restart_window_secs)
    except ValueError as error:
        kind = "Missing package" if isinstance(error, MissingExtraError) else "Bad setting"
        logging.error("%s: %s", kind, error)
        sys.exit(2)


def _warm_spares() -> bool:
    warm_spares = FLAGS.warm_spares and can_wait_idle()
    if FLAGS.warm_spares and not warm_spares:
        logging.warning("launch: no warm spares: a waiting spare would take a CPU share and "
                        "this user could not give it back when promoted (RLIMIT_NICE < 20)")
    return warm_spares


def _specs(root_dir: str, workers: List[LearnerWorker]) -> List[ChildSpec]:
    return child_specs(root_dir, FLAGS.gin_file, FLAGS.gin_param, FLAGS.actors, workers,
                       FLAGS.tf_threads, _warm_spares(), FLAGS.learner_spares,
                       FLAGS.actor_spares, tracker_settings.from_flags().flags())


def servers_text(workers: List[LearnerWorker]) -> str:
    """Where the learner serves its actors, for the start-up line: the address its
    actors dial, and what really listens (Reverb binds its port on every interface)."""
    servers = ", ".join(f"{worker.host}:{worker.port}" for worker in workers)
    where = servers if len(workers) == 1 else f"{len(workers)} workers ({servers})"
    return (f"{where} (actors dial it there; its Reverb server listens on that port of "
            f"every interface)")


def _backend_and_specs(root_dir: str) -> Tuple[Backend, List[ChildSpec], str]:
    """The backend of `--backend`, made and connected, with the learner's workers
    placed (each one's address is its actors' server); ValueError for a bad setting."""
    backend = make_backend(FLAGS.backend, LaunchSettings(
        FLAGS.address, _resources("learner_resources"), _resources("actor_resources"),
        FLAGS.max_restarts, FLAGS.learner_workers,
        reports=os.path.join(log_dir(root_dir), "ray.log")))
    try:
        workers = [LearnerWorker(*backend.place_learner(
            "learner" if not i else f"learner {i}", root_dir, 0 if i else FLAGS.port))
            for i in range(FLAGS.learner_workers)]
    except ValueError:
        backend.close()
        raise
    return backend, _specs(root_dir, workers), servers_text(workers)


def main(argv) -> None:
    del argv
    policy = _check_flags()
    made = "://" not in FLAGS.root_dir and not os.path.exists(FLAGS.root_dir)
    try:
        root_dir = _run_dir(FLAGS.root_dir)
        # Made before Ray or any child starts: processes of this host inherit it, the
        # others read root_dir/run_secret.
        os.environ[run_secret.ENV_VAR] = str(run_secret.for_learner(
            None if "://" in root_dir else root_dir))
        backend, specs, servers = _backend_and_specs(root_dir)
    except ValueError as error:
        kind = "Missing package" if isinstance(error, MissingExtraError) else "Bad setting"
        logging.error("%s: %s", kind, error)
        if made:  # nothing started: no half-made run folder left behind
            shutil.rmtree(FLAGS.root_dir, ignore_errors=True)
        sys.exit(2)
    logging.info("launch (%s): a learner on %s and %d actor process(es); actor logs in %s",
                 backend.name, servers, FLAGS.actors, log_dir(root_dir))
    with SignalStop("stopping every process") as interrupt, events.lifetime(
            root_dir, "launch", "launch"):
        status = Supervisor(specs, policy, backend=backend).run(lambda: interrupt.signum)
        logging.info("launch: exit status %d", status)
        sys.exit(status)


if __name__ == "__main__":
    config.run_command(main)
