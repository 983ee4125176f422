"""globalstep.compat.transformers: transformers' schedules, with its names and numbers."""

from __future__ import annotations

import json
import math
import pathlib
import random
from typing import Any

import numpy as np
import pytest

from globalstep import ConfigError
from globalstep.compat import transformers as compat_hf
from globalstep.compat.torch import TorchSchedule

DATA = json.loads(
    (pathlib.Path(__file__).parent.parent / "data" / "transformers_schedules.json").read_text()
)
CASES = DATA["cases"]


def _id(case: dict[str, Any]) -> str:
    return case["function"].removeprefix("get_") + "-" + "-".join(map(str, case["kwargs"].values()))


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_rates_equal_transformers_at_every_step(case: dict[str, Any]) -> None:
    """values() and the scalar call equal transformers' rates (written by transformers 5.25)."""
    schedule = getattr(compat_hf, case["function"])(case["lr"], **case["kwargs"])
    steps = list(range(len(case["rates"])))
    assert schedule.values(steps).tolist() == case["rates"]
    assert [schedule(k) for k in steps] == case["rates"]


def test_every_function_is_covered_by_the_literal_cases() -> None:
    """Every public function has rates written by transformers, in every wsd shape pair."""
    functions = {c["function"] for c in CASES}
    assert functions == {n for n in compat_hf.__all__ if n.startswith("get_")}
    shapes = {
        (c["kwargs"]["warmup_type"], c["kwargs"]["decay_type"])
        for c in CASES
        if c["function"] == "get_wsd_schedule"
    }
    assert len(shapes) == 9


def test_the_cosine_rises_again_past_num_training_steps() -> None:
    """Past num_training_steps the cosine follows its wave back up, as transformers' does."""
    s = compat_hf.get_cosine_schedule_with_warmup(1.0, num_warmup_steps=0, num_training_steps=10)
    assert s(10) < 1e-15
    assert s(15) == pytest.approx(0.5)
    assert s(20) == 1.0


def test_inverse_sqrt_is_one_at_the_end_of_warm_up() -> None:
    """The inverse square root starts its decay at 1 at step num_warmup_steps (no shift)."""
    s = compat_hf.get_inverse_sqrt_schedule(2.0, num_warmup_steps=4)
    assert [s(k) for k in (3, 4, 16)] == [1.5, 2.0, 1.0]


def test_schedules_round_trip_through_their_config() -> None:
    """to_config() and TorchSchedule.from_config() give back an equal schedule."""
    for case in CASES:
        s = getattr(compat_hf, case["function"])(case["lr"], **case["kwargs"])
        back = TorchSchedule.from_config(json.loads(json.dumps(s.to_config())))
        assert back == s
        assert back.values(range(12)).tolist() == s.values(range(12)).tolist()
        assert s.describe().startswith(f"transformers.{case['function']}(")


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: compat_hf.get_constant_schedule(0.1, last_epoch=5), "`last_epoch` must be -1"),
        (
            lambda: compat_hf.get_polynomial_decay_schedule_with_warmup(1e-7, 1, 10),
            "`lr_end` must be < the optimizer's lr",
        ),
        (
            lambda: compat_hf.get_cosine_with_min_lr_schedule_with_warmup(1.0, 1, 10),
            "`min_lr` must be given, or min_lr_rate, not both",
        ),
        (
            lambda: compat_hf.get_cosine_with_min_lr_schedule_with_warmup(
                1.0, 1, 10, min_lr=0.1, min_lr_rate=0.1
            ),
            "`min_lr` must be given, or min_lr_rate, not both",
        ),
        (
            lambda: compat_hf.get_wsd_schedule(1.0, 1, 2),
            "`num_training_steps` must be given, or num_stable_steps",
        ),
        (
            lambda: compat_hf.get_wsd_schedule(1.0, 1, 2, 10, warmup_type="exp"),
            "`warmup_type` must be one of",
        ),
        (lambda: compat_hf.get_linear_schedule_with_warmup(1.0, -1, 10), "`num_warmup_steps`"),
        (lambda: compat_hf.get_linear_schedule_with_warmup(1.0, 1, 10.5), "`num_training_steps`"),
    ],
)
def test_what_transformers_refuses_is_refused_with_the_parameter_named(
    call: Any, match: str
) -> None:
    """Each refusal names the parameter, the rule and the value."""
    with pytest.raises(ConfigError, match=match):
        call()


def test_wsd_with_both_lengths_warns_and_uses_the_stable_steps() -> None:
    """Both num_training_steps and num_stable_steps: a warning, as transformers gives."""
    with pytest.warns(UserWarning, match="num_stable_steps is used"):
        s = compat_hf.get_wsd_schedule(1.0, 2, 2, num_training_steps=100, num_stable_steps=1)
    assert s(4) == 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * 0.5))


# -- against the installed transformers ------------------------------------------------------


def _random_cases(seed: int) -> list[tuple[str, float, dict[str, Any]]]:
    rng = random.Random(seed)
    cases: list[tuple[str, float, dict[str, Any]]] = []
    for _ in range(12):
        lr = rng.choice([1e-5, 3e-4, 0.1, 1.0, 7.0])
        w, n = rng.randint(0, 12), rng.randint(1, 60)
        n = max(n, w + 1)
        cases += [
            ("get_constant_schedule", lr, {}),
            ("get_constant_schedule_with_warmup", lr, {"num_warmup_steps": w}),
            (
                "get_linear_schedule_with_warmup",
                lr,
                {"num_warmup_steps": w, "num_training_steps": n},
            ),
            (
                "get_cosine_schedule_with_warmup",
                lr,
                {"num_warmup_steps": w, "num_training_steps": n, "num_cycles": rng.random() * 3},
            ),
            (
                "get_cosine_with_hard_restarts_schedule_with_warmup",
                lr,
                {"num_warmup_steps": w, "num_training_steps": n, "num_cycles": rng.randint(1, 4)},
            ),
            (
                "get_polynomial_decay_schedule_with_warmup",
                lr,
                {
                    "num_warmup_steps": w,
                    "num_training_steps": n,
                    "lr_end": lr * rng.random() / 2,
                    "power": rng.choice([0.5, 1.0, 2.0, 3.3]),
                },
            ),
            ("get_inverse_sqrt_schedule", lr, {"num_warmup_steps": w}),
            (
                "get_inverse_sqrt_schedule",
                lr,
                {"num_warmup_steps": w, "timescale": rng.randint(1, 30)},
            ),
            (
                "get_cosine_with_min_lr_schedule_with_warmup",
                lr,
                {"num_warmup_steps": w, "num_training_steps": n, "min_lr": lr * rng.random()},
            ),
            (
                "get_wsd_schedule",
                lr,
                {
                    "num_warmup_steps": w,
                    "num_decay_steps": rng.randint(0, 20),
                    "num_training_steps": n + 20,
                    "warmup_type": rng.choice(["linear", "cosine", "1-sqrt"]),
                    "decay_type": rng.choice(["linear", "cosine", "1-sqrt"]),
                    "min_lr_ratio": rng.choice([0, 0.1, 0.5]),
                    "num_cycles": rng.choice([0.5, 0.25, 1.0]),
                },
            ),
        ]
    return cases


def _transformers_rates(function: str, optimizer: Any, kwargs: dict[str, Any], n: int) -> Any:
    hf = pytest.importorskip("transformers.optimization")
    scheduler = getattr(hf, function)(optimizer, **kwargs)
    out = [scheduler.get_last_lr()[0]]
    for _ in range(n):
        optimizer.step()
        scheduler.step()
        out.append(scheduler.get_last_lr()[0])
    return out


@pytest.mark.parametrize("seed", range(4))
def test_rates_equal_the_installed_transformers(seed: int) -> None:
    """Random arguments: every step 0 .. N + 10 equals the installed transformers' rate."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers.optimization")
    for function, lr, kwargs in _random_cases(seed):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
        steps = kwargs.get("num_training_steps", 40) + 10
        expected = _transformers_rates(function, optimizer, kwargs, steps)
        ours = getattr(compat_hf, function)(lr, **kwargs)
        assert ours.values(range(steps + 1)).tolist() == expected, (function, lr, kwargs)


def test_an_optimizer_first_gives_transformers_numbers() -> None:
    """An optimizer as first argument: its group lr is the base, its default lr the decay's."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers.optimization")
    kwargs = {"num_warmup_steps": 2, "num_training_steps": 12, "lr_end": 1e-4, "power": 2.0}

    def optimizer() -> Any:
        w = torch.nn.Parameter(torch.zeros(1))
        return torch.optim.SGD([{"params": [w], "lr": 0.5}], lr=0.01)

    function = "get_polynomial_decay_schedule_with_warmup"
    expected = _transformers_rates(function, optimizer(), kwargs, 20)
    ours = compat_hf.get_polynomial_decay_schedule_with_warmup(optimizer(), **kwargs)
    assert ours.values(range(21)).tolist() == expected


def test_an_optimizer_with_two_rates_is_refused() -> None:
    """Param groups with different rates: one schedule per group, said in the error."""
    torch = pytest.importorskip("torch")
    a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([{"params": [a], "lr": 0.1}, {"params": [b], "lr": 0.2}], lr=0.1)
    with pytest.raises(ConfigError, match="must have one lr in all its param groups"):
        compat_hf.get_linear_schedule_with_warmup(opt, 1, 10)


def test_attach_drives_an_optimizer_as_transformers_scheduler_does() -> None:
    """attach with a compat schedule sets the rates transformers' scheduler sets."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers.optimization")
    from globalstep import Clock
    from globalstep.integrations.torch import attach

    kwargs = {"num_warmup_steps": 3, "num_training_steps": 10}
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=0.1)
    expected = _transformers_rates(
        "get_cosine_schedule_with_warmup",
        torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1),
        kwargs,
        14,
    )
    attachment = attach(opt, Clock(), compat_hf.get_cosine_schedule_with_warmup(opt, **kwargs))
    used = []
    for _ in range(15):
        w.grad = torch.ones(1)
        opt.step()
        used.append(opt.param_groups[0]["lr"])
    attachment.detach()
    assert np.array_equal(used, expected)
