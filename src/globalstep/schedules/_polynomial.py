"""The schedules that hold a value or move it along a power of the step: a constant, a line,
a polynomial decay, and steps of values (piecewise constant).

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
    check_flag,
    check_number,
    check_range,
    dtype_field,
)

__all__ = ["Constant", "Linear", "PiecewiseConstant", "PolynomialDecay"]


@dataclass(frozen=True)
class Constant(Schedule):
    """The same value at every step.

    .. math:: v(s) = c

    Example:
        >>> Constant(0.01)(10**9)
        0.01
    """

    value: float
    dtype: str = dtype_field("float64")

    name: ClassVar[str] = "constant"
    formula: ClassVar[str] = "v(s) = {value}"

    def __post_init__(self) -> None:
        check_number("value", self.value)
        self._setup()

    def compute(self, steps: Steps) -> Values:
        return np.full(steps.shape, self.scalar(self.value), dtype=self._dt)

    def end_step(self) -> int | None:
        return 0


@dataclass(frozen=True)
class Linear(Schedule):
    """Goes in a straight line from ``initial`` to ``end_value`` over ``steps``, then stays.

    It only ever moves towards ``end_value``.

    .. math:: v(s) = v_0 + (v_1 - v_0) \\cdot \\min(\\max(s - b, 0), n) / n

    Args:
        initial: :math:`v_0`, the value up to step ``begin``.
        end_value: :math:`v_1`, reached at step ``begin + steps`` and kept after it.
        steps: :math:`n`, the length of the line, >= 1 (or a duration).
        begin: :math:`b`, the step where the line starts, >= 0.

    Example:
        >>> [Linear(0.0, 1.0, 4)(s) for s in range(6)]
        [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    """

    initial: float
    end_value: float
    steps: Length
    begin: Length = 0
    dtype: str = dtype_field("float64")

    name: ClassVar[str] = "linear"
    lengths: ClassVar[dict[str, int]] = {"steps": 1, "begin": 0}
    formula: ClassVar[str] = (
        "v(s) = {initial} + ({end_value} - {initial}) * min(max(s - {begin}, 0), {steps}) / {steps}"
    )

    def __post_init__(self) -> None:
        check_number("initial", self.initial)
        check_number("end_value", self.end_value)
        self._setup()

    def compute(self, steps: Steps) -> Values:
        n = self.steps_of("steps")
        t = self.floats(np.clip(steps - self.steps_of("begin"), 0, n))
        v0, v1 = self.scalar(self.initial), self.scalar(self.end_value)
        return v0 + (v1 - v0) * (t / self.scalar(n))

    def end_step(self) -> int | None:
        return int(self.steps_of("begin") + self.steps_of("steps"))


@dataclass(frozen=True)
class PiecewiseConstant(Schedule):
    """Steps through ``levels``; ``levels[i + 1]`` starts at step ``boundaries[i]``.

    .. math:: v(s) = v_i \\quad \\text{for } b_{i-1} \\le s < b_i

    The new value is used by the update at the boundary step itself (as ``join`` and
    PyTorch's ``MultiStepLR`` do). TensorFlow and Keras switch one step later
    (``step > boundary``); :mod:`globalstep.compat.tf` keeps their rule.

    Args:
        boundaries: strictly increasing steps >= 1 (or durations).
        levels: the values, one more than boundaries (``values`` is the vectorised method).

    Example:
        >>> lr = PiecewiseConstant((100, 200), (1.0, 0.5, 0.1))
        >>> lr(99), lr(100), lr(200)
        (1.0, 0.5, 0.1)
    """

    boundaries: tuple[Length, ...]
    levels: tuple[float, ...]
    dtype: str = dtype_field("float64")

    name: ClassVar[str] = "piecewise_constant"
    lengths: ClassVar[dict[str, int]] = {"boundaries": 1}
    formula: ClassVar[str] = "v(s) = {levels}[i] where {boundaries}[i-1] <= s < {boundaries}[i]"

    def __post_init__(self) -> None:
        self._setup_pieces("levels", "numbers", check_number, self.boundaries)

    def compute(self, steps: Steps) -> Values:
        index = np.searchsorted(np.asarray(self.steps_of("boundaries"), np.int64), steps, "right")
        return np.asarray(self.levels, dtype=self._dt)[index]

    def end_step(self) -> int | None:
        bounds = self.steps_of("boundaries")
        return int(bounds[-1]) if bounds else 0


@dataclass(frozen=True)
class PolynomialDecay(Schedule):
    """Decays from ``initial`` to ``end_value`` along :math:`(1 - p)^k`.

    Without ``cycle`` it only ever moves towards ``end_value`` and is constant from step
    ``begin + decay_steps`` on.

    .. math::
        t = \\max(s - b, 0), \\quad
        D = d \\lceil t / d \\rceil \\ (\\text{cycle}, D = d \\text{ at } t = 0)
        \\text{ else } t \\leftarrow \\min(t, d), D = d, \\qquad
        v(s) = (v_0 - v_1)(1 - t / D)^k + v_1

    Args:
        initial: :math:`v_0`, the value at step 0.
        decay_steps: :math:`d`, >= 1 (or a duration).
        end_value: :math:`v_1`, reached at ``begin + decay_steps`` (without ``cycle``).
        power: :math:`k` > 0.
        cycle: restart the decay, stretched, each time it ends.
        begin: :math:`b`, the step where the decay starts, >= 0.

    Example:
        >>> PolynomialDecay(1.0, 10, end_value=0.0, power=2.0)(5)
        0.25
    """

    initial: float
    decay_steps: Length
    end_value: float = 0.0
    power: float = 1.0
    cycle: bool = False
    begin: Length = 0
    dtype: str = dtype_field("float64")

    name: ClassVar[str] = "polynomial_decay"
    lengths: ClassVar[dict[str, int]] = {"decay_steps": 1, "begin": 0}
    formula: ClassVar[str] = (
        "v(s) = ({initial} - {end_value}) * (1 - min(s - {begin}, {decay_steps}) / {decay_steps})"
        " ** {power} + {end_value}"
    )

    def __post_init__(self) -> None:
        check_number("initial", self.initial)
        check_number("end_value", self.end_value)
        check_number("power", self.power)
        check_range("power", self.power, "must be > 0", self.power > 0)
        check_flag("cycle", self.cycle)
        self._setup()

    def compute(self, steps: Steps) -> Values:
        t = self.floats(np.maximum(steps - self.steps_of("begin"), 0))
        d = self.scalar(self.steps_of("decay_steps"))
        if self.cycle:
            d = d * np.where(t == 0, self.scalar(1.0), np.ceil(t / d))
        else:
            t = np.minimum(t, d)
        v0, v1 = self.scalar(self.initial), self.scalar(self.end_value)
        # In float32, ceil(t / d) * d may round below t; clamping keeps 1 - p >= 0 finite.
        remaining = np.maximum(self.scalar(1.0) - t / d, self.scalar(0.0))
        return (v0 - v1) * self.apply(np.power, remaining, self.scalar(self.power)) + v1

    def end_step(self) -> int | None:
        return None if self.cycle else int(self.steps_of("begin") + self.steps_of("decay_steps"))
