"""The cosine schedules: a half-cosine decay, its restarts (SGDR), and the linear cosine
decays (Bello et al.), one of them with seeded noise.

In every formula :math:`s` is the step (see :mod:`globalstep.schedules.core`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from globalstep._errors import ConfigError
from globalstep.schedules._base import (
    Length,
    Schedule,
    Steps,
    Values,
    check_number,
    check_range,
    dtype_field,
)

__all__ = [
    "CosineDecay",
    "CosineDecayRestarts",
    "LinearCosineDecay",
    "NoisyLinearCosineDecay",
    "standard_normal",
]


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
    dtype: str = dtype_field("float64")

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

    def compute(self, steps: Steps) -> Values:
        d = self.scalar(self.steps_of("decay_steps"))
        c = self._half_cosine(np.minimum(self.floats(steps), d) / d)
        a = self.scalar(self.alpha)
        return self.scalar(self.initial) * (
            (1 - a) * self.apply(np.power, c, self.scalar(self.exponent)) + a
        )

    def end_step(self) -> int | None:
        return int(self.steps_of("decay_steps"))


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
    dtype: str = dtype_field("float64")

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

    def compute(self, steps: Steps) -> Values:
        one = self.scalar(1.0)
        t_mul, m_mul, alpha = (
            self.scalar(self.t_mul),
            self.scalar(self.m_mul),
            self.scalar(self.alpha),
        )
        fraction = self.floats(steps) / self.scalar(self.steps_of("first_decay_steps"))
        if t_mul == 1:
            restart = np.floor(fraction)
            fraction = fraction - restart
        else:
            log = self.apply(np.log, one - fraction * (one - t_mul)) / self.apply(np.log, t_mul)
            restart = np.floor(log)
            sum_r = (one - self.apply(np.power, t_mul, restart)) / (one - t_mul)
            fraction = (fraction - sum_r) / self.apply(np.power, t_mul, restart)
        decayed = (
            0.5
            * self.apply(np.power, m_mul, restart)
            * (one + self.apply(np.cos, np.pi * fraction))
        )
        return self.scalar(self.initial) * ((one - alpha) * decayed + alpha)


class _LinearCosine(Schedule):
    """What the linear cosine decays share: their checks and the formula, with or without
    the noise added to the line."""

    if TYPE_CHECKING:  # the subclasses' fields (no annotations of a base at run time)
        initial: float
        num_periods: float
        alpha: float
        beta: float

    def _check_linear_cosine(self) -> None:
        for name in ("initial", "num_periods", "alpha", "beta"):
            check_number(name, getattr(self, name))
        check_range("num_periods", self.num_periods, "must be >= 0", self.num_periods >= 0)

    def _linear_cosine(self, steps: Steps, noise: Values | None) -> Values:
        d = self.scalar(self.steps_of("decay_steps"))
        t = np.minimum(self.floats(steps), d)
        linear = (d - t) / d
        if noise is not None:
            linear = linear + noise
        fraction = 2.0 * self.scalar(self.num_periods) * (t / d)
        cosine = self._half_cosine(fraction)
        value = (self.scalar(self.alpha) + linear) * cosine + self.scalar(self.beta)
        return self.scalar(self.initial) * value


@dataclass(frozen=True)
class LinearCosineDecay(_LinearCosine):
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
    dtype: str = dtype_field("float64")

    name: ClassVar[str] = "linear_cosine_decay"
    lengths: ClassVar[dict[str, int]] = {"decay_steps": 1}
    formula: ClassVar[str] = (
        "v(s) = {initial} * (({alpha} + l) * 0.5 * (1 + cos(2 pi {num_periods} t / "
        "{decay_steps})) + {beta}), t = min(s, {decay_steps}), l = 1 - t / {decay_steps}"
    )

    def __post_init__(self) -> None:
        self._check_linear_cosine()
        self._setup()

    def compute(self, steps: Steps) -> Values:
        return self._linear_cosine(steps, None)

    def end_step(self) -> int | None:
        return int(self.steps_of("decay_steps"))


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
class NoisyLinearCosineDecay(_LinearCosine):
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
    dtype: str = dtype_field("float64")

    name: ClassVar[str] = "noisy_linear_cosine_decay"
    lengths: ClassVar[dict[str, int]] = {"decay_steps": 1}
    formula: ClassVar[str] = (
        "v(s) = {initial} * (({alpha} + l + sqrt({initial_variance} / (1 + t) ** "
        "{variance_decay}) * z(seed={seed}, s)) * 0.5 * (1 + cos(2 pi {num_periods} t / "
        "{decay_steps})) + {beta})"
    )

    def __post_init__(self) -> None:
        self._check_linear_cosine()
        for name in ("initial_variance", "variance_decay"):
            value = getattr(self, name)
            check_number(name, value)
            check_range(name, value, "must be >= 0", value >= 0)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError("seed", "must be an int >= 0", self.seed)
        self._setup()

    def compute(self, steps: Steps) -> Values:
        t = np.minimum(self.floats(steps), self.scalar(self.steps_of("decay_steps")))
        variance = self.scalar(self.initial_variance) / self.apply(
            np.power, self.scalar(1.0) + t, self.scalar(self.variance_decay)
        )
        noise = np.sqrt(variance) * standard_normal(self.seed, steps).astype(self._dt)
        return self._linear_cosine(steps, noise)
