"""Deferred restoration on every Keras backend, each in a subprocess (one backend a process).

An unbuilt model and its unbuilt optimizer restored from a checkpoint take the weights at
the model's first call and the slots when the optimizer builds (here inside compiled
fit()), and training continues bit-identical to the run that was saved.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from keras_subprocess import run_on_backend

SCRIPT = Path(__file__).with_name("keras_deferred_check.py")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_unbuilt_model_and_optimizer_take_their_values_when_they_build(tmp_path, backend):
    """On each backend: weights and slots pending at restore, none after the first fit()
    batch, and the resumed run's variables equal the saved run's, bit for bit."""
    result = run_on_backend(SCRIPT, backend, str(tmp_path))
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
