"""Tests for globalstep.compat.torch: parity with torch.optim.lr_scheduler, and bad input."""

import json
import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from globalstep import ConfigError, StepError
from globalstep.compat import torch as gt

RTOL = 1e-12
DENSE = 2000  # steps run through the real scheduler one step() at a time


def torch_rates(make, steps: int) -> np.ndarray:
    """Returns get_last_lr()[0] after 0..steps calls of scheduler.step()."""
    torch = pytest.importorskip("torch")
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.1)
    scheduler = make(torch.optim.lr_scheduler, optimizer)
    rates = [scheduler.get_last_lr()[0]]
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        rates.append(scheduler.get_last_lr()[0])
    return np.array(rates)


def assert_close(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Relative 1e-12, with rates that are zero in exact arithmetic compared absolutely."""
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=1e-17)


CASES = [
    (
        "StepLR",
        lambda sch, o: sch.StepLR(o, step_size=30, gamma=0.1),
        gt.StepLR(base_lr=0.1, step_size=30, gamma=0.1),
    ),
    (
        "MultiStepLR",
        lambda sch, o: sch.MultiStepLR(o, milestones=[30, 80, 80, 500], gamma=0.5),
        gt.MultiStepLR(base_lr=0.1, milestones=[30, 80, 80, 500], gamma=0.5),
    ),
    (
        "ExponentialLR",
        lambda sch, o: sch.ExponentialLR(o, gamma=0.999),
        gt.ExponentialLR(base_lr=0.1, gamma=0.999),
    ),
    (
        "ConstantLR",
        lambda sch, o: sch.ConstantLR(o, factor=0.25, total_iters=40),
        gt.ConstantLR(base_lr=0.1, factor=0.25, total_iters=40),
    ),
    ("LinearLR", lambda sch, o: sch.LinearLR(o), gt.LinearLR(base_lr=0.1)),
    (
        "LinearLR-down",
        lambda sch, o: sch.LinearLR(o, start_factor=1.0, end_factor=0.05, total_iters=300),
        gt.LinearLR(base_lr=0.1, start_factor=1.0, end_factor=0.05, total_iters=300),
    ),
    (
        "PolynomialLR",
        lambda sch, o: sch.PolynomialLR(o, total_iters=700, power=2.0),
        gt.PolynomialLR(base_lr=0.1, total_iters=700, power=2.0),
    ),
    (
        "CosineAnnealingLR",
        lambda sch, o: sch.CosineAnnealingLR(o, T_max=150, eta_min=0.001),
        gt.CosineAnnealingLR(base_lr=0.1, T_max=150, eta_min=0.001),
    ),
    (
        "CosineAnnealingLR-eta0",
        lambda sch, o: sch.CosineAnnealingLR(o, T_max=97),
        gt.CosineAnnealingLR(base_lr=0.1, T_max=97),
    ),
    (
        "CosineAnnealingWarmRestarts",
        lambda sch, o: sch.CosineAnnealingWarmRestarts(o, T_0=10, T_mult=2, eta_min=1e-4),
        gt.CosineAnnealingWarmRestarts(base_lr=0.1, T_0=10, T_mult=2, eta_min=1e-4),
    ),
    (
        "CosineAnnealingWarmRestarts-1",
        lambda sch, o: sch.CosineAnnealingWarmRestarts(o, T_0=33),
        gt.CosineAnnealingWarmRestarts(base_lr=0.1, T_0=33),
    ),
    (
        "OneCycleLR-cos",
        lambda sch, o: sch.OneCycleLR(o, max_lr=1.0, total_steps=DENSE),
        gt.OneCycleLR(max_lr=1.0, total_steps=DENSE),
    ),
    (
        "OneCycleLR-linear-3phase",
        lambda sch, o: sch.OneCycleLR(
            o,
            max_lr=0.5,
            epochs=4,
            steps_per_epoch=DENSE // 4,
            pct_start=0.25,
            anneal_strategy="linear",
            three_phase=True,
            div_factor=10.0,
            final_div_factor=100.0,
        ),
        gt.OneCycleLR(
            max_lr=0.5,
            epochs=4,
            steps_per_epoch=DENSE // 4,
            pct_start=0.25,
            anneal_strategy="linear",
            three_phase=True,
            div_factor=10.0,
            final_div_factor=100.0,
        ),
    ),
    (
        "SequentialLR",
        lambda sch, o: sch.SequentialLR(
            o,
            [
                sch.LinearLR(o, start_factor=0.1, total_iters=20),
                sch.ExponentialLR(o, gamma=0.99),
                sch.CosineAnnealingLR(o, T_max=300),
            ],
            milestones=[20, 500],
        ),
        gt.SequentialLR(
            (
                gt.LinearLR(base_lr=0.1, start_factor=0.1, total_iters=20),
                gt.ExponentialLR(base_lr=0.1, gamma=0.99),
                gt.CosineAnnealingLR(base_lr=0.1, T_max=300),
            ),
            milestones=(20, 500),
        ),
    ),
]


@pytest.mark.parametrize(("name", "make", "ours"), CASES, ids=[c[0] for c in CASES])
def test_dense_parity(name, make, ours):
    """Every step 0..2000 (boundaries and the past-the-end region included) matches torch."""
    assert_close(ours.values(np.arange(DENSE + 1)), torch_rates(make, DENSE))


@pytest.mark.parametrize(
    ("make", "ours"),
    [
        (lambda sch, o: sch.StepLR(o, step_size=30), gt.StepLR(base_lr=0.1, step_size=30)),
        (lambda sch, o: sch.ExponentialLR(o, gamma=0.9999), gt.ExponentialLR(0.1, 0.9999)),
        (lambda sch, o: sch.CosineAnnealingLR(o, T_max=1000), gt.CosineAnnealingLR(0.1, 1000)),
        (lambda sch, o: sch.PolynomialLR(o, total_iters=10**6), gt.PolynomialLR(0.1, 10**6)),
        (lambda sch, o: sch.LinearLR(o, total_iters=10**6), gt.LinearLR(0.1, total_iters=10**6)),
        (
            lambda sch, o: sch.MultiStepLR(o, milestones=[10**6, 10**9]),
            gt.MultiStepLR(0.1, milestones=[10**6, 10**9]),
        ),
        (
            lambda sch, o: sch.ConstantLR(o, factor=0.5, total_iters=10**9),
            gt.ConstantLR(0.1, factor=0.5, total_iters=10**9),
        ),
    ],
    ids=[
        "StepLR",
        "ExponentialLR",
        "CosineAnnealingLR",
        "PolynomialLR",
        "LinearLR",
        "MultiStepLR",
        "ConstantLR",
    ],
)
def test_large_steps_match_torch_closed_form(make, ours):
    """Past the kept 2**22 steps (2**31-1, 10**9, 10**12), values are torch's closed form."""
    torch = pytest.importorskip("torch")
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.1)
    scheduler = make(torch.optim.lr_scheduler, optimizer)
    for step in (gt.CACHE_STEPS, 2**31 - 1, 10**9, 10**12):
        scheduler.last_epoch = step
        theirs = scheduler._get_closed_form_lr()[0]
        assert ours(step) == pytest.approx(theirs, rel=RTOL, abs=1e-300)


@pytest.mark.parametrize("t_mult", [1, 3])
def test_warm_restarts_large_step_matches_torch_epoch_form(t_mult):
    """CosineAnnealingWarmRestarts at 10**6..10**12 matches torch's step(epoch) path."""
    torch = pytest.importorskip("torch")
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        optimizer, T_0=7, T_mult=t_mult
    )
    ours = gt.CosineAnnealingWarmRestarts(base_lr=0.1, T_0=7, T_mult=t_mult)
    for step in (10**6, 2**31 - 1, 10**9, 10**12):
        scheduler.step(step)
        assert ours(step) == pytest.approx(scheduler.get_last_lr()[0], rel=RTOL)


@pytest.mark.parametrize("three_phase", [False, True])
def test_one_cycle_large_steps_match_torch(three_phase):
    """A OneCycleLR of 10**12 steps matches torch at 10**6, 2**31-1, 10**9 and 10**12."""
    torch = pytest.importorskip("torch")
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    kwargs = {"max_lr": 1.0, "total_steps": 10**12, "three_phase": three_phase}
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, **kwargs)
    ours = gt.OneCycleLR(**kwargs)
    for step in (10**6, 2**31 - 1, 10**9, 10**12):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # step(epoch) is deprecated
            scheduler.step(step)
        assert ours(step) == pytest.approx(scheduler.get_last_lr()[0], rel=RTOL)


def test_sequential_large_steps_match_torch():
    """A SequentialLR at 10**6..10**12 is its last part, restarted at the milestone, as torch."""
    torch = pytest.importorskip("torch")
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sch = torch.optim.lr_scheduler
    tail = sch.CosineAnnealingLR(optimizer, T_max=997)
    scheduler = sch.SequentialLR(optimizer, [sch.ConstantLR(optimizer), tail], milestones=[10])
    ours = gt.SequentialLR(
        (gt.ConstantLR(0.1), gt.CosineAnnealingLR(0.1, T_max=997)), milestones=(10,)
    )
    for _ in range(10):
        optimizer.step()
        scheduler.step()
    assert ours(10) == pytest.approx(scheduler.get_last_lr()[0], rel=RTOL)
    for step in (10**6, 2**31 - 1, 10**9, 10**12):
        tail.last_epoch = step - 10
        assert ours(step) == pytest.approx(tail._get_closed_form_lr()[0], rel=RTOL)


def test_one_cycle_last_valid_step_and_error_after():
    """OneCycleLR accepts total_steps and, like torch, fails on the step after it."""
    torch = pytest.importorskip("torch")
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1.0, total_steps=10)
    ours = gt.OneCycleLR(max_lr=1.0, total_steps=10)
    for _ in range(10):
        optimizer.step()
        scheduler.step()
    assert ours(10) == pytest.approx(scheduler.get_last_lr()[0], rel=RTOL)
    optimizer.step()
    with pytest.raises(ValueError, match="Tried to step 11 times"):
        scheduler.step()
    with pytest.raises(StepError, match="total_steps=10") as info:
        ours(11)
    assert info.value.step == 11


def test_cosine_annealing_rises_past_t_max():
    """Past T_max the cosine goes back up, as torch's recursive form does."""
    s = gt.CosineAnnealingLR(base_lr=1.0, T_max=10)
    assert s(10) == 0.0
    assert s(15) == pytest.approx(0.5)
    assert s(20) == pytest.approx(1.0)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_config_round_trip(case):
    """to_config() survives JSON and from_config() rebuilds an equal schedule."""
    ours = case[2]
    config = json.loads(json.dumps(ours.to_config()))
    again = gt.TorchSchedule.from_config(config)
    assert again == ours
    assert again.values(np.arange(50)).tolist() == ours.values(np.arange(50)).tolist()


@given(st.integers(min_value=0, max_value=10**9))
def test_values_equal_call(step):
    """values() equals __call__ element by element."""
    s = gt.CosineAnnealingWarmRestarts(base_lr=0.3, T_0=5, T_mult=2, eta_min=0.01)
    assert s.values([step])[0] == s(step)
    assert math.isfinite(s(step))


@pytest.mark.parametrize("step", [-1, 1.5, "3", True, None])
def test_bad_step(step):
    """A negative or non-integer step raises StepError naming the step."""
    with pytest.raises(StepError, match="`step` must be"):
        gt.StepLR(base_lr=0.1, step_size=3)(step)


@pytest.mark.parametrize(
    ("make", "parameter"),
    [
        (lambda: gt.StepLR(base_lr=0.1, step_size=0), "step_size"),
        (lambda: gt.StepLR(base_lr=-0.1, step_size=3), "base_lr"),
        (lambda: gt.StepLR(base_lr=float("nan"), step_size=3), "base_lr"),
        (lambda: gt.StepLR(base_lr=0.1, step_size=3, gamma=float("inf")), "gamma"),
        (lambda: gt.MultiStepLR(base_lr=0.1, milestones=[3, -1]), "milestones"),
        (lambda: gt.MultiStepLR(base_lr=0.1, milestones="3"), "milestones"),
        (lambda: gt.ExponentialLR(base_lr=0.1, gamma="0.9"), "gamma"),
        (lambda: gt.ConstantLR(base_lr=0.1, factor=1.5), "factor"),
        (lambda: gt.ConstantLR(base_lr=0.1, total_iters=-1), "total_iters"),
        (lambda: gt.LinearLR(base_lr=0.1, start_factor=0.0), "start_factor"),
        (lambda: gt.LinearLR(base_lr=0.1, end_factor=2.0), "end_factor"),
        (lambda: gt.LinearLR(base_lr=0.1, total_iters=0), "total_iters"),
        (lambda: gt.PolynomialLR(base_lr=0.1, total_iters=2.0), "total_iters"),
        (lambda: gt.PolynomialLR(base_lr=0.1, power=float("nan")), "power"),
        (lambda: gt.CosineAnnealingLR(base_lr=0.1, T_max=0), "T_max"),
        (lambda: gt.CosineAnnealingWarmRestarts(base_lr=0.1, T_0=0), "T_0"),
        (lambda: gt.CosineAnnealingWarmRestarts(base_lr=0.1, T_0=3, T_mult=0), "T_mult"),
        (lambda: gt.OneCycleLR(max_lr=1.0), "total_steps"),
        (lambda: gt.OneCycleLR(max_lr=1.0, total_steps=0), "total_steps"),
        (lambda: gt.OneCycleLR(max_lr=1.0, epochs=0, steps_per_epoch=3), "epochs"),
        (lambda: gt.OneCycleLR(max_lr=1.0, total_steps=9, pct_start=1.5), "pct_start"),
        (lambda: gt.OneCycleLR(max_lr=1.0, total_steps=9, anneal_strategy="x"), "anneal_strategy"),
        (lambda: gt.OneCycleLR(max_lr=1.0, total_steps=9, div_factor=0.0), "div_factor"),
        (
            lambda: gt.OneCycleLR(max_lr=1.0, total_steps=9, final_div_factor=-1.0),
            "final_div_factor",
        ),
        (lambda: gt.OneCycleLR(max_lr=1.0, total_steps=9, three_phase=1), "three_phase"),
        (lambda: gt.SequentialLR((), milestones=()), "schedulers"),
        (lambda: gt.SequentialLR((gt.ExponentialLR(0.1, 0.9), 3), (2,)), "schedulers"),
        (
            lambda: gt.SequentialLR((gt.ExponentialLR(0.1, 0.9), gt.ExponentialLR(0.1, 0.9)), ()),
            "milestones",
        ),
        (
            lambda: gt.SequentialLR((gt.ExponentialLR(0.1, 0.9),) * 3, milestones=(5, 4)),
            "milestones",
        ),
    ],
)
def test_bad_parameters(make, parameter):
    """Every invalid parameter raises ConfigError naming it and the value received."""
    with pytest.raises(ConfigError, match=f"`{parameter}`.*got {parameter}=") as info:
        make()
    assert info.value.parameter == parameter


def test_from_config_unknown_class():
    """from_config() of an unknown class names the known ones."""
    with pytest.raises(ConfigError, match="StepLR"):
        gt.TorchSchedule.from_config({"class": "Nope", "config": {}})


def test_fields_stay_as_given():
    """Construction keeps each field as the caller gave it (milestones unsorted, no total)."""
    multi = gt.MultiStepLR(base_lr=1.0, milestones=[5, 2], gamma=0.5)
    assert multi.milestones == [5, 2]
    assert multi.values([1, 2, 5]).tolist() == [1.0, 0.5, 0.25]
    cycle = gt.OneCycleLR(max_lr=1.0, epochs=2, steps_per_epoch=5)
    assert (cycle.total_steps, cycle.steps_total) == (None, 10)


def test_values_keep_the_shape_of_the_steps():
    """values() of a 2-D array of steps (or of none) has that shape, as core schedules do."""
    lr = gt.StepLR(base_lr=0.1, step_size=2, gamma=0.5)
    assert lr.values([[0, 1], [2, 3]]).tolist() == [[0.1, 0.1], [0.05, 0.05]]
    assert lr.values([]).shape == (0,)


@pytest.mark.parametrize(("steps", "shown"), [([1.5, 2.7], "dtype float64"), ([3, -1], "step=-1")])
def test_values_refuse_steps_that_call_refuses(steps, shown):
    """values() refuses fractional or negative steps, which it used to truncate to ints."""
    with pytest.raises(StepError, match=rf"`steps` must be an array of ints >= 0; got {shown}"):
        gt.StepLR(base_lr=0.1, step_size=2).values(steps)


# -- new schedulers' errors ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: gt.LambdaLR(0.1, lr_lambda=3), TypeError, "lr_lambda.*function of the step"),
        (lambda: gt.MultiplicativeLR(0.1, lr_lambda="x"), TypeError, "lr_lambda"),
        (lambda: gt.LambdaLR(0.1, [lambda k: 1.0]), ConfigError, "one schedule per param"),
        (lambda: gt.OneCycleLR(max_lr=[1.0, 0.5], total_steps=9), ConfigError, "per param"),
        (lambda: gt.CosineAnnealingLR(0.1, T_max=0), ZeroDivisionError, "T_max.*divides"),
        (lambda: gt.CyclicLR(0.1, 1.0, step_size_up=0), ZeroDivisionError, "step_size_up"),
        (lambda: gt.OneCycleLR(1.0, total_steps=9, div_factor=0.0), ZeroDivisionError, "div"),
        (lambda: gt.OneCycleLR(1.0, total_steps=2, pct_start=0.5), ZeroDivisionError, "pct_start"),
        (lambda: gt.OneCycleLR(1.0, total_steps=9, pct_start=1), ConfigError, "pct_start"),
        (lambda: gt.OneCycleLR(1.0, total_steps=9, cycle_momentum=1), ConfigError, "cycle_mom"),
        (lambda: gt.CosineAnnealingWarmRestarts(0.1, T_0=3, T_mult=0), ConfigError, "T_mult"),
        (lambda: gt.CyclicLR(0.1, 1.0, mode="up"), ConfigError, "mode"),
        (lambda: gt.CyclicLR(0.1, 1.0, scale_fn=abs, scale_mode="x"), ConfigError, "scale_mode"),
        (lambda: gt.CyclicLR(0.1, 1.0, scale_fn=3), ConfigError, "scale_fn"),
        (lambda: gt.SWALR(0.1, 0.05, anneal_epochs=-1), ConfigError, "anneal_epochs"),
        (lambda: gt.SWALR(0.1, 0.05, anneal_strategy="x"), ConfigError, "anneal_strategy"),
        (lambda: gt.ReduceLROnPlateau(0.1, factor=1.0), ConfigError, "factor.*< 1.0"),
        (lambda: gt.ReduceLROnPlateau(0.1, mode="best"), ConfigError, "mode"),
        (lambda: gt.ReduceLROnPlateau(0.1, threshold_mode="x"), ConfigError, "threshold_mode"),
        (lambda: gt.ReduceLROnPlateau(0.1, patience=1.5), ConfigError, "patience"),
        (lambda: gt.ChainedScheduler([]), ConfigError, "non-empty"),
        (
            lambda: gt.ChainedScheduler([gt.ConstantLR(0.1), gt.ReduceLROnPlateau(0.1)]),
            ConfigError,
            "ReduceLROnPlateau",
        ),
        (
            lambda: gt.ChainedScheduler([gt.ConstantLR(0.1), gt.ExponentialLR(0.2, 0.9)]),
            ConfigError,
            "one base_lr",
        ),
        (
            lambda: gt.ChainedScheduler([gt.ExponentialLR(0.1, 0.9, interval=2)]),
            ConfigError,
            "interval on the ChainedScheduler",
        ),
        (
            lambda: gt.SequentialLR(
                [gt.ConstantLR(0.1), gt.ChainedScheduler([gt.ConstantLR(0.1)])], [3]
            ),
            ConfigError,
            "NotImplementedError",
        ),
    ],
)
def test_bad_arguments_of_new_schedulers(make, error, match):
    """Each refused argument raises the exception type torch raises, naming the parameter."""
    with pytest.raises(error, match=match):
        make()


def test_zero_division_at_the_step_torch_divides():
    """ConstantLR(factor=0) and PolynomialLR(power<0) divide by zero at total_iters, as torch."""
    constant = gt.ConstantLR(0.1, factor=0.0, total_iters=3)
    assert constant(2) == 0.0
    with pytest.raises(ZeroDivisionError, match="Use factor > 0") as info:
        constant(3)
    assert isinstance(info.value, StepError)
    assert info.value.step == 3
    with pytest.raises(ZeroDivisionError, match="power >= 0"):
        gt.PolynomialLR(0.1, total_iters=4, power=-1.0)(4)


@pytest.mark.parametrize("epoch", [-1.0, float("nan"), float("inf")])
def test_warm_restarts_bad_epoch(epoch):
    """A negative or non-finite epoch raises StepError (a ValueError, as torch's)."""
    with pytest.raises(StepError, match="finite epoch >= 0"):
        gt.CosineAnnealingWarmRestarts(0.1, T_0=3)(epoch)


@pytest.mark.parametrize(
    "schedule",
    [
        gt.LambdaLR(0.1, lambda k: 0.5),
        gt.MultiplicativeLR(0.1, lambda k: 0.5),
        gt.CyclicLR(0.1, 1.0, scale_fn=lambda x: 1.0),
        gt.SequentialLR([gt.ConstantLR(0.1), gt.LambdaLR(0.1, lambda k: 1.0)], [2]),
    ],
)
def test_callables_do_not_go_into_configs(schedule):
    """to_config() of a schedule holding a Python callable raises, saying what to do."""
    assert schedule(1) > 0  # it works otherwise
    with pytest.raises(ConfigError, match="Python callable, which a config cannot hold"):
        schedule.to_config()


def test_momentum_is_none_where_torch_writes_none():
    """momentum(step) is None for schedulers that write no momentum, a float for OneCycleLR."""
    assert gt.StepLR(0.1, 3).momentum(5) is None
    assert not gt.StepLR(0.1, 3).has_momentum
    assert gt.OneCycleLR(1.0, total_steps=9, cycle_momentum=False).momentum(3) is None
    assert gt.OneCycleLR(1.0, total_steps=9).momentum(0) == pytest.approx(0.95)
    chained = gt.ChainedScheduler([gt.CyclicLR(0.1, 1.0, step_size_up=2), gt.ConstantLR(0.1)])
    assert chained.has_momentum
    assert chained.momentum(2) == pytest.approx(0.8)


# -- what torch accepts and compat refuses, and why ------------------------------------------
def _torch_rates(make, n, lr=0.1, epoch=None):
    torch = pytest.importorskip("torch")
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scheduler = make(torch.optim.lr_scheduler, optimizer)
        rates = [scheduler.get_last_lr()[0]]
        for _ in range(n):
            optimizer.step()
            scheduler.step()
            rates.append(scheduler.get_last_lr()[0])
    return rates, scheduler


def test_why_negative_rates_are_refused():
    """torch's optimizers refuse a negative lr, so a negative base_lr never reaches a scheduler."""
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="Invalid learning rate"):
        torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=-0.1)
    with pytest.raises(ConfigError, match=r"base_lr.*negative lr"):
        gt.StepLR(-0.1, 3)


def test_why_fractional_lengths_are_refused():
    """torch's StepLR(step_size=2.5) decays at multiples of 5 when stepped but at multiples of
    2.5 in its closed form: two answers, so compat asks for an int (or a duration)."""
    rates, scheduler = _torch_rates(lambda sch, o: sch.StepLR(o, 2.5, 0.5), 5)
    assert rates[3] == 0.1
    assert rates[5] == 0.05
    scheduler.last_epoch = 5
    assert scheduler._get_closed_form_lr()[0] == 0.025  # closed form: two decays by 5
    with pytest.raises(ConfigError, match="step_size"):
        gt.StepLR(0.1, 2.5)


@pytest.mark.parametrize(
    ("make", "ours"),
    [
        (lambda sch, o: sch.LinearLR(o, 0.5, total_iters=0), lambda: gt.LinearLR(0.1, 0.5, 1.0, 0)),
        (lambda sch, o: sch.PolynomialLR(o, total_iters=0), lambda: gt.PolynomialLR(0.1, 0)),
    ],
    ids=["LinearLR", "PolynomialLR"],
)
def test_why_zero_total_iters_is_refused(make, ours):
    """With total_iters=0 torch's stepping holds one rate while its closed form divides by
    zero: compat refuses it, with ZeroDivisionError."""
    rates, scheduler = _torch_rates(make, 3)
    assert len(set(rates)) == 1
    with pytest.raises(ZeroDivisionError):
        scheduler._get_closed_form_lr()
    with pytest.raises(ZeroDivisionError, match="total_iters"):
        ours()


@pytest.mark.parametrize(
    ("make", "ours", "parameter"),
    [
        (lambda sch, o: sch.MultiStepLR(o, [-1, 2.5]), lambda: gt.MultiStepLR(0.1, [-1]), "mile"),
        (lambda sch, o: sch.ConstantLR(o, 0.5, -2), lambda: gt.ConstantLR(0.1, 0.5, -2), "total"),
    ],
    ids=["MultiStepLR", "ConstantLR"],
)
def test_why_negative_or_fractional_milestones_are_refused(make, ours, parameter):
    """torch's stepping never reaches a milestone of -1 or 2.5 (or total_iters=-2) that its
    closed form counts: compat refuses them."""
    rates, scheduler = _torch_rates(make, 4)
    scheduler.last_epoch = 4
    assert rates[4] != scheduler._get_closed_form_lr()[0]
    with pytest.raises(ConfigError, match=parameter):
        ours()


def test_why_negative_div_factor_is_refused():
    """torch's OneCycleLR turns a negative div_factor into negative rates without a word."""
    rates, _ = _torch_rates(
        lambda sch, o: sch.OneCycleLR(o, 1.0, total_steps=5, div_factor=-2.0), 1
    )
    assert rates[0] < 0
    with pytest.raises(ConfigError, match=r"div_factor.*negative rates"):
        gt.OneCycleLR(1.0, total_steps=5, div_factor=-2.0)


def test_why_non_finite_gamma_is_refused():
    """torch's ExponentialLR(gamma=inf) makes the rate inf then NaN (inf * 0 never recovers)."""
    rates, _ = _torch_rates(lambda sch, o: sch.ExponentialLR(o, float("inf")), 1)
    assert math.isinf(rates[1])
    with pytest.raises(ConfigError, match=r"gamma.*finite"):
        gt.ExponentialLR(0.1, float("inf"))


def test_why_an_unknown_scale_mode_is_refused():
    """torch's CyclicLR takes scale_mode="cycles" (a typo) silently as "iterations"."""
    fn = lambda x: 0.5**x  # noqa: E731
    typo, _ = _torch_rates(
        lambda sch, o: sch.CyclicLR(
            o, 0.1, 1.0, 2, scale_fn=fn, scale_mode="cycles", cycle_momentum=False
        ),
        6,
    )
    iters, _ = _torch_rates(
        lambda sch, o: sch.CyclicLR(
            o, 0.1, 1.0, 2, scale_fn=fn, scale_mode="iterations", cycle_momentum=False
        ),
        6,
    )
    assert typo == iters
    with pytest.raises(ConfigError, match="scale_mode"):
        gt.CyclicLR(0.1, 1.0, 2, scale_fn=fn, scale_mode="cycles")


def test_why_unsorted_sequential_milestones_are_refused():
    """torch's SequentialLR with milestones [10, 5] silently never runs its middle scheduler."""

    def parts(sch, o):
        return [sch.ConstantLR(o, 0.5, 100), sch.ExponentialLR(o, 0.9), sch.ConstantLR(o, 0.25)]

    ordered, _ = _torch_rates(lambda sch, o: sch.SequentialLR(o, parts(sch, o), [5, 10]), 15)
    unsorted, _ = _torch_rates(lambda sch, o: sch.SequentialLR(o, parts(sch, o), [10, 5]), 15)
    assert ordered[6] == pytest.approx(0.09)  # sorted: the ExponentialLR runs from step 5
    assert not any(r == pytest.approx(0.09) for r in unsorted)  # unsorted: it never does
    with pytest.raises(ConfigError, match="increasing"):
        gt.SequentialLR(
            [gt.ConstantLR(0.1), gt.ExponentialLR(0.1, 0.5), gt.ConstantLR(0.1)], [10, 5]
        )


def test_why_composites_are_refused_inside_sequential():
    """torch's SequentialLR raises NotImplementedError when it hands over to a ChainedScheduler."""
    torch = pytest.importorskip("torch")
    sch = torch.optim.lr_scheduler
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    inner = sch.ChainedScheduler([sch.ExponentialLR(optimizer, 0.9)])
    outer = sch.SequentialLR(optimizer, [sch.ConstantLR(optimizer), inner], [1])
    optimizer.step()
    with pytest.raises(NotImplementedError):
        outer.step()


def test_per_group_lists_are_one_schedule_per_group():
    """torch's OneCycleLR(max_lr=[1.0, 0.3]) on two param groups equals two compat schedules,
    one per group, rate and momentum: the per-group list is refused for that spelling."""
    torch = pytest.importorskip("torch")
    groups = [{"params": [torch.nn.Parameter(torch.zeros(1))]} for _ in range(2)]
    optimizer = torch.optim.SGD(groups, lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=[1.0, 0.3], total_steps=20, base_momentum=[0.8, 0.85]
    )
    ours = [
        gt.OneCycleLR(1.0, total_steps=20, base_momentum=0.8),
        gt.OneCycleLR(0.3, total_steps=20, base_momentum=0.85),
    ]
    for k in range(21):
        if k:
            optimizer.step()
            scheduler.step()
        for group, schedule in zip(optimizer.param_groups, ours, strict=True):
            assert (group["lr"], group["momentum"]) == (schedule(k), schedule.momentum(k))


@pytest.mark.parametrize(
    "schedule",
    [
        gt.OneCycleLR(1.0, total_steps="3ep", cycle_momentum=False, three_phase=True),
        gt.CyclicLR(0.1, 1.0, step_size_up=2.5, step_size_down=None, mode="exp_range"),
        gt.CosineAnnealingWarmRestarts(0.1, T_0=4, T_mult=2, interval="epoch"),
        gt.SWALR(0.1, 0.05, anneal_epochs="2ep"),
        gt.ChainedScheduler([gt.ConstantLR(0.1), gt.MultiStepLR(0.1, ["2ep", 9])]),
        gt.ReduceLROnPlateau(0.1, mode="max", patience=2),
    ],
    ids=lambda s: type(s).__name__,
)
def test_config_round_trip_of_new_schedulers(schedule):
    """to_config() of every new scheduler (durations included) survives JSON and rebuilds it."""
    config = json.loads(json.dumps(schedule.to_config()))
    assert gt.TorchSchedule.from_config(config) == schedule
