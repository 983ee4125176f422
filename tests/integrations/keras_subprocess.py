"""Runs a check script on one Keras backend, in a process of its own (Keras picks its
backend once per process), and returns what the script printed last, as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import globalstep

SRC = str(Path(globalstep.__file__).resolve().parents[1])


def run_on_backend(script: Path, backend: str, *args: str) -> Any:
    """Runs ``script *args`` with ``KERAS_BACKEND=backend`` (skipped where Keras or the
    backend is missing), fails with its stderr if it fails, and returns its last line of
    standard output parsed as JSON (None where it printed nothing)."""
    pytest.importorskip("keras")
    pytest.importorskip(backend)
    env = {
        **os.environ,
        "KERAS_BACKEND": backend,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        # this checkout's globalstep, whatever directory the script runs in
        "PYTHONPATH": os.pathsep.join([SRC, *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    done = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else None
