"""SequentialLR accepts a ChainedScheduler where torch 2.13 does, with torch's numbers."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from globalstep import ConfigError
from globalstep.compat import torch as gt

from .test_compat_torch_diff import CI, SLOW, _part, run_pair, steps

torch = pytest.importorskip("torch")
lr_scheduler = torch.optim.lr_scheduler


@st.composite
def chain_first(draw: Any) -> tuple[Any, ...]:
    """SequentialLR([ChainedScheduler(parts), then 0 to 2 more], milestones)."""
    lr = draw(st.floats(1e-3, 1.0))
    chained = [_part(draw, lr) for _ in range(draw(st.integers(1, 3)))]
    rest = [_part(draw, lr) for _ in range(draw(st.integers(0, 2)))]
    ms = sorted(draw(st.lists(st.integers(1, 60), min_size=len(rest), max_size=len(rest))))

    def make_torch(o: Any) -> Any:
        chain = lr_scheduler.ChainedScheduler([make(o) for make, _ in chained])
        return lr_scheduler.SequentialLR(o, [chain, *(make(o) for make, _ in rest)], ms)

    def make_ours() -> Any:
        chain = gt.ChainedScheduler([ours for _, ours in chained])
        return gt.SequentialLR([chain, *(ours for _, ours in rest)], ms)

    return make_torch, make_ours, draw(steps), lr


@given(chain_first())
@CI
def test_a_chain_first_equals_torch(case: tuple[Any, ...]) -> None:
    """Drawn chains first in a SequentialLR equal torch's rate step for step, bit for bit."""
    make_torch, make_ours, n, lr = case
    run_pair("SequentialLR(ChainedScheduler, ...)", make_torch, make_ours, n, lr=lr)


@pytest.mark.slow
@given(chain_first())
@SLOW
def test_a_chain_first_equals_torch_at_length(case: tuple[Any, ...]) -> None:
    """Ten times as many drawn chains first equal torch bit for bit."""
    make_torch, make_ours, n, lr = case
    run_pair("SequentialLR(ChainedScheduler, ...) (slow)", make_torch, make_ours, n, lr=lr)


def _torch_rates(make: Any, n: int) -> list[float]:
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns of the parts' step() in its constructor
        sched = make(opt)
        rates = [sched.get_last_lr()[0]]
        for _ in range(n):
            opt.step()
            sched.step()
            rates.append(sched.get_last_lr()[0])
    return rates


def test_warm_up_and_decay_chained_then_cosine() -> None:
    """A LinearLR warm-up chained with an ExponentialLR, then a cosine: torch's numbers."""

    def make(o: Any) -> Any:
        chain = lr_scheduler.ChainedScheduler(
            [lr_scheduler.LinearLR(o, 0.1, 1.0, 5), lr_scheduler.ExponentialLR(o, 0.9)]
        )
        return lr_scheduler.SequentialLR(o, [chain, lr_scheduler.CosineAnnealingLR(o, 10)], [8])

    ours = gt.SequentialLR(
        [
            gt.ChainedScheduler([gt.LinearLR(1.0, 0.1, 1.0, 5), gt.ExponentialLR(1.0, 0.9)]),
            gt.CosineAnnealingLR(1.0, 10),
        ],
        milestones=[8],
    )
    assert ours.values(range(25)).tolist() == _torch_rates(make, 24)


def test_a_chain_after_a_milestone_is_refused_naming_torch_s_error() -> None:
    """A ChainedScheduler after a milestone > 0: refused, as torch raises there."""
    chain = gt.ChainedScheduler([gt.ExponentialLR(1.0, 0.9)])
    with pytest.raises(ConfigError, match=r"NotImplementedError.*here at step 5"):
        gt.SequentialLR([gt.ExponentialLR(1.0, 0.5), chain], milestones=[5])


def test_a_chain_after_a_milestone_at_zero_equals_torch() -> None:
    """A ChainedScheduler after a milestone at step 0 runs from the start, as in torch."""

    def make(o: Any) -> Any:
        chain = lr_scheduler.ChainedScheduler(
            [lr_scheduler.StepLR(o, 3, 0.5), lr_scheduler.ConstantLR(o, 0.5, 4)]
        )
        return lr_scheduler.SequentialLR(o, [lr_scheduler.ExponentialLR(o, 0.9), chain], [0])

    chain = gt.ChainedScheduler([gt.StepLR(1.0, 3, 0.5), gt.ConstantLR(1.0, 0.5, 4)])
    ours = gt.SequentialLR([gt.ExponentialLR(1.0, 0.9), chain], milestones=[0])
    assert ours.values(range(12)).tolist() == _torch_rates(make, 11)


def test_a_nested_sequential_lr_is_refused_with_the_reason() -> None:
    """A SequentialLR inside a SequentialLR: refused, saying how torch shifts it."""
    inner = gt.SequentialLR([gt.ExponentialLR(1.0, 0.5), gt.StepLR(1.0, 2)], milestones=[3])
    with pytest.raises(ConfigError, match="milestones move by one step"):
        gt.SequentialLR([inner, gt.StepLR(1.0, 2)], milestones=[5])
