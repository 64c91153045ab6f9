"""`alf_async.population.mutations`: what may be mutated, its range, explore."""

import math
import random

import pytest

from alf_async.population.mutations import bindings, parse_mutation, parse_mutations


def test_a_mutation_names_its_setting_and_range():
    lr = parse_mutation("alf_async.Learner.learning_rate:log_uniform(1e-4, 1e-2)")
    assert (lr.binding, lr.setting, lr.low, lr.high, lr.log) == (
        "alf_async.Learner.learning_rate", "learning_rate", 1e-4, 1e-2, True)
    clip = parse_mutation("PPOAlgorithm.clip_ratio:uniform(0.1,0.3)")
    assert clip.setting == "clip_ratio" and not clip.log
    assert bindings([lr, clip], {"learning_rate": 0.001, "clip_ratio": 0.2}) == [
        "alf_async.Learner.learning_rate=0.001", "PPOAlgorithm.clip_ratio=0.2"]


def test_any_binding_of_a_number_is_named_by_itself_and_integer_bounds_stay_integers():
    epochs = parse_mutation("alf_async.Learner.num_epochs:uniform(2, 8)")
    assert (epochs.setting, epochs.integer) == ("alf_async.Learner.num_epochs", True)
    rng = random.Random(0)
    draws = {epochs.sample(rng) for _ in range(300)}
    assert draws == set(range(2, 9)) and all(isinstance(d, int) for d in draws)
    assert {epochs.explore(5, rng, (0.8, 1.2), 0.0) for _ in range(50)} == {4, 6}
    assert epochs.explore(8, rng, (1.2,), 0.0) == 8  # kept within HIGH
    lam = parse_mutation("PPOAlgorithm.gae_lambda:uniform(0.9,1)")
    assert (lam.setting, lam.integer) == ("PPOAlgorithm.gae_lambda", False)
    assert parse_mutation("train/WIDTH:log_uniform(16,256)").integer  # a scoped macro
    assert bindings([epochs, lam], {"alf_async.Learner.num_epochs": 3,
                                    "PPOAlgorithm.gae_lambda": 0.95}) == [
        "alf_async.Learner.num_epochs=3", "PPOAlgorithm.gae_lambda=0.95"]


@pytest.mark.parametrize("text, message", [
    ("num epochs:uniform(1,2)", "BINDING must be a gin binding (CONFIGURABLE.PARAMETER"),
    ("alf_async.Learner.num_epochs=3:uniform(1,2)", "BINDING must be a gin binding"),
    ("PPOAlgorithm.clip_ratio:normal(0,1)", "SPEC must be uniform"),
    ("PPOAlgorithm.clip_ratio:uniform(0.3,0.1)", "needs LOW < HIGH"),
    ("alf_async.Learner.learning_rate:log_uniform(0,1)", "needs LOW < HIGH and LOW > 0"),
    ("PPOAlgorithm.clip_ratio:uniform(a,b)", "LOW and HIGH must be numbers")])
def test_what_cannot_be_mutated_is_refused_in_one_line(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_mutation(text)


def test_none_or_twice_is_refused():
    with pytest.raises(ValueError, match="at least one"):
        parse_mutations([])
    with pytest.raises(ValueError, match="clip_ratio given more than once"):
        parse_mutations(["PPOAlgorithm.clip_ratio:uniform(0.1,0.3)",
                         "ImpalaAlgorithm.clip_ratio:uniform(0.1,0.3)"])


def test_samples_and_explores_stay_in_range_and_perturb_by_the_factors():
    lr = parse_mutation("alf_async.Learner.learning_rate:log_uniform(1e-4,1e-2)")
    rng = random.Random(0)
    samples = [lr.sample(rng) for _ in range(2000)]
    assert 1e-4 <= min(samples) and max(samples) <= 1e-2
    logs = [math.log10(s) for s in samples]  # uniform in log space: median near 1e-3
    assert -3.1 < sorted(logs)[1000] < -2.9
    perturbed = {round(lr.explore(1e-3, rng, (0.8, 1.2), 0.0) / 1e-3, 6) for _ in range(100)}
    assert perturbed == {0.8, 1.2}
    assert lr.explore(9.5e-3, random.Random(1), (1.2,), 0.0) == 1e-2  # clipped to HIGH
    resampled = [lr.explore(1e-3, rng, (0.8, 1.2), 1.0) for _ in range(50)]
    assert len({round(v, 12) for v in resampled}) == 50  # drawn afresh every time
