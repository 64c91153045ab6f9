import contextlib
import io
import json
import subprocess
import sys
from unittest import mock

import numpy as np
import pytest

from alf_async.datasets.recorder import EpisodeRecorder, open_recorder, unroll_columns
from dataset_fakes import ACTION_SPEC, OBSERVATION_SPEC, concatenated, episode, unrolls

PRODUCER = dict(kind="train", root_dir="/runs/a", commit="abc", gin_files="x.gin",
                gin_sha256="00", run_settings={"run": {"seed": 1}})

# Reads the dataset with TFDS and RLDS alone: no alf_async import.
READ_BACK = r"""
import json, sys
import numpy as np, rlds, tensorflow_datasets as tfds
builder = tfds.builder_from_directory(sys.argv[1])
episodes = builder.as_dataset(split="train")
returns = episodes.map(lambda e: rlds.transformations.sum_dataset(
    e["steps"], lambda step: step["reward"]))
out = dict(metadata=dict(builder.info.metadata), returns=[float(r) for r in tfds.as_numpy(returns)],
           episodes=[{k: np.asarray([s[k] for s in e["steps"]]).tolist() for k in
                      ("observation", "action", "reward", "discount", "is_first", "is_last",
                       "is_terminal", "log_prob", "policy_version")}
                     for e in tfds.as_numpy(episodes)],
           imported_alf_async=any(m.startswith("alf_async") for m in sys.modules))
print(json.dumps(out))
"""


def _streams():
    """Two columns of two envs; each starts inside an episode and ends inside one."""
    lead_in = {k: v[3:] for k, v in episode(6, True, 99).items()}  # an episode in progress
    tail = {k: v[:5] for k, v in episode(8, True, 98).items()}  # unfinished at the end
    column = lambda *episodes: concatenated([lead_in, *episodes, tail])
    return {0: [column(episode(5, True, 1), episode(7, False, 2)),
                column(episode(4, True, 3), episode(9, True, 4))],
            1: [column(episode(6, False, 5), episode(4, True, 7)), column(episode(10, True, 6))]}


def _record(directory, producer=PRODUCER, steps_per_shard=8):
    recorder = open_recorder(str(directory), "Fake-v0", OBSERVATION_SPEC, ACTION_SPEC, producer,
                             lambda: {"weights_digest": "feed"}, steps_per_shard)
    for env_id, columns in _streams().items():
        for unroll in unrolls(columns, unroll_length=4, env_id=env_id):
            recorder.add(unroll)
    recorder.close()
    return recorder


def _read_back(directory, alone: bool = False):
    """What `READ_BACK` prints: in a process of its own (`alone`), or in this one."""
    if not alone:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), mock.patch.object(sys, "argv",
                                                                    ["-", str(directory)]):
            exec(READ_BACK, {})  # pylint: disable=exec-used
        return json.loads(printed.getvalue())
    result = subprocess.run([sys.executable, "-c", READ_BACK, str(directory)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_recorded_episodes_read_back_with_tfds_and_rlds_alone_step_for_step(tmp_path):
    recorder = _record(tmp_path / "ds")
    assert len(recorder.writer._shard_lengths) > 1  # pylint: disable=protected-access
    back = _read_back(tmp_path / "ds", alone=True)
    assert not back["imported_alf_async"]
    by_tag = {int(e["observation"][0][0]): e for e in back["episodes"]}
    # Whole episodes only: not the one in progress at the start, nor the unfinished one.
    assert sorted(by_tag) == [1, 2, 3, 4, 5, 6, 7]
    for tag, length, terminated in [(1, 5, True), (2, 7, False), (4, 9, True), (5, 6, False)]:
        steps = by_tag[tag]
        assert [o[1] for o in steps["observation"]] == list(range(length))
        assert steps["reward"] == [*range(1, length), 0]  # the reward of each action
        assert steps["is_first"] == [True] + [False] * (length - 1)
        assert steps["is_last"] == [False] * (length - 1) + [True]
        assert steps["is_terminal"][-1] is terminated
        assert steps["discount"][-2] == (0.0 if terminated else 1.0)
        assert steps["action"] == [t % 3 for t in range(length)]
        assert steps["policy_version"] == [t // 4 for t in range(length)]
        assert steps["log_prob"] == [-0.5] * length
    assert sorted(back["returns"]) == sorted(sum(range(length))
                                             for length in (5, 7, 4, 9, 6, 4, 10))


def test_the_metadata_holds_the_provenance_the_specs_and_the_counts(tmp_path):
    _record(tmp_path / "ds")
    metadata = _read_back(tmp_path / "ds")["metadata"]
    assert metadata["producer"] == PRODUCER
    assert metadata["env_name"] == "Fake-v0"
    assert metadata["observation_spec"] == {"shape": [2], "dtype": "float32"}
    assert metadata["action_spec"] == {"shape": [], "dtype": "int64", "minimum": 0, "maximum": 2}
    assert metadata["episodes"] == 7 and metadata["steps"] == 5 + 7 + 4 + 9 + 6 + 4 + 10
    assert metadata["weights_digest"] == "feed"


def test_the_same_run_appends_and_another_is_refused_in_one_line(tmp_path):
    _record(tmp_path / "ds")
    _record(tmp_path / "ds")  # the same run resumed: appended
    back = _read_back(tmp_path / "ds")
    assert len(back["episodes"]) == 14 and back["metadata"]["episodes"] == 14
    other = dict(PRODUCER, root_dir="/runs/b")
    with pytest.raises(ValueError, match=r"^train.record_dataset=.*/ds already holds another "
                       r"dataset \(recorded by train of /runs/a\): give a new directory$"):
        open_recorder(str(tmp_path / "ds"), "Fake-v0", OBSERVATION_SPEC, ACTION_SPEC, other)
    with pytest.raises(ValueError, match=r"its env_name is 'Fake-v0', this run's 'Other-v0'"):
        open_recorder(str(tmp_path / "ds"), "Other-v0", OBSERVATION_SPEC, ACTION_SPEC, PRODUCER)
    assert len(_read_back(tmp_path / "ds")["episodes"]) == 14  # nothing written by either


class _Episodes:
    """A writer that keeps what it is given."""

    def __init__(self):
        self.episodes = []

    def write(self, episodes):
        self.episodes.extend(episodes)

    def write_metadata(self, unused_more):
        pass


def test_an_episode_cut_short_by_a_new_first_step_is_dropped_and_the_next_kept():
    cut = {k: v[:3] for k, v in episode(6, True, 1).items()}  # a replaced env's
    column = concatenated([cut, episode(5, True, 2), episode(4, False, 3)])
    recorder = EpisodeRecorder(_Episodes(), steps_per_shard=1)
    for unroll in unrolls([column], unroll_length=4):
        recorder.add(unroll)
    assert [(e["observation"][0][0], len(e["reward"])) for e in recorder.writer.episodes] == [
        (2, 5), (3, 4)]


def test_only_the_chosen_columns_are_recorded_and_only_open_episodes_are_held():
    columns = [concatenated([episode(3, True, 10 * b + k) for k in range(40)])
               for b in range(3)]
    recorder = EpisodeRecorder(_Episodes(), steps_per_shard=1)
    for unroll in unrolls(columns, unroll_length=5):
        recorder.add_steps(unroll_columns(unroll), 0, np.array([True, False, True]))
        stream = recorder._streams[0]  # pylint: disable=protected-access
        assert stream.size <= 3 + 5  # the open episodes' steps and one unroll
    tags = sorted(int(e["observation"][0][0]) for e in recorder.writer.episodes)
    assert tags == sorted([k for k in range(40)] + [20 + k for k in range(40)])
