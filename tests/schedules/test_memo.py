"""Tests for the scalar memo of schedules/_base.py: a call equals values(), bit for bit."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from globalstep import StepError
from globalstep._clock import MAX_STEP
from globalstep.schedules import (
    CosineDecay,
    ExponentialDecay,
    Linear,
    NoisyLinearCosineDecay,
    PiecewiseConstant,
    warmup,
)
from globalstep.schedules._base import MEMO_BLOCK, MEMO_BLOCKS

SCHEDULES = [
    ExponentialDecay(0.1, 1000, 0.96),
    ExponentialDecay(0.1, 7, 0.5, staircase=True, dtype="float32"),
    CosineDecay(1.0, 3000),
    PiecewiseConstant((10, 1024, 2048), (1.0, 0.5, 0.25, 0.125)),
    NoisyLinearCosineDecay(1.0, 5000, seed=3),
    warmup(CosineDecay(1.0, 100), 10),
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.name)
@settings(max_examples=60, deadline=None)
@given(step=st.integers(0, 10**7) | st.integers(MAX_STEP - 3 * MEMO_BLOCK, MAX_STEP))
def test_call_equals_values_bit_for_bit(schedule, step):
    """A scalar call (memo hit or miss) returns the float values() gives at that step."""
    expected = schedule.values(np.array([step], dtype=np.int64))[0]
    first, second = schedule(step), schedule(step)
    assert type(first) is float
    assert np.float64(first).tobytes() == np.float64(expected).tobytes()
    assert np.float64(second).tobytes() == np.float64(first).tobytes()


def test_memo_keeps_a_few_blocks():
    """After calls in many blocks, the memo holds at most MEMO_BLOCKS blocks."""
    lr = CosineDecay(1.0, 10**6)
    for block in range(3 * MEMO_BLOCKS):
        lr(block * MEMO_BLOCK + 5)
    assert 1 <= len(lr.__dict__["_memo"]) <= MEMO_BLOCKS


@pytest.mark.parametrize("step", [-1, 2.0, np.int64(3), True, MAX_STEP + 1])
def test_other_steps_bypass_the_memo(step):
    """A negative, float, NumPy or bool step never reads or fills the memo."""
    lr = Linear(0.0, 1.0, 10)
    if type(step) is np.int64:
        assert lr(step) == 0.3
    else:
        with pytest.raises(StepError, match="`step` must be"):
            lr(step)
    assert "_memo" not in lr.__dict__


def test_memo_takes_no_part_in_equality_or_config():
    """A schedule with a filled memo equals a fresh one and has the same config."""
    used, fresh = CosineDecay(1.0, 100), CosineDecay(1.0, 100)
    used(5)
    assert used == fresh
    assert hash(used) == hash(fresh)
    assert used.to_config() == fresh.to_config()


def test_threads_read_the_same_values():
    """Eight threads calling one schedule over many blocks all read values()' numbers."""
    lr = ExponentialDecay(0.1, 100, 0.9, dtype="float32")
    steps = np.arange(0, 20 * MEMO_BLOCK, 37)
    expected = lr.values(steps).astype(np.float64).tolist()
    results: list[list[float]] = []

    def read() -> None:
        results.append([lr(int(s)) for s in steps])

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 8
