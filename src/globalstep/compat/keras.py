"""Keras 3's learning-rate schedules, with Keras' names, arguments, defaults and float32.

Migrating is renaming an import: ``keras.optimizers.schedules.ExponentialDecay`` becomes
``globalstep.compat.keras.ExponentialDecay``. Each is called with a step (optimizer updates
applied, see :mod:`globalstep._clock`) and has ``get_config()`` / ``from_config()``. Values
are computed as Keras computes them on its TensorFlow backend, in the dtype of
``initial_learning_rate`` (float32 for a Python float), operation for operation, with
TensorFlow's pow, exp, log and cos and its flush-to-zero (see
:mod:`globalstep.compat._common`).

Steps are taken as Keras takes them: ints (int32, or int64 past int32's range), floats
(a Python float is float32) and negative steps, scalars or arrays; a float64
``initial_learning_rate`` computes in float64. ``__call__`` returns a Python number (the
peer's value exactly), ``values`` an array in the peer's dtype.

Once Keras is imported, each schedule is also a registered, serialisable
``keras.optimizers.schedules.LearningRateSchedule`` (``keras.optimizers.Adam(
learning_rate=CosineDecay(...))`` works, inside compiled ``fit()`` on every backend):
called with a backend tensor or variable, as an optimizer calls it, it computes with
Keras' own schedule of the same arguments, so the rate an update uses is Keras' own, bit
for bit, on that backend and mode (a traced step under ``jit`` gives XLA's values).
``keras.saving`` finds the classes by their registered name ``globalstep>Name`` once
this module or :mod:`globalstep.integrations.keras` has been imported after Keras.

Deliberate differences from Keras (each warns at construction with
:class:`KerasDifferenceWarning`, or raises where noted):

- A NaN or infinite hyper-parameter raises ConfigError (Keras returns NaN rates
  silently and the model trains on NaN).
- An ``initial_learning_rate`` given as a Python int computes in float32 (Keras casts
  ``decay_rate`` and friends to int32 first, so ``ExponentialDecay(1, 10, 0.5)`` gives 0
  after step 0).
- ``CosineDecayRestarts(t_mul <= 0)`` raises ConfigError (Keras takes the log of a
  negative number and returns NaN), and ``CosineDecay(warmup_steps < 0)`` raises
  ConfigError (Keras shifts the cosine so that step 0 is already decayed).
- ``PiecewiseConstantDecay`` with boundaries that do not increase warns, and then adds
  the values of every range holding the step, as Keras does.
- A subnormal intermediate of plain arithmetic is not flushed to zero (TensorFlow's
  kernels flush it): only where two rates differ by less than 1.2e-38 (documented, not
  warned; see :mod:`globalstep.compat._common`). Subnormal hyper-parameters are read as
  zero and subnormal results flushed, as Keras does.
- On Keras' JAX and NumPy backends a float64 ``initial_learning_rate`` computes in
  float32 (JAX without x64); this follows the TensorFlow backend and computes in float64.

Example:
    >>> lr = ExponentialDecay(0.1, decay_steps=1000, decay_rate=0.96)
    >>> lr(0)
    0.10000000149011612
    >>> lr(-1000), lr(2.5)
    (0.104166679084301, 0.09998979419469833)
"""

from __future__ import annotations

import itertools
import sys
import warnings
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from globalstep._errors import ConfigError, EmptyBoundariesError, KerasDifferenceWarning, StepError
from globalstep.compat._common import PeerSchedule, check_positive_steps
from globalstep.compat._decays import (
    CosineRestarts,
    Exponential,
    InverseTime,
    Polynomial,
    cosine_decayed,
)
from globalstep.schedules import Steps, Values, check_flag, check_number

__all__ = [
    "CosineDecay",
    "CosineDecayRestarts",
    "ExponentialDecay",
    "InverseTimeDecay",
    "KerasDifferenceWarning",
    "PiecewiseConstantDecay",
    "PolynomialDecay",
]

_INT32 = np.iinfo(np.int32)
_INT64 = np.iinfo(np.int64)


def keras_array(value: Any, parameter: str = "step") -> Any:
    """``value`` as an array typed as Keras' ``convert_to_tensor`` types it.

    A Python int is int32 (int64 past int32's range), a bool is an int, a Python float
    float32; NumPy scalars and arrays keep their dtype (lists take the type of their
    elements, as above).

    Raises:
        StepError: ``value`` is not a real number or an array of them.
    """
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
    elif isinstance(value, bool):
        array = np.asarray(int(value), dtype=np.int32)
    elif isinstance(value, int):
        if not _INT64.min <= value <= _INT64.max:
            raise StepError(f"`{parameter}` must fit in int64; got {parameter}={value}.", value)
        fits = _INT32.min <= value <= _INT32.max
        array = np.asarray(value, dtype=np.int32 if fits else np.int64)
    elif isinstance(value, float):
        array = np.asarray(value, dtype=np.float32)
    elif isinstance(value, list | tuple):
        items = [keras_array(v, parameter) for v in value]
        array = np.asarray(items, dtype=np.result_type(*items) if items else np.int32)
    else:
        array = np.asarray(None)
    if array.dtype.kind not in "biuf":
        raise StepError(
            f"`{parameter}` must be a number or an array of numbers (int or float, negative "
            f"and fractional steps accepted, as Keras does); got {parameter}={value!r}.",
            value,
        )
    if array.dtype.kind == "b":
        array = array.astype(np.int32)
    return array


def _denormals_are_zero(steps: Any, dtype: Any) -> Any:
    """Float steps that are subnormal, in their own dtype or once cast to ``dtype``, as
    (signed) zero: TensorFlow's kernels read subnormal inputs as zero."""
    small = (np.abs(steps) < np.finfo(steps.dtype).tiny) | (
        np.abs(steps.astype(dtype)) < np.finfo(dtype).tiny
    )
    if not small.any():
        return steps
    return np.where(small, np.copysign(steps.dtype.type(0), steps), steps)


def _is_backend_tensor(step: Any) -> bool:
    """Whether ``step`` is a framework tensor or variable (not a number or NumPy array)."""
    if isinstance(step, np.generic | np.ndarray):
        return False
    return hasattr(step, "dtype") and hasattr(step, "shape")


_FACES: dict[type, type] = {}


def _keras_face(cls: type) -> type:
    """``cls`` joined with Keras' ``LearningRateSchedule``, registered for keras.saving."""
    if getattr(cls, "_is_keras_face", False):
        return cls
    face = _FACES.get(cls)
    if face is None:
        import keras

        base = keras.optimizers.schedules.LearningRateSchedule
        face = type(
            cls.__name__,
            (cls, base),
            {
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "__doc__": cls.__doc__,
                "_is_keras_face": True,
            },
        )
        face = keras.saving.register_keras_serializable(package="globalstep")(face)
        _FACES[cls] = face
    return face


def register_with_keras() -> None:
    """Registers every schedule here with ``keras.saving`` (imports Keras).

    Needed once per process before ``keras.saving`` loads a model or schedule that uses
    them; importing this module after Keras, or :mod:`globalstep.integrations.keras`,
    does it.
    """
    for name in __all__:
        cls = globals()[name]
        if isinstance(cls, type) and issubclass(cls, _KerasSchedule):
            _keras_face(cls)


class _KerasSchedule(PeerSchedule):
    """Keras' schedules: any step Keras takes, and a LearningRateSchedule once Keras is in."""

    _is_keras_face = False
    _keras_twin: Any = None
    _numpy_only = False  # True where the fast Formula path does not apply
    # Constructors between the caller and the shared one (a Keras signature of its own):
    # the int-rate warning points where it always has.
    _own_signature: ClassVar[int] = 0

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if "keras" in sys.modules and not cls._is_keras_face:
            cls = _keras_face(cls)
        return object.__new__(cls)

    def __call__(self, step: Any) -> Any:
        """Returns the value at ``step``: a Python number for a number, a tensor of the
        backend for a tensor (Keras' own computation, see the module docstring)."""
        if type(step) is int and step >= 0 and not self._numpy_only:
            return self._schedule(step)
        if _is_backend_tensor(step):
            return self._keras(step)
        return self._any_steps(step).item()

    def values(self, steps: Any) -> Values:
        """Returns the values at every step of ``steps``, in the peer's dtype."""
        array = np.asarray(steps) if isinstance(steps, np.ndarray) else None
        if (
            array is not None
            and not self._numpy_only
            and array.dtype.kind in "iu"
            and (not array.size or array.min() >= 0)
        ):
            return self._schedule.values(array)
        return self._any_steps(steps)

    def _any_steps(self, steps: Any) -> Values:
        array = keras_array(steps)
        with np.errstate(all="ignore"):
            if array.dtype.kind == "f":
                array = _denormals_are_zero(array, self._ops.dtype)
            return self._flushed(array)

    def _keras(self, step: Any) -> Any:
        """Keras' own schedule of the same arguments, at a tensor step."""
        twin = self._keras_twin
        if twin is None:
            import keras

            twin = getattr(keras.optimizers.schedules, type(self).__name__)(**self.get_config())
            self._keras_twin = twin
        return twin(step)

    def get_config(self) -> dict[str, Any]:
        """Returns the constructor's arguments, as Keras' ``get_config()`` does."""
        return PeerSchedule.get_config(self)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        """Builds the schedule from :meth:`get_config`'s output."""
        return cls(**config)

    # The hooks of globalstep.compat._decays.Decay, as Keras takes its arguments.
    def _check_initial(self, value: Any, *, cosine: bool) -> None:
        parameter = "initial_learning_rate"
        check_number(parameter, value)
        if isinstance(value, int | np.integer):
            warnings.warn(
                f"`{parameter}` is an int ({value!r}); globalstep.compat.keras computes in "
                "float32 where Keras would compute in int32 (casting the decay rate and alpha "
                f"to int). Pass {parameter}={float(value)!r} to silence this.",
                KerasDifferenceWarning,
                stacklevel=4 + self._own_signature,
            )

    def _flag(self, parameter: str, value: Any) -> bool:
        check_flag(parameter, value)
        return bool(value)

    def _named(self, name: str | None) -> str | None:
        return type(self).__name__ if name is None else name  # Keras' default name


class ExponentialDecay(_KerasSchedule, Exponential):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)``, as Keras computes it.

    Example:
        >>> ExponentialDecay(1.0, 10, 0.5, staircase=True)(10)
        0.5
    """


class PiecewiseConstantDecay(_KerasSchedule):
    """``values[0]`` up to and including ``boundaries[0]``, then ``values[1]``, ...

    As in Keras, the value changes one step after each boundary: at step ``b + 1``; each
    boundary is compared in the step's type (an int step truncates a float boundary), and
    the result has the type of ``values[0]`` (int32 for Python ints, float32 for Python
    floats, float64 for ``np.float64``). Boundaries that do not increase are accepted, as
    Keras accepts them, with a :class:`KerasDifferenceWarning`: Keras then adds the values
    of every range that holds the step, and so does this.

    Raises:
        ConfigError: ``boundaries`` does not hold one element fewer than ``values``
            (Keras raises ValueError), or an element is not a finite number.
        EmptyBoundariesError: called with no boundaries (an IndexError, as in Keras).

    Example:
        >>> lr = PiecewiseConstantDecay([100], [1.0, 0.5])
        >>> lr(100), lr(101), lr(-999)
        (1.0, 0.5, 1.0)
    """

    _fields = ("boundaries", "values", "name")

    def __init__(
        self, boundaries: Sequence[Any], values: Sequence[Any], name: str = "PiecewiseConstant"
    ) -> None:
        if len(boundaries) != len(values) - 1:
            raise ConfigError(
                "boundaries",
                f"must hold one element fewer than values ({len(values)} elements)",
                list(boundaries),
                hint="Keras raises ValueError here too: give one boundary between each two values.",
            )
        for b in boundaries:
            check_number("boundaries", b)
        for v in values:
            check_number("values", v)
        self._increasing = all(a < b for a, b in itertools.pairwise(boundaries))
        if not self._increasing:
            warnings.warn(
                f"`boundaries` do not increase ({list(boundaries)!r}): as in Keras, a step in "
                "several ranges gets the sum of their values. Sort the boundaries.",
                KerasDifferenceWarning,
                stacklevel=3,
            )
        self.boundaries = list(boundaries)
        self.values_ = list(values)
        self.name = name
        arrays = [keras_array(v, "values") for v in values]
        dtype = arrays[0].dtype
        if dtype.kind != "f":
            floats = [a.dtype for a in arrays if a.dtype.kind == "f"]
            dtype = np.result_type(*floats) if floats else dtype
        self._result_dtype = dtype
        self._value_arrays = [a.astype(dtype) for a in arrays]
        self._init(values[0] if dtype.kind == "f" else 0.0)
        self._numpy_only = dtype.kind != "f"  # int values: no float Formula, no flush

    def _flushed(self, steps: Steps) -> Values:
        values = self._formula(steps)
        return self._ops.flush(values) if values.dtype.kind == "f" else values

    def get_config(self) -> dict[str, Any]:
        return {"boundaries": self.boundaries, "values": self.values_, "name": self.name}

    def _formula(self, steps: Steps) -> Values:
        if not self.boundaries:
            raise EmptyBoundariesError(
                "`boundaries` must hold at least one boundary to call PiecewiseConstantDecay "
                "(Keras raises IndexError); got boundaries=[]. Use a constant rate instead."
            )
        steps = np.asarray(steps)
        # Each boundary is typed as Keras types it, then cast to the step's type.
        bounds = [keras_array(b, "boundaries").astype(steps.dtype) for b in self.boundaries]
        values = self._value_arrays
        dtype = self._result_dtype
        if self._increasing:
            index = np.zeros(steps.shape, dtype=np.intp)
            for b in bounds:
                index += steps > b
            return dtype.type(0) + np.asarray(values, dtype=dtype)[index]
        # Keras' sum of indicator * value over the ranges, in its order.
        result = np.zeros(steps.shape, dtype=dtype)
        result = result + (steps <= bounds[0]).astype(dtype) * values[0]
        result = result + (steps > bounds[-1]).astype(dtype) * values[-1]
        for low, high, value in zip(bounds[:-1], bounds[1:], values[1:-1], strict=True):
            result = result + ((steps > low) & (steps <= high)).astype(dtype) * value
        return result


class PolynomialDecay(_KerasSchedule, Polynomial):
    """``(initial - end) * (1 - step / decay_steps) ** power + end``, as Keras computes it.

    Example:
        >>> PolynomialDecay(1.0, 10, end_learning_rate=0.0)(5)
        0.5
    """

    _own_signature = 1

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        end_learning_rate: float = 0.0001,
        power: float = 1.0,
        cycle: bool = False,
        name: str = "PolynomialDecay",
    ) -> None:
        super().__init__(initial_learning_rate, decay_steps, end_learning_rate, power, cycle, name)


class InverseTimeDecay(_KerasSchedule, InverseTime):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)``, as Keras does it.

    Example:
        >>> InverseTimeDecay(1.0, 10, 1.0)(10)
        0.5
    """


class CosineDecay(_KerasSchedule):
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
    initial_learning_rate: float
    decay_steps: int
    alpha: float
    name: str
    warmup_target: float | None
    warmup_steps: int

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        alpha: float = 0.0,
        name: str = "CosineDecay",
        warmup_target: float | None = None,
        warmup_steps: int = 0,
    ) -> None:
        self._check_initial(initial_learning_rate, cosine=True)
        check_positive_steps("decay_steps", decay_steps)
        check_number("alpha", alpha)
        check_number("warmup_target", warmup_target, optional=True)
        check_number("warmup_steps", warmup_steps)
        if warmup_steps < 0:
            raise ConfigError("warmup_steps", "must be >= 0", warmup_steps)
        self._keep(initial_learning_rate, decay_steps, alpha, name, warmup_target, warmup_steps)
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
        decay = cosine_decayed(o, (t - w) / d, self.alpha, target)
        before = t < w
        if not before.any():  # Keras' cond takes the decay: no warm-up to compute
            return decay
        with np.errstate(divide="ignore", invalid="ignore"):  # a warm-up of length 0
            warm = (target - initial) * (t / w) + initial
        return np.where(before, warm, decay)


class CosineDecayRestarts(_KerasSchedule, CosineRestarts):
    """SGDR, as Keras computes it (periods ``t_mul`` times longer, ``m_mul`` times lower).

    Example:
        >>> CosineDecayRestarts(1.0, 10, t_mul=1.0)(10)
        1.0
    """

    _own_signature = 1

    def __init__(
        self,
        initial_learning_rate: float,
        first_decay_steps: int,
        t_mul: float = 2.0,
        m_mul: float = 1.0,
        alpha: float = 0.0,
        name: str = "SGDRDecay",
    ) -> None:
        super().__init__(initial_learning_rate, first_decay_steps, t_mul, m_mul, alpha, name)
