"""Tests for globalstep.checkpoint._manager."""

import os
import signal
import subprocess
import sys
import threading

import ml_dtypes
import numpy as np
import pytest
from ckpt_helpers import assert_tree_equal, make_state, reseal, subprocess_env

import globalstep
from globalstep import (
    CheckpointError,
    CheckpointExistsError,
    CheckpointNotFoundError,
    Clock,
    ConfigError,
    CorruptCheckpointError,
    LockError,
    RestoreMismatchError,
    every,
)
from globalstep.checkpoint import CheckpointManager, KeepBest, KeepLatest
from globalstep.checkpoint._files import fastio
from globalstep.checkpoint._files.fastio import ReadAhead


def test_manager_is_public():
    """CheckpointManager is importable from the top-level package."""
    assert globalstep.CheckpointManager is CheckpointManager


def test_save_restore_round_trip(ckpt_dir):
    """A saved tree restores equal, leaf for leaf."""
    state = make_state(1)
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(10, state)
        assert_tree_equal(manager.restore(), state)


def test_every_dtype_round_trips(ckpt_dir):
    """Arrays of every kind of dtype, 0-d, empty and non-contiguous, round-trip."""
    state = {
        "bf16": np.arange(4).astype(ml_dtypes.bfloat16),
        "f8": np.ones(3, ml_dtypes.float8_e4m3fn),
        "c128": np.array([1 + 2j]),
        "ld": np.ones(2, np.longdouble),
        "big_endian": np.arange(5, dtype=">i4"),
        "dt": np.array(["2020-01-01"], "M8[D]"),
        "td": np.array([5], "m8[s]"),
        "str": np.array(["ab", "c"]),
        "bytes": np.array([b"xy"]),
        "struct": np.zeros(2, [("x", "<i4"), ("y", ">f8")]),
        "zero_d": np.array(7, np.uint16),
        "empty": np.zeros((0, 3), np.float16),
        "strided": np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2],
        "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        "scalar": np.float64(2.5),
    }
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, state)
        restored = manager.restore()
    for key, value in state.items():
        got = restored[key]
        assert np.asarray(got).dtype == np.asarray(value).dtype.newbyteorder("<"), key
        assert np.asarray(value).tobytes() == np.asarray(got).astype(value.dtype).tobytes(), key
    assert isinstance(restored["scalar"], np.float64)


def test_step_may_be_a_clock(ckpt_dir):
    """Passing a Clock saves under its step."""
    clock = Clock()
    clock.tick(42)
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(clock, {"clock": clock})
        assert manager.steps() == [42]


def test_clock_and_trigger_restore_in_place(ckpt_dir):
    """A Clock and a trigger in the template get their saved state in place."""
    clock, trigger = Clock(steps_per_epoch=10), every(5)
    clock.tick(23)
    trigger.should_fire(clock)
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(clock, {"clock": clock, "trigger": trigger})
        fresh, fresh_trigger = Clock(steps_per_epoch=10), every(5)
        manager.restore({"clock": fresh, "trigger": fresh_trigger})
    assert (fresh.step, fresh.epoch, fresh.step_in_epoch) == (23, 2, 3)
    assert fresh_trigger.state_dict() == trigger.state_dict()


def test_restore_fills_template_arrays_in_place(ckpt_dir):
    """Writable template arrays receive the saved values without a new array."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"w": np.arange(6.0).reshape(2, 3)})
        template = {"w": np.zeros((2, 3))}
        tree = manager.restore(template)
    assert tree["w"] is template["w"]
    np.testing.assert_array_equal(template["w"], np.arange(6.0).reshape(2, 3))


@pytest.mark.parametrize("walk", ["fit check", "second walk"])
def test_restore_fills_the_templates_dicts_and_lists_in_place(ckpt_dir, walk):
    """A template's own dicts and lists (nested too) take the restored plain values, by
    the fit check's tree or by a second walk (a NumPy scalar forces one): a loop that goes
    on counting in what it passed saves the right count (issue 33); a restore that does
    not fit touches none of them."""
    scalar = np.float32(3) if walk == "second walk" else 3.0
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(15, {"w": np.ones(2), "meta": {"updates": 15, "c": [1, {"s": scalar}]}})
        w, inner = np.zeros(2), {"s": type(scalar)(0)}
        counts = [0, inner]
        meta = {"updates": 0, "c": counts}
        misfit = {"w": np.zeros(3), "meta": meta}
        with pytest.raises(RestoreMismatchError, match="w: expected float64"):
            manager.restore(misfit)
        assert meta == {"updates": 0, "c": [0, {"s": 0}]}
        tree = manager.restore({"w": w, "meta": meta})
        assert tree["meta"] is meta
        assert meta["c"] is counts
        assert counts[1] is inner
        assert meta == {"updates": 15, "c": [1, {"s": 3}]}
        assert type(inner["s"]) is type(scalar)
        for step in (16, 17):
            meta["updates"] += 1
            manager.save(step, {"w": w, "meta": meta})
        assert [manager.restore(step=s)["meta"]["updates"] for s in (15, 16, 17)] == [15, 16, 17]


def test_template_filled_in_place_is_rebuilt_by_the_fit_check_alone(ckpt_dir, monkeypatch):
    """Where every array is read into the template's, the tree the fit check built is
    returned, with no second walk of the tree; values and misfits come out the same."""
    from globalstep.checkpoint._directory import reading as manager_module

    def no_second_walk(*args, **kwargs):
        raise AssertionError("unflatten walked the tree again")

    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"w": np.arange(3.0), "l": [np.ones(2), (4, "x")], "extra": 1})
        monkeypatch.setattr(manager_module, "unflatten", no_second_walk)
        template = {"w": np.zeros(3), "l": [np.zeros(2), (0, "")], "new": np.zeros(1)}
        tree, report = manager.restore(template, partial=True)
    assert tree["w"] is template["w"]
    assert tree["l"][0] is template["l"][0]
    np.testing.assert_array_equal(template["w"], np.arange(3.0))
    assert tree["l"][1] == (4, "x")
    assert tree["new"] is template["new"]
    assert (report.missing, report.unexpected) == (["new"], ["extra"])


def test_template_with_a_dataclass_or_a_copy_is_rebuilt_after_the_read(ckpt_dir, monkeypatch):
    """A template that the restore cannot fill wholly in place gets its tree from unflatten
    after the read, as before."""
    from globalstep.checkpoint._directory import reading as manager_module

    calls = []
    unflatten = manager_module.unflatten
    monkeypatch.setattr(
        manager_module, "unflatten", lambda *a, **k: calls.append(1) or unflatten(*a, **k)
    )
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"w": np.arange(4.0)})
        template = {"w": np.zeros(8)[::2]}
        tree = manager.restore(template)
    assert calls == [1]
    assert tree["w"] is template["w"]
    np.testing.assert_array_equal(template["w"], np.arange(4.0))


def test_the_arrays_are_read_ahead_from_before_state_json_is_read(ckpt_dir, monkeypatch):
    """The background reader starts first, so that the disk reads the arrays while
    state.json is read and parsed (issue 14)."""
    from globalstep.checkpoint._directory import reading as manager_module

    events = []
    load_state = manager_module.load_state
    read_ahead = manager_module.read_ahead
    monkeypatch.setattr(
        manager_module, "load_state", lambda *a: events.append("state") or load_state(*a)
    )
    monkeypatch.setattr(
        manager_module, "read_ahead", lambda *a: events.append("ahead") or read_ahead(*a)
    )
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"w": np.arange(4.0)})
        manager.restore({"w": np.zeros(4)})
        manager.restore()
    assert events == ["ahead", "state", "ahead", "state"]


def test_a_bad_state_json_stops_the_read_ahead(ckpt_dir, monkeypatch):
    """A state.json that fails its checksum raises, and the reader started before it was
    read is stopped, not left running."""
    monkeypatch.setattr(fastio, "_AHEAD_MIN_BYTES", 0)
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"w": np.arange(4.0)})
    state_json = ckpt_dir / "step-000000000001" / "state.json"
    state_json.write_bytes(state_json.read_bytes().replace(b'"step"', b'"stip"'))
    started = []
    real = ReadAhead.__init__
    monkeypatch.setattr(
        ReadAhead, "__init__", lambda self, path: started.append(self) or real(self, path)
    )
    with (
        CheckpointManager(ckpt_dir, read_only=True) as manager,
        pytest.raises(CorruptCheckpointError, match=r"state\.json fails its checksum"),
    ):
        manager.restore(step=1)
    assert started
    assert not any(ahead._thread.is_alive() for ahead in started)


def test_read_only_template_arrays_get_new_arrays(ckpt_dir):
    """A read-only template array is not written; a new array is returned."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"w": np.ones(3)})
        frozen = np.zeros(3)
        frozen.flags.writeable = False
        tree = manager.restore({"w": frozen})
    assert tree["w"] is not frozen
    assert frozen.sum() == 0
    assert tree["w"].sum() == 3


def test_mismatch_fails_and_leaves_template_untouched(ckpt_dir):
    """A template that does not fit raises, and none of its arrays is changed."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"w": np.ones(3), "b": np.ones(2)})
        template = {"w": np.zeros(3), "b": np.zeros(4)}
        with pytest.raises(RestoreMismatchError, match=r"mismatched: b: expected float64\[4\]"):
            manager.restore(template)
    assert template["w"].sum() == 0


def test_partial_restore_returns_report(ckpt_dir):
    """partial=True restores what fits and returns the report."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"w": np.ones(3), "extra": 1})
        template = {"w": np.zeros(3), "new": np.zeros(2)}
        tree, report = manager.restore(template, partial=True)
    assert template["w"].sum() == 3
    assert tree["new"] is template["new"]
    assert report.missing == ["new"]
    assert report.unexpected == ["extra"]


def test_restore_newest_by_default_or_given_step(ckpt_dir):
    """restore() takes the newest step, restore(step=) the given one."""
    with CheckpointManager(ckpt_dir) as manager:
        for step in (1, 2, 3):
            manager.save(step, {"s": step})
        assert manager.restore() == {"s": 3}
        assert manager.restore(step=2) == {"s": 2}
        assert manager.latest_step() == 3


def test_restore_missing_step_is_not_found(ckpt_dir):
    """Restoring a step that was never saved names the committed steps."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(5, {"s": 5})
        with pytest.raises(CheckpointNotFoundError, match=r"step 6 .*committed steps: \[5\]"):
            manager.restore(step=6)


def test_restore_empty_directory_is_not_found(ckpt_dir):
    """Restoring from an empty directory raises CheckpointNotFoundError."""
    with (
        CheckpointManager(ckpt_dir) as manager,
        pytest.raises(CheckpointNotFoundError, match="no committed checkpoint"),
    ):
        manager.restore()


def test_saving_an_existing_step_is_an_error(ckpt_dir):
    """A second save of one step raises unless force=True."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"v": 1})
        with pytest.raises(CheckpointExistsError, match="pass force=True"):
            manager.save(1, {"v": 2})
        assert manager.restore() == {"v": 1}


def test_force_replaces_a_step(ckpt_dir):
    """force=True replaces an existing checkpoint and leaves no temporary directory."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"v": 1})
        manager.save(1, {"v": 2}, force=True)
        assert manager.restore() == {"v": 2}
    names = [".lock", ".summaries.jsonl", "ledger.jsonl", "step-000000000001"]
    assert sorted(os.listdir(ckpt_dir)) == names


def test_directory_layout(ckpt_dir):
    """A checkpoint is step-<12 digits>/ with the array file, state.json and marker."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(7, {"w": np.ones(2)})
    assert sorted(os.listdir(ckpt_dir / "step-000000000007")) == [
        "COMMITTED",
        "arrays.safetensors",
        "state.json",
    ]


def test_max_to_keep(ckpt_dir):
    """Only the newest max_to_keep checkpoints remain."""
    with CheckpointManager(ckpt_dir, max_to_keep=2) as manager:
        for step in range(1, 6):
            manager.save(step, {"s": step})
        assert manager.steps() == [4, 5]


def test_max_to_keep_none_keeps_all(ckpt_dir):
    """max_to_keep=None keeps every checkpoint."""
    with CheckpointManager(ckpt_dir, max_to_keep=None) as manager:
        for step in range(1, 8):
            manager.save(step, {"s": step})
        assert manager.steps() == list(range(1, 8))


def test_keep_best_keeps_the_best_and_the_newest(ckpt_dir):
    """keep_best keeps the best by the metric beside the latest N and the newest."""
    losses = [0.5, 0.9, 0.8, 0.7, 0.95]
    with CheckpointManager(ckpt_dir, max_to_keep=1, keep_best=KeepBest("loss", k=1)) as manager:
        for step, loss in enumerate(losses, start=1):
            manager.save(step, {"s": step}, metrics={"loss": loss})
        assert manager.steps() == [1, 5]


def test_keep_every_n_steps(ckpt_dir):
    """keep_every_n_steps keeps multiples beside the latest N."""
    with CheckpointManager(ckpt_dir, max_to_keep=1, keep_every_n_steps=3) as manager:
        for step in range(1, 8):
            manager.save(step, {"s": step})
        assert manager.steps() == [3, 6, 7]


def test_keep_every_n_hours(ckpt_dir, monkeypatch):
    """keep_every_n_hours keeps one checkpoint per window of wall time."""
    now = [0.0]
    monkeypatch.setattr("globalstep.checkpoint._manager.time.time", lambda: now[0])
    with CheckpointManager(ckpt_dir, max_to_keep=1, keep_every_n_hours=1.0) as manager:
        for step in range(1, 7):
            now[0] = step * 1800.0
            manager.save(step, {"s": step})
        assert manager.steps() == [1, 3, 5, 6]


def test_restart_continues_the_same_retention(ckpt_dir):
    """A new manager on an existing directory keeps applying the same retention."""
    with CheckpointManager(ckpt_dir, max_to_keep=2, keep_best=KeepBest("loss")) as manager:
        for step, loss in [(1, 0.1), (2, 0.5), (3, 0.4)]:
            manager.save(step, {"s": step}, metrics={"loss": loss})
        assert manager.steps() == [1, 2, 3]
    with CheckpointManager(ckpt_dir, max_to_keep=2, keep_best=KeepBest("loss")) as manager:
        manager.save(4, {"s": 4}, metrics={"loss": 0.3})
        assert manager.steps() == [1, 3, 4]


def test_prune_with_another_policy(ckpt_dir):
    """prune deletes what the given policy does not keep; dry_run deletes nothing."""
    with CheckpointManager(ckpt_dir, max_to_keep=None) as manager:
        for step in range(1, 6):
            manager.save(step, {"s": step})
        assert manager.prune(KeepLatest(2), dry_run=True) == [1, 2, 3]
        assert manager.steps() == [1, 2, 3, 4, 5]
        assert manager.prune(KeepLatest(2)) == [1, 2, 3]
        assert manager.steps() == [4, 5]


def test_maybe_save_uses_the_trigger(ckpt_dir):
    """maybe_save saves exactly when save_every fires."""
    clock = Clock()
    saved = []
    with CheckpointManager(ckpt_dir, max_to_keep=None, save_every="3st") as manager:
        for _ in range(10):
            clock.tick()
            if manager.maybe_save(clock, {"clock": clock}):
                saved.append(clock.step)
        assert saved == [3, 6, 9] == manager.steps()


def test_maybe_save_resumes_its_trigger_after_restart(ckpt_dir):
    """A restarted manager does not save again right after resuming."""
    clock = Clock()
    with CheckpointManager(ckpt_dir, save_every=5) as manager:
        for _ in range(5):
            clock.tick()
            manager.maybe_save(clock, {"clock": clock})
    resumed = Clock()
    with CheckpointManager(ckpt_dir, save_every=5) as manager:
        manager.restore({"clock": resumed})
        fired = []
        for _ in range(6):
            resumed.tick()
            if manager.maybe_save(resumed, {"clock": resumed}):
                fired.append(resumed.step)
    assert fired == [10]


def test_maybe_save_needs_save_every(ckpt_dir):
    """maybe_save without save_every is a configuration error."""
    with (
        CheckpointManager(ckpt_dir) as manager,
        pytest.raises(ConfigError, match="`save_every` must be set to use maybe_save"),
    ):
        manager.maybe_save(Clock(), {})


def test_maybe_save_needs_a_clock(ckpt_dir):
    """maybe_save refuses anything but a Clock."""
    with (
        CheckpointManager(ckpt_dir, save_every=1) as manager,
        pytest.raises(ConfigError, match="`clock` must be a globalstep Clock"),
    ):
        manager.maybe_save(3, {})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_to_keep": 0}, "`max_to_keep` must be an int >= 1"),
        ({"keep_every_n_steps": -1}, "`keep_every_n_steps` must be an int >= 1"),
        ({"keep_every_n_hours": 0}, "`keep_every_n_hours` must be a finite number > 0"),
        ({"keep_best": "loss"}, "`keep_best` must be a KeepBest"),
        ({"async_save": 1}, "`async_save` must be a bool"),
        ({"save_every": "soon"}, "`save_every` must be a duration|`duration` must be"),
    ],
)
def test_invalid_parameters(ckpt_dir, kwargs, match):
    """Each invalid constructor parameter raises a ConfigError naming it."""
    with pytest.raises(ConfigError, match=match):
        CheckpointManager(ckpt_dir, **kwargs)


def test_invalid_directory():
    """A directory that is not a path is refused."""
    with pytest.raises(ConfigError, match="`directory` must be a path"):
        CheckpointManager(3)


@pytest.mark.parametrize("step", [-1, 1.5, True, 2**63])
def test_invalid_step(ckpt_dir, step):
    """A step that is not an int in range is refused."""
    with (
        CheckpointManager(ckpt_dir) as manager,
        pytest.raises(ConfigError, match="`step` must be an int in"),
    ):
        manager.save(step, {})


@pytest.mark.parametrize("kind", [np.int64, np.int32, np.uint16])
def test_numpy_integer_step_is_a_step(ckpt_dir, kind):
    """A NumPy integer (a counter kept in an array, a step read back from one) is a step:
    saved as the int step's directory, restored and read by it, reported as an int."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(kind(4), {"s": np.arange(2)})
        assert (ckpt_dir / "step-000000000004").is_dir()
        assert manager.latest_step() == 4
        assert type(manager.latest_step()) is int
        np.testing.assert_array_equal(manager.restore(step=kind(4))["s"], np.arange(2))
        assert manager.steps() == [4]


@pytest.mark.parametrize("step", [4.0, np.float64(4.0), np.True_, True, "4"])
def test_float_or_bool_step_is_refused(ckpt_dir, step):
    """A float or a bool, of Python or NumPy, is no step, whatever its value."""
    with (
        CheckpointManager(ckpt_dir) as manager,
        pytest.raises(ConfigError, match=r"`step` must be an int in \[0, 2\*\*63-1\] or a Clock"),
    ):
        manager.save(step, {})
    assert not list(ckpt_dir.glob("step-*"))


def test_misfit_error_says_what_partial_returns(ckpt_dir):
    """The error that suggests partial=True says that restore() then returns a pair."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"w": np.ones(3)})
        with pytest.raises(
            RestoreMismatchError,
            match=r"Pass partial=True to restore what fits; restore\(\) then returns "
            r"\(tree, report\)",
        ):
            manager.restore({"w": np.zeros(3), "new": np.zeros(1)})


@pytest.mark.parametrize("metrics", [{"loss": "low"}, {"loss": True}, [1.0], {1: 1.0}])
def test_invalid_metrics(ckpt_dir, metrics):
    """Metrics must map names to numbers."""
    with (
        CheckpointManager(ckpt_dir) as manager,
        pytest.raises(ConfigError, match="`metrics` must map names to numbers"),
    ):
        manager.save(1, {}, metrics=metrics)


def test_nan_metric_is_saved(ckpt_dir):
    """A NaN metric (a diverged run) is saved and never counted as the best."""
    with CheckpointManager(ckpt_dir, max_to_keep=1, keep_best=KeepBest("loss")) as manager:
        manager.save(1, {}, metrics={"loss": 1.0})
        manager.save(2, {}, metrics={"loss": float("nan")})
        manager.save(3, {}, metrics={"loss": 2.0})
        assert manager.steps() == [1, 3]
        manager.save(4, {}, metrics={"loss": float("nan")})
        assert np.isnan(manager.summaries()[-1].metrics["loss"])


def test_second_writer_is_locked_out(ckpt_dir):
    """A second writer on one directory gets a LockError naming the holder."""
    with CheckpointManager(ckpt_dir):
        with pytest.raises(
            LockError, match=f"locked by another writer \\(pid {os.getpid()} "
        ) as info:
            CheckpointManager(ckpt_dir)
        assert info.value.holder["pid"] == os.getpid()


def test_lock_is_released_on_close(ckpt_dir):
    """After close another writer may open the directory."""
    CheckpointManager(ckpt_dir).close()
    with CheckpointManager(ckpt_dir) as manager:
        assert manager.steps() == []


def test_stale_lock_of_a_killed_process_is_taken_over(ckpt_dir):
    """The lock of a SIGKILLed writer is detected as stale and taken over."""
    code = (
        "import sys, time\n"
        "from globalstep.checkpoint import CheckpointManager\n"
        f"m = CheckpointManager({str(ckpt_dir)!r})\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, env=subprocess_env(), text=True
    )
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(LockError, match=f"pid {child.pid} "):
            CheckpointManager(ckpt_dir)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    with CheckpointManager(ckpt_dir) as manager:
        assert manager._lock.took_over.startswith(f"pid {child.pid} ")


def test_read_only_needs_no_lock_and_cannot_save(ckpt_dir):
    """A read-only manager restores beside a writer but refuses to save or prune."""
    with CheckpointManager(ckpt_dir) as writer:
        writer.save(1, {"v": 1})
        reader = CheckpointManager(ckpt_dir, read_only=True)
        assert reader.restore() == {"v": 1}
        with pytest.raises(CheckpointError, match="read-only"):
            reader.save(2, {})
        with pytest.raises(CheckpointError, match="read-only"):
            reader.prune()
        reader.close()


def test_closed_manager_refuses_saves(ckpt_dir):
    """Saving after close is an error; closing twice is harmless."""
    manager = CheckpointManager(ckpt_dir)
    manager.close()
    manager.close()
    with pytest.raises(CheckpointError, match="is closed"):
        manager.save(1, {})


def test_stale_temporary_directories_are_invisible_and_removed(ckpt_dir):
    """A leftover .tmp- directory is not a checkpoint and the next save removes it."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"v": 1})
        stale = ckpt_dir / ".tmp-step-000000000002-dead"
        stale.mkdir()
        (stale / "state.json").write_text("{}")
        uncommitted = ckpt_dir / "step-000000000003"
        uncommitted.mkdir()
        assert manager.steps() == [1]
        manager.save(4, {"v": 4})
    assert not stale.exists()


def test_corrupt_newest_is_an_error_naming_the_file(ckpt_dir):
    """A corrupt newest checkpoint raises, naming its file, instead of looking absent."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"v": 1})
        manager.save(2, {"v": 2})
        (ckpt_dir / "step-000000000002" / "state.json").write_text("garbage")
        with pytest.raises(CorruptCheckpointError, match=r"step-000000000002/state\.json"):
            manager.restore()


def test_skip_corrupt_restores_newest_valid(ckpt_dir):
    """skip_corrupt=True falls back to the newest checkpoint that verifies."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"v": 1})
        manager.save(2, {"v": 2})
        (ckpt_dir / "step-000000000002" / "state.json").write_text("garbage")
        assert manager.restore(skip_corrupt=True) == {"v": 1}


def test_run_resumed_from_an_older_checkpoint_keeps_its_saves(ckpt_dir):
    """After resuming below a corrupt newest checkpoint, the new timeline's saves are kept."""
    with CheckpointManager(ckpt_dir, max_to_keep=1, keep_every_n_steps=400) as manager:
        manager.save(400, {"v": 400})
        manager.save(600, {"v": 600})
    (ckpt_dir / "step-000000000600" / "arrays.safetensors").write_bytes(b"garbage")
    with CheckpointManager(ckpt_dir, max_to_keep=1, keep_every_n_steps=400) as manager:
        assert manager.restore(skip_corrupt=True) == {"v": 400}
        manager.save(500, {"v": 500})
        assert manager.steps() == [400, 500]
        manager.save(700, {"v": 700})
        assert manager.steps() == [400, 700]


def test_skip_corrupt_with_everything_corrupt_raises(ckpt_dir):
    """skip_corrupt=True raises the newest error when nothing verifies."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"v": 1})
        (ckpt_dir / "step-000000000001" / "COMMITTED").write_text("{")
        with pytest.raises(CorruptCheckpointError, match="COMMITTED fails its own checksum"):
            manager.restore(skip_corrupt=True)


def test_summaries_read_no_arrays(ckpt_dir):
    """summaries() gives step, clocks, size, metrics and the retention reason."""
    clock = Clock(steps_per_epoch=4, batch_size=8)
    clock.tick(10)
    with CheckpointManager(ckpt_dir, max_to_keep=3) as manager:
        manager.save(clock, {"clock": clock, "w": np.ones(100)}, metrics={"loss": 0.5})
        (summary,) = manager.summaries()
    assert (summary.step, summary.clocks[0].epoch, summary.clocks[0].samples) == (10, 2, 80)
    assert summary.metrics == {"loss": 0.5}
    assert summary.size_bytes > 800
    assert summary.kept_because == "newest, latest 3"


def test_lazy_open_reads_one_array(ckpt_dir):
    """open() maps the file and returns single arrays on demand."""
    state = {"a": np.arange(10.0), "b": np.ones((2, 2), np.float32)}
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(3, state)
        with manager.open() as reader:
            assert sorted(reader.keys()) == ["a", "b"]
            np.testing.assert_array_equal(reader["b"], state["b"])
            assert not reader["a"].flags.writeable
            with pytest.raises(ConfigError, match="`key` must name an array of step 3"):
                reader["c"]


def test_verify_passes_on_a_sound_checkpoint(ckpt_dir):
    """verify() returns quietly on an intact checkpoint."""
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(3, make_state())
        manager.verify()
        manager.verify(3)


def test_async_save_copies_state_before_returning(ckpt_dir):
    """An async save writes what the state was at the call, not what it became."""
    weights = np.zeros(1000)
    with CheckpointManager(ckpt_dir, async_save=True) as manager:
        manager.save(1, {"w": weights})
        weights += 1.0
        manager.wait()
        assert manager.restore()["w"].sum() == 0


def test_async_saves_one_in_flight(ckpt_dir):
    """Back-to-back async saves all commit, one at a time."""
    with CheckpointManager(ckpt_dir, max_to_keep=None, async_save=True) as manager:
        threads = []
        for step in range(5):
            manager.save(step, {"w": np.full(10, step)})
            threads.append(manager._saver.in_flight)
            # The previous save finished before this one started.
            assert all(not t.is_alive() for t in threads[:-1])
        manager.wait()
        assert manager.steps() == [0, 1, 2, 3, 4]


def test_async_error_surfaces_on_wait(ckpt_dir, monkeypatch):
    """A background failure is raised by the next wait."""
    with CheckpointManager(ckpt_dir, async_save=True) as manager:

        def fail(*args, **kwargs):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr("globalstep.checkpoint._files.commit.RenameCommit.commit", fail)
        manager.save(1, {"w": np.ones(3)})
        with pytest.raises(CheckpointError, match=r"background save failed: .*No space left"):
            manager.wait()
        monkeypatch.undo()


def test_async_error_surfaces_on_next_save_and_close(ckpt_dir, monkeypatch):
    """A background failure is raised by the next save, else by close."""
    manager = CheckpointManager(ckpt_dir, async_save=True)

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("globalstep.checkpoint._files.commit.RenameCommit.commit", fail)
    manager.save(1, {"w": np.ones(3)})
    with pytest.raises(CheckpointError, match="background save failed"):
        manager.save(2, {"w": np.ones(3)})
    manager.save(3, {"w": np.ones(3)})
    with pytest.raises(CheckpointError, match="background save failed"):
        manager.close()
    monkeypatch.undo()
    CheckpointManager(ckpt_dir).close()


def test_exit_with_async_save_in_flight_finishes_it(ckpt_dir):
    """A process that returns from main with a save in flight completes that save."""
    code = (
        "import numpy as np\n"
        "from globalstep.checkpoint import CheckpointManager\n"
        f"m = CheckpointManager({str(ckpt_dir)!r}, async_save=True)\n"
        "m.save(9, {'w': np.arange(4_000_000, dtype=np.float32)})\n"
    )
    subprocess.run([sys.executable, "-c", code], env=subprocess_env(), check=True)
    with CheckpointManager(ckpt_dir, read_only=True) as manager:
        manager.verify(9)
        assert manager.restore()["w"][-1] == 3_999_999


def test_memory_filesystem_round_trip():
    """Checkpoints on fsspec's memory:// filesystem save, retain and restore."""
    url = "memory://globalstep-tests/run-a"
    with CheckpointManager(url, max_to_keep=2) as manager:
        for step in range(1, 4):
            manager.save(step, {"w": np.full(3, step)})
        assert manager.steps() == [2, 3]
        assert manager.restore()["w"].tolist() == [3, 3, 3]
        manager.verify(2)
        with manager.open() as reader:
            assert reader["w"].tolist() == [3, 3, 3]


def test_memory_filesystem_marker_decides():
    """On fsspec storage a step directory without its marker is not a checkpoint."""
    import fsspec

    url = "memory://globalstep-tests/run-b"
    with CheckpointManager(url) as manager:
        manager.save(1, {"v": 1})
        fs = fsspec.filesystem("memory")
        fs.makedirs("/globalstep-tests/run-b/step-000000000002", exist_ok=True)
        fs.pipe("/globalstep-tests/run-b/step-000000000002/state.json", b"{}")
        assert manager.steps() == [1]
        manager.save(3, {"v": 3})
        assert not fs.exists("/globalstep-tests/run-b/step-000000000002")


def test_memory_filesystem_lock():
    """A second writer on a memory:// directory is locked out."""
    url = "memory://globalstep-tests/run-c"
    with CheckpointManager(url), pytest.raises(LockError, match="locked by another writer"):
        CheckpointManager(url)
    CheckpointManager(url).close()


@pytest.mark.slow
def test_array_over_4_gib_round_trips(tmp_path):
    """A real array of 4 GiB + 4 KiB saves, verifies, and restores in place bit for bit."""
    nbytes = (4 << 30) + 4096
    big = np.zeros(nbytes, dtype=np.uint8)
    big[: 1 << 20] = np.arange(1 << 20, dtype=np.uint64).astype(np.uint8)
    big[1 << 20 :: 1 << 20] = 7
    big[-4096:] = 255
    with CheckpointManager(tmp_path, max_to_keep=1) as manager:
        manager.save(1, {"big": big})
        manager.verify()
        del big
        into = np.zeros(nbytes, dtype=np.uint8)
        tree = manager.restore({"big": into})
    assert tree["big"] is into
    assert np.array_equal(into[: 1 << 20], np.arange(1 << 20, dtype=np.uint64).astype(np.uint8))
    assert (into[1 << 20 : -4096 : 1 << 20] == 7).all()
    assert (into[-4096:] == 255).all()


def test_failed_open_releases_the_lock(ckpt_dir, monkeypatch):
    """An I/O error while opening a writer surfaces and leaves the directory unlocked."""
    import globalstep.checkpoint._directory.reading as manager_module

    with CheckpointManager(ckpt_dir, save_every=10) as manager:
        manager.save(10, {"v": 1})

    def fail(storage, name):
        raise CheckpointError(f"reading {name} failed: [Errno 5] Input/output error")

    monkeypatch.setattr(manager_module, "load_state", fail)
    with pytest.raises(CheckpointError, match="Input/output error"):
        CheckpointManager(ckpt_dir, save_every=10)
    monkeypatch.undo()
    with CheckpointManager(ckpt_dir, save_every=10) as manager:
        assert manager.steps() == [10]


def test_memory_filesystem_failed_marker_leaves_no_checkpoint(monkeypatch):
    """On fsspec storage a marker write cut short leaves no committed-looking checkpoint."""
    from globalstep.storage import _remote as storage_module

    url = "memory://globalstep-tests/run-d"
    real_close = storage_module._SpooledUpload.close

    def cut_short(self):
        data = bytes(self._memory)
        if b'"state.json"' in data:  # the marker: half of it lands, then ENOSPC
            self._storage.fs.pipe_file(self._path, data[: len(data) // 2])
            raise OSError(28, "No space left on device")
        real_close(self)

    with CheckpointManager(url) as manager:
        manager.save(1, {"v": 1})
        monkeypatch.setattr(storage_module._SpooledUpload, "close", cut_short)
        with pytest.raises(CheckpointError, match="saving step-000000000002 failed"):
            manager.save(2, {"v": 2})
        monkeypatch.undo()
        assert manager.steps() == [1]
        assert manager.restore() == {"v": 1}


def test_prune_refuses_a_non_policy(ckpt_dir):
    """prune() with something that is not a KeepPolicy raises ConfigError naming it."""
    with CheckpointManager(ckpt_dir) as manager, pytest.raises(ConfigError, match="`policy`"):
        manager.prune(3)


def test_skip_corrupt_on_an_empty_directory_is_not_found(ckpt_dir):
    """skip_corrupt=True with nothing committed is 'no committed checkpoint'."""
    with (
        CheckpointManager(ckpt_dir) as manager,
        pytest.raises(CheckpointNotFoundError, match="no committed checkpoint in"),
    ):
        manager.restore(skip_corrupt=True)


def test_repr_names_directory_and_policy(ckpt_dir):
    """The repr shows the directory and the retention policy."""
    with CheckpointManager(ckpt_dir, max_to_keep=2) as manager:
        assert repr(manager) == (
            f"CheckpointManager({str(ckpt_dir)!r}, policy=KeepAny(policies=(KeepLatest(n=2),)))"
        )


def test_another_trigger_starts_afresh_after_restart(ckpt_dir):
    """A writer reopened with another save_every trigger starts that trigger afresh."""
    clock = Clock()
    with CheckpointManager(ckpt_dir, save_every=10) as manager:
        clock.tick(10)
        assert manager.maybe_save(clock, {"clock": clock})
    with CheckpointManager(ckpt_dir, save_every=every(4)) as manager:
        clock.tick(2)
        assert manager.maybe_save(clock, {"clock": clock})


def test_listing_survives_damaged_metadata(ckpt_dir):
    """ls-style reads tolerate odd metrics, clocks and a damaged newest state.json."""
    import json

    with CheckpointManager(ckpt_dir, keep_best=KeepBest("loss")) as manager:
        manager.save(1, {"v": 1}, metrics={"loss": 1.0})
        manager.save(2, {"v": 2}, metrics={"loss": 2.0})
    step1 = ckpt_dir / "step-000000000001"
    doc = json.loads((step1 / "state.json").read_bytes())
    doc.update(metrics=[1], clocks=[{"bogus": 1}], created_unix="then")
    reseal(step1, state=json.dumps(doc).encode())
    (ckpt_dir / "step-000000000002" / "state.json").write_bytes(b"garbage")
    with CheckpointManager(ckpt_dir, read_only=True) as manager:
        assert manager.stored_policy() is None
        first, second = manager.summaries()
    assert (first.metrics, first.clocks, first.created_unix) == ({}, [], 0.0)
    assert "state.json fails its checksum" in str(second.error)


def test_a_checkpoint_removed_behind_the_managers_back_is_forgotten(ckpt_dir):
    """Retention ignores a remembered checkpoint that is no longer there."""
    import shutil

    with CheckpointManager(ckpt_dir, max_to_keep=2) as manager:
        for step in (1, 2):
            manager.save(step, {"v": step})
        shutil.rmtree(ckpt_dir / "step-000000000001")
        manager.save(3, {"v": 3})
        assert manager.steps() == [2, 3]


def test_numpy_scalar_metrics_are_numbers(ckpt_dir):
    """NumPy scalar metrics (np.float32 from a mean, np.int64) are saved as numbers."""
    with CheckpointManager(ckpt_dir, max_to_keep=1, keep_best=KeepBest("loss")) as manager:
        manager.save(1, {}, metrics={"loss": np.float32(0.5), "seen": np.int64(7)})
        manager.save(2, {}, metrics={"loss": np.float32(0.25), "seen": np.int64(9)})
        manager.save(3, {}, metrics={"loss": np.float32(np.inf)})
        assert manager.steps() == [2, 3]
        assert manager.summaries()[0].metrics == {"loss": 0.25, "seen": 9.0}
    with CheckpointManager(ckpt_dir) as manager, pytest.raises(ConfigError, match="`metrics`"):
        manager.save(4, {}, metrics={"ok": np.bool_(True)})


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.asfortranarray(np.zeros((2, 3))),
        lambda: np.zeros((2, 6))[:, ::2],
        lambda: np.zeros((2, 3), ">f8"),
    ],
    ids=["fortran-order", "strided-view", "big-endian"],
)
def test_every_writable_template_array_is_filled_in_place(ckpt_dir, make):
    """Fortran-order, strided and big-endian template arrays get the values in place too."""
    saved = np.arange(6.0).reshape(2, 3)
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, {"w": saved})
        template = {"w": make()}
        tree = manager.restore(template)
    assert tree["w"] is template["w"]
    np.testing.assert_array_equal(template["w"], saved)


def test_big_endian_state_restores_into_itself(ckpt_dir):
    """A state holding a big-endian array restores into that same state."""
    state = {"w": np.arange(3, dtype=">i4")}
    with CheckpointManager(ckpt_dir) as manager:
        manager.save(1, state)
        state["w"][:] = 0
        manager.restore(state)
    assert state["w"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("async_save", [False, True])
def test_before_commit_runs_before_the_checkpoint_exists(ckpt_dir, async_save):
    """before_commit runs once per save, before the checkpoint is committed."""
    seen = []
    with CheckpointManager(ckpt_dir, async_save=async_save) as manager:

        def before():
            seen.append(manager.steps())

        manager.save(1, {"w": np.ones(3)}, before_commit=before)
        manager.save(2, {"w": np.ones(3)}, before_commit=before)
        manager.wait()
        assert seen == [[], [1]]
        assert manager.steps() == [1, 2]


def test_failing_before_commit_saves_nothing(ckpt_dir):
    """A before_commit that raises fails the save with its error and commits nothing."""
    with CheckpointManager(ckpt_dir) as manager:

        def before():
            raise OSError(5, "logs not on disk")

        with pytest.raises(OSError, match="logs not on disk"):
            manager.save(1, {"w": np.ones(3)}, before_commit=before)
        assert manager.steps() == []


def test_failing_before_commit_of_an_async_save_surfaces_on_wait(ckpt_dir):
    """An async save whose before_commit raises commits nothing; wait() raises its error."""
    with CheckpointManager(ckpt_dir, async_save=True) as manager:

        def before():
            raise OSError(5, "logs not on disk")

        manager.save(1, {"w": np.ones(3)}, before_commit=before)
        with pytest.raises(CheckpointError, match=r"background save failed: .*logs not on disk"):
            manager.wait()
        assert manager.steps() == []


def test_async_saves_share_one_thread(ckpt_dir):
    """Async saves run on one thread kept by the manager, not a new thread per save."""
    names = []
    with CheckpointManager(ckpt_dir, async_save=True) as manager:
        for step in range(3):
            manager.save(
                step, {"w": np.ones(3)}, before_commit=lambda: names.append(threading.get_ident())
            )
        manager.wait()
    assert len(names) == 3
    assert len(set(names)) == 1
    assert names[0] != threading.get_ident()


def test_exit_waits_for_an_async_save_never_waited_for(tmp_path):
    """A process that ends right after an async save, without wait() or close(), still
    commits that checkpoint."""
    code = (
        "import numpy as np\n"
        "import time\n"
        "from globalstep.checkpoint import CheckpointManager\n"
        f"m = CheckpointManager({str(tmp_path)!r}, async_save=True)\n"
        "m.save(7, {'w': np.ones(1_000_000)}, before_commit=lambda: time.sleep(0.5))\n"
    )
    subprocess.run([sys.executable, "-c", code], env=subprocess_env(), check=True)
    with CheckpointManager(tmp_path, read_only=True) as reader:
        assert reader.steps() == [7]
