"""`batches.registry`: a learn-batch source is one entry, found by its name."""

import pytest

from alf_async.batches import registry
from alf_async.batches.registry import SOURCES, Source
from fakes import learning_driver, timed_stop


def test_a_new_kind_of_source_is_one_entry_that_the_driver_builds_by_name(monkeypatch):
    needs_seen = []

    def build(needs):
        needs_seen.append(needs)
        return registry.SOURCES["one_time"].build(needs)

    monkeypatch.setitem(SOURCES, "fresh_twice", Source(type("Twice", (), {"wants_back": ()}), build))
    driver = learning_driver(None, exp_replayer="fresh_twice", learn_queue_cap=2)
    try:
        assert len(needs_seen) == 1
        needs = needs_seen[0]
        assert needs.learn_queue_cap == 2 and needs.replay_dir is None
        assert int(needs.version) == int(needs.env_steps) == 0
        driver.start()
        assert driver.get_training_exps().experience.policy_version.shape[:2] == (2, 3)
    finally:
        timed_stop(driver, bound=5.0)


def test_an_unknown_name_lists_every_registered_one(monkeypatch):
    monkeypatch.setitem(SOURCES, "n_step", Source(object, lambda needs: None))
    with pytest.raises(ValueError, match=r"^AsyncOffPolicyDriver.exp_replayer must be one of "
                       r"'one_time', 'uniform', 'prioritized', 'dataset', 'hybrid', 'n_step', "
                       r"got 'nstep'$"):
        registry.check_name("nstep")


def test_a_source_wanting_a_term_the_loss_lacks_is_refused_before_it_is_built(monkeypatch):
    built = []
    wanting = type("Wanting", (), {"wants_back": ("td_error", "surprise")})
    monkeypatch.setitem(SOURCES, "wanting", Source(wanting, built.append))
    with pytest.raises(ValueError, match=r"^exp_replayer='wanting' wants the per-item loss term "
                       r"'td_error', 'surprise' back after each update, which CountingPolicy's "
                       r"loss does not supply \(its item_terms: \(\)\)"):
        learning_driver(None, exp_replayer="wanting")
    assert not built
