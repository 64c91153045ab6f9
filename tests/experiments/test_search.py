import numpy as np
import pytest

optuna = pytest.importorskip("optuna")

from alf_async.experiments import search  # noqa: E402

SPACE = """
alf_async.Learner.learning_rate: {low: 3e-4, high: 3.0e-3, log: true}
alf_async.Learner.num_epochs: {low: 1, high: 8, step: 1}
AsyncOffPolicyDriver.learn_queue_cap: {choices: [2, 4]}
alf_async.Learner.optimizer: {choices: [adam, rmsprop]}
PPOAlgorithm.actor_fc_layers: {choices: [[64, 64], [32]]}
"""


def test_space_kinds_and_gin_text():
    space = search.parse_space(SPACE)
    assert space["alf_async.Learner.learning_rate"] == dict(
        kind="float", low=3e-4, high=3e-3, log=True, step=None)  # '3e-4' read as a number
    assert space["alf_async.Learner.num_epochs"]["kind"] == "int"
    assert space["AsyncOffPolicyDriver.learn_queue_cap"]["choices"] == ["2", "4"]
    assert space["alf_async.Learner.optimizer"]["choices"] == ["'adam'", "'rmsprop'"]
    assert space["PPOAlgorithm.actor_fc_layers"]["choices"] == ["(64, 64)", "(32,)"]


def test_suggested_bindings_lie_in_the_space():
    space = search.parse_space(SPACE)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        bindings = dict(b.split("=", 1) for b in search.suggest(study.ask(), space))
        assert 3e-4 <= float(bindings["alf_async.Learner.learning_rate"]) <= 3e-3
        assert 1 <= int(bindings["alf_async.Learner.num_epochs"]) <= 8
        assert bindings["alf_async.Learner.optimizer"] in ("'adam'", "'rmsprop'")


@pytest.mark.parametrize("text, match", [
    ("[1, 2]", "must map"),
    ("a.b: 3", "expected a mapping"),
    ("a.b: {low: 1}", "low, high"),
    ("a.b: {low: 2, high: 1}", "low must be < high"),
    ("a.b: {low: x, high: 1}", "low must be a number"),
    ("a.b: {choices: []}", "non-empty"),
    ("a.b: {low: 1, high: 2, scale: 3}", "a.b"),
])
def test_bad_spaces_name_the_entry(text, match):
    with pytest.raises(ValueError, match=match):
        search.parse_space(text)


def _curve(values):
    values = np.array(values, dtype=np.float64)
    return dict(env_steps=np.arange(1, len(values) + 1) * 1000, value=values,
                seconds=np.arange(len(values), dtype=np.float64))


def test_objectives_by_hand():
    curve = _curve([0, 100, 200, 500])
    assert search.objective_value(curve, "final", None) == 500
    # trapezoids over 3000 env steps: (50 + 150 + 350) * 1000 / 3000
    assert search.objective_value(curve, "auc", None) == pytest.approx(550 / 3)
    assert search.objective_value(curve, "steps_to_target", 475) == 4000
    # missed: its 4000 env steps times 2 - best / target
    assert search.objective_value(curve, "steps_to_target", 1000) == pytest.approx(6000)
    closer = search.objective_value(_curve([0, 100, 200, 900]), "steps_to_target", 1000)
    assert closer < 6000
    # the same on the seconds of training: reached at the 4th point (3 s), or missed
    assert search.objective_value(curve, "seconds_to_target", 475) == 3.0
    assert search.objective_value(curve, "seconds_to_target", 1000) == pytest.approx(4.5)


def test_reports_align_on_a_grid_of_env_steps():
    runner = search.TrialRunner("/unused", [], [], {}, "steps_to_target", 475, 1,
                                lambda: False, report_steps=2500)
    trial = optuna.create_study().ask()
    curve = dict(env_steps=np.array([1000, 2000, 3000, 4000, 5000, 6000]),
                 value=np.array([1.0, 2, 3, 4, 5, 6]), seconds=np.zeros(6))
    last = runner._report(trial, dict((k, v[:4]) for k, v in curve.items()), 0)
    assert last == 2500
    assert runner._report(trial, curve, last) == 5000
    # minimised objective: returns are reported negated, the latest at or before each step
    assert trial.study.trials[0].intermediate_values == {
        2500: -2.0, 5000: -5.0}
