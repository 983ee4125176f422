"""Tests for the meeting of the summary writers and the checkpoint manager without Run:
every open writer's points are durable before a checkpoint commits."""

import ast
import gc
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import globalstep
from globalstep import CheckpointError, SummaryWriteError, _durability
from globalstep.checkpoint import CheckpointManager
from globalstep.summary import SummaryWriter, read_run

SRC = Path(globalstep.__file__).parent


def _on_disk(logdir, tag="x"):
    """The steps of ``tag`` in the JSONL file as it is on disk now."""
    run = read_run(logdir)
    return [p.step for p in run.scalars.get(tag, [])]


def _quiet_writer(logdir, **kwargs):
    """A writer whose background thread does not flush during the test."""
    return SummaryWriter(logdir, formats=("jsonl",), flush_seconds=3600, **kwargs)


class _Recorder:
    """An object with a bound method to register."""

    def __init__(self):
        self.calls = 0

    def sync(self):
        self.calls += 1


def test_an_open_writer_is_registered_and_a_closed_one_drops_out(tmp_path):
    """A writer's sync is in the registry while it is open and gone after close()."""
    writer = _quiet_writer(tmp_path)
    assert writer.sync_points in _durability.registered()
    writer.close()
    assert writer.sync_points not in _durability.registered()


def test_a_collected_object_drops_out_of_the_registry():
    """The registry holds weak references: an object garbage collected leaves it."""
    recorder = _Recorder()
    _durability.register(recorder.sync)
    assert recorder.sync in _durability.registered()
    del recorder
    gc.collect()
    assert not [s for s in _durability.registered() if isinstance(s.__self__, _Recorder)]


def test_a_cancelled_registration_is_not_called():
    """cancel() drops a sync; a second cancel() does nothing."""
    recorder = _Recorder()
    registration = _durability.register(recorder.sync)
    _durability.sync_registered()
    registration.cancel()
    registration.cancel()
    _durability.sync_registered()
    assert recorder.calls == 1


def test_register_refuses_a_function_that_is_not_a_bound_method():
    """A plain function cannot be held weakly by its object: register() refuses it."""
    with pytest.raises(TypeError, match="`sync` must be a bound method; got sync="):
        _durability.register(lambda: None)


def test_sync_registered_calls_every_sync_then_raises_the_first_error():
    """One failing sync does not keep the others from running; its error is raised."""

    class Failing:
        def sync(self):
            raise OSError("disk gone")

    failing, recorder = Failing(), _Recorder()
    first = _durability.register(failing.sync)
    second = _durability.register(recorder.sync)
    try:
        with pytest.raises(OSError, match="disk gone"):
            _durability.sync_registered()
        assert recorder.calls == 1
    finally:
        first.cancel()
        second.cancel()


@pytest.mark.parametrize("call", ["save", "maybe_save"])
def test_a_save_puts_the_writers_points_on_disk_before_it_commits(tmp_path, call):
    """Without Run, save() and maybe_save() write and fsync the points logged before them,
    and the checkpoint is committed only after that."""
    clock = globalstep.Clock()
    writer = _quiet_writer(tmp_path / "logs", clock=clock)
    seen_at_commit = []
    with CheckpointManager(tmp_path / "ckpt", save_every=3) as manager:
        for _ in range(3):
            clock.tick()
            writer.scalars({"x": float(clock.step)})
        assert _on_disk(tmp_path / "logs") == []  # queued only
        before = lambda: seen_at_commit.append(_on_disk(tmp_path / "logs"))  # noqa: E731
        if call == "save":  # before_commit runs after the writers' syncs
            manager.save(clock, {"clock": clock}, before_commit=before)
        else:
            assert manager.maybe_save(clock, {"clock": clock})
            before()
        assert manager.steps() == [3]
    assert seen_at_commit == [[1, 2, 3]]
    writer.close()


def test_an_async_save_syncs_the_writer_on_the_save_thread(tmp_path):
    """An async save makes the points durable on its background thread, before it commits."""
    threads = []

    class Recording(SummaryWriter):
        def sync_points(self):
            threads.append(threading.current_thread().name)
            super().sync_points()

    clock = globalstep.Clock()
    writer = Recording(tmp_path / "logs", clock=clock, formats=("jsonl",), flush_seconds=3600)
    with CheckpointManager(tmp_path / "ckpt", async_save=True) as manager:
        clock.tick()
        writer.scalars({"x": 1.0})
        manager.save(clock, {"w": np.ones(3)})
        manager.wait()
        assert manager.steps() == [1]
        assert _on_disk(tmp_path / "logs") == [1]
    assert threads
    assert all(name.startswith("globalstep-save") for name in threads)
    writer.close()


def _full_disk_writer(logdir):
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    logdir.mkdir()
    os.symlink("/dev/full", logdir / "metrics.jsonl")
    writer = _quiet_writer(logdir)
    writer.scalar("x", 1.0, step=1)
    return writer


def test_a_writer_that_cannot_write_fails_the_save_with_its_error(tmp_path):
    """A full disk under the logs fails save() with the writer's SummaryWriteError; no
    checkpoint is committed."""
    writer = _full_disk_writer(tmp_path / "logs")
    with CheckpointManager(tmp_path / "ckpt") as manager:
        with pytest.raises(SummaryWriteError, match="No space left on device"):
            manager.save(1, {"w": np.ones(3)})
        assert manager.steps() == []
    with pytest.raises(SummaryWriteError, match="could not write"):
        writer.close()


def test_a_writer_that_cannot_write_fails_an_async_save_at_wait(tmp_path):
    """An async save whose writer cannot write commits nothing; wait() raises with the
    writer's error as the cause."""
    writer = _full_disk_writer(tmp_path / "logs")
    with CheckpointManager(tmp_path / "ckpt", async_save=True) as manager:
        manager.save(1, {"w": np.ones(3)})
        with pytest.raises(CheckpointError, match="background save failed") as info:
            manager.wait()
        assert isinstance(info.value.__cause__, SummaryWriteError)
        assert "No space left on device" in str(info.value.__cause__)
        assert manager.steps() == []
    with pytest.raises(SummaryWriteError, match="could not write"):
        writer.close()


def test_a_writer_closed_while_an_async_save_syncs_it_fails_nothing(tmp_path):
    """close() on the training thread while the save thread is inside the same writer's
    sync: the save commits, and every point is in the file."""
    entered, release = threading.Event(), threading.Event()

    class Held(SummaryWriter):
        def _drain(self, sync=False):
            if threading.current_thread().name.startswith("globalstep-save"):
                entered.set()  # past sync_points' closed check, before the I/O lock
                assert release.wait(60)
            super()._drain(sync)

    clock = globalstep.Clock()
    writer = Held(tmp_path / "logs", clock=clock, formats=("jsonl",), flush_seconds=3600)
    with CheckpointManager(tmp_path / "ckpt", async_save=True) as manager:
        clock.tick()
        writer.scalars({"x": 1.0})
        manager.save(clock, {"w": np.ones(3)})
        assert entered.wait(60)
        writer.close()  # writes the point and closes the files
        release.set()
        manager.wait()
        assert manager.steps() == [1]
    assert _on_disk(tmp_path / "logs") == [1]


def test_run_syncs_its_writer_once_per_save(tmp_path, monkeypatch):
    """A Run's save makes its writer's points durable once, not once by Run and again by
    the manager."""
    calls = []
    real = SummaryWriter.sync_points

    def counting(self):
        calls.append(self)
        real(self)

    monkeypatch.setattr(SummaryWriter, "sync_points", counting)
    with globalstep.Run(tmp_path / "run", save_every=2, progress=False) as run:
        state = run.restore({"w": np.zeros(2)})
        for _ in range(4):
            state["w"] += 1.0  # an update, in place (an unchanged tree is refused)
            run.update(loss=1.0)
    assert len(calls) == 2  # steps 2 and 4; the final save is at step 4 already
    assert _on_disk(tmp_path / "run" / "logs", "loss") == [1, 2, 3, 4]


def _imports(path):
    """Every module ``path`` imports, at its top or inside a function."""
    tree = ast.parse(path.read_text(), str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            names.append(node.module or "")
    return names


@pytest.mark.parametrize(
    ("package", "forbidden", "allowed"),
    [
        ("checkpoint", "globalstep.summary", ()),
        ("summary", "globalstep.checkpoint", ()),
    ],
)
def test_checkpoint_and_summary_do_not_import_each_other(package, forbidden, allowed):
    """checkpoint/ never imports summary/; summary/ imports only checkpoint's storage layer,
    which is below both (DESIGN.md, "Layers")."""
    for path in sorted((SRC / package).glob("*.py")):
        for name in _imports(path):
            if name == forbidden or name.startswith(forbidden + "."):
                assert name in allowed, f"{path.name} imports {name}"


def test_the_durability_registry_imports_no_globalstep_module():
    """The registry is below both layers: it imports nothing of globalstep."""
    assert not [n for n in _imports(SRC / "_durability.py") if n.startswith("globalstep")]
