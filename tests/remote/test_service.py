"""`ActorRegistry`: unrolls delivered twice or skipped, by incarnation and sequence."""

import pytest

pytest.importorskip("reverb")

from alf_async.remote.service import ActorRegistry  # noqa: E402


def test_a_repeated_sequence_is_a_duplicate_and_a_skipped_one_is_missing(caplog):
    registry = ActorRegistry(timeout_secs=30.0)
    for sequence in (0, 1, 2, 2, 1, 4):  # 2 and 1 again, 3 skipped
        registry.seen(task=0, incarnation=7, sequence=sequence)
    assert (registry.duplicated, registry.missing) == (2, 1)
    assert registry.unrolls(0) == 6
    assert "Actor task 0 delivered unroll 2 again (after 2)" in caplog.text


def test_a_restarted_process_counts_from_0_again_without_a_duplicate():
    registry = ActorRegistry(timeout_secs=30.0)
    for incarnation in (1, 2):  # the restart: a new incarnation
        for sequence in range(3):
            registry.seen(task=1, incarnation=incarnation, sequence=sequence)
    registry.seen(task=0, incarnation=1, sequence=0)  # another task, the same numbers
    assert (registry.duplicated, registry.missing) == (0, 0)


def test_a_restarted_learner_counts_an_actor_it_first_sees_mid_way_from_there():
    """The actor outlived the learner: its numbers go on from 212; none is missing."""
    registry = ActorRegistry(timeout_secs=30.0)
    for sequence in (212, 213, 215):
        registry.seen(task=0, incarnation=9, sequence=sequence)
    assert (registry.duplicated, registry.missing) == (0, 1)  # only 214
