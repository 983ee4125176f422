"""Tests for globalstep.checkpoint._files.lazy."""

import numpy as np
import pytest

from globalstep import CorruptCheckpointError
from globalstep.checkpoint import CheckpointManager


def test_reader_maps_arrays_without_reading_others(tmp_path):
    """Indexing returns a read-only memory map of just that array."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"a": np.arange(1000.0), "b": np.ones(3, np.float32)})
        with manager.open(1) as reader:
            a = reader["a"]
            assert isinstance(a.base, memoryview) or a.base is not None
            assert not a.flags.writeable
            assert a[999] == 999.0
            assert reader.state["step"] == 1


def test_reader_returns_empty_and_zero_d_arrays(tmp_path):
    """Empty and 0-d arrays come back with their shapes."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"e": np.zeros((0, 4)), "z": np.array(5, np.int8)})
        with manager.open() as reader:
            assert reader["e"].shape == (0, 4)
            assert reader["z"].shape == ()
            assert reader["z"] == 5


def test_reader_refuses_a_header_that_differs_from_state(tmp_path):
    """A reader whose array file lists other tensors than state.json raises."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"a": np.ones(2)})
        manager.save(2, {"b": np.ones(2)})
    step1 = tmp_path / "step-000000000001"
    step2 = tmp_path / "step-000000000002"
    (step2 / "arrays.safetensors").write_bytes((step1 / "arrays.safetensors").read_bytes())
    with (
        CheckpointManager(tmp_path, read_only=True) as manager,
        pytest.raises(CorruptCheckpointError, match=r"tensors differ from state\.json"),
    ):
        manager.open(2)


@pytest.mark.parametrize("url", [None, "memory://globalstep-lazy/missing"])
def test_reader_on_a_lost_array_file_is_corrupt(tmp_path, url):
    """Opening a committed checkpoint whose array file is gone is corruption, naming it."""
    directory = url or str(tmp_path)
    with CheckpointManager(directory) as manager:
        manager.save(1, {"a": np.ones(2)})
        manager._storage.remove_file(
            manager._storage.join("step-000000000001", "arrays.safetensors")
        )
        with pytest.raises(CorruptCheckpointError, match=r"arrays\.safetensors is missing") as info:
            manager.open()
    assert info.value.path.endswith("step-000000000001/arrays.safetensors")


def test_reader_on_fsspec_reads_each_array_when_asked(monkeypatch):
    """On fsspec storage an array is read on indexing; an I/O error then names the file."""
    from globalstep import CheckpointError
    from globalstep.storage import FsspecStorage

    with CheckpointManager("memory://globalstep-lazy/read") as manager:
        manager.save(1, {"a": np.arange(3.0)})
        with manager.open() as reader:
            assert reader["a"].tolist() == [0.0, 1.0, 2.0]

            def fail(self, path):
                raise OSError(5, "Input/output error")

            monkeypatch.setattr(FsspecStorage, "open_reader", fail)
            with pytest.raises(CheckpointError, match=r"reading 'a' failed .*Input/output"):
                reader["a"]
