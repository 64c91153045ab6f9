"""Keeps a group of processes alive: restarts with backoff, a clean stop, no orphans.

A `Supervisor` runs one process per `ChildSpec` through a `backend.Backend`:
on this host (`local.LocalBackend`: sessions of their own that die with the
supervisor) or on a Ray cluster (`ray_backend.RayBackend`). The restart
policy, the stop and the exit status are the same on both.
`python -m alf_async.launch` supervises a learner and its actor processes with
it; nothing here knows about training.

Thread-safety: a `Supervisor` is driven from one thread, the main one (the
parent-death signal of a local child is tied to the thread that started it).
"""

import dataclasses
import signal
import time
from typing import Callable, List, Optional, Sequence

from absl import logging

from alf_async import events
from alf_async.collection.restart_budget import RestartBudget
from alf_async.supervision.backend import Backend, ChildSpec, Process
from alf_async.supervision.local import LocalBackend

__all__ = ["ChildSpec", "RestartPolicy", "Supervisor", "describe_status"]

BAD_SETTING = 2  # the exit status of a bad setting: a restart cannot help


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """When and how soon a child that exited is started again.

    A child is restarted at most `max_restarts` times within any
    `window_secs`. A child that ran at least `healthy_secs`, or that a signal
    from outside stopped (`STOPPED_FROM_OUTSIDE`: pre-emption, the OOM
    killer, an operator), is restarted at once. One that fails by itself
    sooner (an exit status or a crash signal: a crash loop) waits
    `backoff_secs`, doubled with every such quick failure up to
    `max_backoff_secs`.
    """
    max_restarts: int = 5
    window_secs: float = 600.0
    backoff_secs: float = 1.0
    max_backoff_secs: float = 30.0
    healthy_secs: float = 10.0

    def __post_init__(self):
        self.budget()  # checks the settings

    def budget(self) -> RestartBudget:
        """A child's own budget."""
        if self.window_secs <= 0:
            raise ValueError(f"--restart_window_secs must be > 0, got {self.window_secs}")
        return RestartBudget(self.max_restarts, self.window_secs, "--max_restarts")


# Signals that stop a process from outside: no crash loop of its own, no backoff.
STOPPED_FROM_OUTSIDE = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


def describe_status(returncode: int) -> str:
    """'exit status N' or 'signal NAME' for a `Popen.returncode`."""
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


class Child:
    """One supervised process and its restart history."""

    def __init__(self, spec: ChildSpec, policy: RestartPolicy,
                 backend: Optional[Backend] = None):
        self.spec, self._policy = spec, policy
        self._backend = backend or LocalBackend()
        self.process: Optional[Process] = None
        self.restarts = 0
        self.restart_at: Optional[float] = None  # when a scheduled restart is due
        self.finished = False  # exited with status 0, and `spec.finishes`
        self._started = 0.0
        self._backoff = policy.backoff_secs
        self._budget = policy.budget()

    def start(self) -> None:
        """Starts the child (from its warm spare, where its backend keeps one ready)."""
        self.process = self._backend.start(self.spec)
        self._started, self.restart_at = time.monotonic(), None

    def poll(self) -> Optional[int]:
        """The return code once the process has exited, else None."""
        return self.process.poll() if self.process else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def schedule_restart(self, now: float, returncode: int = 1) -> Optional[float]:
        """Schedules the next start after an exit with `returncode` (a `Popen`'s:
        -N for signal N, 128 + N after a handled one); returns its delay, or None
        when the budget is spent."""
        if not self._budget.allow(now):
            return None
        if (now - self._started >= self._policy.healthy_secs
                or -returncode in STOPPED_FROM_OUTSIDE  # killed by it
                or returncode - 128 in STOPPED_FROM_OUTSIDE):  # exited on it (143: SIGTERM)
            self._backoff = 0.0
        delay = self._backoff
        self._backoff = min(max(2 * self._backoff, self._policy.backoff_secs),
                            self._policy.max_backoff_secs)
        self.restarts += 1
        self.restart_at = now + delay
        return delay

    def signal_group(self, signum: int) -> None:
        """Sends `signum` to the child and its subprocesses, if any is left."""
        if self.process is not None:
            self.process.signal(signum)


class Supervisor:
    """Starts its children in order and keeps them alive until the primary finishes.

    A child that exits is restarted after its backoff, with one log line
    naming it, its exit status or signal, and its restart count, unless
    - it is the primary and exited with status 0: the others are stopped and
      `run()` returns 0;
    - it `finishes` and exited with status 0: it is done, the others go on;
    - it exited with status 2 (a bad setting): everything stops, `run()`
      returns 2;
    - its restart budget is spent: everything stops, `run()` returns 1
      after a line that names the child and its last exit.
    """

    def __init__(self, specs: Sequence[ChildSpec], policy: RestartPolicy,
                 stop_grace_secs: float = 6.0, poll_secs: float = 0.1,
                 backend: Optional[Backend] = None):
        """
        Args:
            specs: the processes, started in this order (the primary first).
            policy: restarts allowed, and their backoff.
            stop_grace_secs: from SIGTERM to SIGKILL on a stop: the learner's checkpoint
                on a busy machine (4 s cut it short under a Ray cluster's churn), with
                Ray's own shutdown still inside the 10 s a stop may take.
            poll_secs: how often the children are looked at.
            backend: where they run (None: `LocalBackend`, this host); closed by `run()`.
        """
        self.backend = backend or LocalBackend()
        self.children: List[Child] = [Child(spec, policy, self.backend) for spec in specs]
        self._policy = policy
        self._grace, self._poll = stop_grace_secs, poll_secs

    def run(self, stop_signal: Callable[[], Optional[int]]) -> int:
        """Supervises until done or `stop_signal()` names a signal; returns the exit status.

        On a stop signal every child gets SIGTERM, and SIGKILL after
        `stop_grace_secs`; the status is then 128 + the signal (the primary's
        own, if it had failed of itself before the signal came).
        """
        try:
            for child in self.children:
                child.start()
            while True:
                signum = stop_signal()
                if signum is not None:
                    return self._stop_on_signal(signum)
                status = self._check_children()
                if status is not None:
                    return status
                time.sleep(self._poll)
        finally:
            self._kill_all()
            self.backend.close()

    def _check_children(self) -> Optional[int]:
        """Starts children whose restart is due; returns the status that ends the run."""
        now = time.monotonic()
        for child in self.children:
            if child.finished:
                continue
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.start()
                continue
            returncode = child.poll()
            if returncode is not None:
                status = self._exited(child, returncode, now)
                if status is not None:
                    return status
            self.backend.tend(child.spec, child.running)
        return None

    def _exited(self, child: Child, returncode: int, now: float) -> Optional[int]:
        child.signal_group(signal.SIGKILL)  # what it left behind in its session
        if child.spec.primary and returncode == 0:
            logging.info("launch: %s finished; stopping the others", child.spec.name)
            self._stop_all()
            return 0
        if child.spec.finishes and returncode == 0:
            logging.info("launch: %s finished", child.spec.name)
            child.finished = True
            return None
        if returncode == BAD_SETTING:
            logging.error("launch: %s exited with status 2 (a bad setting, see its log): "
                          "stopping", child.spec.name)
            self._stop_all()
            return BAD_SETTING
        delay = child.schedule_restart(now, returncode)
        if delay is None:
            logging.error("launch: %s exited with %s after %d restart(s): over its budget of "
                          "%d restarts in %.0f s (--max_restarts, --restart_window_secs); "
                          "stopping", child.spec.name, describe_status(returncode),
                          child.restarts, self._policy.max_restarts, self._policy.window_secs)
            self._stop_all()
            return 1
        if child.spec.gang:
            return self._restart_gang(child, returncode, delay, now)
        logging.warning("launch: %s exited with %s; restart %d in %.1f s", child.spec.name,
                        describe_status(returncode), child.restarts, delay)
        events.emit("restarted", child=child.spec.name, reason=describe_status(returncode),
                    restart=child.restarts, delay_secs=delay)
        return None

    def _restart_gang(self, child: Child, returncode: int, delay: float,
                      now: float) -> Optional[int]:
        """`child` exited: the rest of its gang is SIGKILLed (and reaped: their ports
        free again) and all start again together, after `delay`; one line says so."""
        gang = [c for c in self.children if c.spec.gang == child.spec.gang and c is not child
                and not c.finished and c.restart_at is None]
        for other in gang:
            other.signal_group(signal.SIGKILL)
            if other.process is not None:
                other.process.wait(timeout=10)
            if other.schedule_restart(now, -signal.SIGKILL) is None:
                logging.error("launch: %s is over its restart budget; stopping",
                              other.spec.name)
                self._stop_all()
                return 1
            other.restart_at = child.restart_at
        logging.warning("launch: %s exited with %s; restarting all %d %s workers together "
                        "from the chief's checkpoint (restart %d in %.1f s)", child.spec.name,
                        describe_status(returncode), len(gang) + 1, child.spec.gang,
                        child.restarts, delay)
        events.emit("restarted", child=child.spec.name, reason=describe_status(returncode),
                    restart=child.restarts, delay_secs=delay)
        return None

    def _stop_on_signal(self, signum: int) -> int:
        """Stops everything; the primary's exit status if it exited of itself, else
        128 + `signum`."""
        primary = next((c for c in self.children if c.spec.primary and c.running), None)
        # Read before the stop: the learner's own exit on the SIGTERM the stop sends
        # (143) is not the run's status.
        exited = primary.poll() if primary else None
        self._stop_all()
        return exited if exited is not None and exited > 0 else 128 + signum

    def _stop_all(self) -> None:
        """SIGTERM to every child (the learner checkpoints, actors end their unroll),
        SIGKILL to what is left after the grace."""
        self.backend.drop_spares(wait=False)
        for child in self.children:
            child.restart_at = None
            if child.running:
                child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + self._grace
        while time.monotonic() < deadline and any(
                child.poll() is None and child.running for child in self.children):
            time.sleep(0.05)
        self._kill_all()

    def _kill_all(self) -> None:
        """SIGKILLs every child's session and reaps the children, and the spares.
        A spare at idle priority may wait for a core to die on a busy machine: they
        are signalled first and reaped last."""
        self.backend.drop_spares(wait=False)
        for child in self.children:
            child.signal_group(signal.SIGKILL)
        for child in self.children:
            if child.process is not None and child.process.wait(timeout=10) is None:
                logging.error("launch: %s (pid %d) did not die on SIGKILL",
                              child.spec.name, child.process.pid)
        self.backend.drop_spares(wait=True)
