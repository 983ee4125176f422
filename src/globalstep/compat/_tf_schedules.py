"""The schedules behind :mod:`globalstep.compat.tf`'s decays: TensorFlow's own
``learning_rate_schedule`` classes (``tensorflow/python/keras/optimizer_v2``), which
``tf.compat.v1.train.*_decay`` build, operation for operation.

They take every step TensorFlow takes: an int of any sign, a float (a Python float as
TensorFlow converts it, to float32 first), a NumPy scalar in its own dtype. The dtype is
the learning rate's: float32 for a Python float or ``np.float32``, float64 for
``np.float64``. Where TensorFlow fails at the first call (an int learning rate; a float64
one in the cosine decays, whose ``pi`` TensorFlow makes a float32 constant), these fail at
construction with a :class:`~globalstep._errors.ConfigError` that says what to write.

Example:
    >>> lr = ExponentialDecay(0.1, 10, 0.5)
    >>> lr(10), lr(-10), lr(2.5)
    (0.05000000074505806, 0.20000000298023224, 0.08408964425325394)
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from globalstep._errors import ConfigError
from globalstep.compat._common import (
    CompatDifferenceWarning,
    F32Ops,
    Formula,
    PeerSchedule,
    check_positive_steps,
    step_array,
)
from globalstep.compat._decays import (
    CosineRestarts,
    Exponential,
    InverseTime,
    Polynomial,
    cosine_decayed,
    half_cosine,
)
from globalstep.schedules import Steps, Values, check_number, standard_normal

__all__ = [
    "CosineDecay",
    "CosineDecayRestarts",
    "ExponentialDecay",
    "InverseTimeDecay",
    "LinearCosineDecay",
    "PiecewiseConstantDecay",
    "PolynomialDecay",
    "check_rate",
    "tf_dtype",
]


def tf_dtype(value: Any) -> np.dtype[Any]:
    """The dtype TensorFlow's ``convert_to_tensor`` gives a scalar: int32 for a Python int
    that fits (int64 otherwise), float32 for a Python float, bool, or a NumPy scalar's own.

    Example:
        >>> tf_dtype(5).name, tf_dtype(2**40).name, tf_dtype(5.0).name
        ('int32', 'int64', 'float32')
    """
    if isinstance(value, np.generic):
        return value.dtype
    if isinstance(value, bool):
        return np.dtype(np.bool_)
    if isinstance(value, int):
        return np.dtype(np.int32 if -(2**31) <= value < 2**31 else np.int64)
    if isinstance(value, float):
        return np.dtype(np.float32)
    raise ConfigError("value", "must be a number (an int, a float or a NumPy scalar)", value)


def check_rate(value: Any, parameter: str = "learning_rate", *, float64: bool = True) -> None:
    """Raises ConfigError unless ``value`` is a float TensorFlow can compute a decay in."""
    check_number(parameter, value)
    if isinstance(value, int | np.integer):
        raise ConfigError(
            parameter,
            "must be a float: TensorFlow computes in the int dtype of an int learning rate "
            "and fails at the first call",
            value,
            f"Write {parameter}={float(value)!r}.",
        )
    if not float64 and tf_dtype(value) == np.float64:
        raise ConfigError(
            parameter,
            "must be float32 here: TensorFlow's cosine decays multiply by a float32 pi and "
            "fail at the first call on a float64 learning rate",
            value,
            f"Write {parameter}={float(value)!r} (a Python float, computed in float32).",
        )


def _truth(parameter: str, value: Any) -> bool:
    """``value`` as TensorFlow's ``if value:`` reads it (a bool or an int)."""
    if not isinstance(value, bool | int | np.bool_ | np.integer):
        raise ConfigError(parameter, "must be a bool", value)
    return bool(value)


class _TFSchedule(PeerSchedule):
    """TensorFlow's schedules: any real step, the learning rate's dtype; the hooks of
    :class:`globalstep.compat._decays.Decay` as TensorFlow checks its arguments."""

    _any_step = True

    def _check_initial(self, value: Any, *, cosine: bool) -> None:
        check_rate(value, "initial_learning_rate", float64=not cosine)

    def _flag(self, parameter: str, value: Any) -> bool:
        return _truth(parameter, value)


class ExponentialDecay(_TFSchedule, Exponential):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)``, floored if staircase.

    Example:
        >>> ExponentialDecay(1.0, 10, 0.5, staircase=True)(19)
        0.5
    """


class InverseTimeDecay(ExponentialDecay, InverseTime):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)``.

    Example:
        >>> InverseTimeDecay(1.0, 10, 1.0)(10)
        0.5
    """


class PolynomialDecay(_TFSchedule, Polynomial):
    """``(initial - end) * (1 - min(step, decay_steps) / decay_steps) ** power + end``;
    with ``cycle`` the decay length is the first multiple of ``decay_steps`` past the step.

    Example:
        >>> PolynomialDecay(1.0, 10, end_learning_rate=0.0)(5)
        0.5
    """


class CosineDecay(_TFSchedule):
    """``lr * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, d) / d)) + alpha)``.

    Example:
        >>> CosineDecay(1.0, 100)(100)
        0.0
    """

    _fields = ("initial_learning_rate", "decay_steps", "alpha", "name")
    initial_learning_rate: float
    decay_steps: float
    alpha: float
    name: str | None

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: float,
        alpha: float = 0.0,
        name: str | None = None,
    ) -> None:
        check_rate(initial_learning_rate, "initial_learning_rate", float64=False)
        check_positive_steps("decay_steps", decay_steps)
        check_number("alpha", alpha)
        self._keep(initial_learning_rate, decay_steps, alpha, name)
        self._init(initial_learning_rate)

    def _formula(self, steps: Steps) -> Values:
        o = self._ops
        d = o.c(self.decay_steps)
        fraction = np.minimum(steps.astype(o.dtype), d) / d
        return cosine_decayed(o, fraction, self.alpha, o.c(self.initial_learning_rate))


class CosineDecayRestarts(_TFSchedule, CosineRestarts):
    """SGDR: cosine decays restarting, each period ``t_mul`` times longer, ``m_mul`` lower.

    Example:
        >>> CosineDecayRestarts(1.0, 10, t_mul=1.0)(10)
        1.0
    """


class LinearCosineDecay(_TFSchedule):
    """``lr * ((alpha + linear) * cosine + beta)`` (Bello et al., 2017); with ``seed`` the
    noisy variant, Gaussian noise of variance ``initial_variance / (1 + t) ** variance_decay``
    on the linear part, drawn as a pure function of ``(seed, step)``.

    Example:
        >>> LinearCosineDecay(1.0, 100, beta=0.0)(100)
        0.0
    """

    _fields: tuple[str, ...] = (
        "initial_learning_rate",
        "decay_steps",
        "num_periods",
        "alpha",
        "beta",
        "name",
    )
    initial_learning_rate: float
    decay_steps: float
    num_periods: float
    alpha: float
    beta: float
    name: str | None

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: float,
        num_periods: float = 0.5,
        alpha: float = 0.0,
        beta: float = 0.001,
        name: str | None = None,
        *,
        initial_variance: float | None = None,
        variance_decay: float = 0.55,
        seed: int | None = None,
    ) -> None:
        check_rate(initial_learning_rate, "initial_learning_rate", float64=False)
        check_positive_steps("decay_steps", decay_steps)
        for parameter, value in (
            ("num_periods", num_periods),
            ("alpha", alpha),
            ("beta", beta),
            ("variance_decay", variance_decay),
        ):
            check_number(parameter, value)
        check_number("initial_variance", initial_variance, optional=True)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ConfigError("seed", "must be an int >= 0", seed)
        self._keep(initial_learning_rate, decay_steps, num_periods, alpha, beta, name)
        self.initial_variance = initial_variance
        self.variance_decay = variance_decay
        self.seed = seed
        if initial_variance is not None:
            self._fields = (*self._fields, "initial_variance", "variance_decay", "seed")
        self._init(initial_learning_rate)

    def _formula(self, steps: Steps) -> Values:
        o = self._ops
        d = o.c(self.decay_steps)
        t = np.minimum(steps.astype(o.dtype), d)
        linear = (d - t) / d
        if self.initial_variance is not None:
            variance = o.c(self.initial_variance) / o.pow(
                o.exact(1.0) + t, o.c(self.variance_decay)
            )
            noise = standard_normal(self.seed or 0, steps.astype(np.int64)).astype(o.dtype)
            linear = linear + noise * np.sqrt(variance)
        fraction = 2.0 * o.c(self.num_periods) * (t / d)
        decayed = (o.c(self.alpha) + linear) * half_cosine(o, fraction) + o.c(self.beta)
        return o.c(self.initial_learning_rate) * decayed


class PiecewiseConstantDecay(_TFSchedule):
    """``values[0]`` for ``step <= boundaries[0]``, ``values[i]`` for ``boundaries[i-1] <
    step <= boundaries[i]``, ``values[-1]`` after the last: the change comes at ``b + 1``.

    The step is compared with the boundaries cast to the step's dtype, as TensorFlow does;
    the values keep their dtype (float32 for Python floats, int32 for Python ints). Unlike
    TensorFlow, the boundaries must increase (TensorFlow raises InvalidArgumentError at a
    step where two intervals hold it, and returns ``values[0]`` elsewhere), and at least one
    boundary is needed (TensorFlow raises IndexError at the first call without one).

    Example:
        >>> lr = PiecewiseConstantDecay([100], [1.0, 0.5])
        >>> lr(-999), lr(100), lr(100.5)
        (1.0, 1.0, 0.5)
    """

    _fields = ("boundaries", "values", "name")

    def __init__(
        self, boundaries: Sequence[Any], values: Sequence[Any], name: str | None = None
    ) -> None:
        boundaries, values = list(boundaries), list(values)
        if len(boundaries) != len(values) - 1:
            raise ConfigError(
                "boundaries",
                "should be 1 less in length than values (TensorFlow: 'The length of boundaries "
                "should be 1 less than the length of values')",
                boundaries,
                f"Give {len(values) - 1} boundaries for {len(values)} values.",
            )
        if not boundaries:
            raise _NoBoundariesError(
                "boundaries",
                "must hold at least one boundary (TensorFlow raises IndexError at the first "
                "call without one)",
                boundaries,
                "For a constant rate pass the value itself as the learning rate.",
            )
        for b in boundaries:
            check_number("boundaries", b)
        if any(b <= a for a, b in itertools.pairwise(boundaries)):
            raise ConfigError(
                "boundaries",
                "must be strictly increasing (TensorFlow raises InvalidArgumentError at "
                "steps two intervals hold)",
                boundaries,
            )
        for v in values:
            check_number("values", v)
        dtypes = [tf_dtype(v) for v in values]
        for dtype in dtypes[1:]:
            if dtype != dtypes[0]:
                raise ConfigError(
                    "values",
                    "must all have one dtype (TensorFlow: 'Values must have elements all with "
                    f"the same dtype ({_tf_name(dtypes[0])} vs {_tf_name(dtype)}).')",
                    values,
                    "Write every value as a float (1.0, not 1).",
                )
        self.boundaries = boundaries
        self.values_ = values
        self.name = name
        self._bounds = [np.asarray(b, dtype=tf_dtype(b)) for b in boundaries]
        self._table = np.asarray(values, dtype=dtypes[0])
        self._ops = F32Ops(np.float64 if dtypes[0] == np.float64 else np.float32)
        self._schedule = Formula(self._formula, dtype=self._ops.dtype.name)

    def get_config(self) -> dict[str, Any]:
        return {"boundaries": self.boundaries, "values": self.values_, "name": self.name}

    def _formula(self, steps: Steps) -> Values:
        steps = np.asarray(steps)
        bounds = np.array([b.astype(steps.dtype) for b in self._bounds])
        index = np.searchsorted(bounds, steps, side="left")
        if steps.dtype.kind == "f":
            index = np.where(np.isnan(steps), 0, index)  # no interval holds NaN: values[0]
        return self._table[index]

    def values(self, steps: Any) -> Values:
        """Returns the values at every step of ``steps``, in the values' dtype."""
        array = np.asarray(steps)
        if array.dtype.kind not in "iufb":
            raise ConfigError("steps", "must be an array of numbers", steps)
        return self._formula(array.reshape(-1)).reshape(array.shape)

    def _call_other(self, step: Any) -> float:
        value: float = self._formula(step_array(step))[0].item()
        return value


class _NoBoundariesError(ConfigError, IndexError):
    """No boundaries: TensorFlow raises IndexError at the first call."""


def _tf_name(dtype: np.dtype[Any]) -> str:
    return f"<dtype: '{dtype.name}'>"


def check_piecewise_dtypes(x: Any, boundaries: Sequence[Any]) -> None:
    """TF 1's ``piecewise_constant`` rule: each boundary has the dtype of ``x`` (an int32
    boundary may meet an int64 ``x``); raises ConfigError (a ValueError, as TF raises).

    ``x`` is the global step: a Clock's is int64, as TF's global-step variable.

    Example:
        >>> check_piecewise_dtypes(np.int64(5), [10])
        >>> check_piecewise_dtypes(5.0, [10])
        Traceback (most recent call last):
        ...
        globalstep._errors.ConfigError: `boundaries` must have the dtype of x ...
    """
    x_dtype = tf_dtype(x)
    for b in boundaries:
        b_dtype = tf_dtype(b)
        if b_dtype == x_dtype or (b_dtype == np.int32 and x_dtype == np.int64):
            continue
        kind = "floats (10.0)" if x_dtype.kind == "f" else "ints (10)"
        raise ConfigError(
            "boundaries",
            f"must have the dtype of x (TensorFlow: 'Boundaries ({_tf_name(b_dtype)}) must "
            f"have the same dtype as x ({_tf_name(x_dtype)}).')",
            list(boundaries),
            f"Write the boundaries as {kind}, like the global step.",
        )


def warn_unseeded_noise(what: str) -> None:
    """Warns, once per construction, that the noise is seeded where TF's is not."""
    warnings.warn(
        f"{what}: TensorFlow draws unseeded noise at every call; globalstep draws it as a "
        "pure function of (seed, step), so a run is reproducible and resumes with the same "
        "noise, and no value equals TensorFlow's.",
        CompatDifferenceWarning,
        stacklevel=3,
    )
