"""The study's stale-trial callback: what it says and what it queues."""

import pytest

optuna = pytest.importorskip("optuna")

from alf_async.experiments.study import RetryStaleTrial  # pylint: disable=wrong-import-position


def _failed(study, params):
    trial = study.ask()
    for name, value in params.items():
        trial.suggest_float(name, value, value)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return study.trials[-1]


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_stale_trial_is_queued_with_its_settings_once_and_one_without_any_is_replaced(
        tmp_path, capsys):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")
    retry = RetryStaleTrial(grace_secs=4)

    retry(study, _failed(study, {"lr": 0.01}))
    assert "trial 0: no heartbeat from its worker for 4 s" in capsys.readouterr().out
    queued = study.ask()
    assert queued.params == {"lr": 0.01}
    assert study.trials[-1].system_attrs["failed_trial"] == 0
    study.tell(queued, state=optuna.trial.TrialState.FAIL)

    retry(study, study.trials[-1])
    assert "marked failed, not retried (it was a retry)" in capsys.readouterr().out
    assert not study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    retry(study, _failed(study, {}))
    assert ("trial 2: no heartbeat from its worker for 4 s (it died, or its node was lost): "
            "marked failed, before it drew its settings: a new trial takes its place"
            in capsys.readouterr().out)


def test_a_study_holding_every_trial_asked_for_is_done_whatever_failed_on_the_way(
        monkeypatch):
    """`tune` exits 0 then, though a worker died (its trial marked failed, run again)."""
    import types  # pylint: disable=import-outside-toplevel
    from alf_async.experiments import study as study_lib  # pylint: disable=import-outside-toplevel
    study = optuna.create_study()
    monkeypatch.setattr(study_lib, "open_study", lambda settings: study)
    settings = types.SimpleNamespace(trials=2)
    _failed(study, {})
    study.tell(study.ask(), 1.0)
    assert not study_lib.holds_every_trial(settings)  # a failed trial does not count
    study.tell(study.ask(), state=optuna.trial.TrialState.PRUNED)
    assert study_lib.holds_every_trial(settings)
