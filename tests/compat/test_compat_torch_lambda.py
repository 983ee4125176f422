"""compat.torch's LambdaLR and MultiplicativeLR call ``lr_lambda`` only for steps reached."""

from __future__ import annotations

from typing import Any

import pytest

from globalstep.compat.torch import ChainedScheduler, ExponentialLR, LambdaLR, MultiplicativeLR


def _recording(value: Any = 0.9) -> tuple[list[int], Any]:
    calls: list[int] = []

    def lam(k: int) -> float:
        calls.append(k)
        return value(k) if callable(value) else value

    return calls, lam


def test_lambda_lr_reads_a_table_of_the_run_s_length() -> None:
    """A lambda that indexes a table as long as the run answers step 0 and the last step."""
    table = [0.1 * 0.9**i for i in range(100)]
    sched = LambdaLR(base_lr=1.0, lr_lambda=lambda k: table[k])
    assert sched(0) == 0.1
    assert sched(99) == table[99]


def test_lambda_lr_calls_the_lambda_for_the_step_read_only() -> None:
    """Reading a step calls lr_lambda for that step, once, however often it is read."""
    calls, lam = _recording(lambda k: 1 / (k + 1))
    sched = LambdaLR(base_lr=1.0, lr_lambda=lam)
    assert calls == [0]  # torch's constructor takes step 0 too
    assert [sched(k) for k in (0, 1, 1, 2)] == [1.0, 0.5, 0.5, 1 / 3]
    assert calls == [0, 1, 2]


def test_multiplicative_lr_multiplies_in_only_the_steps_reached() -> None:
    """MultiplicativeLR(...)(0) calls nothing; step k calls the steps up to k not yet done."""
    calls, lam = _recording(0.5)
    sched = MultiplicativeLR(base_lr=1.0, lr_lambda=lam)
    assert sched(0) == 1.0
    assert calls == []
    assert sched(3) == 0.125
    assert calls == [1, 2, 3]
    assert sched(2) == 0.25
    assert sched(4) == 0.0625
    assert calls == [1, 2, 3, 4]


def test_a_stateful_lambda_is_read_at_each_step_as_it_is_then() -> None:
    """A lambda reading state that changes between steps sees it as it is at that step."""
    state = {"scale": 0.1}
    sched = LambdaLR(base_lr=1.0, lr_lambda=lambda k: state["scale"])
    assert sched(0) == 0.1
    state["scale"] = 0.05
    assert sched(1) == 0.05


def test_a_composition_holding_a_lambda_computes_no_step_ahead() -> None:
    """A ChainedScheduler with a MultiplicativeLR part calls it only up to the step read."""
    calls, lam = _recording(0.5)
    chain = ChainedScheduler([MultiplicativeLR(1.0, lam), ExponentialLR(1.0, gamma=0.5)])
    assert chain.calls_user_code
    assert chain(2) == 0.0625
    assert calls == [1, 2]
    assert not ExponentialLR(1.0, gamma=0.5).calls_user_code


def test_past_the_kept_steps_each_step_calls_the_lambda_once(monkeypatch: Any) -> None:
    """Past the table, reading the next step multiplies one more factor in."""
    import globalstep.compat.torch as compat_torch

    monkeypatch.setattr(compat_torch, "CACHE_STEPS", 4)
    calls, lam = _recording(0.5)
    sched = MultiplicativeLR(base_lr=1.0, lr_lambda=lam)
    assert sched.closed_form(5) == 0.5**5
    assert sched.closed_form(6) == 0.5**6
    assert calls == [1, 2, 3, 4, 5, 6]


torch = pytest.importorskip("torch")


def _torch_rates(cls: Any, lam: Any, state: dict[str, float], n: int) -> list[float]:
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=1.0)
    sched = cls(opt, lam)
    rates = []
    for i in range(n):
        if i:
            state["scale"] *= 0.5  # the forward pass changes what the lambda reads
        w.grad = torch.ones(1)
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return rates


def _attached_rates(cls: Any, lam: Any, state: dict[str, float], n: int) -> list[float]:
    from globalstep import Clock
    from globalstep.integrations.torch import attach

    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=1.0)
    attachment = attach(opt, Clock(), cls(base_lr=1.0, lr_lambda=lam))
    rates = []
    for i in range(n):
        if i:
            state["scale"] *= 0.5
        w.grad = torch.ones(1)
        opt.step()
        rates.append(opt.param_groups[0]["lr"])
    attachment.detach()
    return rates


@pytest.mark.parametrize("name", ["LambdaLR", "MultiplicativeLR"])
def test_attach_calls_a_stateful_lambda_where_torch_does(name: str) -> None:
    """Through attach, lr_lambda is called for the same steps, with the same state, as torch."""
    import globalstep.compat.torch as compat_torch

    results = []
    for cls in (getattr(torch.optim.lr_scheduler, name), getattr(compat_torch, name)):
        state = {"scale": 0.1}
        calls, lam = _recording(lambda k, state=state: state["scale"])
        run = _torch_rates if cls.__module__.startswith("torch") else _attached_rates
        results.append((run(cls, lam, state, 6), calls))
    assert results[1] == results[0]


def test_attach_with_a_table_lambda_runs_to_the_table_s_end() -> None:
    """attach with a lambda indexing a 100-step table trains 99 updates without an error."""
    table = [0.1 * 0.9**i for i in range(100)]
    rates = _attached_rates(LambdaLR, lambda k: table[k], {"scale": 1.0}, 99)
    assert rates == table[:99]


def test_cyclic_lr_calls_its_scale_fn_only_for_the_step_read() -> None:
    """CyclicLR(scale_fn=...) calls the function for the step read, not a block ahead."""
    from globalstep.compat.torch import CyclicLR

    seen: list[float] = []

    def scale(x: float) -> float:
        seen.append(x)
        return 1.0

    sched = CyclicLR(0.1, 1.0, 4, scale_fn=scale, scale_mode="iterations", cycle_momentum=False)
    assert sched.calls_user_code
    seen.clear()
    sched(3)
    assert len(seen) == 1
