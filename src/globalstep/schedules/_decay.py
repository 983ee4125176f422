"""The decays by a rate per period: exponential, natural exponential and inverse time.

Each multiplies ``initial`` by a function of :math:`p = \\max(s - b, 0) / d` (floored with
``staircase``), where :math:`s` is the step (see :mod:`globalstep.schedules.core`).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from globalstep._errors import ConfigError
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

__all__ = ["ExponentialDecay", "InverseTimeDecay", "NaturalExpDecay"]


class _Decay(Schedule):
    """What the decays by a ``rate`` per ``decay_steps`` share: their checks and the
    exponent :math:`p` of the rate."""

    if TYPE_CHECKING:  # the subclasses' fields (no annotations of a base at run time)
        initial: float
        rate: float
        staircase: bool

    def _check_decay(self, *, zero_ok: bool) -> None:
        """Checks ``initial``, ``rate`` (> 0, or >= 0 where ``zero_ok``) and ``staircase``,
        then the dtype and lengths."""
        check_number("initial", self.initial)
        check_number("rate", self.rate)
        if zero_ok:
            check_range("rate", self.rate, "must be >= 0", self.rate >= 0)
        else:
            check_range("rate", self.rate, "must be > 0", self.rate > 0)
        check_flag("staircase", self.staircase)
        self._setup()

    def _exponent(self, steps: Steps) -> Values:
        """``max(s - begin, 0) / decay_steps``, floored when ``staircase``."""
        begin = self.steps_of("begin") if "begin" in self.lengths else 0
        p = self.floats(np.maximum(steps - begin, 0)) / self.scalar(self.steps_of("decay_steps"))
        return np.floor(p) if self.staircase else p


@dataclass(frozen=True)
class ExponentialDecay(_Decay):
    """Multiplies the value by ``rate`` every ``decay_steps`` steps.

    .. math::
        p = \\max(s - b, 0) / d \\quad (\\lfloor p \\rfloor \\text{ if staircase}), \\qquad
        v(s) = v_0 \\cdot r^{p}

    clipped below at ``end_value`` when ``rate <= 1`` (a floor) and above when ``rate > 1``
    (a ceiling). With ``staircase`` the value first changes at step ``begin + decay_steps``.
    With ``0 < rate <= 1`` and ``initial >= 0`` it never rises from one step to the next.

    Args:
        initial: :math:`v_0`, the value at step 0.
        decay_steps: :math:`d`, >= 1 (or a duration).
        rate: :math:`r` > 0; a rate above 1 needs ``end_value`` as a ceiling.
        staircase: decay in whole periods.
        begin: :math:`b`, the step where the decay starts, >= 0.
        end_value: the floor (rate < 1) or ceiling (rate > 1), or None.

    Example:
        >>> lr = ExponentialDecay(0.1, 1000, 0.5, staircase=True)
        >>> lr(999), lr(1000), lr(2500)
        (0.1, 0.05, 0.025)
    """

    initial: float
    decay_steps: Length
    rate: float
    staircase: bool = False
    begin: Length = 0
    end_value: float | None = None
    dtype: str = dtype_field("float64")

    name: ClassVar[str] = "exponential_decay"
    lengths: ClassVar[dict[str, int]] = {"decay_steps": 1, "begin": 0}
    formula: ClassVar[str] = "v(s) = {initial} * {rate} ** {p}"

    def _format_fields(self) -> dict[str, Any]:
        p = f"(max(s - {self.begin}, 0) / {self.decay_steps})"
        return {**super()._format_fields(), "p": f"floor{p}" if self.staircase else p}

    def __post_init__(self) -> None:
        self._check_decay(zero_ok=False)
        check_number("end_value", self.end_value, optional=True)
        if self.rate > 1 and self.end_value is None:
            raise ConfigError(
                "end_value", "must be given as a ceiling when rate > 1", self.end_value
            )

    def compute(self, steps: Steps) -> Values:
        value = self.scalar(self.initial) * self.apply(
            np.power, self.scalar(self.rate), self._exponent(steps)
        )
        if self.end_value is None:
            return value
        clip = np.maximum if self.rate <= 1 else np.minimum
        return clip(value, self.scalar(self.end_value))

    def end_step(self) -> int | None:
        return int(self.steps_of("begin")) if self.rate == 1 else None


@dataclass(frozen=True)
class _RateDecay(_Decay):
    """The fields of a decay with a rate per ``decay_steps`` (not registered itself).

    Args:
        initial: :math:`v_0`, the value at step 0.
        decay_steps: :math:`d`, >= 1 (or a duration).
        rate: :math:`r` >= 0.
        staircase: decay in whole periods, :math:`p = \\lfloor s / d \\rfloor`.
    """

    initial: float
    decay_steps: Length
    rate: float
    staircase: bool = False
    dtype: str = dtype_field("float64")

    lengths: ClassVar[dict[str, int]] = {"decay_steps": 1}

    def __post_init__(self) -> None:
        self._check_decay(zero_ok=True)

    def _format_fields(self) -> dict[str, Any]:
        p = f"(s / {self.decay_steps})"
        return {**super()._format_fields(), "p": f"floor{p}" if self.staircase else p}

    def compute(self, steps: Steps) -> Values:
        return self._decayed(
            self.scalar(self.initial), self.scalar(self.rate) * self._exponent(steps)
        )

    @abstractmethod
    def _decayed(self, initial: Values, rp: Values) -> Values:
        """The value from ``initial`` and :math:`r p` (the rate times the exponent)."""


@dataclass(frozen=True)
class NaturalExpDecay(_RateDecay):
    """Decays as :math:`e^{-r p}`, :math:`p = s / d`: :math:`v(s) = v_0 e^{-r p}`.

    The rate is in nepers per ``decay_steps``: ``rate=1`` divides the value by :math:`e`
    every ``decay_steps`` (``ExponentialDecay`` with ``rate=exp(-rate)``, computed
    through ``exp``). The fields are :class:`_RateDecay`'s; never rises for ``initial >= 0``.

    Example:
        >>> NaturalExpDecay(1.0, 10, 0.5)(0)
        1.0
    """

    name: ClassVar[str] = "natural_exp_decay"
    formula: ClassVar[str] = "v(s) = {initial} * exp(-{rate} * {p})"

    def _decayed(self, initial: Values, rp: Values) -> Values:
        return initial * self.apply(np.exp, -rp)


@dataclass(frozen=True)
class InverseTimeDecay(_RateDecay):
    """Decays as :math:`1 / (1 + r p)`, :math:`p = s / d`: :math:`v(s) = v_0 / (1 + r p)`.

    A hyperbola, not an exponential: the value halves by step ``decay_steps / rate`` and
    falls as :math:`1/s` from then on. Takes the fields of :class:`_RateDecay`; for
    ``initial >= 0`` it never rises.

    Example:
        >>> lr = InverseTimeDecay(1.0, 10, 1.0)
        >>> lr(10), lr(30)
        (0.5, 0.25)
    """

    name: ClassVar[str] = "inverse_time_decay"
    formula: ClassVar[str] = "v(s) = {initial} / (1 + {rate} * {p})"

    def _decayed(self, initial: Values, rp: Values) -> Values:
        return initial / (self.scalar(1.0) + rp)
