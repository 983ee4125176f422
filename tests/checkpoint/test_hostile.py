"""Tests for checkpoint directories holding entries the writer did not make (issue 15)."""

import errno
import json
import os
import shutil

import numpy as np
import pytest
from ckpt_helpers import reseal

import globalstep.checkpoint._manager as manager_module
from globalstep import CheckpointError, Clock, CorruptCheckpointError
from globalstep._cli import main
from globalstep.checkpoint import CheckpointManager, CheckpointWarning
from globalstep.checkpoint._directory.retention import Retention
from globalstep.storage import LocalStorage


def _name(step):
    return f"step-{step:012d}"


def _saved(directory, steps, **options):
    with CheckpointManager(directory, max_to_keep=None, **options) as manager:
        for step in steps:
            clock = Clock()
            clock.tick(step)
            manager.save(step, {"w": np.full(3, float(step)), "clock": clock})
    return directory


def test_step_link_out_of_the_run_never_blocks_retention(tmp_path):
    """A step directory that is a link out of the run is skipped once, with a warning."""
    outside = tmp_path / "outside"
    _saved(outside, [5])
    run = tmp_path / "run"
    _saved(run, [1])
    os.symlink(outside / _name(5), run / _name(5))
    with CheckpointManager(run, max_to_keep=1) as manager:
        with pytest.warns(CheckpointWarning, match="symbolic link the writer did not create"):
            manager.save(10, {"w": np.zeros(3)})
        manager.save(11, {"w": np.zeros(3)})  # said once: no second warning
        assert manager.steps() == [5, 11]
    assert (outside / _name(5) / "COMMITTED").exists()
    assert (run / _name(5)).is_symlink()


def test_tmp_link_never_blocks_a_save(tmp_path):
    """A `.tmp-*` link is left alone, named once, and every save still succeeds."""
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep.txt").write_text("x")
    run = _saved(tmp_path / "run", [1])
    os.symlink(target, run / ".tmp-step-000000000002-feed")
    with CheckpointManager(run, max_to_keep=1) as manager:
        with pytest.warns(CheckpointWarning, match=r"\.tmp-step-000000000002-feed"):
            manager.save(2, {"w": np.zeros(3)})
        manager.save(3, {"w": np.zeros(3)})
        assert manager.steps() == [3]
    assert (target / "keep.txt").read_text() == "x"


def test_state_json_that_is_a_directory_is_corrupt_and_skipped(tmp_path):
    """A state.json that is a directory is a corrupt checkpoint that skip_corrupt skips."""
    run = _saved(tmp_path / "run", [1, 2])
    state = run / _name(2) / "state.json"
    state.unlink()
    state.mkdir()
    with CheckpointManager(run, read_only=True) as manager:
        with pytest.raises(CorruptCheckpointError, match=r"checkpoint step-000000000002 .*damaged"):
            manager.restore()
        assert manager.restore(skip_corrupt=True)["w"][0] == 1.0


def test_renamed_copy_is_corrupt(tmp_path, capsys):
    """A copy of step 20 named step-45 is corrupt: its metadata says another step."""
    run = _saved(tmp_path / "run", [20])
    shutil.copytree(run / _name(20), run / _name(45))
    with CheckpointManager(run, read_only=True) as manager:
        with pytest.raises(CorruptCheckpointError, match=r"state\.json is of step 20, not 45"):
            manager.restore(step=45)
        assert manager.restore(skip_corrupt=True)["w"][0] == 20.0
    assert main(["ckpt", "verify", str(run)]) == 1
    assert "step 45: CORRUPT: " in capsys.readouterr().out


def test_deleted_marker_is_reported_by_verify_and_ls_all(tmp_path, capsys):
    """A step directory whose COMMITTED was deleted is named by verify and ls --all."""
    run = _saved(tmp_path / "run", [1, 2])
    (run / _name(2) / "COMMITTED").unlink()
    with CheckpointManager(run, read_only=True) as manager:
        assert manager.steps() == [1]
        assert manager.incomplete() == {2: "no COMMITTED marker: not committed, readers ignore it"}
    assert main(["ckpt", "verify", str(run)]) == 1
    out = capsys.readouterr().out
    assert "step 2: NOT A CHECKPOINT: no COMMITTED marker" in out
    assert "1 step-* entries not committed" in out
    assert main(["ckpt", "ls", "--all", str(run)]) == 0
    assert "NOT A CHECKPOINT: no COMMITTED marker" in capsys.readouterr().out
    assert main(["ckpt", "ls", str(run)]) == 0
    assert "NOT A CHECKPOINT" not in capsys.readouterr().out


def test_bad_tree_message_names_the_checkpoint(tmp_path):
    """A malformed tree in state.json is reported with the checkpoint's name."""
    run = _saved(tmp_path / "run", [3])
    doc = json.loads((run / _name(3) / "state.json").read_bytes())
    doc["tree"] = {"dict": {"w": {"array": 7}}}
    reseal(run / _name(3), state=json.dumps(doc).encode())
    with (
        CheckpointManager(run, read_only=True) as manager,
        pytest.raises(
            CorruptCheckpointError, match=r"checkpoint step-000000000003 of .*state\.json"
        ),
    ):
        manager.restore()


def test_garbled_clock_state_is_corrupt(tmp_path):
    """A clock state that the Clock refuses is a corrupt checkpoint, not a ConfigError."""
    run = _saved(tmp_path / "run", [3])
    doc = json.loads((run / _name(3) / "state.json").read_bytes())
    clock_node = doc["tree"]["dict"]["clock"]
    clock_node["stateful"]["dict"]["version"] = {"value": 999}
    reseal(run / _name(3), state=json.dumps(doc).encode())
    with (
        CheckpointManager(run, read_only=True) as manager,
        pytest.raises(CorruptCheckpointError, match=r"step-000000000003 .*damaged.*version"),
    ):
        manager.restore({"w": np.zeros(3), "clock": Clock()})


def test_unreadable_old_metadata_never_fails_a_save(tmp_path):
    """An old checkpoint whose state.json is a directory is pruned; every save succeeds."""
    run = _saved(tmp_path / "run", [1, 2])
    state = run / _name(1) / "state.json"
    state.unlink()
    state.mkdir()
    with CheckpointManager(run, max_to_keep=1, keep_best=manager_module.KeepBest("loss")) as m:
        m.save(3, {"w": np.zeros(3)}, metrics={"loss": 1.0})
        m.save(4, {"w": np.zeros(3)}, metrics={"loss": 2.0})
        assert m.steps() == [3, 4]


def test_a_deletion_that_fails_warns_once_and_is_retried(tmp_path, monkeypatch):
    """Retention that cannot delete warns once, the save succeeds, and a later save retries."""
    run = _saved(tmp_path / "run", [1])
    real = Retention.delete
    failing = {"on": True}

    def remove(manager, name):
        if failing["on"]:
            raise CheckpointError(f"deleting {name} failed: [Errno 13] Permission denied")
        real(manager, name)

    monkeypatch.setattr(Retention, "delete", remove)
    with CheckpointManager(run, max_to_keep=1) as manager:
        with pytest.warns(CheckpointWarning, match="could not delete step-000000000001"):
            manager.save(2, {"w": np.zeros(3)})
        with pytest.warns(CheckpointWarning) as caught:
            manager.save(3, {"w": np.zeros(3)})
        assert [str(w.message).split()[4] for w in caught] == ["step-000000000002"]
        assert manager.steps() == [1, 2, 3]
        failing["on"] = False
        manager.save(4, {"w": np.zeros(3)})
        assert manager.steps() == [4]


def test_cli_lists_what_it_can_and_names_what_it_cannot(tmp_path, capsys):
    """ls and verify list the good checkpoints and name an unreadable one."""
    run = _saved(tmp_path / "run", [1, 2])
    state = run / _name(1) / "state.json"
    state.unlink()
    state.mkdir()
    assert main(["ckpt", "ls", str(run)]) == 0
    out = capsys.readouterr().out
    assert "CORRUPT: checkpoint step-000000000001" in out
    assert any(line.startswith("2 ") for line in out.splitlines())
    assert main(["ckpt", "verify", str(run)]) == 1
    out = capsys.readouterr().out
    assert "step 2: ok" in out
    assert "1 of 2 checkpoints corrupt" in out


def test_skip_corrupt_with_an_empty_first_listing_says_none_found(tmp_path, monkeypatch):
    """skip_corrupt never fails an assertion when the listing comes back empty."""
    run = _saved(tmp_path / "run", [1])
    with CheckpointManager(run, read_only=True) as manager:
        monkeypatch.setattr(manager._index, "steps", list)
        with pytest.raises(manager_module.CheckpointNotFoundError, match="no committed checkpoint"):
            manager.restore(skip_corrupt=True)


def test_opening_on_a_full_disk_says_what_to_free(tmp_path, monkeypatch):
    """A writer opened on a full disk raises a CheckpointError that says to free space."""
    real = os.open

    def full(path, flags, *args):
        if str(path).endswith(".lock"):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real(path, flags, *args)

    monkeypatch.setattr(os, "open", full)
    with pytest.raises(CheckpointError, match=r"no space left .* free space there"):
        CheckpointManager(tmp_path / "run")


def test_a_directory_given_as_a_file_is_named(tmp_path):
    """A writer opened on a path that is a file says it is not a directory."""
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(CheckpointError, match="is not a directory"):
        CheckpointManager(path)


def test_remove_tree_never_follows_a_link(tmp_path):
    """Removing a link to a directory removes the link, not what it points to."""
    target = tmp_path / "target"
    target.mkdir()
    (target / "f").write_text("x")
    os.symlink(target, tmp_path / "link")
    LocalStorage(str(tmp_path)).remove_tree(str(tmp_path / "link"))
    assert not (tmp_path / "link").exists()
    assert (target / "f").exists()


def _damage(path, kind):
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    if kind == "directory":
        path.mkdir()
    elif kind == "dangling link":
        os.symlink(path.parent / "nowhere", path)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(b"\x00garbage\xff")


@pytest.mark.parametrize("file", ["COMMITTED", "state.json", "arrays.safetensors"])
@pytest.mark.parametrize("kind", ["missing", "directory", "dangling link", "empty", "garbage"])
def test_every_damaged_entry_is_corrupt_and_skipped(tmp_path, file, kind):
    """Each file of a checkpoint, missing or replaced, is a named corruption skip_corrupt skips."""
    run = _saved(tmp_path / "run", [1, 2])
    _damage(run / _name(2) / file, kind)
    with CheckpointManager(run, read_only=True) as manager:
        if file == "COMMITTED" and kind in ("missing", "dangling link"):
            assert manager.steps() == [1]  # no marker: not a checkpoint, and said so
            assert 2 in manager.incomplete()
        else:
            with pytest.raises(CorruptCheckpointError, match="step-000000000002"):
                manager.restore(step=2)
        assert manager.restore(skip_corrupt=True)["w"][0] == 1.0
