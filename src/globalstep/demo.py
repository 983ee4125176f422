"""``globalstep demo``: a small model trained end to end, with the step owned by a Clock.

The model is the first example of the seed article done right: a linear model on inputs of
shape 100x5 and targets of shape 100x10, trained by plain SGD at learning rate 0.01 for
1,000 updates. The step advances with the update itself (``clock.tick()`` right after the
weights change), and a trigger, not a modulo on a loop counter, decides when to log.

Example:
    >>> result = run_demo(steps=200, log=lambda line: None)
    >>> result.final_step, result.losses[-1] < result.losses[0]
    (200, True)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from globalstep.clock import Clock
from globalstep.errors import ConfigError
from globalstep.triggers import every

__all__ = ["DemoResult", "add_parser", "run_demo"]


@dataclass
class DemoResult:
    """What a demo run did: its final step and the loss at each logged step."""

    final_step: int
    logged_steps: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)


def _data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    inputs = rng.normal(size=(100, 5))
    true_weights = rng.normal(size=(5, 10))
    targets = inputs @ true_weights + 0.1 * rng.normal(size=(100, 10))
    return inputs, targets


def run_demo(
    *,
    steps: int = 1000,
    learning_rate: float = 0.01,
    log_every: int = 100,
    seed: int = 0,
    log: Callable[[str], Any] = print,
) -> DemoResult:
    """Trains the demo's linear model and returns what it did.

    Args:
        steps: optimizer updates to apply, >= 1.
        learning_rate: the SGD rate, > 0.
        log_every: steps between progress lines, >= 1.
        seed: seeds the data and the initial weights.
        log: receives each progress line.

    Raises:
        ConfigError: a parameter is out of range.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError("steps", "must be an int >= 1", steps)
    if not learning_rate > 0 or not np.isfinite(learning_rate):
        raise ConfigError("learning_rate", "must be a finite number > 0", learning_rate)
    inputs, targets = _data(seed)
    weights = np.zeros((5, 10))
    bias = np.zeros(10)
    clock = Clock(steps_per_epoch=1, batch_size=len(inputs))
    progress_line = every(log_every)
    result = DemoResult(final_step=0)
    while clock.step < steps:
        # Update number `clock.step` uses the rate for that step.
        error = inputs @ weights + bias - targets
        loss = float(np.mean(error**2))
        grad = 2.0 * error / error.size
        weights -= learning_rate * (inputs.T @ grad)
        bias -= learning_rate * grad.sum(axis=0)
        clock.tick()
        if progress_line.should_fire(clock):
            result.logged_steps.append(clock.step)
            result.losses.append(loss)
            log(f"step {clock.step:>6}  loss {loss:.6f}  lr {learning_rate:g}")
    result.final_step = clock.step
    log(f"final global step: {clock.step}")
    return result


def _run(args: argparse.Namespace) -> int:
    run_demo(steps=args.steps, learning_rate=args.lr, log_every=args.log_every, seed=args.seed)
    return 0


def add_parser(subparsers: Any) -> None:
    """Registers ``globalstep demo``."""
    parser = subparsers.add_parser(
        "demo", help="train a small model end to end", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--steps", type=int, default=1000, help="updates to apply (1000)")
    parser.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (0.01)")
    parser.add_argument("--log-every", type=int, default=100, help="steps between lines (100)")
    parser.add_argument("--seed", type=int, default=0, help="data and weight seed (0)")
    parser.set_defaults(func=_run)
