"""A core schedule read inside a traced function (jax.jit, tf.function) refuses instead of
freezing: ``lr(clock)`` there would be the value at the step of tracing, for every run."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from globalstep import Clock, StepError, TracingError
from globalstep.schedules import CosineDecay

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture(scope="module")
def jax():
    return pytest.importorskip("jax")


@pytest.fixture(scope="module")
def tf():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("tensorflow")


def test_clock_inside_jax_jit_raises(jax):
    """lr(clock) inside jax.jit raises, saying what traces instead."""
    lr, clock = CosineDecay(1.0, 100), Clock()
    with pytest.raises(
        TracingError,
        match=r"got a globalstep Clock inside jax\.jit .* frozen .*globalstep\.compat\.optax",
    ):
        jax.jit(lambda: lr(clock))()


def test_traced_step_inside_jax_jit_says_what_to_use(jax):
    """A tracer as the step is refused with the traceable alternative named."""
    lr = CosineDecay(1.0, 100)
    with pytest.raises(
        StepError, match=r"got a traced value inside jax\.jit .*globalstep\.compat\.optax"
    ):
        jax.jit(lambda step: lr(step))(np.int32(5))


def test_clock_inside_tf_function_raises(tf):
    """lr(clock) inside tf.function raises (not AutoGraph's StagingError), naming compat.tf."""
    lr, clock = CosineDecay(1.0, 100), Clock()
    with pytest.raises(
        TracingError,
        match=r"got a globalstep Clock inside tf\.function .*globalstep\.compat\.tf decay",
    ):
        tf.function(lambda: lr(clock))()
