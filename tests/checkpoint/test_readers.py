"""Tests for readers beside a pruning writer, the evaluator's iterator, timelines and locks."""

import json
import shutil
import threading
import time

import numpy as np
import pytest

from globalstep import CheckpointNotFoundError, CorruptCheckpointError, LockError
from globalstep.checkpoint import CheckpointManager, CheckpointWarning
from globalstep.storage import DirectoryLock, open_storage


def _name(step):
    return f"step-{step:012d}"


def _run(directory, steps, **options):
    with CheckpointManager(directory, max_to_keep=None, **options) as manager:
        for step in steps:
            manager.save(step, {"w": np.full(2, float(step))})
    return directory


def _prune_on_first_read(manager, monkeypatch, victim):
    """Makes the first read of ``victim`` find it deleted, as a writer's retention would."""
    real = manager._reading.load

    def load(step):
        if step == victim and not load.done:
            load.done = True
            shutil.rmtree(f"{manager._storage.root}/{_name(step)}")
        return real(step)

    load.done = False
    monkeypatch.setattr(manager._reading, "load", load)


@pytest.mark.parametrize("call", ["restore", "open", "metadata", "verify", "skip_corrupt"])
def test_reader_moves_to_the_newest_left_when_its_choice_is_pruned(ckpt_dir, monkeypatch, call):
    """A checkpoint deleted between listing and reading sends the reader to the newest left."""
    _run(ckpt_dir, [1, 2, 3])
    with CheckpointManager(ckpt_dir, read_only=True) as manager:
        _prune_on_first_read(manager, monkeypatch, 3)
        if call == "restore":
            assert manager.restore()["w"][0] == 2.0
        elif call == "skip_corrupt":
            assert manager.restore(skip_corrupt=True)["w"][0] == 2.0
        elif call == "open":
            with manager.open() as reader:
                assert reader.step == 2
        elif call == "metadata":
            assert manager.metadata()["step"] == 2
        else:
            manager.verify()
        assert manager.latest_step() == 2


def test_a_named_step_pruned_while_read_is_not_found(ckpt_dir, monkeypatch):
    """restore(step=...) of a checkpoint pruned under it says so, not that it is corrupt."""
    _run(ckpt_dir, [1, 2])
    with CheckpointManager(ckpt_dir, read_only=True) as manager:
        _prune_on_first_read(manager, monkeypatch, 1)
        with pytest.raises(CheckpointNotFoundError, match="deleted while being read"):
            manager.restore(step=1)


def test_a_damaged_checkpoint_still_there_is_corrupt(ckpt_dir):
    """A checkpoint still present whose arrays are damaged is reported as corrupt."""
    _run(ckpt_dir, [1, 2])
    (ckpt_dir / _name(2) / "arrays.safetensors").write_bytes(b"garbage")
    with CheckpointManager(ckpt_dir, read_only=True) as manager:
        with pytest.raises(CorruptCheckpointError, match=r"step-000000000002 .* damaged"):
            manager.restore()
        assert manager.restore(skip_corrupt=True)["w"][0] == 1.0


def test_reader_sees_new_checkpoints_after_a_quiet_listing(ckpt_dir):
    """A listing reused while the directory is quiet is dropped once the writer saves."""
    _run(ckpt_dir, [1])
    time.sleep(0.15)  # let the directory become quiet, so that the listing is reused
    with CheckpointManager(ckpt_dir, read_only=True) as reader:
        assert reader.latest_step() == 1
        assert reader.latest_step() == 1
        _run(ckpt_dir, [2])
        assert reader.latest_step() == 2
        assert reader.steps() == [1, 2]


def test_follow_yields_each_new_checkpoint_once_in_order(ckpt_dir):
    """The iterator yields every checkpoint after `after`, opened, then stops at the timeout."""
    _run(ckpt_dir, [1, 2, 3])
    with CheckpointManager(ckpt_dir, read_only=True) as manager:
        follower = manager.follow(after=1, timeout_seconds=0.0, poll_seconds=0.01)
        steps = [(reader.step, float(reader["w"][0])) for reader in follower]
    assert steps == [(2, 2.0), (3, 3.0)]
    assert follower.missed == []


def test_follow_starts_at_the_newest_and_waits_for_the_next(ckpt_dir):
    """Without `after`, the iterator starts with the newest checkpoint and then each newer."""
    _run(ckpt_dir, [1, 2])
    seen = []
    with CheckpointManager(ckpt_dir, read_only=True) as manager:
        follower = manager.follow(timeout_seconds=30.0, poll_seconds=0.01)
        seen.append(next(follower).step)
        writer = threading.Thread(target=_run, args=(ckpt_dir, [3, 4]))
        writer.start()
        seen.append(next(follower).step)
        writer.join()
        seen.extend(r.step for r in manager.follow(after=seen[-1], timeout_seconds=0.0))
    assert seen == [2, 3, 4]


def test_follow_names_a_checkpoint_pruned_before_it_was_read(ckpt_dir, monkeypatch):
    """A listed checkpoint pruned before it could be opened is warned about and in missed."""
    _run(ckpt_dir, [1, 2, 3])
    with CheckpointManager(ckpt_dir, read_only=True) as manager:
        _prune_on_first_read(manager, monkeypatch, 2)
        follower = manager.follow(after=0, timeout_seconds=0.0)
        with pytest.warns(CheckpointWarning, match=r"step 2 .* pruned before it could be read"):
            steps = [reader.step for reader in follower]
    assert steps == [1, 3]
    assert follower.missed == [2]


def test_follow_names_a_checkpoint_pruned_between_polls(ckpt_dir):
    """A checkpoint committed and pruned between two polls is named by its successor."""
    with CheckpointManager(ckpt_dir, max_to_keep=1) as writer:
        writer.save(1, {"w": np.zeros(2)})
        follower = CheckpointManager(ckpt_dir, read_only=True).follow(timeout_seconds=0.0)
        assert [r.step for r in follower] == [1]
        writer.save(2, {"w": np.zeros(2)})
        writer.save(3, {"w": np.zeros(2)})
        with pytest.warns(CheckpointWarning, match=r"step 2 .* committed and pruned"):
            assert [r.step for r in follower] == [3]
    assert follower.missed == [2]


@pytest.mark.parametrize(
    ("argument", "value"),
    [("timeout_seconds", -1.0), ("poll_seconds", float("nan")), ("poll_seconds", None)],
)
def test_follow_refuses_bad_seconds(ckpt_dir, argument, value):
    """follow() names a negative, NaN or missing number of seconds."""
    with (
        CheckpointManager(ckpt_dir, read_only=True) as manager,
        pytest.raises(ValueError, match=f"`{argument}` must be a finite number of seconds"),
    ):
        manager.follow(**{argument: value})


def test_resume_from_an_older_step_abandons_the_newer_timeline(ckpt_dir):
    """After restore(step=5) the first save deletes steps 6..10 and records them."""
    _run(ckpt_dir, range(1, 11))
    with CheckpointManager(ckpt_dir, max_to_keep=None) as manager:
        manager.restore(step=5)
        assert manager.steps() == list(range(1, 11))  # nothing changes before the save
        manager.save(6, {"w": np.full(2, -6.0)})
        assert manager.steps() == [1, 2, 3, 4, 5, 6]
        timeline = manager.metadata()["timeline"]
    assert timeline == {"resumed_from": 5, "abandoned": [6, 7, 8, 9, 10]}
    with CheckpointManager(ckpt_dir, read_only=True) as fresh:
        assert fresh.restore()["w"][0] == -6.0


def test_restoring_the_newest_again_keeps_the_timeline(ckpt_dir):
    """A restore of an older step followed by one of the newest abandons nothing."""
    _run(ckpt_dir, [1, 2, 3])
    with CheckpointManager(ckpt_dir, max_to_keep=None) as manager:
        manager.restore(step=1)
        manager.restore()
        manager.save(4, {"w": np.zeros(2)})
        assert manager.steps() == [1, 2, 3, 4]
        assert "timeline" not in manager.metadata()


def test_read_only_restore_of_an_old_step_changes_nothing(ckpt_dir):
    """A read-only manager's restore of an old step never abandons anything."""
    _run(ckpt_dir, [1, 2, 3])
    with CheckpointManager(ckpt_dir, read_only=True) as manager:
        manager.restore(step=1)
    with CheckpointManager(ckpt_dir, max_to_keep=None) as manager:
        manager.save(4, {"w": np.zeros(2)})
        assert manager.steps() == [1, 2, 3, 4]


def test_fsspec_lock_is_exclusive_and_released_only_by_its_holder():
    """Of two memory:// locks only one is taken, and a takeover's lock survives a release."""
    storage = open_storage("memory://globalstep-tests/lock-own")
    first, second = DirectoryLock(storage), DirectoryLock(storage)
    first.acquire()
    with pytest.raises(LockError, match="locked by another writer"):
        second.acquire()
    path = storage.join(".lock")
    other = json.dumps({"pid": 1, "host": "elsewhere", "since": "now", "token": "x"}).encode()
    storage.remove_file(path)
    storage.write_bytes(path, other)  # another writer took it over
    first.release()
    assert storage.read_bytes(path) == other
    storage.remove_file(path)


def test_fsspec_locks_started_together_exclude_each_other():
    """Of 8 threads taking one memory:// lock at once, exactly one gets it, 30 times."""
    for attempt in range(30):
        storage = open_storage(f"memory://globalstep-tests/lock-race-{attempt}")
        barrier = threading.Barrier(8)
        held = []

        def take(storage=storage, barrier=barrier, held=held):
            lock = DirectoryLock(storage)
            barrier.wait()
            try:
                lock.acquire()
            except LockError:
                return
            held.append(lock)

        threads = [threading.Thread(target=take) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(held) == 1
        held[0].release()
        assert not storage.exists(storage.join(".lock"))


def test_summaries_come_from_the_writers_index_while_files_are_unchanged(ckpt_dir, monkeypatch):
    """ckpt ls's summaries read the index, not each state.json, while the files match it."""
    import globalstep.checkpoint._directory.reading as manager_module

    with CheckpointManager(ckpt_dir, max_to_keep=None) as manager:
        for step in (1, 2):
            manager.save(step, {"w": np.zeros(2)}, metrics={"loss": step / 10})

    def refuse(storage, name):
        raise AssertionError(f"{name} was read despite the index")

    with CheckpointManager(ckpt_dir, read_only=True) as reader:
        monkeypatch.setattr(manager_module, "load_state", refuse)
        summaries = reader.summaries()
    assert [(s.step, s.metrics, s.size_bytes > 0) for s in summaries] == [
        (1, {"loss": 0.1}, True),
        (2, {"loss": 0.2}, True),
    ]


def test_a_rewritten_state_json_is_read_not_taken_from_the_index(ckpt_dir):
    """A state.json changed after the writer indexed it is read, and found corrupt."""
    _run(ckpt_dir, [1, 2])
    (ckpt_dir / _name(2) / "state.json").write_text("{}")
    with CheckpointManager(ckpt_dir, read_only=True) as reader:
        summaries = reader.summaries()
    assert summaries[0].error is None
    assert "step-000000000002" in summaries[1].error


def test_a_torn_index_line_is_skipped(ckpt_dir):
    """A half-written last line of the index is ignored; the others still serve."""
    _run(ckpt_dir, [1, 2])
    with open(ckpt_dir / ".summaries.jsonl", "ab") as f:
        f.write(b'{"step": 3, "ids": [')
    with CheckpointManager(ckpt_dir, read_only=True) as reader:
        assert sorted(reader._catalogue.hints()) == [1, 2]
        assert [s.step for s in reader.summaries()] == [1, 2]


def test_the_index_is_compacted_to_committed_checkpoints(ckpt_dir):
    """Entries of pruned checkpoints are dropped once the index has grown enough."""
    with CheckpointManager(ckpt_dir, max_to_keep=2) as manager:
        for step in range(1, 200):
            manager.save(step, {"w": np.zeros(1)})
        lines = (ckpt_dir / ".summaries.jsonl").read_bytes().count(b"\n")
        assert lines <= 2 * 2 + 64 + 1
        assert sorted(manager._catalogue.hints())[-2:] == [198, 199]
