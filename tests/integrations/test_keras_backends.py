"""Schedules inside compiled fit() on each Keras backend, one subprocess per backend.

keras_backend_check.py trains a small MLP (dropout, shuffled data) by compiled fit() and
reports: a compat.keras schedule gives the weights Keras' own schedule gives (and a
slightly different schedule does not); a core schedule gives the weights of a table of
its values looked up with Keras ops; gradient accumulation keeps the clock at
optimizer.iterations; the schedules round-trip through keras.saving, alone and in a
saved model; plain model.fit on a ResumableDataset ends after its epochs, on gk.fit's
batches.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from keras_subprocess import run_on_backend

pytest.importorskip("keras")

SCRIPT = Path(__file__).with_name("keras_backend_check.py")


@pytest.fixture(scope="module", params=["tensorflow", "jax", "torch"])
def report(request, tmp_path_factory):
    """The check script's results on one backend."""
    directory = tmp_path_factory.mktemp(request.param)
    result = run_on_backend(SCRIPT, request.param, str(directory))
    assert result["backend"] == request.param
    return result


pytestmark = pytest.mark.slow


def test_compat_schedule_is_a_keras_schedule(report):
    """A compat.keras schedule built after importing Keras is a LearningRateSchedule."""
    assert report["compat_is_schedule"]


def test_compat_schedule_trains_as_keras_own(report):
    """In compiled fit() a compat schedule gives Keras' own schedule's weights bit for bit."""
    assert report["compat_equals_keras_in_fit"]
    assert report["control_differs"]


def test_core_schedule_uses_its_exact_values(report):
    """A core schedule in compiled fit() trains as a Keras-ops table of its values."""
    assert report["core_equals_table_in_fit"]
    assert report["core_piecewise_equals_keras"]


def test_clock_follows_iterations_under_accumulation(report):
    """With gradient_accumulation_steps=3 the clock counts updates, as iterations does."""
    assert report["accumulation_clock"] == [8, 8]


def test_schedules_round_trip_through_keras_saving(report):
    """Serialised and deserialised, alone or in a saved model, a schedule is the same."""
    assert report["serialized_class"] == "globalstep>CosineDecay"
    assert report["round_trip"]
    assert report["core_round_trip"]
    assert report["model_round_trip"]


def test_plain_fit_on_resumable_data_ends_on_gk_fits_batches(report):
    """model.fit(ResumableDataset, epochs=3) stops after 3 epochs of 5 batches (a bound on
    steps fails it otherwise), and trains on the batches gk.fit gives, bit for bit: with
    the callback, without it, and split in two calls (the second continues the epochs)."""
    plain = report["plain_fit"]
    assert "error" not in plain, plain
    assert plain["gk.fit"] == [15, 15, 3, 15]  # batches, clock step and epoch, position
    assert plain["plain"] == [15, 15, 3, 15]
    assert plain["plain, no callback"][0] == 15
    assert plain["plain, two calls"] == [15, 15, 3, 15]
    assert plain["plain same batches"]
    assert plain["plain, no callback same batches"]
    assert plain["plain, two calls same batches"]
