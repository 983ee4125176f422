"""Tests for max_host_bytes: async saves wait for host memory rather than hold more."""

import threading
import time

import numpy as np
import pytest

from globalstep import CheckpointError, ConfigError, Run
from globalstep.checkpoint import CheckpointManager, CheckpointWarning
from globalstep.checkpoint._host_memory import HELD

SIZE = 1 << 20  # the state's bytes


def state():
    return {"w": np.arange(SIZE // 8, dtype=np.float64)}


@pytest.fixture
def held(monkeypatch):
    """Every value the process's count of held bytes takes, in order."""
    seen = []
    reserve, release = HELD.reserve, HELD.release

    def counted_reserve(nbytes, limit):
        waited = reserve(nbytes, limit)
        seen.append(HELD.held)
        return waited

    def counted_release(nbytes):
        release(nbytes)
        seen.append(HELD.held)

    monkeypatch.setattr(HELD, "reserve", counted_reserve)
    monkeypatch.setattr(HELD, "release", counted_release)
    return seen


def two_saves(tmp_path, **options):
    """A's save is held on its thread until B's save waits for memory (or, where B does
    not wait, until B's save returned); returns B's manager."""
    go = threading.Event()
    a = CheckpointManager(tmp_path / "a", async_save=True, **options)
    b = CheckpointManager(tmp_path / "b", async_save=True, **options)
    a.save(1, state(), before_commit=go.wait)  # its copy is held until `go`

    def release_when_b_waits():
        while not go.is_set() and HELD.waiting == 0:
            time.sleep(0.001)
        go.set()

    releaser = threading.Thread(target=release_when_b_waits)
    releaser.start()
    b.save(1, state())
    go.set()
    releaser.join()
    a.close()
    b.close()
    return b


def test_a_bounded_save_waits_for_the_copy_in_flight(tmp_path, held):
    """Under a bound of 1.5 copies, the second manager's save copies only once the first
    manager's save has ended: never two copies at once, and the wait is recorded."""
    b = two_saves(tmp_path, max_host_bytes=SIZE * 3 // 2)
    assert held == [SIZE, 0, SIZE, 0]
    assert b._saver.waited_for_memory_seconds > 0.0
    assert CheckpointManager(tmp_path / "b").steps() == [1]


def test_without_a_bound_both_copies_are_held(tmp_path, held):
    """Without max_host_bytes the two copies are held at once, and nothing waits."""
    b = two_saves(tmp_path)
    assert max(held) == 2 * SIZE
    assert b._saver.waited_for_memory_seconds == 0.0


def test_a_save_that_fits_records_no_wait(ckpt_dir, held):
    """A save with room records a wait of 0.0 and holds its copy until it ends."""
    with CheckpointManager(ckpt_dir, async_save=True, max_host_bytes=SIZE) as manager:
        manager.save(1, state())
        assert manager._saver.waited_for_memory_seconds == 0.0
    assert held == [SIZE, 0]


def test_a_bounded_save_copies_the_state(ckpt_dir):
    """A bounded async save writes the state as it was at save(), not as changed after."""
    tree = state()
    with CheckpointManager(ckpt_dir, async_save=True, max_host_bytes=SIZE) as manager:
        manager.save(1, tree)
        tree["w"][:] = -1.0
        manager.wait()
        restored = manager.restore(template=state())
    np.testing.assert_array_equal(restored["w"], state()["w"])


def test_a_save_larger_than_the_bound_runs_on_the_caller_thread(ckpt_dir, held):
    """A save larger than max_host_bytes alone is committed before save() returns, without
    a copy, with one warning for all such saves."""
    with CheckpointManager(ckpt_dir, async_save=True, max_host_bytes=SIZE // 2) as manager:
        with pytest.warns(CheckpointWarning, match=r"larger than max_host_bytes=524288"):
            manager.save(1, state())
        assert manager._saver.in_flight is None
        assert manager.steps() == [1]
        manager.save(2, state())  # no second warning (warnings are errors here)
        assert manager.steps() == [1, 2]
    assert held == []


def test_a_failed_bounded_save_frees_its_bytes(ckpt_dir):
    """A background save that fails frees the bytes it held."""
    with CheckpointManager(ckpt_dir, async_save=True, max_host_bytes=SIZE) as manager:
        manager.save(1, state(), before_commit=lambda: 1 / 0)
        with pytest.raises(CheckpointError):
            manager.wait()
    assert HELD.held == 0


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "1GB"])
def test_max_host_bytes_must_be_a_positive_int(ckpt_dir, value):
    """max_host_bytes that is not an int >= 1 is refused, named with its value."""
    with pytest.raises(ConfigError, match=r"`max_host_bytes` must be None or an int >= 1"):
        CheckpointManager(ckpt_dir, async_save=True, max_host_bytes=value)


def test_max_host_bytes_needs_async_save(ckpt_dir):
    """max_host_bytes on a synchronous manager is refused (it holds no copy)."""
    with pytest.raises(ConfigError, match=r"unless async_save=True"):
        CheckpointManager(ckpt_dir, max_host_bytes=SIZE)


def test_max_host_bytes_is_refused_on_a_distributed_manager(ckpt_dir):
    """A distributed manager refuses max_host_bytes before it looks for a group."""
    with pytest.raises(ConfigError, match=r"for a distributed manager"):
        CheckpointManager(ckpt_dir, async_save=True, max_host_bytes=SIZE, distributed=True)


def test_run_passes_max_host_bytes_to_its_manager(tmp_path):
    """Run's checkpoint_options carry max_host_bytes to the manager, checked there."""
    with pytest.raises(ConfigError, match=r"`max_host_bytes` must be None or an int >= 1"):
        Run(tmp_path, checkpoint_options={"async_save": True, "max_host_bytes": 0})
    options = {"async_save": True, "max_host_bytes": SIZE}
    with Run(tmp_path, save_every=1, progress=False, checkpoint_options=options) as run:
        tree = run.restore(state())
        tree["w"] += 1.0
        run.update(loss=1.0)
        assert run.checkpoints._saver.max_host_bytes == SIZE
    assert run.checkpoints.steps() == [1]
