"""A member of a population: an ordinary training run in its own root_dir.

The controller trains every member one interval at a time: the member's
`python -m alf_async.train` command resumes its checkpoint and stops at the
interval's env steps, with the member's current mutable settings as gin
bindings. What a member did is read from its files: `result.json` (its score,
the average return of its last episodes) and its typed run events (what it
reports it trains with after the restore, the digest of the weights it saved).

Thread-safety: called from the controller's one thread.
"""

import dataclasses
import os
from typing import Dict, List, Optional, Sequence

from absl import logging

from alf_async import events
from alf_async.runs.commands import train_command
from alf_async.supervision.placement import LocalPlacement
from alf_async.population.mutations import Mutation, bindings
from alf_async.runs import layout
from alf_async.runs.queue import Job, RunQueue
from alf_async.tracking.settings import TrackerSettings

STOP_GRACE_SECS = 20.0  # a member stopped by Ctrl-C writes its checkpoint first


@dataclasses.dataclass
class Member:
    """One member and its current mutable settings.

    Attributes:
        index: its number, 0 ... P - 1.
        root_dir: its run's folder (`ROOT/member_<index>`).
        settings: `{setting: value}` it trains with in its next interval.
        parent: the member whose checkpoint it continues next (None: its own).
        weights: the digest of the weights its next start must restore (the
            checkpoint it continues; None: not known yet, before the first).
        start_env_steps: the env steps of that checkpoint (0: none).
    """
    index: int
    root_dir: str
    settings: Dict[str, float]
    parent: Optional[int] = None
    weights: Optional[str] = None
    start_env_steps: int = 0

    def command(self, gin_files: Sequence[str], gin_params: Sequence[str],
                mutations: Sequence[Mutation], env_steps: int, seed: int,
                tf_threads: int) -> List[str]:
        """Its `train` command for an interval ending at `env_steps` (the budget)."""
        return train_command(self.root_dir, gin_files, [
            *gin_params, f"train.seed={seed + self.index}", f"train.num_env_steps={env_steps}",
            "train.stop_at_return=None", *bindings(mutations, self.settings)], tf_threads)


def tracker_flags(tracker: TrackerSettings, root_dir: str, index: int) -> List[str]:
    """Member `index`'s `--tracker*` flags: one tracked run over all its intervals (each
    resumes it), `<population>/member_<index>` in the population's group (the cell's
    under `experiment`; else the population's folder name)."""
    population = os.path.basename(os.path.normpath(root_dir))
    return tracker.flags(group=tracker.group or population,
                         name=f"{tracker.name or population}/member_{index}")


def train_interval(members: Sequence[Member], commands: Dict[int, List[str]],
                   parallel: int, should_stop, placement=None) -> Dict[int, int]:
    """Runs every member's command where `placement` puts it (None: here), `parallel`
    at a time (`runs.queue`); returns their exit statuses.

    A member whose node was lost starts again (it resumes from its checkpoint),
    one line each, at most `placement.retries` times per interval.
    `should_stop()` true (a signal) stops every running member (each saves a
    checkpoint) and starts no more; the statuses of those not run are absent.
    """
    placement = placement or LocalPlacement()
    queue = RunQueue(placement, placement.capacity(parallel), placement.retries,
                     STOP_GRACE_SECS, on_retry=lambda job, proc, retry: _retrying(
                         job, proc, retry, placement.retries))
    codes = queue.run([Job(f"member_{m.index}", commands[m.index], m.root_dir)
                       for m in members], should_stop)
    return {int(name.split("_")[1]): code for name, code in codes.items()}


def _retrying(job: Job, proc, retry: int, budget: int) -> None:
    logging.warning("pbt: %s's node %s was lost (%s); resuming from its checkpoint on "
                    "another node (retry %d of %d)", job.name.replace("_", " "),
                    proc.address, proc.lost, retry, budget)


def score(root_dir: str) -> Optional[dict]:
    """`{"score": the average return of its last episodes, "env_steps", "iteration"}`
    of the run's `result.json`, or None (it never finished an interval)."""
    result = layout.read_result(root_dir)
    if result is None:
        return None
    return dict(score=result["average_return"], env_steps=result["env_steps"],
                iteration=result["iteration"])


def reports_since(root_dir: str, env_steps: int) -> List[dict]:
    """The run's `trains_with` events (one per start, after its restore: the settings it
    trains with and the digest of the weights it restored, read from the live run)
    of the starts that restored a checkpoint at or past `env_steps`, oldest first:
    an interval's first start, then its restarts (a lost node, a Ctrl-C)."""
    return [e for e in events.read_events(root_dir)
            if e["event"] == "trains_with" and e["env_steps"] >= env_steps]


def last_saved(root_dir: str) -> Optional[dict]:
    """The run's latest `weights_saved` event (the digest of the weights it saved at its
    end, `weights`, and its `env_steps`), or None."""
    found = [e for e in events.read_events(root_dir) if e["event"] == "weights_saved"]
    return found[-1] if found else None


def failed(codes: Dict[int, int]) -> List[int]:
    """The members whose run ended with a non-zero exit status."""
    return sorted(i for i, code in codes.items() if code != 0)
