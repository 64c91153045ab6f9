"""`ReverbTable`: the Reverb implementation of a replay table: saving, resuming, torn copies."""

import shutil

import pytest

from replay_fakes import (B, T, counting_unroll as _unroll, deadline as _deadline,
                          replay_buffer as _replay)


def test_a_saved_buffer_is_restored_and_sampled_at_once_unless_saving_is_off(tmp_path):
    settings = dict(replay_ratio=1e3, min_size=4 * T, save_buffer=True,
                    checkpoint_dir=str(tmp_path))
    replay = _replay(**settings)
    try:
        for k in range(4):
            assert replay.insert(_unroll(1000 * k), _deadline(10))
    finally:
        replay.close()  # saves
    resumed = _replay(**settings)
    try:
        assert resumed.restored_segments == 4 * B
        batch = resumed.sample(_deadline(5))  # no insert: min_size is already held
        first_steps = set(batch.experience.time_step.reward.numpy()[:, 0, 0].tolist())
        assert first_steps <= {  # the steps stored before the restart
            1000 * k + t + 100 * b for k in range(4) for t in range(T) for b in range(B)}
    finally:
        resumed.close()
    fresh = _replay(**dict(settings, save_buffer=False))
    try:
        assert fresh.restored_segments == 0
        assert fresh.sample(_deadline(1.0)) is None  # waits to refill min_size
    finally:
        fresh.close()


def test_a_buffer_saved_under_other_settings_is_refused(tmp_path):
    settings = dict(save_buffer=True, checkpoint_dir=str(tmp_path))
    replay = _replay(**settings)
    try:
        assert replay.insert(_unroll(0), _deadline(10))
    finally:
        replay.close()
    with pytest.raises(ValueError, match="ReplayBuffer.save_buffer: the buffer saved in"):
        _replay(replay_ratio=8.0, **settings)


def _saved_copy(tmp_path, first_reward):
    """A buffer of one unroll saved in tmp_path; returns the settings and the copy's path."""
    settings = dict(save_buffer=True, checkpoint_dir=str(tmp_path))
    replay = _replay(**settings)
    try:
        assert replay.insert(_unroll(first_reward), _deadline(10))
    finally:
        replay.close()  # saves
    copies = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    return settings, copies[-1]


def test_a_torn_newest_copy_is_passed_over_with_one_line_for_the_newest_complete_one(
        tmp_path, caplog):
    """A kill mid-write leaves a copy without its DONE file beside the previous one
    (Reverb deletes that only once the new one is done)."""
    settings, complete = _saved_copy(tmp_path, 0)
    # e.g. 2026-11-26T09:41:38.651558649+00:00; the fraction drops its trailing zeros
    # (.55818856, or none at all), so a newer name gets one more digit.
    stamp, zone = complete.name.split("+")
    torn = tmp_path / (f"{stamp}1+{zone}" if "." in stamp else f"{stamp}.1+{zone}")
    assert torn.name > complete.name
    shutil.copytree(complete, torn)
    (torn / "DONE").unlink()
    resumed = _replay(**settings)
    try:
        assert resumed.restored_segments == B
    finally:
        resumed.close()
    torn_lines = [r for r in caplog.records if "is torn" in r.getMessage()]
    assert len(torn_lines) == 1 and str(torn) in torn_lines[0].getMessage()


def test_copies_none_of_which_is_complete_stop_the_run_with_one_line(tmp_path):
    """Reverb alone would start an empty buffer without a word."""
    settings, complete = _saved_copy(tmp_path, 0)
    (complete / "DONE").unlink()
    with pytest.raises(ValueError, match=r"none of the 1 copies of the buffer in .* is "
                                         r"complete; move them away"):
        _replay(**settings)


def test_a_corrupt_complete_copy_is_one_line_not_a_traceback(tmp_path):
    settings, complete = _saved_copy(tmp_path, 0)
    for record in complete.glob("*.tfrecord"):
        with open(record, "r+b") as f:
            f.truncate(record.stat().st_size // 2)
    with pytest.raises(ValueError, match=r"the buffer saved in .* cannot be read \(.*\); "
                                         r"move it away") as raised:
        _replay(**settings)
    assert str(raised.value).splitlines()[0].endswith("start with an empty buffer")
