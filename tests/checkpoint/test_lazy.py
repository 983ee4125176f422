"""Tests for globalstep.checkpoint.lazy."""

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
