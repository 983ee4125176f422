"""Tests for globalstep.compat._tf_checkpoint: TF's Checkpoint and CheckpointManager."""

import json
import os
import warnings

import numpy as np
import pytest

from globalstep import Clock, ConfigError, CorruptCheckpointError, RestoreMismatchError
from globalstep.compat._tf_checkpoint import Checkpoint, CheckpointManager, latest_checkpoint


def names(paths):
    """The base names of checkpoint paths."""
    return [os.path.basename(p) for p in paths]


def on_disk(directory):
    """The checkpoint directories present, sorted by number."""
    found = [n for n in os.listdir(directory) if n.startswith("ckpt-")]
    return sorted(found, key=lambda n: int(n.split("-")[1]))


def test_seven_saves_keep_the_last_three(tmp_path):
    """After 7 saves with max_to_keep=3 the checkpoints are ckpt-5..7, on disk too."""
    manager = CheckpointManager(Checkpoint(w=np.zeros(2)), str(tmp_path), max_to_keep=3)
    for _ in range(7):
        manager.save()
    assert names(manager.checkpoints) == ["ckpt-5", "ckpt-6", "ckpt-7"]
    assert on_disk(tmp_path) == ["ckpt-5", "ckpt-6", "ckpt-7"]
    assert names([manager.latest_checkpoint]) == ["ckpt-7"]


def test_checkpoint_number_then_save_counter(tmp_path):
    """Explicit numbers 100 and 200 keep save order; the next plain save uses the counter."""
    manager = CheckpointManager(Checkpoint(w=np.zeros(2)), str(tmp_path), max_to_keep=3)
    for _ in range(7):
        manager.save()
    manager.save(checkpoint_number=100)
    assert names(manager.checkpoints) == ["ckpt-6", "ckpt-7", "ckpt-100"]
    manager.save(checkpoint_number=200)
    assert names(manager.checkpoints) == ["ckpt-7", "ckpt-100", "ckpt-200"]
    manager.save()
    assert names(manager.checkpoints) == ["ckpt-100", "ckpt-200", "ckpt-10"]
    assert on_disk(tmp_path) == ["ckpt-10", "ckpt-100", "ckpt-200"]


def test_resaving_a_number_moves_it_to_the_end(tmp_path):
    """Saving an existing number again replaces it and makes it the newest."""
    manager = CheckpointManager(Checkpoint(w=np.zeros(1)), str(tmp_path), max_to_keep=3)
    manager.save(checkpoint_number=1)
    manager.save(checkpoint_number=2)
    manager.save(checkpoint_number=1)
    assert names(manager.checkpoints) == ["ckpt-2", "ckpt-1"]


def test_restore_fills_arrays_and_counter(tmp_path):
    """Restoring writes saved values into the arrays in place and restores save_counter."""
    weights = np.arange(3.0)
    ckpt = Checkpoint(weights=weights)
    manager = CheckpointManager(ckpt, str(tmp_path), max_to_keep=2)
    path = manager.save()
    fresh = np.zeros(3)
    other = Checkpoint(weights=fresh)
    other.restore(path).assert_consumed()
    assert fresh.tolist() == [0.0, 1.0, 2.0]
    assert other.save_counter.numpy() == 1
    assert int(other.save_counter) == 1
    assert other.weights is fresh


def test_clock_restores_in_place(tmp_path):
    """A Clock in a Checkpoint restores its step in place."""
    clock = Clock()
    clock.tick(12)
    path = Checkpoint(step=clock).save(str(tmp_path / "ckpt"))
    resumed = Clock()
    Checkpoint(step=resumed).restore(path).assert_existing_objects_matched()
    assert resumed.step == 12


def test_assert_consumed_fails_on_unmatched(tmp_path):
    """assert_consumed raises when the checkpoint holds a value nothing took."""
    path = Checkpoint(a=np.ones(1), b=np.ones(1)).save(str(tmp_path / "ckpt"))
    status = Checkpoint(a=np.zeros(1)).restore(path)
    with pytest.raises(AssertionError, match="Unresolved objects"):
        status.assert_consumed()
    assert status.assert_existing_objects_matched() is status
    assert status.expect_partial() is status


def test_assert_existing_objects_matched_fails_on_new_object(tmp_path):
    """assert_existing_objects_matched raises when an object found no saved value."""
    path = Checkpoint(a=np.ones(1)).save(str(tmp_path / "ckpt"))
    status = Checkpoint(a=np.zeros(1), extra=np.zeros(2)).restore(path)
    with pytest.raises(AssertionError, match="no matching value"):
        status.assert_existing_objects_matched()
    with pytest.raises(AssertionError, match="Unresolved"):
        status.assert_consumed()


def test_assert_nontrivial_match(tmp_path):
    """assert_nontrivial_match raises when no object matched."""
    path = Checkpoint(a=np.ones(1)).save(str(tmp_path / "ckpt"))
    with pytest.raises(AssertionError, match="Nothing except the save counter"):
        Checkpoint(b=np.zeros(1)).restore(path).assert_nontrivial_match()
    status = Checkpoint(a=np.zeros(1)).restore(path)
    assert status.assert_nontrivial_match() is status


def test_restore_none_is_initialisation_only(tmp_path):
    """restore(None) restores nothing and its assertions fail, as in TF."""
    status = Checkpoint(a=np.zeros(1)).restore(None)
    with pytest.raises(AssertionError, match="No checkpoint specified"):
        status.assert_consumed()
    with pytest.raises(AssertionError, match="No checkpoint specified"):
        status.assert_existing_objects_matched()
    assert status.expect_partial() is status


def test_restore_or_initialize(tmp_path):
    """restore_or_initialize calls init_fn without a checkpoint, else restores."""
    calls = []
    weights = np.zeros(2)
    manager = CheckpointManager(
        Checkpoint(w=weights), str(tmp_path), 2, init_fn=lambda: calls.append(1)
    )
    assert manager.restore_or_initialize() is None
    assert calls == [1]
    weights += 5
    manager.save()
    weights[:] = 0
    assert names([manager.restore_or_initialize()]) == ["ckpt-1"]
    assert weights.tolist() == [5.0, 5.0]


def test_restart_recovers_the_managed_list(tmp_path):
    """A new manager on the directory continues its list and its deletions."""
    first = CheckpointManager(Checkpoint(w=np.zeros(1)), str(tmp_path), max_to_keep=2)
    for _ in range(3):
        first.save()
    ckpt = Checkpoint(w=np.zeros(1))
    second = CheckpointManager(ckpt, str(tmp_path), max_to_keep=2)
    assert names(second.checkpoints) == ["ckpt-2", "ckpt-3"]
    ckpt.restore(second.latest_checkpoint)
    second.save()
    assert names(second.checkpoints) == ["ckpt-3", "ckpt-4"]
    assert on_disk(tmp_path) == ["ckpt-3", "ckpt-4"]
    assert latest_checkpoint(str(tmp_path)) == second.latest_checkpoint


def test_damaged_index_is_an_error_not_a_fresh_start(tmp_path):
    """A damaged `checkpoint` index raises instead of silently starting at step 0."""
    manager = CheckpointManager(Checkpoint(w=np.zeros(1)), str(tmp_path), max_to_keep=2)
    manager.save()
    (tmp_path / "checkpoint").write_text("model_checkpoint_path: garbage")
    with pytest.raises(CorruptCheckpointError, match="is not a checkpoint index"):
        CheckpointManager(Checkpoint(w=np.zeros(1)), str(tmp_path), max_to_keep=2)


def test_keep_checkpoint_every_n_hours_preserves(tmp_path, monkeypatch):
    """A checkpoint leaving the active set an hour after the last preserved one stays."""
    now = [1000.0]
    monkeypatch.setattr("globalstep.compat._tf_checkpoint.time.time", lambda: now[0])
    manager = CheckpointManager(
        Checkpoint(w=np.zeros(1)), str(tmp_path), 1, keep_checkpoint_every_n_hours=1
    )
    for hours in (0.5, 1.0, 1.5, 2.0):
        now[0] = 1000.0 + hours * 3600
        manager.save()
    # As in TF: ckpt-1 leaves 0.5 h after the manager started and is deleted; ckpt-2 leaves
    # a full hour after it and is preserved; ckpt-3 leaves within the hour and is deleted.
    assert names(manager.checkpoints) == ["ckpt-4"]
    assert on_disk(tmp_path) == ["ckpt-2", "ckpt-4"]


def test_checkpoint_interval_skips_early_saves(tmp_path):
    """With checkpoint_interval, early saves are skipped; one save per step at most."""
    clock = Clock()
    manager = CheckpointManager(
        Checkpoint(c=clock), str(tmp_path), 5, step_counter=clock, checkpoint_interval=10
    )
    saved = []
    for _ in range(25):
        clock.tick()
        if manager.save() is not None:
            saved.append(clock.step)
    assert saved == [1, 11, 21]
    assert manager.save(check_interval=False) is not None
    assert manager.save(check_interval=False) is None


def test_index_file_is_json_with_tf_fields(tmp_path):
    """The index records the latest path, the managed paths and their timestamps."""
    manager = CheckpointManager(Checkpoint(w=np.zeros(1)), str(tmp_path), 2)
    manager.save()
    index = json.loads((tmp_path / "checkpoint").read_text())
    assert names([index["model_checkpoint_path"]]) == ["ckpt-1"]
    assert len(index["all_model_checkpoint_timestamps"]) == 1


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda d: CheckpointManager(Checkpoint(), d, 0), "`max_to_keep` must be a positive"),
        (lambda d: CheckpointManager(Checkpoint(), d, 1, checkpoint_interval=5), "`step_counter`"),
        (lambda d: CheckpointManager(Checkpoint(), d, 1, checkpoint_name="../x"), "keys must be"),
        (lambda d: CheckpointManager(object(), d, 1), "`checkpoint` must be"),
        (lambda d: Checkpoint(save_counter=np.zeros(1)), "reserved name 'save_counter'"),
        (lambda d: Checkpoint(**{"a/b": 1}), "keys must be"),
        (lambda d: Checkpoint().write(f"{d}/.."), "keys must be"),
    ],
)
def test_invalid_arguments(tmp_path, make, match):
    """Invalid arguments raise ValueError subclasses naming the parameter."""
    with pytest.raises(ConfigError, match=match):
        make(str(tmp_path))


def test_restore_of_a_missing_path(tmp_path):
    """Restoring a path with no committed checkpoint raises CheckpointNotFoundError."""
    from globalstep import CheckpointNotFoundError

    with pytest.raises(CheckpointNotFoundError, match="no committed checkpoint at"):
        Checkpoint().restore(str(tmp_path / "ckpt-9"))


@pytest.mark.slow
def test_matches_tensorflow_numbering(tmp_path):
    """The managed list matches real TensorFlow's for the documented sequence."""
    tf = pytest.importorskip("tensorflow")

    def sequence(manager):
        lists = []
        for _ in range(7):
            manager.save()
        lists.append(names(manager.checkpoints))
        for number in (100, 200, None):
            manager.save(checkpoint_number=number)
            lists.append(names(manager.checkpoints))
        return lists

    ours = sequence(CheckpointManager(Checkpoint(w=np.zeros(1)), str(tmp_path / "ours"), 3))
    theirs = sequence(
        tf.train.CheckpointManager(tf.train.Checkpoint(w=tf.Variable(0.0)), str(tmp_path / "tf"), 3)
    )
    assert ours == theirs


def test_compat_tf_exposes_checkpoint_classes():
    """globalstep.compat.tf offers TF's Checkpoint and CheckpointManager under TF's names."""
    from globalstep.compat import _tf_checkpoint, tf

    assert tf.Checkpoint is _tf_checkpoint.Checkpoint
    assert tf.CheckpointManager is _tf_checkpoint.CheckpointManager
    assert tf.CheckpointLoadStatus is _tf_checkpoint.CheckpointLoadStatus
    assert tf.latest_checkpoint is _tf_checkpoint.latest_checkpoint
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = tf.Nope


def test_resaving_a_path_keeps_the_other_paths_timestamps(tmp_path, monkeypatch):
    """Checkpoint.save over an indexed path drops that path's timestamp, not the last one."""
    now = [100.0]
    monkeypatch.setattr("globalstep.compat._tf_checkpoint.time.time", lambda: now[0])
    ckpt = Checkpoint(w=np.zeros(1))
    prefix = str(tmp_path / "ckpt")
    for stamp in (100.0, 200.0, 300.0):
        now[0] = stamp
        ckpt.save(prefix)
    ckpt.save_counter.value = 1  # as after restoring ckpt-1: the next save is ckpt-2 again
    now[0] = 400.0
    ckpt.save(prefix)
    index = json.loads((tmp_path / "checkpoint").read_text())
    assert names(index["all_model_checkpoint_paths"]) == ["ckpt-1", "ckpt-3", "ckpt-2"]
    assert index["all_model_checkpoint_timestamps"] == [100.0, 300.0, 400.0]


@pytest.mark.parametrize(
    "index",
    [
        {"all_model_checkpoint_paths": [1]},
        {"all_model_checkpoint_paths": ["a"], "all_model_checkpoint_timestamps": ["x"]},
        {"all_model_checkpoint_paths": ["a"], "all_model_checkpoint_timestamps": None},
        ["not", "an", "object"],
    ],
)
def test_index_with_bad_fields_is_corrupt(tmp_path, index):
    """An index whose paths or timestamps are of the wrong type is a CorruptCheckpointError."""
    (tmp_path / "checkpoint").write_text(json.dumps(index))
    with pytest.raises(CorruptCheckpointError, match="is not a checkpoint index"):
        CheckpointManager(Checkpoint(w=np.zeros(1)), str(tmp_path), max_to_keep=2)


class FakeVariable:
    """A stand-in for a tf.Variable step counter: read with numpy()."""

    def __init__(self, value):
        self.value = value

    def numpy(self):
        return self.value


def test_step_counter_may_be_read_with_numpy(tmp_path):
    """A step counter with numpy() (a tf.Variable) drives checkpoint_interval."""
    step = FakeVariable(0)
    manager = CheckpointManager(
        Checkpoint(w=np.zeros(1)), str(tmp_path), 2, step_counter=step, checkpoint_interval=5
    )
    assert manager.save() is not None
    step.value = 3
    assert manager.save() is None
    step.value = 5
    assert manager.save(checkpoint_number=FakeVariable(50)).endswith("ckpt-50")


def test_restore_or_initialize_resets_the_interval(tmp_path):
    """After restore_or_initialize the interval counts from the restored step."""
    clock = Clock()
    clock.tick(7)
    first = CheckpointManager(
        Checkpoint(c=clock), str(tmp_path), 2, step_counter=clock, checkpoint_interval=10
    )
    first.save()
    resumed = Clock()
    manager = CheckpointManager(
        Checkpoint(c=resumed), str(tmp_path), 2, step_counter=resumed, checkpoint_interval=10
    )
    assert names([manager.restore_or_initialize()]) == ["ckpt-1"]
    resumed.tick(9)
    assert manager.save() is None
    resumed.tick(1)
    assert manager.save() is not None


def test_save_counter_behaves_like_an_int():
    """save_counter converts, indexes, compares, hashes and prints like TF's counter."""
    ckpt = Checkpoint()
    ckpt.save_counter.assign_add(3)
    counter = ckpt.save_counter
    assert (int(counter), [0, 1, 2, 3][counter], counter == 3, hash(counter)) == (3, 3, True, 3)
    assert repr(counter) == "save_counter=3"


def test_root_and_attribute_access(tmp_path):
    """root is saved under 'root'; objects read as attributes; others raise AttributeError."""
    root = np.arange(2.0)
    ckpt = Checkpoint(root, w=np.zeros(1))
    assert ckpt.root is root
    with pytest.raises(AttributeError, match="missing"):
        _ = ckpt.missing
    path = ckpt.save(str(tmp_path / "ckpt"))
    fresh = np.zeros(2)
    Checkpoint(fresh, w=np.zeros(1)).read(path).assert_consumed()
    assert fresh.tolist() == [0.0, 1.0]


def test_manager_properties_and_unbounded_keep(tmp_path):
    """The manager exposes its directory, checkpoint and interval; None keeps every save."""
    ckpt = Checkpoint(w=np.zeros(1))
    manager = CheckpointManager(ckpt, str(tmp_path) + "/", None)
    assert (manager.directory, manager.checkpoint, manager.checkpoint_interval) == (
        str(tmp_path),
        ckpt,
        None,
    )
    assert latest_checkpoint(str(tmp_path)) is None
    for _ in range(4):
        manager.save()
    manager.sync()
    assert on_disk(tmp_path) == ["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4"]


def test_failed_deletion_stays_listed_and_is_retried(tmp_path, monkeypatch):
    """A failed deletion warns without failing the committed save; the checkpoint stays in
    the list and index, and goes at the next save."""
    from globalstep import CheckpointError
    from globalstep.checkpoint import CheckpointWarning
    from globalstep.compat import _tf_checkpoint

    manager = CheckpointManager(Checkpoint(w=np.zeros(1)), str(tmp_path), max_to_keep=1)
    manager.save()

    def fail(storage, name):
        raise CheckpointError(f"deleting {name} failed: [Errno 5] Input/output error")

    monkeypatch.setattr(_tf_checkpoint, "remove_checkpoint", fail)
    with pytest.warns(CheckpointWarning, match=r"retention could not delete .*ckpt-1 \(deleting"):
        saved = manager.save()
    monkeypatch.undo()
    assert names([saved]) == ["ckpt-2"]
    assert manager.latest_checkpoint == saved
    assert latest_checkpoint(str(tmp_path)) == saved
    assert names(manager.checkpoints) == ["ckpt-1", "ckpt-2"]
    index = json.loads((tmp_path / "checkpoint").read_text())
    assert names(index["all_model_checkpoint_paths"]) == ["ckpt-1", "ckpt-2"]
    manager.save()
    assert names(manager.checkpoints) == ["ckpt-3"]
    assert on_disk(tmp_path) == ["ckpt-3"]


def test_restore_into_another_shape_raises_at_restore(tmp_path):
    """Restoring into an array of another shape raises ValueError at restore(), nothing filled."""
    path = Checkpoint(a=np.ones(2), w=np.arange(3.0)).save(str(tmp_path / "ckpt"))
    a, w = np.zeros(2), np.zeros(4)
    target = Checkpoint(a=a, w=w)
    with pytest.raises(RestoreMismatchError, match=r"shape \(3,\) .* shape \(4,\)") as info:
        target.restore(path)
    assert isinstance(info.value, ValueError)
    assert a.tolist() == [0.0, 0.0]
    assert target.save_counter.numpy() == 0


def test_tensorflow_also_raises_value_error_for_another_shape(tmp_path):
    """TF's own Checkpoint raises ValueError at restore() for a variable of another shape."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tf = pytest.importorskip("tensorflow")
    path = tf.train.Checkpoint(w=tf.Variable(np.arange(3.0))).save(str(tmp_path / "tf"))
    with pytest.raises(ValueError, match=r"shape \(3,\).*shape \(4,\)"):
        tf.train.Checkpoint(w=tf.Variable(np.zeros(4))).restore(path)
