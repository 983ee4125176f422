"""Composition: warm-up in front of a schedule, schedules joined end to end, scaled, clipped.

Composites are schedules too (frozen, serialisable, vectorised). In :class:`Join` and
:class:`Warmup` each later part sees the step relative to the boundary where it starts, so
``join([a, b], [100])(100) == b(0)``.

Example:
    >>> from globalstep.schedules import CosineDecay
    >>> lr = warmup(CosineDecay(1.0, 100), steps=10)
    >>> lr(0), lr(5), lr(10), lr(110)
    (0.0, 0.5, 1.0, 0.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from globalstep._errors import ConfigError
from globalstep.schedules._base import (
    Schedule,
    Steps,
    Values,
    check_choice,
    check_number,
    check_range,
    dtype_field,
)

__all__ = ["Clip", "Join", "Scale", "Warmup", "clip", "join", "scale", "warmup"]


class _Wraps(Schedule):
    """parts() and describe() for a composite that wraps one ``schedule``."""

    schedule: Schedule

    def parts(self) -> tuple[Schedule, ...]:
        return (self.schedule,)

    def _format_fields(self) -> dict[str, Any]:
        return {**super()._format_fields(), "inner": self.schedule.describe()}


def _check_schedule(parameter: str, value: Any) -> None:
    if not isinstance(value, Schedule):
        raise ConfigError(parameter, "must be a globalstep schedule", value)


@dataclass(frozen=True)
class Warmup(_Wraps):
    """Ramps from ``start_value`` to ``schedule(0)`` over ``steps``, then runs ``schedule``.

    .. math::
        v(s) = a(v_s, g(0), s / w) \\ (s < w), \\qquad v(s) = g(s - w) \\ (s \\ge w)

    where :math:`a` is ``shape``: a line, a half cosine, or a geometric (``exponential``)
    ramp :math:`v_s (g(0)/v_s)^{s/w}`, which needs ``start_value`` and ``g(0)`` > 0.

    Args:
        schedule: :math:`g`, which sees the step relative to the end of the warm-up.
        steps: :math:`w` >= 1 (or a duration).
        start_value: :math:`v_s`, the value at step 0.
        shape: ``"linear"``, ``"cosine"`` or ``"exponential"``.
        dtype: defaults to the schedule's.
    """

    schedule: Schedule
    steps: int | str
    start_value: float = 0.0
    shape: str = "linear"
    dtype: str | None = dtype_field(None)

    name: ClassVar[str] = "warmup"
    lengths: ClassVar[dict[str, int]] = {"steps": 1}
    formula: ClassVar[str] = "{shape} ramp from {start_value} over {steps} steps, then {inner}"

    def __post_init__(self) -> None:
        _check_schedule("schedule", self.schedule)
        check_number("start_value", self.start_value)
        check_choice("shape", self.shape, ("linear", "cosine", "exponential"))
        self._setup(self.schedule.numpy_dtype.name)
        if self.shape == "exponential":
            check_range(
                "start_value",
                self.start_value,
                "must be > 0 for an exponential warm-up",
                self.start_value > 0,
            )
            if self.schedule.resolved:
                target = self.schedule(0)
                check_range(
                    "schedule", target, "must start > 0 for an exponential warm-up", target > 0
                )

    def compute(self, steps: Steps) -> Values:
        w = self.steps_of("steps")
        out = np.empty(steps.shape, dtype=self._dt)
        ramp = steps < w
        if ramp.any():  # the ramp's target, g(0), only where a step needs it
            target = self.scalar(self.schedule.compute(np.zeros(1, np.int64))[0])
            start = self.scalar(self.start_value)
            pct = self.floats(steps[ramp]) / self.scalar(w)
            if self.shape == "exponential":
                out[ramp] = start * self.apply(np.power, target / start, pct)
            else:
                out[ramp] = self._ramp(self.shape, start, target, pct)
        if not ramp.all():
            after = ~ramp
            out[after] = self.schedule.compute(steps[after] - w)
        return out

    def end_step(self) -> int | None:
        inner = self.schedule.end_step()
        return None if inner is None else int(inner + self.steps_of("steps"))


@dataclass(frozen=True)
class Join(Schedule):
    """Runs ``schedules[i]`` from ``boundaries[i - 1]``, each seeing its own relative step.

    .. math:: v(s) = g_i(s - b_{i-1}) \\quad \\text{for } b_{i-1} \\le s < b_i, \\ b_{-1} = 0

    Args:
        schedules: the parts, in order.
        boundaries: strictly increasing steps >= 1, one fewer than ``schedules``.
        dtype: defaults to the first part's.
    """

    schedules: tuple[Schedule, ...]
    boundaries: tuple[int | str, ...]
    dtype: str | None = dtype_field(None)

    name: ClassVar[str] = "join"
    lengths: ClassVar[dict[str, int]] = {"boundaries": 1}
    formula: ClassVar[str] = "{inner}"

    def __post_init__(self) -> None:
        self._setup_pieces(
            "schedules",
            "schedules",
            _check_schedule,
            self.boundaries,
            lambda first: first.numpy_dtype.name,
        )

    def parts(self) -> tuple[Schedule, ...]:
        return self.schedules

    def _format_fields(self) -> dict[str, Any]:
        starts = (0, *self.boundaries)
        text = "; ".join(
            f"from {b}: {p.describe()}" for b, p in zip(starts, self.schedules, strict=True)
        )
        return {**super()._format_fields(), "inner": text}

    def compute(self, steps: Steps) -> Values:
        starts = np.asarray((0, *self.steps_of("boundaries")), np.int64)
        index = np.searchsorted(starts, steps, "right") - 1
        out = np.empty(steps.shape, dtype=self._dt)
        for i in np.unique(index):
            mask = index == i
            out[mask] = self.schedules[i].compute(steps[mask] - starts[i])
        return out

    def end_step(self) -> int | None:
        last = self.schedules[-1].end_step()
        bounds = self.steps_of("boundaries")
        return None if last is None else int(last + (bounds[-1] if bounds else 0))


@dataclass(frozen=True)
class Scale(_Wraps):
    """Multiplies a schedule by ``factor``: :math:`v(s) = k \\, g(s)`."""

    schedule: Schedule
    factor: float
    dtype: str | None = dtype_field(None)

    name: ClassVar[str] = "scale"
    formula: ClassVar[str] = "{factor} * [{inner}]"

    def __post_init__(self) -> None:
        _check_schedule("schedule", self.schedule)
        check_number("factor", self.factor)
        self._setup(self.schedule.numpy_dtype.name)

    def compute(self, steps: Steps) -> Values:
        return self.scalar(self.factor) * self.schedule.compute(steps).astype(self._dt)

    def end_step(self) -> int | None:
        return self.schedule.end_step()


@dataclass(frozen=True)
class Clip(_Wraps):
    """Keeps a schedule within ``[low, high]``: :math:`v(s) = \\min(\\max(g(s), l), h)`."""

    schedule: Schedule
    low: float | None = None
    high: float | None = None
    dtype: str | None = dtype_field(None)

    name: ClassVar[str] = "clip"
    formula: ClassVar[str] = "clip([{inner}], {low}, {high})"

    def __post_init__(self) -> None:
        _check_schedule("schedule", self.schedule)
        check_number("low", self.low, optional=True)
        check_number("high", self.high, optional=True)
        if self.low is None and self.high is None:
            raise ConfigError("high", "must be given when low is None", self.high)
        if self.low is not None and self.high is not None:
            check_range("high", self.high, f"must be >= low ({self.low})", self.high >= self.low)
        self._setup(self.schedule.numpy_dtype.name)

    def compute(self, steps: Steps) -> Values:
        out = self.schedule.compute(steps).astype(self._dt)
        if self.low is not None:
            out = np.maximum(out, self.scalar(self.low))
        if self.high is not None:
            out = np.minimum(out, self.scalar(self.high))
        return out

    def end_step(self) -> int | None:
        return self.schedule.end_step()


def warmup(
    schedule: Schedule, steps: int | str, start_value: float = 0.0, shape: str = "linear"
) -> Warmup:
    """Puts a warm-up of ``steps`` in front of ``schedule`` (see :class:`Warmup`).

    Example:
        >>> from globalstep.schedules import Constant
        >>> [warmup(Constant(1.0), 4, shape="linear")(s) for s in range(5)]
        [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    return Warmup(schedule, steps, start_value, shape)


def join(schedules: Sequence[Schedule], boundaries: Sequence[int | str]) -> Join:
    """Joins ``schedules`` end to end at ``boundaries`` (see :class:`Join`).

    Example:
        >>> from globalstep.schedules import Constant, Linear
        >>> lr = join([Linear(0.0, 1.0, 10), Constant(1.0)], [10])
        >>> lr(5), lr(10), lr(1000)
        (0.5, 1.0, 1.0)
    """
    return Join(tuple(schedules), tuple(boundaries))


def scale(schedule: Schedule, factor: float) -> Scale:
    """Multiplies ``schedule`` by ``factor``.

    Example:
        >>> from globalstep.schedules import Constant
        >>> scale(Constant(0.5), 0.1)(0)
        0.05
    """
    return Scale(schedule, factor)


def clip(schedule: Schedule, low: float | None = None, high: float | None = None) -> Clip:
    """Keeps ``schedule`` within ``[low, high]``.

    Example:
        >>> from globalstep.schedules import Linear
        >>> clip(Linear(0.0, 1.0, 10), low=0.2)(0)
        0.2
    """
    return Clip(schedule, low, high)
