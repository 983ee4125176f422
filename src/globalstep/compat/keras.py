"""Keras 3's learning-rate schedules, with Keras' names, arguments, defaults and float32.

Migrating is renaming an import: ``keras.optimizers.schedules.ExponentialDecay`` becomes
``globalstep.compat.keras.ExponentialDecay``. Each is called with a step (optimizer updates
applied, see :mod:`globalstep.clock`) and has ``get_config()`` / ``from_config()``. Values
are computed as Keras computes them on its TensorFlow backend, in the dtype of
``initial_learning_rate`` (float32 for a Python float), operation for operation, with
TensorFlow's pow, exp, log and cos and its flush-to-zero (see
:mod:`globalstep.compat._common`).

Example:
    >>> lr = ExponentialDecay(0.1, decay_steps=1000, decay_rate=0.96)
    >>> lr(0)
    0.10000000149011612
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from globalstep.compat._common import PeerSchedule, check_positive_steps
from globalstep.errors import ConfigError
from globalstep.schedules._base import Steps, Values, check_flag, check_number

__all__ = [
    "CosineDecay",
    "CosineDecayRestarts",
    "ExponentialDecay",
    "InverseTimeDecay",
    "PiecewiseConstantDecay",
    "PolynomialDecay",
]


def _decay_p(self: Any, steps: Steps) -> Values:
    o = self._ops
    p = steps.astype(o.dtype) / o.c(self.decay_steps)
    return np.floor(p) if self.staircase else p


class _RateDecay(PeerSchedule):
    """Keras' decays of ``(initial_learning_rate, decay_steps, decay_rate, staircase)``."""

    _fields = ("initial_learning_rate", "decay_steps", "decay_rate", "staircase", "name")

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        decay_rate: float,
        staircase: bool = False,
        name: str | None = None,
    ) -> None:
        check_number("initial_learning_rate", initial_learning_rate)
        check_positive_steps("decay_steps", decay_steps)
        check_number("decay_rate", decay_rate)
        check_flag("staircase", staircase)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate
        self.staircase = staircase
        self.name = type(self).__name__ if name is None else name  # Keras' default name
        self._init(initial_learning_rate)


class ExponentialDecay(_RateDecay):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)``, as Keras computes it.

    Example:
        >>> ExponentialDecay(1.0, 10, 0.5, staircase=True)(10)
        0.5
    """

    def _formula(self, steps: Steps) -> Values:
        o = self._ops
        rate = o.pow(o.c(self.decay_rate), _decay_p(self, steps))
        return o.c(self.initial_learning_rate) * rate


class PiecewiseConstantDecay(PeerSchedule):
    """``values[0]`` up to and including ``boundaries[0]``, then ``values[1]``, ...

    As in Keras, the value changes one step after each boundary: at step ``b + 1``.

    Example:
        >>> lr = PiecewiseConstantDecay([100], [1.0, 0.5])
        >>> lr(100), lr(101)
        (1.0, 0.5)
    """

    _fields = ("boundaries", "values", "name")

    def __init__(
        self, boundaries: Sequence[int], values: Sequence[float], name: str = "PiecewiseConstant"
    ) -> None:
        if len(boundaries) != len(values) - 1:
            raise ConfigError(
                "boundaries",
                f"must hold one fewer element than values ({len(values)})",
                list(boundaries),
            )
        for b in boundaries:
            check_number("boundaries", b)
        if any(b <= a for a, b in itertools.pairwise(boundaries)):
            raise ConfigError("boundaries", "must be strictly increasing", list(boundaries))
        for v in values:
            check_number("values", v)
        self.boundaries = list(boundaries)
        self.values_ = list(values)
        self.name = name
        self._init(values[0])

    def get_config(self) -> dict[str, Any]:
        return {"boundaries": self.boundaries, "values": self.values_, "name": self.name}

    def _formula(self, steps: Steps) -> Values:
        # The step is compared with each boundary cast to the step's integer type.
        bounds = np.asarray([math.trunc(b) for b in self.boundaries], dtype=np.int64)
        index = np.searchsorted(bounds, steps, side="left")
        return np.asarray(self.values_, dtype=self._ops.dtype)[index]


class PolynomialDecay(PeerSchedule):
    """``(initial - end) * (1 - step / decay_steps) ** power + end``, as Keras computes it.

    Example:
        >>> PolynomialDecay(1.0, 10, end_learning_rate=0.0)(5)
        0.5
    """

    _fields = (
        "initial_learning_rate",
        "decay_steps",
        "end_learning_rate",
        "power",
        "cycle",
        "name",
    )

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        end_learning_rate: float = 0.0001,
        power: float = 1.0,
        cycle: bool = False,
        name: str = "PolynomialDecay",
    ) -> None:
        check_number("initial_learning_rate", initial_learning_rate)
        check_positive_steps("decay_steps", decay_steps)
        check_number("end_learning_rate", end_learning_rate)
        check_number("power", power)
        check_flag("cycle", cycle)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.end_learning_rate = end_learning_rate
        self.power = power
        self.cycle = cycle
        self.name = name
        self._init(initial_learning_rate)

    def _formula(self, steps: Steps) -> Values:
        o = self._ops
        t = steps.astype(o.dtype)
        d = o.c(self.decay_steps)
        if self.cycle:
            multiplier = np.where(t == 0, o.c(1.0), np.ceil(t / o.c(self.decay_steps)))
            d = d * multiplier
        else:
            t = np.minimum(t, d)
        p = t / d
        initial, end = o.c(self.initial_learning_rate), o.c(self.end_learning_rate)
        return (initial - end) * o.pow(1 - p, o.c(self.power)) + end


class InverseTimeDecay(_RateDecay):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)``, as Keras does it.

    Example:
        >>> InverseTimeDecay(1.0, 10, 1.0)(10)
        0.5
    """

    def _formula(self, steps: Steps) -> Values:
        o = self._ops
        denominator = o.c(1) + o.c(self.decay_rate) * _decay_p(self, steps)
        return o.c(self.initial_learning_rate) / denominator


def cosine_decayed(ops: Any, fraction: Values, alpha: float, lr: Any) -> Values:
    """Keras' ``_decay_function``: ``lr * ((1 - alpha) * 0.5 * (1 + cos(pi f)) + alpha)``."""
    cosine = 0.5 * (ops.c(1.0) + ops.cos(ops.exact(math.pi) * fraction))
    decayed = ops.exact(1 - alpha) * cosine + ops.exact(alpha)
    return lr * decayed


class CosineDecay(PeerSchedule):
    """A cosine decay with an optional linear warm-up to ``warmup_target``, as Keras does it.

    Example:
        >>> lr = CosineDecay(0.0, 100, warmup_target=1.0, warmup_steps=10)
        >>> lr(5), lr(10)
        (0.5, 1.0)
    """

    _fields = (
        "initial_learning_rate",
        "decay_steps",
        "alpha",
        "name",
        "warmup_target",
        "warmup_steps",
    )

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        alpha: float = 0.0,
        name: str = "CosineDecay",
        warmup_target: float | None = None,
        warmup_steps: int = 0,
    ) -> None:
        check_number("initial_learning_rate", initial_learning_rate)
        check_positive_steps("decay_steps", decay_steps)
        check_number("alpha", alpha)
        check_number("warmup_target", warmup_target, optional=True)
        check_number("warmup_steps", warmup_steps)
        if warmup_steps < 0:
            raise ConfigError("warmup_steps", "must be >= 0", warmup_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.alpha = alpha
        self.name = name
        self.warmup_target = warmup_target
        self.warmup_steps = warmup_steps
        self._init(initial_learning_rate)

    def _formula(self, steps: Steps) -> Values:
        o = self._ops
        initial = o.c(self.initial_learning_rate)
        d = o.c(self.decay_steps)
        t = steps.astype(o.dtype)
        if self.warmup_target is None:
            return cosine_decayed(o, np.minimum(t, d) / d, self.alpha, initial)
        target, w = o.c(self.warmup_target), o.c(self.warmup_steps)
        t = np.minimum(t, d + w)
        warm = (target - initial) * (t / w) + initial
        decay = cosine_decayed(o, (t - w) / d, self.alpha, target)
        return np.where(t < w, warm, decay)


class CosineDecayRestarts(PeerSchedule):
    """SGDR, as Keras computes it (periods ``t_mul`` times longer, ``m_mul`` times lower).

    Example:
        >>> CosineDecayRestarts(1.0, 10, t_mul=1.0)(10)
        1.0
    """

    _fields = ("initial_learning_rate", "first_decay_steps", "t_mul", "m_mul", "alpha", "name")

    def __init__(
        self,
        initial_learning_rate: float,
        first_decay_steps: int,
        t_mul: float = 2.0,
        m_mul: float = 1.0,
        alpha: float = 0.0,
        name: str = "SGDRDecay",
    ) -> None:
        check_number("initial_learning_rate", initial_learning_rate)
        check_positive_steps("first_decay_steps", first_decay_steps)
        check_positive_steps("t_mul", t_mul)
        check_number("m_mul", m_mul)
        check_number("alpha", alpha)
        self.initial_learning_rate = initial_learning_rate
        self.first_decay_steps = first_decay_steps
        self.t_mul = t_mul
        self.m_mul = m_mul
        self.alpha = alpha
        self.name = name
        self._init(initial_learning_rate)

    def _formula(self, steps: Steps) -> Values:
        o = self._ops
        one = o.c(1.0)
        alpha, t_mul, m_mul = o.c(self.alpha), o.c(self.t_mul), o.c(self.m_mul)
        fraction = steps.astype(o.dtype) / o.c(self.first_decay_steps)
        if t_mul == 1.0:
            restart = np.floor(fraction)
            fraction = fraction - restart
        else:
            restart = np.floor(o.log(one - fraction * (one - t_mul)) / o.log(t_mul))
            sum_r = (one - o.pow(t_mul, restart)) / (one - t_mul)
            fraction = (fraction - sum_r) / o.pow(t_mul, restart)
        m_fac = o.pow(m_mul, restart)
        cosine = 0.5 * m_fac * (one + o.cos(o.exact(math.pi) * fraction))
        decayed = (one - alpha) * cosine + alpha
        return o.c(self.initial_learning_rate) * decayed
