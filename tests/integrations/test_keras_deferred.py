"""Deferred restoration on every Keras backend, each in a subprocess (one backend a process).

An unbuilt model and its unbuilt optimizer restored from a checkpoint take the weights at
the model's first call and the slots when the optimizer builds (here inside compiled
fit()), and training continues bit-identical to the run that was saved.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import globalstep

SCRIPT = Path(__file__).with_name("keras_deferred_check.py")
SRC = str(Path(globalstep.__file__).resolve().parents[1])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_unbuilt_model_and_optimizer_take_their_values_when_they_build(tmp_path, backend):
    """On each backend: weights and slots pending at restore, none after the first fit()
    batch, and the resumed run's variables equal the saved run's, bit for bit."""
    if importlib.util.find_spec("keras") is None or importlib.util.find_spec(backend) is None:
        pytest.skip(f"keras or {backend} is not installed")
    env = {
        **os.environ,
        "KERAS_BACKEND": backend,
        "PYTHONPATH": os.pathsep.join([SRC, *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"]
    assert result["pending_before"] == [
        "model/variables/0000.kernel",
        "model/variables/0001.bias",
        "model/variables/0002.kernel",
        "model/variables/0003.bias",
        *[f"model/optimizer/{i:04d}" for i in range(2, 10)],
    ]
    assert result["pending_after"] == []
    assert result["iterations"] == 7
    assert result["equal"]
