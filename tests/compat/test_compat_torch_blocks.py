"""Tests for compat.torch's vectorised tables and closed forms (TorchSchedule._block,
_factors, _closed_array): values() equals torch's recursion replayed step by step."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

from globalstep import StepError
from globalstep.compat import torch as gt
from globalstep.compat._torch_base import StepZeroDivisionError

N = 6000

CASES = [
    gt.StepLR(base_lr=0.1, step_size=30, gamma=0.1),
    gt.StepLR(base_lr=0.1, step_size=7, gamma=3),
    gt.ExponentialLR(base_lr=0.1, gamma=0.99),
    gt.ExponentialLR(base_lr=0.1, gamma=1.0001),
    gt.MultiStepLR(base_lr=0.1, milestones=[0, 100, 300, 300, 5000], gamma=0.3),
    gt.ConstantLR(base_lr=0.3, factor=0.7, total_iters=777),
    gt.ConstantLR(base_lr=0.3, factor=1, total_iters=0),
    gt.LinearLR(base_lr=0.3, start_factor=0.1, end_factor=0.9, total_iters=5000),
    gt.LinearLR(base_lr=0.3, start_factor=1, end_factor=0, total_iters=4000),
    gt.PolynomialLR(base_lr=0.3, total_iters=5000, power=1.7),
    gt.PolynomialLR(base_lr=0.3, total_iters=5000, power=2),
    gt.PolynomialLR(base_lr=0.3, total_iters=100, power=0.0),
    gt.CosineAnnealingLR(base_lr=0.1, T_max=1000),
    gt.CosineAnnealingLR(base_lr=0.1, T_max=1),
    gt.CosineAnnealingLR(base_lr=0.1, T_max=997, eta_min=0.01),
    gt.CosineAnnealingLR(base_lr=-0.0, T_max=50),
    gt.CosineAnnealingWarmRestarts(base_lr=0.1, T_0=100),
    gt.CosineAnnealingWarmRestarts(base_lr=0.1, T_0=7, T_mult=3, eta_min=0.001),
    gt.OneCycleLR(max_lr=0.1, total_steps=N),
    gt.OneCycleLR(max_lr=0.1, total_steps=N, anneal_strategy="linear", three_phase=True),
    gt.CyclicLR(base_lr=0.01, max_lr=0.5, step_size_up=200),
    gt.CyclicLR(
        base_lr=0.01, max_lr=0.5, step_size_up=17.3, step_size_down=4.1, mode="triangular2"
    ),
    gt.CyclicLR(base_lr=0.01, max_lr=0.5, step_size_up=3, mode="exp_range", gamma=0.9993),
    gt.CyclicLR(base_lr=0.01, max_lr=0.5, step_size_up=1, step_size_down=0),
    gt.CyclicLR(base_lr=0.01, max_lr=0.5, step_size_up=9, scale_fn=lambda c: 1 / (c + 1)),
    gt.CyclicLR(0.01, 0.5, 9, scale_fn=lambda k: 0.999**k, scale_mode="iterations"),
    gt.LambdaLR(base_lr=0.1, lr_lambda=lambda k: 0.95**k),
    gt.LambdaLR(base_lr=0.1, lr_lambda=lambda k: k % 3),
    gt.SWALR(base_lr=0.1, swa_lr=0.05, anneal_epochs=10),
    gt.SWALR(base_lr=0.1, swa_lr=0.2, anneal_epochs=2500, anneal_strategy="linear"),
    gt.SWALR(base_lr=0.1, swa_lr=0.0, anneal_epochs=0),
]


def _fresh(schedule: gt.TorchSchedule) -> gt.TorchSchedule:
    """The same schedule, with no rates computed yet."""
    return type(schedule)(
        **{f.name: getattr(schedule, f.name) for f in dataclasses.fields(schedule)}
    )


def _replayed(schedule: gt.TorchSchedule, n: int) -> np.ndarray:
    """torch's recursion (or closed form) one step at a time, as the scalar path computes it."""
    if not schedule._recursive:
        return np.array([schedule.closed_form(k) for k in range(n)])
    rates = [schedule.first_rate(schedule.initial_lr)]
    for k in range(1, n):
        rates.append(schedule.next_rate(rates[-1], k))
    return np.array(rates)


def _case_id(schedule: object) -> str:
    """The case's repr without function addresses, which differ between the processes
    that collect the tests (pytest-xdist's workers must agree on every id)."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(schedule))


@pytest.mark.parametrize("schedule", CASES, ids=_case_id)
def test_values_equal_the_step_by_step_recursion(schedule):
    """values() of a fresh schedule on 6,000 steps equals torch's recursion replayed, bitwise."""
    fresh = _fresh(schedule)
    ours = fresh.values(np.arange(N))
    assert np.array_equal(ours.view(np.uint64), _replayed(schedule, N).view(np.uint64))


@pytest.mark.parametrize("schedule", CASES[:4] + CASES[12:13], ids=_case_id)
def test_the_table_is_built_as_a_running_product(schedule):
    """A multiplicative recursion is built without calling the per-step ``next_rate``."""
    fresh = _fresh(schedule)

    def refused(lr, k):
        raise AssertionError(f"next_rate called at step {k}")

    object.__setattr__(fresh, "next_rate", refused)  # an instance attribute: the method shadowed
    assert fresh.values(np.arange(N)).shape == (N,)


def test_swalr_replays_only_its_anneal():
    """SWALR's table calls the per-step recursion through the anneal only, then holds."""
    fresh = gt.SWALR(base_lr=0.1, swa_lr=0.05, anneal_epochs=10)
    calls = []
    step = fresh.next_rate

    def counted(lr, k):
        calls.append(k)
        return step(lr, k)

    object.__setattr__(fresh, "next_rate", counted)
    assert fresh.values(np.arange(N))[-1] == 0.05
    assert max(calls) <= 11


@pytest.mark.parametrize(
    "schedule",
    [
        gt.LambdaLR(base_lr=0.1, lr_lambda=lambda k: np.float32(0.9) ** k),
        gt.LambdaLR(base_lr=0.1, lr_lambda=lambda k: 10**20 if k > 50 else 1),
        gt.CyclicLR(0.01, 0.5, 9, scale_fn=lambda k: np.float32(0.5), scale_mode="iterations"),
    ],
    ids=_case_id,
)
def test_a_lambda_of_other_numbers_keeps_pythons_arithmetic(schedule):
    """Where a user function returns a NumPy number or a huge int, values() is each call's."""
    assert values_are_calls(schedule, 300)


def values_are_calls(schedule: gt.TorchSchedule, n: int) -> bool:
    fresh = _fresh(schedule)
    calls = np.array([schedule(k) for k in range(n)], dtype=np.float64)
    return fresh.values(np.arange(n)).tobytes() == calls.tobytes()


def test_a_lambda_dividing_by_zero_raises_at_its_step():
    """LambdaLR whose function divides by zero at step 70: values() raises at step 70."""
    schedule = gt.LambdaLR(base_lr=0.1, lr_lambda=lambda k: 1 / (70 - k))
    with pytest.raises(StepZeroDivisionError, match="at step 70"):
        schedule.values(np.arange(200))


def test_cyclic_triangular2_overflow_raises_as_the_scalar_call():
    """Where torch's 2.0 ** cycle overflows (OverflowError), values() raises it too."""
    schedule = gt.CyclicLR(base_lr=0.01, max_lr=0.5, step_size_up=1, mode="triangular2")
    steps = np.array([0, 5, 10**6], dtype=np.int64)
    with pytest.raises(OverflowError):
        schedule(10**6)
    with pytest.raises(OverflowError):
        schedule.values(np.concatenate([steps, np.arange(20)]))


def test_a_numpy_scalar_gamma_keeps_pythons_arithmetic():
    """A NumPy float32 gamma is replayed step by step (Python then computes in float32)."""
    schedule = gt.ExponentialLR(base_lr=0.1, gamma=np.float32(0.9))
    assert np.array_equal(schedule.values(np.arange(200)), _replayed(schedule, 200))


def test_a_division_by_zero_inside_a_block_raises_at_its_step():
    """ConstantLR(factor=0) divides by zero at total_iters in torch; values() raises there."""
    schedule = gt.ConstantLR(base_lr=0.3, factor=0.0, total_iters=50)
    with pytest.raises(StepZeroDivisionError, match="at step 50"):
        schedule.values(np.arange(200))
    assert schedule(49) == 0.0


def test_one_cycle_past_its_last_step_raises_from_values():
    """values() past OneCycleLR's total_steps raises the scalar call's StepError."""
    schedule = gt.OneCycleLR(max_lr=0.1, total_steps=100)
    with pytest.raises(StepError, match="must be <= total_steps=100"):
        schedule.values(np.arange(102))


@pytest.mark.slow
def test_cosine_annealing_equals_torch_on_100000_steps():
    """CosineAnnealingLR(T_max=1000), vectorised, equals torch stepped 100,000 times."""
    torch = pytest.importorskip("torch")
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.1)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=1000)
    optimizer.step()
    theirs = [scheduler.get_last_lr()[0]]
    for _ in range(100_000 - 1):
        scheduler.step()
        theirs.append(scheduler.get_last_lr()[0])
    ours = gt.CosineAnnealingLR(base_lr=0.1, T_max=1000).values(np.arange(100_000))
    assert np.array_equal(ours, np.array(theirs))
    assert not math.isnan(float(ours[-1]))
