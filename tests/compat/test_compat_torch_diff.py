"""Randomised differential test: every compat torch scheduler against real torch, bit for bit.

Hypothesis draws each scheduler's arguments over their whole domain (ints and fractions,
empty and single-element lists, lengths of 1, factors of 0 and 1, steps past every
boundary, fractional epochs for CosineAnnealingWarmRestarts) and steps a real torch
optimizer and scheduler, comparing the rate (``get_last_lr()[0]``) and the momentum (SGD's
``momentum`` or Adam's ``betas[0]``) after every ``step()`` with the compat schedule at that
step: equal bit for bit (NaN equal to NaN), and the same exception type where torch raises.
CI runs a fixed-seed budget; ``-m slow`` runs ten times as many configurations.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from globalstep.compat import torch as gt

torch = pytest.importorskip("torch")
lr_scheduler = torch.optim.lr_scheduler

TOTALS: Counter[str] = Counter()  # configurations and steps compared, per scheduler
MISMATCHES: list[str] = []

CI = settings(
    max_examples=30,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
SLOW = settings(CI, max_examples=300)

# -- what hypothesis draws ----------------------------------------------------------------
lrs = st.one_of(
    st.floats(1e-6, 10.0, allow_nan=False),
    st.sampled_from([0.0, 1, 0.1, 1e-300]),
)
factors = st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 1.0, 0.5, 1 / 3]))
gammas = st.one_of(st.floats(0.0, 1.5), st.sampled_from([0.0, 1.0, 0.1, 2, -0.5]))
lengths = st.one_of(st.integers(1, 40), st.sampled_from([1, 2]))
steps = st.integers(0, 200)


def _seed_lambda(seed: int) -> Callable[[int], float]:
    """A deterministic lambda drawn by seed (a mix of shapes torch users write)."""
    shape = seed % 4
    if shape == 0:
        return lambda k: 0.95**k
    if shape == 1:
        return lambda k: 1.0 / (k + 1)
    if shape == 2:
        return lambda k: 0.5 if k % 3 == 0 else 1.0
    return lambda k: min(1.0, (k + 1) / 7)


def _sgd(lr: float, *, adam: bool = False) -> Any:
    param = torch.nn.Parameter(torch.zeros(1))
    if adam:
        return torch.optim.Adam([param], lr=lr)
    return torch.optim.SGD([param], lr=lr, momentum=0.9)


def _momentum_of(optimizer: Any) -> float:
    group = optimizer.param_groups[0]
    return group["betas"][0] if "betas" in group else group["momentum"]


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def run_pair(
    name: str,
    make_torch: Callable[[Any], Any],
    ours: Any,
    n: int,
    *,
    lr: float,
    adam: bool = False,
) -> None:
    """Steps torch ``n`` times and compares rate (and momentum) with ``ours`` at each step,
    called step by step, and with a fresh ``ours().values()`` on every step torch reached
    (the vectorised path, which builds torch's recursion in blocks)."""
    rates: list[float] = []
    try:
        _run_pair(name, make_torch, ours, n, rates, lr=lr, adam=adam)
    finally:
        if len(rates) > 1:
            fresh = ours().values(np.arange(len(rates)))
            TOTALS[name + " values() steps"] += len(rates)
            assert np.array_equal(fresh.view(np.uint64), np.array(rates).view(np.uint64)) or all(
                _same(a, b) for a, b in zip(fresh.tolist(), rates, strict=True)
            ), name


def _run_pair(
    name: str,
    make_torch: Callable[[Any], Any],
    ours: Any,
    n: int,
    rates: list[float],
    *,
    lr: float,
    adam: bool,
) -> None:
    optimizer = _sgd(lr, adam=adam)
    TOTALS[name + " configs"] += 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            scheduler = make_torch(optimizer)
        except (ZeroDivisionError, ValueError, TypeError) as err:
            with pytest.raises(type(err)):
                ours()
            return
        ours = ours()
        for k in range(n + 1):
            if k:
                optimizer.step()
                try:
                    scheduler.step()
                except (ZeroDivisionError, ValueError) as err:
                    with pytest.raises(type(err)):
                        ours(k)
                    return
            theirs = float(scheduler.get_last_lr()[0])
            rates.append(theirs)
            mine = ours(k)
            TOTALS[name + " steps"] += 1
            if not _same(mine, theirs):
                MISMATCHES.append(f"{name} {ours!r} step {k}: {mine!r} != {theirs!r}")
            assert _same(mine, theirs), (k, mine, theirs)
            if ours.has_momentum:
                assert _same(ours.momentum(k), _momentum_of(optimizer)), k


# -- one strategy per scheduler: (torch factory, compat factory, steps, lr, adam) ---------
@st.composite
def lambda_lr(draw: Any) -> tuple[Any, ...]:
    lr, fn = draw(lrs), _seed_lambda(draw(st.integers(0, 3)))
    return (
        lambda o: lr_scheduler.LambdaLR(o, fn),
        lambda: gt.LambdaLR(lr, fn),
        draw(steps),
        lr,
    )


@st.composite
def multiplicative_lr(draw: Any) -> tuple[Any, ...]:
    lr, fn = draw(lrs), _seed_lambda(draw(st.integers(0, 3)))
    return (
        lambda o: lr_scheduler.MultiplicativeLR(o, fn),
        lambda: gt.MultiplicativeLR(lr, fn),
        draw(steps),
        lr,
    )


@st.composite
def step_lr(draw: Any) -> tuple[Any, ...]:
    lr, size, gamma = draw(lrs), draw(lengths), draw(gammas)
    return (
        lambda o: lr_scheduler.StepLR(o, size, gamma),
        lambda: gt.StepLR(lr, size, gamma),
        draw(steps),
        lr,
    )


@st.composite
def multi_step_lr(draw: Any) -> tuple[Any, ...]:
    lr, gamma = draw(lrs), draw(gammas)
    milestones = draw(st.lists(st.integers(0, 60), max_size=6))
    return (
        lambda o: lr_scheduler.MultiStepLR(o, milestones, gamma),
        lambda: gt.MultiStepLR(lr, milestones, gamma),
        draw(steps),
        lr,
    )


@st.composite
def constant_lr(draw: Any) -> tuple[Any, ...]:
    lr, factor, total = draw(lrs), draw(factors), draw(st.integers(0, 40))
    return (
        lambda o: lr_scheduler.ConstantLR(o, factor, total),
        lambda: gt.ConstantLR(lr, factor, total),
        draw(steps),
        lr,
    )


@st.composite
def linear_lr(draw: Any) -> tuple[Any, ...]:
    lr, end, total = draw(lrs), draw(factors), draw(lengths)
    start = draw(st.one_of(st.floats(1e-3, 1.0), st.sampled_from([1.0, 1 / 3, 1e-6])))
    return (
        lambda o: lr_scheduler.LinearLR(o, start, end, total),
        lambda: gt.LinearLR(lr, start, end, total),
        draw(steps),
        lr,
    )


@st.composite
def exponential_lr(draw: Any) -> tuple[Any, ...]:
    lr, gamma = draw(lrs), draw(gammas)
    return (
        lambda o: lr_scheduler.ExponentialLR(o, gamma),
        lambda: gt.ExponentialLR(lr, gamma),
        draw(steps),
        lr,
    )


@st.composite
def polynomial_lr(draw: Any) -> tuple[Any, ...]:
    lr, total = draw(lrs), draw(lengths)
    power = draw(st.one_of(st.floats(0.0, 5.0), st.sampled_from([0, 1, 2, 0.5, -1.0])))
    return (
        lambda o: lr_scheduler.PolynomialLR(o, total, power),
        lambda: gt.PolynomialLR(lr, total, power),
        draw(steps),
        lr,
    )


@st.composite
def cosine_annealing_lr(draw: Any) -> tuple[Any, ...]:
    lr, t_max = draw(lrs), draw(lengths)
    eta = draw(st.one_of(st.just(0.0), st.floats(0.0, 1.0), st.sampled_from([0, 1e-4])))
    return (
        lambda o: lr_scheduler.CosineAnnealingLR(o, t_max, eta),
        lambda: gt.CosineAnnealingLR(lr, t_max, eta),
        draw(steps),
        lr,
    )


@st.composite
def warm_restarts(draw: Any) -> tuple[Any, ...]:
    lr, t0, mult = draw(lrs), draw(lengths), draw(st.integers(1, 3))
    eta = draw(st.one_of(st.just(0.0), st.floats(0.0, 1.0), st.just(0)))
    return (
        lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, t0, mult, eta),
        lambda: gt.CosineAnnealingWarmRestarts(lr, t0, mult, eta),
        draw(steps),
        lr,
    )


@st.composite
def one_cycle_lr(draw: Any) -> tuple[Any, ...]:
    max_lr = draw(lrs)
    total = draw(st.integers(1, 150))
    kwargs = {
        "pct_start": draw(st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 0.3, 0.5, 1.0]))),
        "anneal_strategy": draw(st.sampled_from(["cos", "linear"])),
        "cycle_momentum": draw(st.booleans()),
        "base_momentum": draw(st.floats(0.0, 1.0)),
        "max_momentum": draw(st.floats(0.0, 1.0)),
        "div_factor": draw(st.one_of(st.floats(0.5, 100.0), st.just(25.0), st.just(1))),
        "final_div_factor": draw(st.one_of(st.floats(0.5, 1e5), st.just(1e4))),
        "three_phase": draw(st.booleans()),
    }
    if draw(st.booleans()):
        epochs = draw(st.integers(1, 10))
        size = {"epochs": epochs, "steps_per_epoch": max(1, total // epochs)}
    else:
        size = {"total_steps": total}
    adam = draw(st.booleans())
    return (
        lambda o: lr_scheduler.OneCycleLR(o, max_lr, **size, **kwargs),
        lambda: gt.OneCycleLR(max_lr, **size, **kwargs),
        total + 2,  # one past the last valid step: both raise
        max_lr,
        adam,
    )


@st.composite
def cyclic_lr(draw: Any) -> tuple[Any, ...]:
    base, top = draw(lrs), draw(lrs)
    kwargs = {
        "step_size_up": draw(st.one_of(st.integers(1, 30), st.floats(0.5, 30.0))),
        "step_size_down": draw(st.one_of(st.none(), st.integers(0, 30), st.floats(0.5, 30.0))),
        "mode": draw(st.sampled_from(["triangular", "triangular2", "exp_range"])),
        "gamma": draw(st.floats(0.5, 1.0)),
        "cycle_momentum": draw(st.booleans()),
        "base_momentum": draw(st.floats(0.0, 1.0)),
        "max_momentum": draw(st.floats(0.0, 1.0)),
    }
    if draw(st.booleans()):
        kwargs["scale_fn"] = _seed_lambda(draw(st.integers(0, 3)))
        kwargs["scale_mode"] = draw(st.sampled_from(["cycle", "iterations"]))
    adam = draw(st.booleans())
    return (
        lambda o: lr_scheduler.CyclicLR(o, base, top, **kwargs),
        lambda: gt.CyclicLR(base, top, **kwargs),
        draw(steps),
        base,
        adam,
    )


@st.composite
def swa_lr(draw: Any) -> tuple[Any, ...]:
    from torch.optim.swa_utils import SWALR

    lr, swa = draw(lrs), draw(lrs)
    epochs = draw(st.integers(0, 30))
    strategy = draw(st.sampled_from(["cos", "linear"]))
    return (
        lambda o: SWALR(o, swa, epochs, strategy),
        lambda: gt.SWALR(lr, swa, epochs, strategy),
        draw(st.integers(0, 60)),
        lr,
    )


def _part(draw: Any, lr: float) -> tuple[Any, Any]:
    """A (torch factory, compat schedule) pair for a part of a composition."""
    kind = draw(
        st.sampled_from(
            [
                "step",
                "exp",
                "const",
                "linear",
                "cos",
                "poly",
                "multi",
                "swa",
                "lambda",
                "mult",
                "restarts",
                "cycle",
                "cyclic",
            ]
        )
    )
    size, gamma, factor = draw(lengths), draw(gammas), draw(factors)
    if kind == "step":
        return (lambda o: lr_scheduler.StepLR(o, size, gamma)), gt.StepLR(lr, size, gamma)
    if kind == "exp":
        return (lambda o: lr_scheduler.ExponentialLR(o, gamma)), gt.ExponentialLR(lr, gamma)
    if kind == "const":
        factor = max(factor, 0.01)
        return (lambda o: lr_scheduler.ConstantLR(o, factor, size)), gt.ConstantLR(lr, factor, size)
    if kind == "linear":
        start = max(factor, 0.01)
        return (lambda o: lr_scheduler.LinearLR(o, start, 1.0, size)), gt.LinearLR(
            lr, start, 1.0, size
        )
    if kind == "cos":
        return (lambda o: lr_scheduler.CosineAnnealingLR(o, size)), gt.CosineAnnealingLR(lr, size)
    if kind == "poly":
        return (lambda o: lr_scheduler.PolynomialLR(o, size, 2.0)), gt.PolynomialLR(lr, size, 2.0)
    if kind == "multi":
        ms = draw(st.lists(st.integers(0, 40), max_size=3))
        return (lambda o: lr_scheduler.MultiStepLR(o, ms, gamma)), gt.MultiStepLR(lr, ms, gamma)
    if kind == "lambda":
        fn = _seed_lambda(size)
        return (lambda o: lr_scheduler.LambdaLR(o, fn)), gt.LambdaLR(lr, fn)
    if kind == "mult":
        fn = _seed_lambda(size)
        return (lambda o: lr_scheduler.MultiplicativeLR(o, fn)), gt.MultiplicativeLR(lr, fn)
    if kind == "restarts":
        return (
            (lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, size, 2)),
            gt.CosineAnnealingWarmRestarts(lr, size, 2),
        )
    if kind == "cycle":
        total = 300
        return (
            (lambda o: lr_scheduler.OneCycleLR(o, 0.5, total_steps=total)),
            gt.OneCycleLR(0.5, total_steps=total),
        )
    if kind == "cyclic":
        return (
            (lambda o: lr_scheduler.CyclicLR(o, 0.01, 0.5, size)),
            gt.CyclicLR(0.01, 0.5, size),
        )
    from torch.optim.swa_utils import SWALR

    return (lambda o: SWALR(o, 0.05, size)), gt.SWALR(lr, 0.05, size)


@st.composite
def chained(draw: Any) -> tuple[Any, ...]:
    lr = draw(st.floats(1e-3, 1.0))
    parts = [_part(draw, lr) for _ in range(draw(st.integers(1, 3)))]
    return (
        lambda o: lr_scheduler.ChainedScheduler([make(o) for make, _ in parts]),
        lambda: gt.ChainedScheduler([ours for _, ours in parts]),
        draw(steps),
        lr,
    )


@st.composite
def sequential(draw: Any) -> tuple[Any, ...]:
    lr = draw(st.floats(1e-3, 1.0))
    parts = [_part(draw, lr) for _ in range(draw(st.integers(1, 3)))]
    ms = sorted(
        draw(st.lists(st.integers(0, 60), min_size=len(parts) - 1, max_size=len(parts) - 1))
    )
    return (
        lambda o: lr_scheduler.SequentialLR(o, [make(o) for make, _ in parts], ms),
        lambda: gt.SequentialLR([ours for _, ours in parts], ms),
        draw(steps),
        lr,
    )


STRATEGIES = {
    "LambdaLR": lambda_lr(),
    "MultiplicativeLR": multiplicative_lr(),
    "StepLR": step_lr(),
    "MultiStepLR": multi_step_lr(),
    "ConstantLR": constant_lr(),
    "LinearLR": linear_lr(),
    "ExponentialLR": exponential_lr(),
    "PolynomialLR": polynomial_lr(),
    "CosineAnnealingLR": cosine_annealing_lr(),
    "CosineAnnealingWarmRestarts": warm_restarts(),
    "OneCycleLR": one_cycle_lr(),
    "CyclicLR": cyclic_lr(),
    "SWALR": swa_lr(),
    "ChainedScheduler": chained(),
    "SequentialLR": sequential(),
}


def _check(name: str, case: tuple[Any, ...]) -> None:
    make_torch, make_ours, n, lr, *adam = case
    run_pair(name, make_torch, make_ours, n, lr=lr, adam=bool(adam and adam[0]))


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_differential(name):
    """Drawn configurations step-for-step equal torch's rate and momentum, bit for bit."""
    CI(given(STRATEGIES[name])(lambda case: _check(name, case)))()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_differential_at_length(name):
    """Ten times the CI budget of drawn configurations equal torch bit for bit."""
    SLOW(given(STRATEGIES[name])(lambda case: _check(name + " (slow)", case)))()


@CI
@given(
    lr=lrs,
    t0=lengths,
    mult=st.integers(1, 3),
    epochs=st.lists(
        st.one_of(st.floats(0.0, 500.0), st.integers(0, 500).map(float)), min_size=1, max_size=40
    ),
)
def test_warm_restarts_fractional_epochs(lr, t0, mult, epochs):
    """scheduler.step(epoch) with fractional (and whole) float epochs equals schedule(epoch)."""
    optimizer = _sgd(lr)
    scheduler = lr_scheduler.CosineAnnealingWarmRestarts(optimizer, t0, mult)
    ours = gt.CosineAnnealingWarmRestarts(lr, t0, mult)
    TOTALS["CosineAnnealingWarmRestarts(epoch) configs"] += 1
    for epoch in epochs:
        optimizer.step()
        scheduler.step(epoch)
        TOTALS["CosineAnnealingWarmRestarts(epoch) steps"] += 1
        assert _same(ours(epoch), float(scheduler.get_last_lr()[0])), epoch
    assert ours.values(np.array(epochs)).tolist() == [ours(e) for e in epochs]


@CI
@given(
    lr=lrs,
    mode=st.sampled_from(["min", "max"]),
    threshold_mode=st.sampled_from(["rel", "abs"]),
    factor=st.floats(0.0, 0.99),
    patience=st.integers(0, 4),
    cooldown=st.integers(0, 3),
    min_lr=st.sampled_from([0, 1e-4, 0.05]),
    threshold=st.sampled_from([0.0, 1e-4, 0.1]),
    metrics=st.lists(
        st.one_of(
            st.floats(-10, 10),
            st.sampled_from([1.0, 1.0, float("nan"), float("inf"), -float("inf")]),
        ),
        max_size=60,
    ),
    cut=st.integers(0, 60),
)
def test_reduce_on_plateau(
    lr, mode, threshold_mode, factor, patience, cooldown, min_lr, threshold, metrics, cut
):
    """ReduceLROnPlateau equals torch after each metric, across a JSON state round trip."""
    kwargs = {
        "mode": mode,
        "factor": factor,
        "patience": patience,
        "threshold": threshold,
        "threshold_mode": threshold_mode,
        "cooldown": cooldown,
        "min_lr": min_lr,
    }
    optimizer = _sgd(lr)
    scheduler = lr_scheduler.ReduceLROnPlateau(optimizer, **kwargs)
    ours = gt.ReduceLROnPlateau(lr, **kwargs)
    TOTALS["ReduceLROnPlateau configs"] += 1
    for i, metric in enumerate(metrics):
        if i == cut:  # resume from a state written as JSON
            state = json.loads(json.dumps(ours.state_dict(), allow_nan=False))
            ours = gt.ReduceLROnPlateau(lr, **kwargs)
            ours.load_state_dict(state)
        optimizer.step()
        scheduler.step(metric)
        ours.step(metric)
        TOTALS["ReduceLROnPlateau steps"] += 1
        assert _same(ours(i), float(scheduler.get_last_lr()[0])), i


DELIBERATE = [
    "refused with ConfigError where torch misbehaves or fails later: per-group lists, a "
    "negative rate, fractional lengths, total_iters=0 (LinearLR, PolynomialLR), negative or "
    "fractional milestones, a negative div_factor, a non-finite factor, an unknown "
    "scale_mode, unsorted SequentialLR milestones, a composition inside SequentialLR",
    "a zero length torch divides by: ConfigZeroDivisionError at construction (torch: at the "
    "first step that divides)",
    "past 2**22 steps torch's closed form (its stepping's accumulated rounding, ~k * 2**-53)",
    "to_config() raises for lambda-based schedulers (a config cannot hold code)",
]


def test_zz_report(capsys):
    """Prints the configurations and steps compared; none mismatched."""
    assert TOTALS, "the differential tests above compared nothing"
    assert not MISMATCHES, MISMATCHES[:5]
    with capsys.disabled():
        print("\ncompat.torch differential:", dict(sorted(TOTALS.items())), "mismatches: 0")
        print("deliberate differences from torch:\n  - " + "\n  - ".join(DELIBERATE))


LONG = [
    (
        "CosineAnnealingLR",
        lambda o: lr_scheduler.CosineAnnealingLR(o, 997, 1e-5),
        lambda: gt.CosineAnnealingLR(0.1, 997, 1e-5),
    ),
    (
        "ExponentialLR",
        lambda o: lr_scheduler.ExponentialLR(o, 0.99999),
        lambda: gt.ExponentialLR(0.1, 0.99999),
    ),
    (
        "PolynomialLR",
        lambda o: lr_scheduler.PolynomialLR(o, 40_000, 1.7),
        lambda: gt.PolynomialLR(0.1, 40_000, 1.7),
    ),
    (
        "LinearLR",
        lambda o: lr_scheduler.LinearLR(o, 0.01, 1.0, 40_000),
        lambda: gt.LinearLR(0.1, 0.01, 1.0, 40_000),
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "make", "ours"), LONG, ids=[c[0] for c in LONG])
def test_long_runs_bit_for_bit(name, make, ours):
    """50,000 steps of torch's recursion (its rounding accumulated) equal compat bit for bit,
    past every boundary (T_max, total_iters) and through several cosine periods."""
    run_pair(name + " (50k steps)", make, ours, 50_000, lr=0.1)
