"""The core schedules: each a frozen dataclass, a pure function of the step.

In every formula :math:`s` is the step (optimizer updates applied, see
:mod:`globalstep.clock`), lengths are in steps, and values are computed in the schedule's
``dtype`` (float64 unless ``dtype="float32"``). Each schedule's value at step 0 is the one
the very first update uses.

Example:
    >>> lr = ExponentialDecay(initial=0.1, decay_steps=100_000, rate=0.96, staircase=True)
    >>> lr(0), lr(23_999)
    (0.1, 0.1)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from globalstep.errors import ConfigError
from globalstep.schedules._base import (
    Schedule,
    Steps,
    Values,
    check_choice,
    check_flag,
    check_number,
    check_range,
)

__all__ = [
    "Constant",
    "CosineDecay",
    "CosineDecayRestarts",
    "ExponentialDecay",
    "InverseSqrt",
    "InverseTimeDecay",
    "Linear",
    "LinearCosineDecay",
    "NaturalExpDecay",
    "NoisyLinearCosineDecay",
    "OneCycle",
    "PiecewiseConstant",
    "PolynomialDecay",
    "WarmupStableDecay",
]

Length = int | str


def _dtype() -> Any:
    """The ``dtype`` field every core schedule ends with."""
    return field(default="float64", kw_only=True)


def _decay_exponent(schedule: Any, steps: Steps) -> Values:
    """``max(s - begin, 0) / decay_steps``, floored when ``staircase``."""
    begin = schedule._len("begin") if "begin" in schedule.lengths else 0
    p = schedule._t(np.maximum(steps - begin, 0)) / schedule._c(schedule._len("decay_steps"))
    return np.floor(p) if schedule.staircase else p


def _check_decay(schedule: Any, *, zero_ok: bool) -> None:
    check_number("initial", schedule.initial)
    check_number("rate", schedule.rate)
    if zero_ok:
        check_range("rate", schedule.rate, "must be >= 0", schedule.rate >= 0)
    else:
        check_range("rate", schedule.rate, "must be > 0", schedule.rate > 0)
    check_flag("staircase", schedule.staircase)
    schedule._setup()


@dataclass(frozen=True)
class Constant(Schedule):
    """The same value at every step.

    .. math:: v(s) = c

    Example:
        >>> Constant(0.01)(10**9)
        0.01
    """

    value: float
    dtype: str = _dtype()

    name: ClassVar[str] = "constant"
    formula: ClassVar[str] = "v(s) = {value}"

    def __post_init__(self) -> None:
        check_number("value", self.value)
        self._setup()

    def _compute(self, steps: Steps) -> Values:
        return np.full(steps.shape, self._c(self.value), dtype=self._dt)

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
    dtype: str = _dtype()

    name: ClassVar[str] = "linear"
    lengths: ClassVar[dict[str, int]] = {"steps": 1, "begin": 0}
    formula: ClassVar[str] = (
        "v(s) = {initial} + ({end_value} - {initial}) * min(max(s - {begin}, 0), {steps}) / {steps}"
    )

    def __post_init__(self) -> None:
        check_number("initial", self.initial)
        check_number("end_value", self.end_value)
        self._setup()

    def _compute(self, steps: Steps) -> Values:
        n = self._len("steps")
        t = self._t(np.clip(steps - self._len("begin"), 0, n))
        v0, v1 = self._c(self.initial), self._c(self.end_value)
        return v0 + (v1 - v0) * (t / self._c(n))

    def end_step(self) -> int | None:
        return int(self._len("begin") + self._len("steps"))


@dataclass(frozen=True)
class ExponentialDecay(Schedule):
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
    dtype: str = _dtype()

    name: ClassVar[str] = "exponential_decay"
    lengths: ClassVar[dict[str, int]] = {"decay_steps": 1, "begin": 0}
    formula: ClassVar[str] = "v(s) = {initial} * {rate} ** {p}"

    def _format_fields(self) -> dict[str, Any]:
        p = f"(max(s - {self.begin}, 0) / {self.decay_steps})"
        return {**super()._format_fields(), "p": f"floor{p}" if self.staircase else p}

    def __post_init__(self) -> None:
        _check_decay(self, zero_ok=False)
        check_number("end_value", self.end_value, optional=True)
        if self.rate > 1 and self.end_value is None:
            raise ConfigError(
                "end_value", "must be given as a ceiling when rate > 1", self.end_value
            )

    def _compute(self, steps: Steps) -> Values:
        value = self._c(self.initial) * self._f(
            np.power, self._c(self.rate), _decay_exponent(self, steps)
        )
        if self.end_value is None:
            return value
        clip = np.maximum if self.rate <= 1 else np.minimum
        return clip(value, self._c(self.end_value))

    def end_step(self) -> int | None:
        return int(self._len("begin")) if self.rate == 1 else None


@dataclass(frozen=True)
class _RateDecay(Schedule):
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
    dtype: str = _dtype()

    lengths: ClassVar[dict[str, int]] = {"decay_steps": 1}

    def __post_init__(self) -> None:
        _check_decay(self, zero_ok=True)

    def _format_fields(self) -> dict[str, Any]:
        p = f"(s / {self.decay_steps})"
        return {**super()._format_fields(), "p": f"floor{p}" if self.staircase else p}


@dataclass(frozen=True)
class NaturalExpDecay(_RateDecay):
    """Decays as :math:`e^{-r p}`, :math:`p = s / d`: :math:`v(s) = v_0 e^{-r p}`.

    Arguments as :class:`_RateDecay`. Never rises for ``initial >= 0``.

    Example:
        >>> NaturalExpDecay(1.0, 10, 0.5)(0)
        1.0
    """

    name: ClassVar[str] = "natural_exp_decay"
    formula: ClassVar[str] = "v(s) = {initial} * exp(-{rate} * {p})"

    def _compute(self, steps: Steps) -> Values:
        p = _decay_exponent(self, steps)
        return self._c(self.initial) * self._f(np.exp, -self._c(self.rate) * p)


@dataclass(frozen=True)
class InverseTimeDecay(_RateDecay):
    """Decays as :math:`1 / (1 + r p)`, :math:`p = s / d`: :math:`v(s) = v_0 / (1 + r p)`.

    Arguments as :class:`_RateDecay`. Never rises for ``initial >= 0``.

    Example:
        >>> InverseTimeDecay(1.0, 10, 1.0)(10)
        0.5
    """

    name: ClassVar[str] = "inverse_time_decay"
    formula: ClassVar[str] = "v(s) = {initial} / (1 + {rate} * {p})"

    def _compute(self, steps: Steps) -> Values:
        p = _decay_exponent(self, steps)
        return self._c(self.initial) / (self._c(1.0) + self._c(self.rate) * p)


def _check_boundaries(parameter: str, boundaries: Any, count: int, count_name: str) -> None:
    if not isinstance(boundaries, tuple):
        raise ConfigError(parameter, "must be a tuple of steps", boundaries)
    if len(boundaries) != count:
        raise ConfigError(
            parameter,
            f"must hold exactly {count} boundaries (one fewer than {count_name})",
            boundaries,
        )


def _check_increasing(parameter: str, schedule: Schedule) -> None:
    resolved = schedule._n.get(parameter)
    if resolved is not None and any(b <= a for a, b in itertools.pairwise(resolved)):
        raise ConfigError(parameter, "must be strictly increasing", getattr(schedule, parameter))


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
    dtype: str = _dtype()

    name: ClassVar[str] = "piecewise_constant"
    lengths: ClassVar[dict[str, int]] = {"boundaries": 1}
    formula: ClassVar[str] = "v(s) = {levels}[i] where {boundaries}[i-1] <= s < {boundaries}[i]"

    def __post_init__(self) -> None:
        if not isinstance(self.levels, tuple) or not self.levels:
            raise ConfigError("levels", "must be a non-empty tuple of numbers", self.levels)
        for v in self.levels:
            check_number("levels", v)
        _check_boundaries("boundaries", self.boundaries, len(self.levels) - 1, "levels")
        self._setup()
        _check_increasing("boundaries", self)

    def _compute(self, steps: Steps) -> Values:
        index = np.searchsorted(np.asarray(self._len("boundaries"), np.int64), steps, "right")
        return np.asarray(self.levels, dtype=self._dt)[index]

    def end_step(self) -> int | None:
        bounds = self._len("boundaries")
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
    dtype: str = _dtype()

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

    def _compute(self, steps: Steps) -> Values:
        t = self._t(np.maximum(steps - self._len("begin"), 0))
        d = self._c(self._len("decay_steps"))
        if self.cycle:
            d = d * np.where(t == 0, self._c(1.0), np.ceil(t / d))
        else:
            t = np.minimum(t, d)
        v0, v1 = self._c(self.initial), self._c(self.end_value)
        # In float32, ceil(t / d) * d may round below t; clamping keeps 1 - p >= 0 finite.
        remaining = np.maximum(self._c(1.0) - t / d, self._c(0.0))
        return (v0 - v1) * self._f(np.power, remaining, self._c(self.power)) + v1

    def end_step(self) -> int | None:
        return None if self.cycle else int(self._len("begin") + self._len("decay_steps"))


def _cosine(schedule: Schedule, fraction: Values) -> Values:
    """``0.5 * (1 + cos(pi * fraction))``."""
    return 0.5 * (schedule._c(1.0) + schedule._f(np.cos, np.pi * fraction))


@dataclass(frozen=True)
class CosineDecay(Schedule):
    """Half a cosine from ``initial`` down to ``alpha * initial`` over ``decay_steps``.

    Never rises for ``initial >= 0``; constant from step ``decay_steps`` on.

    .. math::
        c = \\tfrac12 (1 + \\cos(\\pi \\min(s, d) / d)), \\qquad
        v(s) = v_0 ((1 - \\alpha) c^{e} + \\alpha)

    Args:
        initial: :math:`v_0`, the value at step 0.
        decay_steps: :math:`d`, >= 1 (or a duration).
        alpha: :math:`\\alpha` in [0, 1], the final value as a fraction of ``initial``.
        exponent: :math:`e` > 0.

    Example:
        >>> CosineDecay(1.0, 100)(100)
        0.0
    """

    initial: float
    decay_steps: Length
    alpha: float = 0.0
    exponent: float = 1.0
    dtype: str = _dtype()

    name: ClassVar[str] = "cosine_decay"
    lengths: ClassVar[dict[str, int]] = {"decay_steps": 1}
    formula: ClassVar[str] = (
        "v(s) = {initial} * ((1 - {alpha}) * (0.5 * (1 + cos(pi * min(s, {decay_steps}) / "
        "{decay_steps}))) ** {exponent} + {alpha})"
    )

    def __post_init__(self) -> None:
        check_number("initial", self.initial)
        check_number("alpha", self.alpha)
        check_range("alpha", self.alpha, "must be in [0, 1]", 0 <= self.alpha <= 1)
        check_number("exponent", self.exponent)
        check_range("exponent", self.exponent, "must be > 0", self.exponent > 0)
        self._setup()

    def _compute(self, steps: Steps) -> Values:
        d = self._c(self._len("decay_steps"))
        c = _cosine(self, np.minimum(self._t(steps), d) / d)
        a = self._c(self.alpha)
        return self._c(self.initial) * ((1 - a) * self._f(np.power, c, self._c(self.exponent)) + a)

    def end_step(self) -> int | None:
        return int(self._len("decay_steps"))


@dataclass(frozen=True)
class CosineDecayRestarts(Schedule):
    """SGDR: cosine decays that restart, each ``t_mul`` times longer and ``m_mul`` times lower.

    .. math::
        f = s / d, \\quad i = \\lfloor f \\rfloor \\ (t_{mul} = 1)
        \\text{ else } \\lfloor \\log(1 - f (1 - t_{mul})) / \\log t_{mul} \\rfloor,
        \\quad f \\leftarrow (f - \\tfrac{1 - t_{mul}^i}{1 - t_{mul}}) / t_{mul}^i

    .. math:: v(s) = v_0 ((1 - \\alpha) \\tfrac12 m_{mul}^i (1 + \\cos \\pi f) + \\alpha)

    Args:
        initial: :math:`v_0`, the value at step 0 and at each restart (times ``m_mul**i``).
        first_decay_steps: :math:`d`, the first period, >= 1 (or a duration).
        t_mul: each period's length over the previous one's, >= 1.
        m_mul: each restart's height over the previous one's, in [0, 1].
        alpha: the floor as a fraction of ``initial``, in [0, 1].

    Example:
        >>> lr = CosineDecayRestarts(1.0, 10, t_mul=1.0)
        >>> lr(0), lr(10)
        (1.0, 1.0)
    """

    initial: float
    first_decay_steps: Length
    t_mul: float = 2.0
    m_mul: float = 1.0
    alpha: float = 0.0
    dtype: str = _dtype()

    name: ClassVar[str] = "cosine_decay_restarts"
    lengths: ClassVar[dict[str, int]] = {"first_decay_steps": 1}
    formula: ClassVar[str] = (
        "SGDR: periods of {first_decay_steps} * {t_mul}**i steps, heights {initial} * "
        "{m_mul}**i, floor {alpha} * {initial}"
    )

    def __post_init__(self) -> None:
        check_number("initial", self.initial)
        for name, low, high in (("t_mul", 1, math.inf), ("m_mul", 0, 1), ("alpha", 0, 1)):
            value = getattr(self, name)
            check_number(name, value)
            rule = f"must be >= {low}" if high == math.inf else f"must be in [{low}, {high}]"
            check_range(name, value, rule, low <= value <= high)
        self._setup()

    def _compute(self, steps: Steps) -> Values:
        one = self._c(1.0)
        t_mul, m_mul, alpha = self._c(self.t_mul), self._c(self.m_mul), self._c(self.alpha)
        fraction = self._t(steps) / self._c(self._len("first_decay_steps"))
        if t_mul == 1:
            restart = np.floor(fraction)
            fraction = fraction - restart
        else:
            log = self._f(np.log, one - fraction * (one - t_mul)) / self._f(np.log, t_mul)
            restart = np.floor(log)
            sum_r = (one - self._f(np.power, t_mul, restart)) / (one - t_mul)
            fraction = (fraction - sum_r) / self._f(np.power, t_mul, restart)
        decayed = (
            0.5 * self._f(np.power, m_mul, restart) * (one + self._f(np.cos, np.pi * fraction))
        )
        return self._c(self.initial) * ((one - alpha) * decayed + alpha)


def _linear_cosine(schedule: Any, steps: Steps, noise: Values | None) -> Values:
    d = schedule._c(schedule._len("decay_steps"))
    t = np.minimum(schedule._t(steps), d)
    linear = (d - t) / d
    if noise is not None:
        linear = linear + noise
    fraction = 2.0 * schedule._c(schedule.num_periods) * (t / d)
    cosine = _cosine(schedule, fraction)
    value = (schedule._c(schedule.alpha) + linear) * cosine + schedule._c(schedule.beta)
    return schedule._c(schedule.initial) * value


def _check_linear_cosine(schedule: Any) -> None:
    for name in ("initial", "num_periods", "alpha", "beta"):
        check_number(name, getattr(schedule, name))
    check_range("num_periods", schedule.num_periods, "must be >= 0", schedule.num_periods >= 0)


@dataclass(frozen=True)
class LinearCosineDecay(Schedule):
    """A cosine of ``num_periods`` periods under a line that falls to zero (Bello et al.).

    .. math::
        t = \\min(s, d), \\quad l = (d - t)/d, \\quad
        c = \\tfrac12(1 + \\cos(2 \\pi n t / d)), \\qquad
        v(s) = v_0 ((\\alpha + l) c + \\beta)

    Args:
        initial: :math:`v_0`; the value at step 0 is ``initial * (alpha + 1 + beta)``.
        decay_steps: :math:`d`, >= 1 (or a duration).
        num_periods: :math:`n` >= 0.
        alpha: :math:`\\alpha`.
        beta: :math:`\\beta`, the final value as a fraction of ``initial``.

    Example:
        >>> LinearCosineDecay(1.0, 100, beta=0.0)(100)
        0.0
    """

    initial: float
    decay_steps: Length
    num_periods: float = 0.5
    alpha: float = 0.0
    beta: float = 0.001
    dtype: str = _dtype()

    name: ClassVar[str] = "linear_cosine_decay"
    lengths: ClassVar[dict[str, int]] = {"decay_steps": 1}
    formula: ClassVar[str] = (
        "v(s) = {initial} * (({alpha} + l) * 0.5 * (1 + cos(2 pi {num_periods} t / "
        "{decay_steps})) + {beta}), t = min(s, {decay_steps}), l = 1 - t / {decay_steps}"
    )

    def __post_init__(self) -> None:
        _check_linear_cosine(self)
        self._setup()

    def _compute(self, steps: Steps) -> Values:
        return _linear_cosine(self, steps, None)

    def end_step(self) -> int | None:
        return int(self._len("decay_steps"))


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix(z: Any) -> Any:
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def standard_normal(seed: int, steps: Steps) -> Any:
    """One standard normal draw per step, a pure function of ``(seed, step)``.

    A counter-based generator (splitmix64 and Box-Muller), so the draw at a step does not
    depend on which other steps were drawn, nor in which order.
    """
    key = _splitmix(np.array([seed], np.uint64) * _GOLDEN + np.uint64(1))[0]
    a = _splitmix(steps.astype(np.uint64) * _GOLDEN + key)
    b = _splitmix(a ^ _MIX2)
    u1 = ((a >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53
    u2 = (b >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


@dataclass(frozen=True)
class NoisyLinearCosineDecay(Schedule):
    """:class:`LinearCosineDecay` with seeded Gaussian noise added to the line.

    .. math::
        \\sigma^2 = \\sigma_0^2 / (1 + t)^{\\gamma}, \\qquad
        v(s) = v_0 ((\\alpha + l + \\sigma z_s) c + \\beta)

    where :math:`z_s` is a standard normal drawn from ``(seed, step)`` alone, so the same
    seed gives the same values in any order, vectorised or not, after any restart. The
    value at step 0 is :math:`v_0 (\\alpha + 1 + \\sigma_0 z_0 + \\beta)`.

    Args:
        initial, decay_steps, num_periods, alpha, beta: as :class:`LinearCosineDecay`.
        initial_variance: :math:`\\sigma_0^2` >= 0.
        variance_decay: :math:`\\gamma` >= 0.
        seed: an int >= 0.

    Example:
        >>> lr = NoisyLinearCosineDecay(1.0, 100, seed=7)
        >>> lr(5) == lr(5)
        True
    """

    initial: float
    decay_steps: Length
    initial_variance: float = 1.0
    variance_decay: float = 0.55
    num_periods: float = 0.5
    alpha: float = 0.0
    beta: float = 0.001
    seed: int = 0
    dtype: str = _dtype()

    name: ClassVar[str] = "noisy_linear_cosine_decay"
    lengths: ClassVar[dict[str, int]] = {"decay_steps": 1}
    formula: ClassVar[str] = (
        "v(s) = {initial} * (({alpha} + l + sqrt({initial_variance} / (1 + t) ** "
        "{variance_decay}) * z(seed={seed}, s)) * 0.5 * (1 + cos(2 pi {num_periods} t / "
        "{decay_steps})) + {beta})"
    )

    def __post_init__(self) -> None:
        _check_linear_cosine(self)
        for name in ("initial_variance", "variance_decay"):
            value = getattr(self, name)
            check_number(name, value)
            check_range(name, value, "must be >= 0", value >= 0)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError("seed", "must be an int >= 0", self.seed)
        self._setup()

    def _compute(self, steps: Steps) -> Values:
        t = np.minimum(self._t(steps), self._c(self._len("decay_steps")))
        variance = self._c(self.initial_variance) / self._f(
            np.power, self._c(1.0) + t, self._c(self.variance_decay)
        )
        noise = np.sqrt(variance) * standard_normal(self.seed, steps).astype(self._dt)
        return _linear_cosine(self, steps, noise)


def _anneal(schedule: Schedule, shape: str, start: Any, end: Any, pct: Values) -> Values:
    """From ``start`` (exactly, at pct 0) to ``end`` along a half cosine or a line."""
    if shape == "cosine":
        return start + (end - start) * ((1 - schedule._f(np.cos, np.pi * pct)) / 2)
    return start + (end - start) * pct


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
    dtype: str = _dtype()

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

    def _compute(self, steps: Steps) -> Values:
        total = self._c(self._len("total_steps"))
        up = self._c(self.pct_start) * total
        peak = self._c(self.peak)
        start = peak / self._c(self.div_factor)
        floor = start / self._c(self.final_div_factor)
        t = self._t(steps)
        rising = _anneal(self, self.shape, start, peak, t / up)
        falling = _anneal(self, self.shape, peak, floor, np.minimum((t - up) / (total - up), 1))
        return np.where(t < up, rising, falling)

    def end_step(self) -> int | None:
        return int(self._len("total_steps"))


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
    dtype: str = _dtype()

    name: ClassVar[str] = "inverse_sqrt"
    lengths: ClassVar[dict[str, int]] = {"warmup_steps": 1}
    formula: ClassVar[str] = (
        "v(s) = {peak} * min((s + 1) / {warmup_steps}, sqrt({warmup_steps} / (s + 1)))"
    )

    def __post_init__(self) -> None:
        check_number("peak", self.peak)
        self._setup()

    def _compute(self, steps: Steps) -> Values:
        n = self._t(steps) + self._c(1.0)
        w = self._c(self._len("warmup_steps"))
        return self._c(self.peak) * np.minimum(n / w, np.sqrt(w / n))


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
    dtype: str = _dtype()

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

    def _compute(self, steps: Steps) -> Values:
        t = self._t(steps)
        w, d = self._len("warmup_steps"), self._len("decay_steps")
        total = self._len("total_steps")
        peak, v0, v1 = self._c(self.peak), self._c(self.initial), self._c(self.end_value)
        warm = v0 + (peak - v0) * (t / self._c(max(w, 1)))
        pct = np.minimum(self._t(np.maximum(steps - (total - d), 0)) / self._c(d), 1)
        if self.decay_shape == "sqrt":
            decay = v1 + (peak - v1) * (1 - np.sqrt(pct))
        else:
            decay = _anneal(self, self.decay_shape, peak, v1, pct)
        stable = np.where(steps < total - d, peak, decay)
        return np.where(steps < w, warm, stable)

    def end_step(self) -> int | None:
        return int(self._len("total_steps"))
