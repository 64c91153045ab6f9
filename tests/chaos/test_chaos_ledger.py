"""`alf_async.chaos.ledger`: the figures of a chaos run, read from its events."""

from alf_async.chaos import ledger as chaos_ledger


T0 = 1_790_000_000.0  # the run's start (a time.time())


def _event(at, process, event, **fields):
    return dict(time=T0 + at, process=process, pid=1, event=event, **fields)


EVENTS = [  # a run's events: progress, a killed learner and actor, the resume, the target
    _event(0.0, "launch", "started", command="launch"),
    _event(10.0, "learner", "progress", iteration=10, env_steps=20480, average_return=20.0),
    _event(15.0, "learner", "progress", iteration=25, env_steps=51200, average_return=80.0),
    _event(16.0, "launch", "restarted", child="learner", reason="signal SIGKILL", restart=1,
           delay_secs=0.0),
    _event(16.5, "launch", "restarted", child="actor 1", reason="signal SIGKILL", restart=1,
           delay_secs=0.0),
    _event(27.0, "learner", "resumed", iteration=20, env_steps=40960),
    _event(30.0, "learner", "progress", iteration=21, env_steps=43008, average_return=70.0),
    _event(30.5, "actor 0", "env_exception_survived", env="EnvThread1",
           error="InjectedEnvFault('step 12')"),
    _event(30.6, "actor 1", "env_exception_survived", env="EnvThread0",
           error="RuntimeError('boom')"),
    _event(31.0, "learner", "reached_target", average_return=476.0, env_steps=45056,
           seconds=20.1),
]


def test_the_ledger_reads_restarts_losses_and_the_target_from_the_runs_events():
    assert chaos_ledger.restarts_by_child(EVENTS) == {"learner": 1, "actor 1": 1}
    lost = chaos_ledger.lost_to_learner_restarts(EVENTS)
    assert lost == dict(env_steps_lost=5 * 2048, seconds_lost=15.0)  # iterations 21-25 again
    assert chaos_ledger.reached(EVENTS, 475.0, T0) == dict(env_steps=45056, wall_seconds=31.0)
    assert chaos_ledger.reached(EVENTS, 500.0, T0) is None
    assert chaos_ledger.env_restarts(EVENTS) == 2 and chaos_ledger.env_restarts(EVENTS, "InjectedEnvFault") == 1


def test_a_ledger_counts_from_the_runs_events_and_says_whether_it_is_clean(tmp_path):
    """`ledger()` reads the events in root_dir itself (one reader: `events.read_events`)."""
    from alf_async import events  # pylint: disable=import-outside-toplevel
    log = events.EventLog(str(tmp_path), "learner", pid=3)
    for event in EVENTS:
        log.emit(event["event"], **{k: v for k, v in event.items()
                                    if k not in ("time", "process", "pid", "event")})
    tree = chaos_ledger.LaunchTree(0)  # pid 0: nothing below it, nothing left behind
    run = dict(seed=1, backend="local", kinds=["actor_kill", "env_exception"],
               injected={"actor_kill": 1}, plan=[(90.0, "learner_kill")],
               scheduled={"actor_kill": 1, "learner_kill": 1}, stop_seconds=[1.5, 6.0],
               final_stop=0.0, exit_status=0, started=T0, cpu_seconds=12.34)
    entry = chaos_ledger.ledger(run, tree, str(tmp_path), target=50.0)
    assert entry["faults"] == {"actor_kill": 1, "env_exception": 1}  # the injected env error
    assert entry["unfired"] == {"learner_kill": 1}
    assert entry["restarts"] == {"learner": 1, "actor 1": 1} and entry["env_restarts"] == 2
    assert entry["reached"]["env_steps"] == 45056  # the times are the log's, not EVENTS'
    assert entry["hangs"] == 1 and entry["longest_stop_secs"] == 6.0  # 6 s > the 5-s bound
    assert entry["processes_left"] == 0 and entry["unreadable_checkpoints"] == 0
    assert not chaos_ledger.clean(entry)  # the hang
    assert chaos_ledger.clean(dict(entry, hangs=0))
    assert not chaos_ledger.clean(dict(entry, hangs=0, reached=None))
