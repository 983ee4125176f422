"""Writes tests/data/transformers_schedules.json: transformers' own rates, step by step.

Run once with transformers 5.x and torch installed:

    python tests/data/make_transformers_schedules.py tests/data/transformers_schedules.json

Each case is a ``transformers.optimization`` function, its arguments (the optimizer's
``lr`` apart) and the rate ``scheduler.get_last_lr()[0]`` holds after ``k`` calls of
``scheduler.step()``, for ``k`` in ``0 .. steps``: ``tests/compat/test_transformers.py``
compares ``globalstep.compat.transformers`` with them where transformers is absent.
"""

from __future__ import annotations

import json
import sys
from typing import Any

# (function, lr, arguments, steps): the settings of transformers' own tests (lr 10, 10 steps,
# 2 of warm-up), each read 10 steps past its end, and a few more shapes and lengths.
CASES: list[tuple[str, float, dict[str, Any], int]] = [
    ("get_constant_schedule", 10.0, {}, 20),
    ("get_constant_schedule_with_warmup", 10.0, {"num_warmup_steps": 4}, 20),
    ("get_constant_schedule_with_warmup", 0.3, {"num_warmup_steps": 0}, 5),
    (
        "get_linear_schedule_with_warmup",
        10.0,
        {"num_warmup_steps": 2, "num_training_steps": 10},
        20,
    ),
    ("get_linear_schedule_with_warmup", 3e-4, {"num_warmup_steps": 7, "num_training_steps": 7}, 17),
    (
        "get_cosine_schedule_with_warmup",
        10.0,
        {"num_warmup_steps": 2, "num_training_steps": 10},
        20,
    ),
    (
        "get_cosine_schedule_with_warmup",
        5e-5,
        {"num_warmup_steps": 3, "num_training_steps": 50, "num_cycles": 1.5},
        60,
    ),
    (
        "get_cosine_with_hard_restarts_schedule_with_warmup",
        10.0,
        {"num_warmup_steps": 2, "num_cycles": 2, "num_training_steps": 10},
        20,
    ),
    (
        "get_cosine_with_hard_restarts_schedule_with_warmup",
        1e-3,
        {"num_warmup_steps": 0, "num_cycles": 3, "num_training_steps": 31},
        41,
    ),
    (
        "get_polynomial_decay_schedule_with_warmup",
        10.0,
        {"num_warmup_steps": 2, "num_training_steps": 10, "power": 2.0, "lr_end": 1e-7},
        20,
    ),
    (
        "get_polynomial_decay_schedule_with_warmup",
        2e-5,
        {"num_warmup_steps": 5, "num_training_steps": 40, "power": 0.5, "lr_end": 1e-6},
        50,
    ),
    ("get_inverse_sqrt_schedule", 10.0, {"num_warmup_steps": 2}, 20),
    ("get_inverse_sqrt_schedule", 1e-3, {"num_warmup_steps": 4, "timescale": 9}, 30),
    ("get_inverse_sqrt_schedule", 1e-3, {"num_warmup_steps": 0}, 10),
    (
        "get_cosine_with_min_lr_schedule_with_warmup",
        10.0,
        {"num_warmup_steps": 2, "num_training_steps": 10, "min_lr_rate": 0.1},
        20,
    ),
    (
        "get_cosine_with_min_lr_schedule_with_warmup",
        10.0,
        {"num_warmup_steps": 2, "num_training_steps": 10, "min_lr": 1e-5},
        20,
    ),
    *[
        (
            "get_wsd_schedule",
            10.0,
            {
                "num_warmup_steps": 2,
                "num_decay_steps": 3,
                "num_training_steps": 10,
                "warmup_type": w,
                "decay_type": d,
            },
            20,
        )
        for w in ("linear", "cosine", "1-sqrt")
        for d in ("linear", "cosine", "1-sqrt")
    ],
    (
        "get_wsd_schedule",
        1e-3,
        {
            "num_warmup_steps": 4,
            "num_decay_steps": 6,
            "num_stable_steps": 5,
            "min_lr_ratio": 0.1,
            "warmup_type": "cosine",
            "decay_type": "cosine",
            "num_cycles": 0.75,
        },
        25,
    ),
]


def rates(function: str, lr: float, kwargs: dict[str, Any], steps: int) -> list[float]:
    """transformers' rate after each of ``0 .. steps`` scheduler steps."""
    import torch
    import transformers.optimization as hf

    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=lr)
    scheduler = getattr(hf, function)(optimizer, **kwargs)
    out = [float(scheduler.get_last_lr()[0])]
    for _ in range(steps):
        optimizer.step()  # no gradient: nothing moves, the scheduler sees a step taken
        scheduler.step()
        out.append(float(scheduler.get_last_lr()[0]))
    return out


def main(path: str) -> None:
    import transformers

    cases = [
        {"function": f, "lr": lr, "kwargs": kw, "rates": rates(f, lr, kw, n)}
        for f, lr, kw, n in CASES
    ]
    document = {"transformers": transformers.__version__, "cases": cases}
    with open(path, "w") as file:
        json.dump(document, file, indent=1)
        file.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
