"""Fixtures for the checkpoint tests."""

import pytest

# A script the distributed tests run in subprocesses (it imports torch), not a test module.
collect_ignore = ["dist_worker.py"]


@pytest.fixture
def ckpt_dir(tmp_path):
    """A fresh checkpoint directory."""
    return tmp_path / "ckpt"
