"""Hugging Face ``transformers``' learning-rate schedules as functions of the step.

Each function has the name and the arguments of its ``transformers.optimization`` namesake
(``get_cosine_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps)``...)
and returns a globalstep schedule whose value at step ``k`` is the rate
``scheduler.get_last_lr()[0]`` holds after ``k`` calls of ``scheduler.step()``: the
optimizer's rate times the multiplier transformers computes in Python floats (float64),
with its operations in its order, so the numbers are equal at every step, past
``num_training_steps`` too (where the cosine rises again, as transformers' does).

The first argument is ``base_lr`` (the optimizer's ``lr``), or the optimizer itself, whose
param groups must share one ``lr`` (a schedule drives one rate; build one per group
otherwise). ``get_polynomial_decay_schedule_with_warmup`` and
``get_cosine_with_min_lr_schedule_with_warmup(min_lr=...)`` read the optimizer's default
``lr`` as transformers does (``base_lr`` where a number is given). ``last_epoch`` is
accepted only as ``-1``: the clock carries the step (restore it, not the scheduler).

The schedules are :class:`~globalstep.compat.torch.TorchSchedule` s: pass one to
``integrations.torch.attach`` or a ``Run``'s schedules; ``to_config()`` round-trips them.
No transformers and no torch are needed.

Example:
    >>> sched = get_linear_schedule_with_warmup(1.0, num_warmup_steps=2, num_training_steps=10)
    >>> [sched(k) for k in (0, 1, 2, 6, 10, 12)]
    [0.0, 0.5, 1.0, 0.5, 0.0, 0.0]
"""

from __future__ import annotations

import dataclasses
import math
import operator
import warnings
from typing import Any, ClassVar

from globalstep._errors import ConfigError
from globalstep.compat._torch_base import TorchSchedule, check_choice, check_rate, check_real

__all__ = [
    "TransformersSchedule",
    "get_constant_schedule",
    "get_constant_schedule_with_warmup",
    "get_cosine_schedule_with_warmup",
    "get_cosine_with_hard_restarts_schedule_with_warmup",
    "get_cosine_with_min_lr_schedule_with_warmup",
    "get_inverse_sqrt_schedule",
    "get_linear_schedule_with_warmup",
    "get_polynomial_decay_schedule_with_warmup",
    "get_wsd_schedule",
]

_SHAPES = ("linear", "cosine", "1-sqrt")


def _steps(parameter: str, value: Any, *, minimum: int = 0) -> int:
    """``value`` as an int >= ``minimum`` (a NumPy integer counts)."""
    try:
        steps = operator.index(value)
    except TypeError:
        raise ConfigError(parameter, "must be an int number of steps", value) from None
    if isinstance(value, bool) or steps < minimum:
        raise ConfigError(parameter, f"must be an int >= {minimum}", value)
    return steps


def _warmup(k: int, warmup: int) -> float:
    """transformers' linear warm-up factor, ``k / max(1, warmup)``."""
    return float(k) / float(max(1, warmup))


def _rates(optimizer_or_lr: Any) -> tuple[float, float]:
    """(the rate the schedule multiplies, the optimizer's default ``lr``) from a number
    or a torch optimizer.

    Raises:
        ConfigError: an optimizer whose param groups hold different rates.
    """
    groups = getattr(optimizer_or_lr, "param_groups", None)
    if groups is None:
        return optimizer_or_lr, optimizer_or_lr
    rates = {float(g["lr"]) for g in groups}
    if len(rates) != 1:
        raise ConfigError(
            "optimizer",
            "must have one lr in all its param groups (a schedule drives one rate)",
            sorted(rates),
            "Pass base_lr=<the group's lr> and build one schedule per param group.",
        )
    default = optimizer_or_lr.defaults["lr"]
    return groups[0]["lr"], default


def _check_last_epoch(last_epoch: Any) -> None:
    if last_epoch != -1:
        raise ConfigError(
            "last_epoch",
            "must be -1: the clock carries the step",
            last_epoch,
            "Restore the Clock (or the Run) from its checkpoint; the schedule reads its step.",
        )


@dataclasses.dataclass(frozen=True)
class TransformersSchedule(TorchSchedule):
    """A ``transformers`` schedule: ``base_lr`` times transformers' multiplier at the step.

    Built by this module's functions (each subclass is one of them); a pure function of
    the step, with no Python callable in it, so ``to_config()`` works.
    """

    base_lr: float

    _recursive: ClassVar[bool] = False
    absolute_rate: ClassVar[bool] = True
    _function: ClassVar[str] = ""

    def _check(self) -> None:
        check_rate("base_lr", self.base_lr)

    def multiplier(self, k: int) -> float:
        """transformers' ``lr_lambda(k)``: the factor of ``base_lr`` at scheduler step ``k``."""
        raise NotImplementedError

    def closed_form(self, k: int) -> float:
        return self.base_lr * self.multiplier(k)

    def __repr__(self) -> str:
        fields = [f.name for f in dataclasses.fields(self) if f.name != "interval"]
        if self.interval != 1:
            fields.append("interval")
        args = ", ".join(f"{name}={getattr(self, name)!r}" for name in fields)
        return f"{self._function}({args})"

    def describe(self) -> str:
        """Returns the transformers function and its arguments."""
        return f"transformers.{self!r}"


@dataclasses.dataclass(frozen=True, repr=False)
class _HFConstant(TransformersSchedule):
    _function: ClassVar[str] = "get_constant_schedule"

    def multiplier(self, k: int) -> float:
        return 1


@dataclasses.dataclass(frozen=True, repr=False)
class _HFConstantWarmup(TransformersSchedule):
    num_warmup_steps: int = 0
    _function: ClassVar[str] = "get_constant_schedule_with_warmup"

    def multiplier(self, k: int) -> float:
        if k < self.num_warmup_steps:
            return float(k) / float(max(1.0, self.num_warmup_steps))
        return 1.0


@dataclasses.dataclass(frozen=True, repr=False)
class _HFWarmupThenDecay(TransformersSchedule):
    """A linear warm-up over ``num_warmup_steps``, then :meth:`decay` at step ``k``."""

    num_warmup_steps: int = 0
    num_training_steps: int = 0

    def multiplier(self, k: int) -> float:
        w = self.num_warmup_steps
        return _warmup(k, w) if k < w else self.decay(k)

    def decay(self, k: int) -> float:
        """The factor at step ``k >= num_warmup_steps`` (subclasses)."""
        raise NotImplementedError

    def progress(self, k: int) -> float:
        """transformers' ``(k - W) / max(1, N - W)``, in floats."""
        w, n = self.num_warmup_steps, self.num_training_steps
        return float(k - w) / float(max(1, n - w))


@dataclasses.dataclass(frozen=True, repr=False)
class _HFLinear(_HFWarmupThenDecay):
    _function: ClassVar[str] = "get_linear_schedule_with_warmup"

    def decay(self, k: int) -> float:
        w, n = self.num_warmup_steps, self.num_training_steps
        return max(0.0, float(n - k) / float(max(1, n - w)))


def _cosine_factor(progress: float, num_cycles: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))


@dataclasses.dataclass(frozen=True, repr=False)
class _HFCosine(_HFWarmupThenDecay):
    num_cycles: float = 0.5
    min_lr_rate: float = 0.0
    _function: ClassVar[str] = "get_cosine_schedule_with_warmup"

    def _check(self) -> None:
        super()._check()
        check_real("num_cycles", self.num_cycles)
        check_real("min_lr_rate", self.min_lr_rate)

    def decay(self, k: int) -> float:
        factor = _cosine_factor(self.progress(k), self.num_cycles)
        factor = factor * (1 - self.min_lr_rate) + self.min_lr_rate
        return max(0, factor)


@dataclasses.dataclass(frozen=True, repr=False)
class _HFCosineMinLR(_HFCosine):
    _function: ClassVar[str] = "get_cosine_with_min_lr_schedule_with_warmup"


@dataclasses.dataclass(frozen=True, repr=False)
class _HFHardRestarts(_HFWarmupThenDecay):
    num_cycles: int = 1
    _function: ClassVar[str] = "get_cosine_with_hard_restarts_schedule_with_warmup"

    def _check(self) -> None:
        super()._check()
        check_real("num_cycles", self.num_cycles)

    def decay(self, k: int) -> float:
        progress = self.progress(k)
        if progress >= 1.0:
            return 0.0
        return max(
            0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(self.num_cycles) * progress) % 1.0)))
        )


@dataclasses.dataclass(frozen=True, repr=False)
class _HFPolynomial(_HFWarmupThenDecay):
    lr_end: float = 1e-7
    power: float = 1.0
    lr_init: float = 0.0
    _function: ClassVar[str] = "get_polynomial_decay_schedule_with_warmup"

    def _check(self) -> None:
        super()._check()
        check_real("lr_end", self.lr_end)
        check_real("power", self.power)
        check_rate("lr_init", self.lr_init)
        if not self.lr_init > self.lr_end:
            raise ConfigError(
                "lr_end",
                f"must be < the optimizer's lr, {self.lr_init} (transformers raises ValueError)",
                self.lr_end,
            )

    def decay(self, k: int) -> float:
        w, n, end, init = self.num_warmup_steps, self.num_training_steps, self.lr_end, self.lr_init
        if k > n:
            return end / init
        remaining = 1 - (k - w) / (n - w)
        decay: float = (init - end) * remaining**self.power + end
        return decay / init


@dataclasses.dataclass(frozen=True, repr=False)
class _HFInverseSqrt(TransformersSchedule):
    num_warmup_steps: int = 0
    timescale: int = 10_000
    _function: ClassVar[str] = "get_inverse_sqrt_schedule"

    def multiplier(self, k: int) -> float:
        w, t = self.num_warmup_steps, self.timescale
        if k < w:
            return _warmup(k, w)
        return 1.0 / math.sqrt((k + (t - w)) / t)


@dataclasses.dataclass(frozen=True, repr=False)
class _HFWSD(TransformersSchedule):
    num_warmup_steps: int = 0
    num_stable_steps: int = 0
    num_decay_steps: int = 0
    warmup_type: str = "linear"
    decay_type: str = "cosine"
    min_lr_ratio: float = 0.0
    num_cycles: float = 0.5
    _function: ClassVar[str] = "get_wsd_schedule"

    def _check(self) -> None:
        super()._check()
        check_choice("warmup_type", self.warmup_type, _SHAPES)
        check_choice("decay_type", self.decay_type, _SHAPES)
        check_real("min_lr_ratio", self.min_lr_ratio)
        check_real("num_cycles", self.num_cycles)

    def _floor(self, factor: float) -> float:
        ratio = self.min_lr_ratio
        return max(0.0, factor * (1.0 - ratio) + ratio)

    def multiplier(self, k: int) -> float:
        w, s, d = self.num_warmup_steps, self.num_stable_steps, self.num_decay_steps
        if k < w:
            progress = float(k) / float(max(1, w))
            if self.warmup_type == "linear":
                return self._floor(progress)
            if self.warmup_type == "cosine":
                return self._floor(0.5 * (1.0 - math.cos(math.pi * progress)))
            return self._floor(1.0 - math.sqrt(1.0 - progress))
        if k < w + s:
            return 1.0
        if k < w + s + d:
            progress = float(k - w - s) / float(max(1, d))
            if self.decay_type == "linear":
                return self._floor(1.0 - progress)
            if self.decay_type == "cosine":
                return self._floor(_cosine_factor(progress, self.num_cycles))
            return self._floor(1.0 - math.sqrt(progress))
        return self.min_lr_ratio


# -- transformers' functions ----------------------------------------------------------------


def get_constant_schedule(optimizer: Any, last_epoch: int = -1) -> TransformersSchedule:
    """The optimizer's rate at every step (``transformers.get_constant_schedule``).

    Args:
        optimizer: ``base_lr`` (the optimizer's ``lr``) or a torch optimizer.
        last_epoch: must be -1 (the clock carries the step).

    Example:
        >>> get_constant_schedule(0.1)(1000)
        0.1
    """
    _check_last_epoch(last_epoch)
    return _HFConstant(_rates(optimizer)[0])


def get_constant_schedule_with_warmup(
    optimizer: Any, num_warmup_steps: int, last_epoch: int = -1
) -> TransformersSchedule:
    """Linear warm-up from 0 over ``num_warmup_steps``, then the optimizer's rate.

    Example:
        >>> get_constant_schedule_with_warmup(1.0, num_warmup_steps=4).values([0, 2, 4]).tolist()
        [0.0, 0.5, 1.0]
    """
    _check_last_epoch(last_epoch)
    return _HFConstantWarmup(_rates(optimizer)[0], _steps("num_warmup_steps", num_warmup_steps))


def get_linear_schedule_with_warmup(
    optimizer: Any, num_warmup_steps: int, num_training_steps: int, last_epoch: int = -1
) -> TransformersSchedule:
    """Linear warm-up from 0, then linear decay to 0 at ``num_training_steps`` (0 after).

    Example:
        >>> s = get_linear_schedule_with_warmup(1.0, num_warmup_steps=2, num_training_steps=6)
        >>> s.values([1, 2, 4, 6, 8]).tolist()
        [0.5, 1.0, 0.5, 0.0, 0.0]
    """
    _check_last_epoch(last_epoch)
    return _HFLinear(
        _rates(optimizer)[0],
        _steps("num_warmup_steps", num_warmup_steps),
        _steps("num_training_steps", num_training_steps),
    )


def get_cosine_schedule_with_warmup(
    optimizer: Any,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
) -> TransformersSchedule:
    r"""Linear warm-up from 0, then ``num_cycles`` cosine waves from the rate down to 0.

    .. math::

        m(k) = \tfrac12 \left(1 + \cos(2 \pi c \, p)\right), \quad
        p = \frac{k - W}{\max(1, N - W)}

    for ``k >= W``, with no clamp at ``p = 1``: past ``num_training_steps`` the default
    half wave rises again, as transformers' does.

    Example:
        >>> s = get_cosine_schedule_with_warmup(1.0, num_warmup_steps=0, num_training_steps=4)
        >>> s.values([0, 2, 4, 6]).round(12).tolist()
        [1.0, 0.5, 0.0, 0.5]
    """
    _check_last_epoch(last_epoch)
    return _HFCosine(
        _rates(optimizer)[0],
        _steps("num_warmup_steps", num_warmup_steps),
        _steps("num_training_steps", num_training_steps),
        num_cycles,
    )


def get_cosine_with_hard_restarts_schedule_with_warmup(
    optimizer: Any,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: int = 1,
    last_epoch: int = -1,
) -> TransformersSchedule:
    """Linear warm-up from 0, then ``num_cycles`` cosine decays, each restarting from the
    rate; 0 from ``num_training_steps`` on.

    Example:
        >>> s = get_cosine_with_hard_restarts_schedule_with_warmup(
        ...     1.0, num_warmup_steps=0, num_training_steps=8, num_cycles=2)
        >>> s.values([0, 2, 4, 8]).round(12).tolist()
        [1.0, 0.5, 1.0, 0.0]
    """
    _check_last_epoch(last_epoch)
    return _HFHardRestarts(
        _rates(optimizer)[0],
        _steps("num_warmup_steps", num_warmup_steps),
        _steps("num_training_steps", num_training_steps),
        num_cycles,
    )


def get_polynomial_decay_schedule_with_warmup(
    optimizer: Any,
    num_warmup_steps: int,
    num_training_steps: int,
    lr_end: float = 1e-7,
    power: float = 1.0,
    last_epoch: int = -1,
) -> TransformersSchedule:
    """Linear warm-up from 0, then a polynomial decay of power ``power`` down to ``lr_end``.

    The decay runs from the optimizer's default ``lr`` (``optimizer.defaults["lr"]``, or
    ``base_lr``) to ``lr_end``, as a factor of it, as transformers computes it.

    Raises:
        ConfigError: ``lr_end`` is not below the optimizer's rate (transformers raises
            ValueError); ``num_training_steps == num_warmup_steps`` divides by zero at that
            step, as in transformers (``StepZeroDivisionError``).

    Example:
        >>> s = get_polynomial_decay_schedule_with_warmup(
        ...     1.0, num_warmup_steps=0, num_training_steps=4, lr_end=0.0, power=2.0)
        >>> s.values([0, 2, 4, 9]).tolist()
        [1.0, 0.25, 0.0, 0.0]
    """
    _check_last_epoch(last_epoch)
    base_lr, lr_init = _rates(optimizer)
    return _HFPolynomial(
        base_lr,
        _steps("num_warmup_steps", num_warmup_steps),
        _steps("num_training_steps", num_training_steps),
        lr_end,
        power,
        lr_init,
    )


def get_inverse_sqrt_schedule(
    optimizer: Any, num_warmup_steps: int, timescale: int | None = None, last_epoch: int = -1
) -> TransformersSchedule:
    r"""Linear warm-up from 0, then ``1 / sqrt((k + timescale - W) / timescale)``.

    ``timescale`` defaults to ``num_warmup_steps`` (10,000 where that is 0), so the factor
    is 1 at step ``W`` and decays as :math:`\sqrt{W / k}`.

    Example:
        >>> get_inverse_sqrt_schedule(1.0, num_warmup_steps=4).values([2, 4, 16]).tolist()
        [0.5, 1.0, 0.5]
    """
    _check_last_epoch(last_epoch)
    warmup = _steps("num_warmup_steps", num_warmup_steps)
    scale = warmup or 10000 if timescale is None else _steps("timescale", timescale, minimum=1)
    return _HFInverseSqrt(_rates(optimizer)[0], warmup, scale)


def get_cosine_with_min_lr_schedule_with_warmup(
    optimizer: Any,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
    min_lr: float | None = None,
    min_lr_rate: float | None = None,
) -> TransformersSchedule:
    """As :func:`get_cosine_schedule_with_warmup`, down to ``min_lr`` (or ``min_lr_rate``
    times the rate) instead of 0.

    ``min_lr`` is taken as a fraction of the optimizer's default ``lr`` (``base_lr``
    where a number is given), as transformers does.

    Raises:
        ConfigError: both or neither of ``min_lr`` and ``min_lr_rate`` are given.

    Example:
        >>> s = get_cosine_with_min_lr_schedule_with_warmup(
        ...     1.0, num_warmup_steps=0, num_training_steps=4, min_lr_rate=0.1)
        >>> s.values([0, 4]).round(12).tolist()
        [1.0, 0.1]
    """
    _check_last_epoch(last_epoch)
    base_lr, lr_init = _rates(optimizer)
    if (min_lr is None) == (min_lr_rate is None):
        raise ConfigError(
            "min_lr",
            "must be given, or min_lr_rate, not both (transformers raises ValueError too)",
            {"min_lr": min_lr, "min_lr_rate": min_lr_rate},
        )
    if min_lr is not None:
        check_real("min_lr", min_lr)
        min_lr_rate = min_lr / lr_init
    assert min_lr_rate is not None
    return _HFCosineMinLR(
        base_lr,
        _steps("num_warmup_steps", num_warmup_steps),
        _steps("num_training_steps", num_training_steps),
        num_cycles,
        min_lr_rate,
    )


def get_wsd_schedule(
    optimizer: Any,
    num_warmup_steps: int,
    num_decay_steps: int,
    num_training_steps: int | None = None,
    num_stable_steps: int | None = None,
    warmup_type: str = "linear",
    decay_type: str = "cosine",
    min_lr_ratio: float = 0,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
) -> TransformersSchedule:
    """Warm-up, stable, decay (``transformers.get_wsd_schedule``).

    The warm-up rises from ``min_lr_ratio`` times the rate to the rate over
    ``num_warmup_steps`` (``warmup_type``: ``"linear"``, ``"cosine"`` or ``"1-sqrt"``), the
    rate holds for ``num_stable_steps`` (by default what ``num_training_steps`` leaves),
    then decays to ``min_lr_ratio`` times it over ``num_decay_steps`` (``decay_type``, the
    same three shapes) and stays there.

    Raises:
        ConfigError: neither ``num_training_steps`` nor ``num_stable_steps`` is given, or
            an unknown shape.

    Warns:
        UserWarning: both are given (``num_stable_steps`` is used, as in transformers).

    Example:
        >>> s = get_wsd_schedule(1.0, num_warmup_steps=2, num_decay_steps=2,
        ...                      num_training_steps=6, decay_type="linear")
        >>> s.values([0, 1, 2, 3, 4, 5, 6]).tolist()
        [0.0, 0.5, 1.0, 1.0, 1.0, 0.5, 0.0]
    """
    _check_last_epoch(last_epoch)
    if num_training_steps is None and num_stable_steps is None:
        raise ConfigError(
            "num_training_steps",
            "must be given, or num_stable_steps (transformers raises ValueError too)",
            None,
        )
    warmup = _steps("num_warmup_steps", num_warmup_steps)
    decay = _steps("num_decay_steps", num_decay_steps)
    if num_stable_steps is None:
        stable = _steps("num_training_steps", num_training_steps) - warmup - decay
    else:
        if num_training_steps is not None:
            warnings.warn(
                "get_wsd_schedule: both num_training_steps and num_stable_steps are given; "
                "num_stable_steps is used (as transformers does).",
                UserWarning,
                stacklevel=2,
            )
        stable = _steps("num_stable_steps", num_stable_steps)
    return _HFWSD(
        _rates(optimizer)[0],
        warmup,
        stable,
        decay,
        warmup_type,
        decay_type,
        min_lr_ratio,
        num_cycles,
    )
