"""The population-based training loop, every mutation checked against the live run.

Each generation: every member trains one interval (`interval_env_steps` more
env steps, resuming its checkpoint), and is then ready: its score is its
last-N average return. The bottom `quantile` copies the latest checkpoint of a
member of the top one (exploit, `exploit.py`) and perturbs or resamples its
mutable settings (explore, `mutations.py`); the others keep theirs.

What none of the usual tools does: at its next start, after the restore, a
member reports what it trains with, read back from its live optimizer and
algorithm, and a digest of the weights it restored (its `trains_with` run
event). The controller compares both with what it asked for, every member,
every generation; a difference stops the whole population with one line
naming the member, the setting, asked and live (`MutationNotApplied`).

With `exploit=False` nothing is copied and nothing perturbed: the same
population is a random search of the same budget.
"""

import dataclasses
import json
import math
import os
import random
from typing import Callable, Dict, List, Optional

from absl import logging

from alf_async import events
from alf_async.population import exploit as exploit_lib
from alf_async.population import lineage, members as members_lib
from alf_async.population.curve import PopulationCurve
from alf_async.population.members import Member
from alf_async.population.mutations import Mutation
from alf_async.population.settings import PbtSettings, check
from alf_async.runs import layout
from alf_async.tracking.settings import TrackerSettings

STATE_FILE = "state.json"  # ROOT/pbt/state.json: the members' next generation
SETTINGS_FILE = "settings.json"  # ROOT/pbt/settings.json: the population's settings


class MutationNotApplied(RuntimeError):
    """A member trains with other settings or weights than the controller asked for."""


def _state_path(settings: PbtSettings) -> str:
    return os.path.join(settings.root_dir, lineage.PBT_DIR, STATE_FILE)


def _settings_path(root_dir: str) -> str:
    return os.path.join(root_dir, lineage.PBT_DIR, SETTINGS_FILE)


def save_settings(settings: PbtSettings) -> None:
    """`ROOT/pbt/settings.json`: what `replay` and a resumed run need of the population.

    Raises:
        ValueError: the root holds a population of other settings.
    """
    saved = dataclasses.asdict(settings)
    path = _settings_path(settings.root_dir)
    if os.path.exists(path):
        with open(path) as f:
            before = json.load(f)
        changed = sorted(k for k in ("gin_files", "gin_params", "mutations", "population",
                                     "interval_env_steps", "seed", "exploit")
                         if json.loads(json.dumps(saved[k])) != before[k])
        if changed:
            raise ValueError(f"{settings.root_dir} holds a population made with other "
                             f"{', '.join(changed)}; use another --root_dir")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as out:
        json.dump(saved, out, indent=1)


def saved_settings(root_dir: str) -> PbtSettings:
    """The settings a population in `root_dir` was made with (ValueError: none)."""
    try:
        with open(_settings_path(root_dir)) as f:
            saved = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{_settings_path(root_dir)}: not a pbt root_dir") from None
    saved["mutations"] = [Mutation(**m) for m in saved["mutations"]]
    return PbtSettings(**saved)


def _first_members(settings: PbtSettings, rng: random.Random) -> List[Member]:
    return [Member(i, os.path.join(settings.root_dir, f"member_{i}"),
                   {m.setting: m.sample(rng) for m in settings.mutations})
            for i in range(settings.population)]


def _save_state(settings: PbtSettings, generation: int, members: List[Member],
                rng: random.Random) -> None:
    """The next generation's members, written whole (beside, then renamed)."""
    path = _state_path(settings)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".partial", "w") as out:
        json.dump(dict(generation=generation, rng=rng.getstate()[1],
                       members=[dataclasses.asdict(m) for m in members]), out)
    os.replace(path + ".partial", path)


def _load_state(settings: PbtSettings, rng: random.Random) -> tuple:
    """`(next generation, members)`: where a stopped population goes on, or the start."""
    try:
        with open(_state_path(settings)) as f:
            state = json.load(f)
    except FileNotFoundError:
        return 1, _first_members(settings, rng)
    rng.setstate((3, tuple(state["rng"]), None))
    loaded = [Member(**m) for m in state["members"]]
    if len(loaded) != settings.population:
        raise ValueError(f"--population={settings.population}, but {settings.root_dir} "
                         f"holds a population of {len(loaded)}")
    return state["generation"], loaded


def verify(member: Member, reports: List[dict]) -> None:
    """Raises `MutationNotApplied` unless the member's reports after each restore of
    its interval (`members.reports_since`) show the settings it was asked to train
    with, and the first the weights it should have restored."""
    if not reports:
        raise MutationNotApplied(f"member {member.index}: its run reported no settings "
                                 f"(no trains_with event in {member.root_dir}/events)")
    for reported in reports:
        _verify_settings(member, reported["settings"])
    if member.weights is not None and reports[0]["weights"] != member.weights:
        source = member.index if member.parent is None else member.parent
        raise MutationNotApplied(
            f"member {member.index}: restored weights {reports[0]['weights'][:12]} are not "
            f"member {source}'s checkpoint's ({member.weights[:12]})")


def _verify_settings(member: Member, live: Dict[str, float]) -> None:
    for setting, asked in sorted(member.settings.items()):
        if setting not in live:
            raise MutationNotApplied(
                f"member {member.index}: its run cannot change {setting} (it trains with "
                f"{', '.join(sorted(live))})")
        if not math.isclose(live[setting], asked, rel_tol=1e-6):  # float32 in the run
            raise MutationNotApplied(f"member {member.index}: {setting} asked {asked:.6g}, "
                                     f"live {live[setting]:.6g}")


def _train(settings: PbtSettings, members: List[Member], generation: int,
           should_stop: Callable[[], bool], placement, tracker: TrackerSettings) -> bool:
    """Trains every member to `generation * K` env steps (each reporting to `tracker`
    too); False if a signal stopped it.

    Raises:
        RuntimeError: a member's run failed (names it and its log).
    """
    budget = generation * settings.interval_env_steps
    todo = []
    for member in members:
        exploit_lib.recover(member.root_dir)
        done = members_lib.score(member.root_dir)
        if done is None or done["env_steps"] < budget:
            todo.append(member)
    commands = {m.index: m.command(settings.gin_files, settings.gin_params,
                                   settings.mutations, budget, settings.seed,
                                   settings.tf_threads)
                + members_lib.tracker_flags(tracker, settings.root_dir, m.index) for m in todo}
    codes = members_lib.train_interval(todo, commands, settings.parallel, should_stop,
                                       placement)
    if should_stop():
        return False
    for index in members_lib.failed(codes):
        raise RuntimeError(f"member {index}'s run failed (exit status {codes[index]}); "
                           f"see {members[index].root_dir}/train.log")
    return True


def _ready(settings: PbtSettings, members: List[Member], generation: int) -> Dict[int, dict]:
    """Checks what each member trained with, records its score; returns the scores."""
    scores = {}
    recorded = {(r["member"], r["generation"]) for r in lineage.read(settings.root_dir)}
    for member in members:
        verify(member, members_lib.reports_since(member.root_dir, member.start_env_steps))
        scores[member.index] = found = members_lib.score(member.root_dir)
        events.emit("member_ready", member=member.index, generation=generation,
                    env_steps=found["env_steps"], score=found["score"])
        if (member.index, generation) in recorded:  # a resumed controller's second look
            continue
        lineage.append(settings.root_dir, dict(
            member=member.index, generation=generation,
            parent=member.index if member.parent is None else member.parent,
            settings=member.settings, score=scores[member.index]["score"],
            env_steps=scores[member.index]["env_steps"],
            weights=members_lib.last_saved(member.root_dir)["weights"]))
    return scores


def _exploit_and_explore(settings: PbtSettings, members: List[Member],
                         scores: Dict[int, dict], rng: random.Random, generation: int) -> None:
    """The next generation's members: the bottom copies the top and explores."""
    for member in members:
        _continue(member, None, members_lib.last_saved(member.root_dir))
    if not settings.exploit:
        return
    ready = {}
    for index, found in scores.items():
        latest = layout.latest_checkpoint(members[index].root_dir)
        if latest is not None and latest[0] >= found["iteration"]:
            ready[index] = latest[0]
    for index, source in exploit_lib.pairs({i: s["score"] for i, s in scores.items()},
                                           settings.quantile, rng, ready):
        member, top = members[index], members[source]
        exploit_lib.copy_checkpoint(top.root_dir, member.root_dir)
        _continue(member, source, members_lib.last_saved(top.root_dir))
        member.settings = {m.setting: m.explore(top.settings[m.setting], rng, settings.factors,
                                                settings.resample_probability)
                           for m in settings.mutations}
        events.emit("member_exploited", member=index, source=source,
                    generation=generation + 1, settings=member.settings)
        logging.info("pbt: member %d copies member %d (score %.1f < %.1f), explores to %s",
                     index, source, scores[index]["score"] or float("nan"),
                     scores[source]["score"] or float("nan"), _describe(member.settings))


def _continue(member: Member, parent: Optional[int], saved: dict) -> None:
    """Notes the checkpoint (a `weights_saved` event) the member's next start restores."""
    member.parent, member.weights = parent, saved["weights"]
    member.start_env_steps = saved["env_steps"]


def _describe(values: Dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.4g}" for name, value in sorted(values.items()))


def run(settings: PbtSettings, should_stop: Callable[[], bool] = lambda: False,
        placement=None, tracker: TrackerSettings = TrackerSettings()) -> int:
    """Runs (or resumes) the population, its members where `placement` puts them (None:
    here), each also reporting to `tracker` (`members.tracker_flags`); returns the exit
    status: 0 when every generation ran, 130 when a signal stopped it (every member
    checkpointed).

    Raises:
        MutationNotApplied: a member trains with other settings or weights than asked.
        RuntimeError: a member's run failed.
    """
    check(settings)
    save_settings(settings)
    rng = random.Random(settings.seed)
    generation, members = _load_state(settings, rng)
    if generation > 1:
        logging.info("pbt: resuming at generation %d of %d", generation, settings.generations)
    _save_state(settings, generation, members, rng)
    curve = PopulationCurve(settings.root_dir)
    while generation <= settings.generations:
        logging.info("pbt: generation %d of %d: %s", generation, settings.generations,
                     "; ".join(f"member {m.index}: {_describe(m.settings)}" for m in members))
        if not _train(settings, members, generation, should_stop, placement, tracker):
            return 130
        scores = _ready(settings, members, generation)
        curve.record(scores)
        logging.info("pbt: generation %d ready: %s", generation, ", ".join(
            f"member {i} {s['score'] if s['score'] is None else round(s['score'], 1)}"
            for i, s in sorted(scores.items())))
        if generation < settings.generations:
            _exploit_and_explore(settings, members, scores, rng, generation)
        generation += 1
        _save_state(settings, generation, members, rng)
    # Also where a finished population is run again: its files as this code writes them.
    curve.finish({m.index: members_lib.score(m.root_dir) for m in members},
                 {m.index: m.root_dir for m in members})
    return 0
