"""`alf_async.training.files`: a reader sees the old version or the new one, never a part."""

import os

import pytest

from alf_async.training import files


def test_a_text_file_whose_write_fails_keeps_its_old_content(tmp_path, monkeypatch):
    path = str(tmp_path / "result.json")
    files.write_text(path, "old")
    monkeypatch.setattr(os, "replace", lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        files.write_text(path, "new")
    assert open(path).read() == "old"
    monkeypatch.undo()
    files.write_text(path, "new")
    assert open(path).read() == "new"


def _version(directory, text):
    os.makedirs(directory)
    with open(os.path.join(directory, "saved_model.pb"), "w") as f:
        f.write(text)


def _read(directory):
    with open(os.path.join(directory, "saved_model.pb")) as f:
        return f.read()


def test_a_stop_between_the_renames_leaves_the_previous_directory_readable(tmp_path,
                                                                           monkeypatch):
    path = str(tmp_path / "policy")
    _version(path, "v1")
    staged = files.staged_directory(path)
    _version(staged, "v2")
    real_rename, renames = os.rename, []

    def rename_once(src, dst):
        if renames:
            raise KeyboardInterrupt  # the kill, after the old one moved aside
        renames.append(src)
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename_once)
    with pytest.raises(KeyboardInterrupt):
        files.replace_directory(staged, path)
    monkeypatch.undo()
    assert not os.path.exists(path)
    assert _read(files.readable_directory(path)) == "v1"
    staged = files.staged_directory(path)  # the dead writer's leftover is cleared
    assert not any(".partial-" in name and name != os.path.basename(staged)
                   for name in os.listdir(tmp_path))
    _version(staged, "v3")
    files.replace_directory(staged, path)
    assert _read(files.readable_directory(path)) == "v3"
    assert sorted(os.listdir(tmp_path)) == ["policy"]


def test_no_directory_is_none_and_a_saved_model_needs_its_variables_index(tmp_path):
    path = str(tmp_path / "policy")
    assert files.readable_directory(path) is None
    _version(path, "v1")
    assert not files.complete_saved_model(path)  # an empty variables/ as a kill left it
    os.makedirs(os.path.join(path, "variables"))
    open(os.path.join(path, "variables", "variables.index"), "w").close()
    assert files.complete_saved_model(path)
