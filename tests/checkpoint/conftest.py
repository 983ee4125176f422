"""Fixtures for the checkpoint tests."""

import pytest


@pytest.fixture
def ckpt_dir(tmp_path):
    """A fresh checkpoint directory."""
    return tmp_path / "ckpt"
