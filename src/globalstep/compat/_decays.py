"""The decays TensorFlow's and Keras' ``learning_rate_schedule`` classes share, written once.

Keras 3's schedules on its TensorFlow backend are TensorFlow's own
(``tensorflow/python/keras/optimizer_v2/learning_rate_schedule.py``) operation for
operation: :mod:`globalstep.compat._tf_schedules` and :mod:`globalstep.compat.keras` build
their exponential, inverse-time, polynomial, cosine and SGDR decays on the classes here,
which check the arguments, keep them under the peers' names and compute the formula with a
:class:`~globalstep.compat._common.F32Ops` in the rate's dtype.

Where the two peers differ, the peer's base class says how, through three hooks:
``_check_initial`` (TensorFlow refuses an int rate, and a float64 one in the cosine decays;
Keras warns about an int one), ``_flag`` (TensorFlow reads a flag as ``if value:``, Keras
takes only a bool) and ``_named`` (Keras names an exponential or inverse-time decay given
``name=None`` after its class). The formulas have no difference left: the ones that looked
different are the same floating-point operations (``1.0`` is exact in either dtype;
TensorFlow's float32 ``pi`` is ``ops.exact(math.pi)``, as TensorFlow's cosine decays take
only float32 rates).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from globalstep.compat._common import F32Ops, PeerSchedule, check_positive_steps
from globalstep.schedules import Steps, Values, check_number


def half_cosine(ops: F32Ops, fraction: Values) -> Values:
    """``0.5 * (1 + cos(pi * fraction))``, with ``pi`` in the dtype of ``ops``."""
    return 0.5 * (ops.exact(1.0) + ops.cos(ops.exact(math.pi) * fraction))


def cosine_decayed(ops: F32Ops, fraction: Values, alpha: float, lr: Any) -> Values:
    """The peers' ``_decay_function``: ``lr * ((1 - alpha) * 0.5 * (1 + cos(pi f)) + alpha)``."""
    decayed = ops.exact(1 - alpha) * half_cosine(ops, fraction) + ops.exact(alpha)
    return lr * decayed


class Decay(PeerSchedule):
    """A decay of the peers' ``learning_rate_schedule``; the peer's base class (first in the
    bases of each public class) implements the hooks."""

    def _check_initial(self, value: Any, *, cosine: bool) -> None:
        """Checks ``initial_learning_rate`` as the peer does (``cosine``: a cosine decay)."""
        raise NotImplementedError

    def _flag(self, parameter: str, value: Any) -> bool:
        """``value`` as the peer reads the flag ``parameter``."""
        raise NotImplementedError

    def _named(self, name: str | None) -> str | None:
        """The name an exponential or inverse-time decay keeps for ``name``."""
        return name


class Exponential(Decay):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)``, floored if staircase."""

    _fields = ("initial_learning_rate", "decay_steps", "decay_rate", "staircase", "name")
    initial_learning_rate: float
    decay_steps: float
    decay_rate: float
    staircase: bool
    name: str | None

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: float,
        decay_rate: float,
        staircase: bool = False,
        name: str | None = None,
    ) -> None:
        self._check_initial(initial_learning_rate, cosine=False)
        check_positive_steps("decay_steps", decay_steps)
        check_number("decay_rate", decay_rate)
        self._staircase = self._flag("staircase", staircase)
        self._keep(initial_learning_rate, decay_steps, decay_rate, staircase, self._named(name))
        self._init(initial_learning_rate)

    def _p(self, steps: Steps) -> Values:
        o = self._ops
        p = steps.astype(o.dtype) / o.c(self.decay_steps)
        return np.floor(p) if self._staircase else p

    def _formula(self, steps: Steps) -> Values:
        o = self._ops
        return o.c(self.initial_learning_rate) * o.pow(o.c(self.decay_rate), self._p(steps))


class InverseTime(Exponential):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)``."""

    def _formula(self, steps: Steps) -> Values:
        o = self._ops
        denominator = o.c(1) + o.c(self.decay_rate) * self._p(steps)
        return o.c(self.initial_learning_rate) / denominator


class Polynomial(Decay):
    """``(initial - end) * (1 - min(step, decay_steps) / decay_steps) ** power + end``; with
    ``cycle`` the decay length is the first multiple of ``decay_steps`` past the step."""

    _fields = (
        "initial_learning_rate",
        "decay_steps",
        "end_learning_rate",
        "power",
        "cycle",
        "name",
    )
    initial_learning_rate: float
    decay_steps: float
    end_learning_rate: float
    power: float
    cycle: bool
    name: str | None

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: float,
        end_learning_rate: float = 0.0001,
        power: float = 1.0,
        cycle: bool = False,
        name: str | None = None,
    ) -> None:
        self._check_initial(initial_learning_rate, cosine=False)
        check_positive_steps("decay_steps", decay_steps)
        check_number("end_learning_rate", end_learning_rate)
        check_number("power", power)
        self._cycle = self._flag("cycle", cycle)
        self._keep(initial_learning_rate, decay_steps, end_learning_rate, power, cycle, name)
        self._init(initial_learning_rate)

    def _formula(self, steps: Steps) -> Values:
        o = self._ops
        t = steps.astype(o.dtype)
        d = o.c(self.decay_steps)
        if self._cycle:
            # The peers divide by the Python number itself here (a float64 rate: the
            # float64 nearest it), where ``d`` is cast through float32 as ``cast`` casts it.
            multiplier = np.where(t == 0, o.exact(1.0), np.ceil(t / o.exact(self.decay_steps)))
            d = d * multiplier
        else:
            t = np.minimum(t, d)
        p = t / d
        initial, end = o.c(self.initial_learning_rate), o.c(self.end_learning_rate)
        return (initial - end) * o.pow(o.exact(1) - p, o.c(self.power)) + end


class CosineRestarts(Decay):
    """SGDR: cosine decays restarting, each period ``t_mul`` times longer, ``m_mul`` lower."""

    _fields = ("initial_learning_rate", "first_decay_steps", "t_mul", "m_mul", "alpha", "name")
    initial_learning_rate: float
    first_decay_steps: float
    t_mul: float
    m_mul: float
    alpha: float
    name: str | None

    def __init__(
        self,
        initial_learning_rate: float,
        first_decay_steps: float,
        t_mul: float = 2.0,
        m_mul: float = 1.0,
        alpha: float = 0.0,
        name: str | None = None,
    ) -> None:
        self._check_initial(initial_learning_rate, cosine=True)
        check_positive_steps("first_decay_steps", first_decay_steps)
        check_positive_steps("t_mul", t_mul)
        check_number("m_mul", m_mul)
        check_number("alpha", alpha)
        self._keep(initial_learning_rate, first_decay_steps, t_mul, m_mul, alpha, name)
        self._init(initial_learning_rate)

    def _formula(self, steps: Steps) -> Values:
        o = self._ops
        one = o.exact(1.0)
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
