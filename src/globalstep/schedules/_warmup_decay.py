"""The schedules that warm up and decay in one: one cycle (Smith), inverse square root
("Noam") and warm-up, stable, decay (WSD).

In every formula :math:`s` is the step (see :mod:`globalstep.schedules.core`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from globalstep.schedules._base import (
    Length,
    Schedule,
    Steps,
    Values,
    check_choice,
    check_number,
    check_range,
    dtype_field,
)

__all__ = ["InverseSqrt", "OneCycle", "WarmupStableDecay"]


@dataclass(frozen=True)
class OneCycle(Schedule):
    """One cycle (Smith): up from ``peak / div_factor`` to ``peak``, then down to the floor.

    .. math::
        v_0 = p / \\delta, \\quad v_{min} = v_0 / \\delta_f, \\quad u = \\rho T, \\qquad
        v(s) = a(v_0, p, s/u) \\text{ for } s < u, \\
        a(p, v_{min}, \\min((s - u)/(T - u), 1)) \\text{ after}

    where :math:`a` anneals along a half cosine or a line (``shape``).

    Args:
        peak: :math:`p`, the value at step ``pct_start * total_steps``.
        total_steps: :math:`T` >= 2 (or a duration); the floor is reached there and kept.
        pct_start: :math:`\\rho` in (0, 1), the rising share of the cycle.
        div_factor: :math:`\\delta` > 0; the value at step 0 is ``peak / div_factor``.
        final_div_factor: :math:`\\delta_f` > 0.
        shape: ``"cosine"`` or ``"linear"``.

    Example:
        >>> lr = OneCycle(1.0, 100, div_factor=10.0)
        >>> lr(0), lr(30)
        (0.1, 1.0)
    """

    peak: float
    total_steps: Length
    pct_start: float = 0.3
    div_factor: float = 25.0
    final_div_factor: float = 1e4
    shape: str = "cosine"
    dtype: str = dtype_field("float64")

    name: ClassVar[str] = "one_cycle"
    lengths: ClassVar[dict[str, int]] = {"total_steps": 2}
    formula: ClassVar[str] = (
        "{shape} from {peak}/{div_factor} up to {peak} over {pct_start} of {total_steps} steps, "
        "then down to {peak}/{div_factor}/{final_div_factor}"
    )

    def __post_init__(self) -> None:
        check_number("peak", self.peak)
        check_number("pct_start", self.pct_start)
        check_range("pct_start", self.pct_start, "must be in (0, 1)", 0 < self.pct_start < 1)
        for name in ("div_factor", "final_div_factor"):
            check_number(name, getattr(self, name))
            check_range(name, getattr(self, name), "must be > 0", getattr(self, name) > 0)
        check_choice("shape", self.shape, ("cosine", "linear"))
        self._setup()

    def compute(self, steps: Steps) -> Values:
        total = self.scalar(self.steps_of("total_steps"))
        up = self.scalar(self.pct_start) * total
        peak = self.scalar(self.peak)
        start = peak / self.scalar(self.div_factor)
        floor = start / self.scalar(self.final_div_factor)
        t = self.floats(steps)
        rising = self._ramp(self.shape, start, peak, t / up)
        falling = self._ramp(self.shape, peak, floor, np.minimum((t - up) / (total - up), 1))
        return np.where(t < up, rising, falling)

    def end_step(self) -> int | None:
        return int(self.steps_of("total_steps"))


@dataclass(frozen=True)
class InverseSqrt(Schedule):
    """Linear warm-up then decay as :math:`1/\\sqrt{s}` ("Noam", Vaswani et al.).

    .. math:: v(s) = p \\cdot \\min\\left(\\frac{s + 1}{w}, \\sqrt{\\frac{w}{s + 1}}\\right)

    The peak :math:`p` is reached at step ``warmup_steps - 1`` (update number
    ``warmup_steps``). The Transformer's rate is ``peak = d_model**-0.5 * warmup**-0.5``.

    Args:
        peak: :math:`p`.
        warmup_steps: :math:`w` >= 1 (or a duration).

    Example:
        >>> lr = InverseSqrt(1.0, 4)
        >>> lr(0), lr(3), lr(15)
        (0.25, 1.0, 0.5)
    """

    peak: float
    warmup_steps: Length
    dtype: str = dtype_field("float64")

    name: ClassVar[str] = "inverse_sqrt"
    lengths: ClassVar[dict[str, int]] = {"warmup_steps": 1}
    formula: ClassVar[str] = (
        "v(s) = {peak} * min((s + 1) / {warmup_steps}, sqrt({warmup_steps} / (s + 1)))"
    )

    def __post_init__(self) -> None:
        check_number("peak", self.peak)
        self._setup()

    def compute(self, steps: Steps) -> Values:
        n = self.floats(steps) + self.scalar(1.0)
        w = self.scalar(self.steps_of("warmup_steps"))
        return self.scalar(self.peak) * np.minimum(n / w, np.sqrt(w / n))


@dataclass(frozen=True)
class WarmupStableDecay(Schedule):
    """Warm up linearly, hold the peak, and decay over the last ``decay_steps`` (WSD).

    .. math::
        v(s) = v_0 + (p - v_0) s / w \\ (s < w); \\quad p \\ (s < T - d); \\quad
        a(p, v_1, \\min((s - T + d)/d, 1)) \\ \\text{after}

    where :math:`a` is ``decay_shape``: ``"linear"``, ``"cosine"`` or ``"sqrt"``
    (:math:`v_1 + (p - v_1)(1 - \\sqrt{x})`).

    Args:
        peak: :math:`p`, held between warm-up and decay.
        total_steps: :math:`T` (or a duration); ``end_value`` is reached there and kept.
        warmup_steps: :math:`w` >= 0 (or a duration).
        decay_steps: :math:`d` >= 1 (or a duration); ``w + d <= T``.
        initial: :math:`v_0`, the value at step 0.
        end_value: :math:`v_1`.
        decay_shape: ``"linear"``, ``"cosine"`` or ``"sqrt"``.

    Example:
        >>> lr = WarmupStableDecay(1.0, 10, warmup_steps=2, decay_steps=4)
        >>> [lr(s) for s in range(11)]
        [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0]
    """

    peak: float
    total_steps: Length
    warmup_steps: Length
    decay_steps: Length
    initial: float = 0.0
    end_value: float = 0.0
    decay_shape: str = "linear"
    dtype: str = dtype_field("float64")

    name: ClassVar[str] = "warmup_stable_decay"
    lengths: ClassVar[dict[str, int]] = {"total_steps": 1, "warmup_steps": 0, "decay_steps": 1}
    formula: ClassVar[str] = (
        "{initial} -> {peak} over {warmup_steps} steps, {peak} until {total_steps} - "
        "{decay_steps}, then {decay_shape} to {end_value} at {total_steps}"
    )

    def __post_init__(self) -> None:
        for name in ("peak", "initial", "end_value"):
            check_number(name, getattr(self, name))
        check_choice("decay_shape", self.decay_shape, ("linear", "cosine", "sqrt"))
        self._setup()
        n = self._n
        if {"total_steps", "warmup_steps", "decay_steps"} <= n.keys():
            used = n["warmup_steps"] + n["decay_steps"]
            check_range(
                "total_steps",
                self.total_steps,
                f"must be >= warmup_steps + decay_steps ({used})",
                n["total_steps"] >= used,
            )

    def compute(self, steps: Steps) -> Values:
        t = self.floats(steps)
        w, d = self.steps_of("warmup_steps"), self.steps_of("decay_steps")
        total = self.steps_of("total_steps")
        peak, v0, v1 = (
            self.scalar(self.peak),
            self.scalar(self.initial),
            self.scalar(self.end_value),
        )
        warm = v0 + (peak - v0) * (t / self.scalar(max(w, 1)))
        pct = np.minimum(self.floats(np.maximum(steps - (total - d), 0)) / self.scalar(d), 1)
        if self.decay_shape == "sqrt":
            decay = v1 + (peak - v1) * (1 - np.sqrt(pct))
        else:
            decay = self._ramp(self.decay_shape, peak, v1, pct)
        stable = np.where(steps < total - d, peak, decay)
        return np.where(steps < w, warm, stable)

    def end_step(self) -> int | None:
        return int(self.steps_of("total_steps"))
