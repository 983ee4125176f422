"""What the compat layers share: a peer's formula evaluated like every schedule.

A peer computes in float32 (``dtype`` follows the initial rate, as in TensorFlow and Keras).
Arithmetic is done in that dtype, operation for operation in the peer's order, so it
matches bit for bit. Transcendental functions (pow, exp, log, cos) are taken from the C
library in float32 (``powf``, ``expf``, ``logf``, ``cosf``), as TensorFlow's kernels on
one step (a scalar, as an optimizer reads the rate) and XLA's eager ones call them, and
results below the smallest normal number are flushed to zero, as both run with
flush-to-zero. On arrays they run at NumPy's speed where that is still the C library's
bits: ``powf`` through NumPy's own float32 loop where it calls it (checked once per
process; on AVX-512 machines it is NumPy's own SIMD routine instead), else, like ``cosf``
and ``logf``, through :mod:`globalstep.compat._libm32`, glibc's algorithms evaluated in
NumPy float64 (checked once per process against the C library;
the few results near a rounding boundary are the C library's own); elsewhere the C
library is called element by element.
Where the C library cannot be loaded they are computed in float64 and
rounded once (within a few ulps of the peers). TensorFlow's kernels on a tensor of many
steps use Eigen's vectorised approximations instead, up to 2 ulps from its own scalar
results. In float64 (a float64 initial rate) they are the C library's, as TF's float64
kernels are.

Flush-to-zero, measured against the installed peers (TF 2.21 on CPU, eager and in
``tf.function``, one step and 10^5 steps; Keras 3 on its TF backend; JAX 0.10 on CPU,
eager and jitted): every one flushes subnormal results and reads subnormal inputs as zero
(``0.5 ** 130`` in float32 is 0, ``1e30 * 0.5 ** 140`` is 0, not 7e-13; float64 too).
Here a subnormal hyper-parameter is read as zero (:meth:`F32Ops.c`, :meth:`F32Ops.exact`),
and the results of pow, exp, log and cos and every final value are flushed. A subnormal
intermediate of plain arithmetic (``+ - * /``) is not flushed: a deliberate difference
(flushing after every operation would double the cost of every schedule for inputs no
training uses). It shows only where two hyper-parameters differ by less than float32's
smallest normal number (1.2e-38), as TF's ``PolynomialDecay(1.5e-38, end=1.4e-38)`` at
half-way gives 1.4e-38 (``initial - end`` flushed) and this 1.45e-38. optax does that
subtraction in Python float64, so compat.optax matches it there too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from globalstep._clock import MAX_STEP
from globalstep._errors import CompatDifferenceWarning, ConfigError, StepError
from globalstep._memo import MEMO_BITS, MEMO_CALLS, MEMO_MASK, memo_fill
from globalstep.compat._libm32 import KERNELS, powf_sure, sure, vectorised, vectorised_pow
from globalstep.schedules import Schedule, Steps, Values, check_number

__all__ = [
    "CompatDifferenceWarning",
    "F32Ops",
    "Formula",
    "PeerSchedule",
    "check_positive_steps",
    "step_array",
]


def _libm(fn: Callable[..., float], ufunc: np.ufunc) -> Callable[..., float]:
    """``fn`` from the C library (as Eigen's and XLA's float64 kernels call it); where
    Python's ``math`` raises instead of returning C's inf or NaN (pow(0, -1), log(0),
    cos(inf), an overflow), NumPy's scalar ``ufunc``, which returns C's IEEE value."""

    def safe(*args: float) -> float:
        try:
            return fn(*args)
        except (OverflowError, ValueError):
            with np.errstate(all="ignore"):
                return float(ufunc(*(np.float64(a) for a in args)))

    return safe


_FLOAT64: dict[np.ufunc, np.ufunc] = {
    np.power: np.frompyfunc(_libm(math.pow, np.power), 2, 1),
    np.exp: np.frompyfunc(_libm(math.exp, np.exp), 1, 1),
    np.log: np.frompyfunc(_libm(math.log, np.log), 1, 1),
    np.cos: np.frompyfunc(_libm(math.cos, np.cos), 1, 1),
}


_FLOAT32: dict[np.ufunc, np.ufunc] | None = None


def _libm_float32() -> dict[np.ufunc, np.ufunc]:
    """The C library's float32 ``powf``, ``expf``, ``logf``, ``cosf`` (what TensorFlow's
    kernels on one step and XLA's eager ones call), or ``{}`` where it cannot be loaded."""
    global _FLOAT32
    if _FLOAT32 is None:
        _FLOAT32 = {}
        try:
            libm = ctypes.CDLL("libm.so.6")  # glibc, without find_library's subprocess
        except OSError:
            try:
                libm = ctypes.CDLL(ctypes.util.find_library("m"))
            except (OSError, TypeError):  # TypeError: CDLL(None) on Windows
                return _FLOAT32
        for ufunc, name, arity in (
            (np.power, "powf", 2),
            (np.exp, "expf", 1),
            (np.log, "logf", 1),
            (np.cos, "cosf", 1),
        ):
            fn = getattr(libm, name, None)
            if fn is None:
                _FLOAT32 = {}
                break
            fn.restype = ctypes.c_float
            fn.argtypes = [ctypes.c_float] * arity
            _FLOAT32[ufunc] = np.frompyfunc(fn, arity, 1)
    return _FLOAT32


_NUMPY_IS_LIBM: dict[tuple[np.ufunc, str], bool] = {}


def _probe(ufunc: np.ufunc, dtype: np.dtype[Any]) -> list[Any]:
    """Arguments over the ranges schedules use (and past them) to compare kernels on."""
    rng = np.random.default_rng(20261130)
    n = 4096
    if ufunc is np.power:
        base = np.concatenate([rng.uniform(0.0, 2.0, n), rng.uniform(-2.0, 0.0, 64), [0.0, 1.0]])
        exponent = np.concatenate(
            [
                rng.uniform(-60.0, 2000.0, n // 2),
                np.floor(rng.uniform(0, 50, n // 2)),
                rng.uniform(0, 3, 66),
            ]
        )
        return [base.astype(dtype), exponent.astype(dtype)]
    if ufunc is np.exp:
        return [rng.uniform(-110.0, 110.0, n).astype(dtype)]
    if ufunc is np.log:
        return [np.exp(rng.uniform(-80.0, 80.0, n)).astype(dtype)]
    return [
        np.concatenate([rng.uniform(-4.0, 4.0, n), rng.uniform(-1e5, 1e5, n // 4)]).astype(dtype)
    ]


def numpy_is_libm(ufunc: np.ufunc, dtype: Any, libm: np.ufunc) -> bool:
    """Whether NumPy's own ``ufunc`` kernel in ``dtype`` gives the C library's bits (it
    calls it, rather than a SIMD approximation), checked once per process on a probe of
    thousands of arguments: where it does, a whole array is computed at NumPy's speed."""
    dtype = np.dtype(dtype)
    key = (ufunc, dtype.name)
    if key not in _NUMPY_IS_LIBM:
        args = _probe(ufunc, dtype)
        with np.errstate(all="ignore"):
            ours = np.asarray(ufunc(*args), dtype=dtype)
            theirs = np.asarray(libm(*args), dtype=dtype)
        _NUMPY_IS_LIBM[key] = ours.tobytes() == theirs.tobytes() or bool(
            np.array_equal(ours, theirs, equal_nan=True)
            and np.array_equal(np.signbit(ours), np.signbit(theirs))
        )
    return _NUMPY_IS_LIBM[key]


FORMULA_BLOCK = 1 << 14
"""Steps a compat formula is evaluated on at a time (see ``PeerSchedule._flushed``)."""

_GLIBC: dict[tuple[str, np.ufunc], bool] = {}
_VECTORISED: dict[np.ufunc, str] = {np.cos: "cosf", np.log: "logf"}
_MIN_VECTORISED = 64  # fewer elements: the C library element by element is faster


def libm_is_glibc(name: str, libm: np.ufunc) -> bool:
    """Whether the C library's ``cosf``, ``logf`` or ``powf`` (``name``) is glibc's
    algorithm, which :func:`globalstep.compat._libm32.vectorised` and
    :func:`~globalstep.compat._libm32.vectorised_pow` reproduce bit for bit on whole
    arrays: checked once per process on the probe's arguments and on thousands of float32
    bit patterns of every exponent (each must round as glibc's does, the few near a
    rounding boundary aside, which the vectorised forms hand to the C library itself)."""
    key = (name, libm)
    if key not in _GLIBC:
        rng = np.random.default_rng(20261201)
        wide_bits = rng.integers(0, 2**31, 4096, dtype=np.int64).astype(np.uint32)
        if name == "powf":
            base, exponent = _probe(np.power, np.dtype(np.float32))
            other = rng.integers(0, 2**32, wide_bits.size, dtype=np.uint64).astype(np.uint32)
            args = [
                np.concatenate(
                    [base, wide_bits.view(np.float32), np.array([0.96, 2, 1], np.float32)]
                ),
                np.concatenate(
                    [exponent, other.view(np.float32), np.array([500.5, 3, 7], np.float32)]
                ),
            ]
            with np.errstate(all="ignore"):
                theirs = np.asarray(libm(*args), dtype=np.float32)
                rounded, check = powf_sure(args[0], args[1])
        else:
            ufunc = np.cos if name == "cosf" else np.log
            args = [
                np.concatenate(
                    [
                        _probe(ufunc, np.dtype(np.float32))[0],
                        wide_bits.view(np.float32),
                        (wide_bits[:512] | np.uint32(0x80000000)).view(np.float32),
                        np.array(
                            [
                                0.0,
                                -0.0,
                                2**-12,
                                0.75,
                                -0.75,
                                120.0,
                                -120.0,
                                1.0,
                                math.pi,
                                1e30,
                                2.0,
                            ],
                            np.float32,
                        ),
                    ]
                )
            ]
            kernel, relative, absolute = KERNELS[name]
            with np.errstate(all="ignore"):
                theirs = np.asarray(libm(*args), dtype=np.float32)
                wide, special = kernel(*args)
                rounded, certain = sure(wide, relative, absolute)
            check = certain & ~special
        same = rounded.view(np.uint32) == theirs.view(np.uint32)
        _GLIBC[key] = bool(same[check].all()) and int(check.sum()) > args[0].size // 3
    return _GLIBC[key]


_POW_ONE: dict[np.ufunc, bool] = {}


def libm_pow_one_is_identity(powf: np.ufunc) -> bool:
    """Whether the C library's ``powf(x, 1)`` is ``x``, bit for bit, on the probe's bases
    and on thousands of float32 bit patterns of every exponent and sign (true of any
    ``powf`` within 1 ulp, since ``x`` is representable); checked once per process."""
    if powf not in _POW_ONE:
        rng = np.random.default_rng(20261202)
        bases = np.concatenate(
            [
                _probe(np.power, np.dtype(np.float32))[0],
                rng.integers(0, 2**32, 8192, dtype=np.uint64).astype(np.uint32).view(np.float32),
                np.linspace(0, 1, 4096, dtype=np.float32),
            ]
        )
        bases = bases[~np.isnan(bases)]
        with np.errstate(all="ignore"):
            out = np.asarray(powf(bases, np.ones(bases.shape, np.float32)), dtype=np.float32)
        _POW_ONE[powf] = out.tobytes() == bases.tobytes()
    return _POW_ONE[powf]


def _numpy_call(fn: np.ufunc, args: list[Any]) -> Any:
    """``fn(*args)`` in NumPy's loop that calls the C library. For power the exponent is
    made a real array first: with a scalar (or broadcast) exponent of 0.5, 2 or -1 NumPy
    takes sqrt, a square or a reciprocal instead of pow, which differ in the last bit."""
    if fn is not np.power:
        return np.asarray(fn(*args))
    base, exponent = np.broadcast_arrays(*args)
    shape = base.shape
    out = fn(np.atleast_1d(base), np.atleast_1d(np.array(exponent)))
    return np.asarray(out).reshape(shape)


def _daz32(scalar: np.float32) -> np.float32:
    """A float32 subnormal as (signed) zero, as a kernel casting it reads it."""
    if scalar == 0 or not abs(scalar) < np.finfo(np.float32).tiny:
        return scalar
    return np.float32(math.copysign(0.0, scalar))


class F32Ops:
    """Scalar casts and transcendental functions in a peer's dtype.

    Args:
        dtype: ``np.float32`` (the peers' default) or ``np.float64``.
        via_float32: cast Python floats through float32 first (TensorFlow does this when a
            Python hyper-parameter meets a float64 rate).

    In float32, pow, exp, log and cos come from the C library (``powf``, ...), as
    TensorFlow's kernels on one step and XLA's eager ones do, where it can be loaded
    (otherwise they are computed in float64 and rounded once); results below the smallest
    normal number are flushed to zero, as TensorFlow and XLA run. Arrays of 64 elements or
    more take cos and log from :func:`globalstep.compat._libm32.vectorised`, and pow (where
    NumPy's own float32 power is not the C library's) from
    :func:`~globalstep.compat._libm32.vectorised_pow`, where the C library is glibc's (the
    same bits, 20 to 50 times faster than calling it per element).
    """

    def __init__(
        self,
        dtype: Any,
        via_float32: bool = False,
    ) -> None:
        self.dtype = np.dtype(dtype)
        self.type = self.dtype.type
        self._via32 = via_float32 and self.dtype == np.float64
        self._libm32 = _libm_float32() if self.dtype == np.float32 else {}
        self._tiny = np.finfo(self.dtype).tiny
        self._zero = self.type(0)

    def c(self, value: Any) -> Any:
        """``value`` as a scalar of the dtype; a subnormal one as (signed) zero, as the
        peers' kernels read it (denormals-are-zero)."""
        if self._via32 and type(value) is float:  # np.float64 is a float subclass: exact
            return self._daz(self.type(_daz32(np.float32(value))))
        return self._daz(self.type(value))

    def exact(self, value: Any) -> Any:
        """``value`` as a scalar of the dtype, directly (a Python float meeting a tensor);
        a subnormal one as (signed) zero, as :meth:`c`."""
        return self._daz(self.type(value))

    def _daz(self, scalar: Any) -> Any:
        if scalar == 0 or not abs(scalar) < self._tiny:
            return scalar
        return self.type(math.copysign(0.0, scalar))

    def _round(self, fn: np.ufunc, *args: Any) -> Any:
        if self.dtype == np.float64:
            # NumPy's SIMD float64 kernels (AVX-512) differ from the C library's in the last
            # bit; where NumPy calls the C library instead, its array loop is used.
            if numpy_is_libm(fn, np.float64, _FLOAT64[fn]):
                return _numpy_call(fn, [np.asarray(a, dtype=np.float64) for a in args])
            return np.asarray(_FLOAT64[fn](*args), dtype=np.float64)
        if fn in self._libm32:
            narrow = [np.asarray(a, dtype=np.float32) for a in args]
            libm = self._libm32[fn]
            name = _VECTORISED.get(fn)
            if name and narrow[0].size >= _MIN_VECTORISED and libm_is_glibc(name, libm):
                return vectorised(name, narrow[0], libm)  # never subnormal: nothing to flush
            if numpy_is_libm(fn, np.float32, libm):
                return self.flush(_numpy_call(fn, narrow))
            if (
                fn is np.power
                and max(narrow[0].size, narrow[1].size) >= _MIN_VECTORISED
                and libm_is_glibc("powf", libm)
            ):
                return vectorised_pow(narrow[0], narrow[1], libm, flush=True)
            return self.flush(np.asarray(libm(*narrow), dtype=np.float32))
        wide = [np.asarray(a, dtype=np.float64) for a in args]
        return self.flush(np.asarray(fn(*wide)).astype(self.dtype))

    def flush(self, values: Any) -> Any:
        """``values`` with subnormal numbers flushed to (signed) zero, as TensorFlow and
        XLA do."""
        values = np.asarray(values, dtype=self.dtype)
        size = np.abs(values)
        subnormal = size < self._tiny
        if subnormal.any():  # zeros too: are there subnormals among them?
            subnormal &= size > self._zero
        if not subnormal.any():  # the common case: nothing to flush, no copy
            return values
        return np.where(subnormal, np.copysign(self._zero, values), values)

    def pow(self, base: Any, exponent: Any) -> Any:
        """``base ** exponent``.

        In float32 with the C library's ``powf``, an exponent that is the scalar 1 returns
        ``base`` itself (flushed) without calling it: a ``powf`` within 1 ulp (glibc's is
        within 0.82) must return the exactly representable ``base``, which
        :func:`libm_pow_one_is_identity` also checks once per process. optax's cosine
        decays raise their cosine to ``exponent=1.0`` by default."""
        if (
            np.ndim(exponent) == 0
            and exponent == 1
            and np.power in self._libm32
            and libm_pow_one_is_identity(self._libm32[np.power])
        ):
            return self.flush(np.asarray(base, dtype=np.float32))
        return self._round(np.power, base, exponent)

    def exp(self, x: Any) -> Any:
        """``e ** x``."""
        return self._round(np.exp, x)

    def log(self, x: Any) -> Any:
        """The natural logarithm."""
        return self._round(np.log, x)

    def cos(self, x: Any) -> Any:
        """The cosine."""
        return self._round(np.cos, x)


@dataclass(frozen=True)
class Formula(Schedule):
    """A peer's formula as a schedule: ``fn`` maps int64 steps to values."""

    fn: Callable[[Steps], Values]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        self._setup()

    def compute(self, steps: Steps) -> Values:
        return self.fn(steps)


def step_array(step: Any) -> Any:
    """A scalar step as a one-element array in the dtype TensorFlow converts it to: a
    Python float as float32, a Python int as int64, a NumPy scalar in its own dtype.

    Raises:
        StepError: ``step`` is not a real number (a bool, a string, None, ...).
    """
    if isinstance(step, bool) or not isinstance(step, int | float | np.integer | np.floating):
        raise StepError(f"`step` must be a number; got step={step!r}.", step)
    if isinstance(step, np.integer | np.floating):
        return np.asarray([step])
    if isinstance(step, float):
        return np.asarray([step], dtype=np.float32)
    if not -(2**63) <= step <= MAX_STEP:
        raise StepError(f"`step` must fit in int64; got step={step!r}.", step)
    return np.asarray([step], dtype=np.int64)


def check_positive_steps(parameter: str, value: Any) -> None:
    """Raises ConfigError unless ``value`` is a finite number > 0."""
    check_number(parameter, value)
    if value <= 0:
        raise ConfigError(parameter, "must be > 0", value)


class PeerSchedule(ABC):
    """A schedule with a peer's names; subclasses set ``_fields`` and ``_formula``.

    Called with a step (an int >= 0) it returns the value as a Python float (exactly the
    peer's float32 value); ``values(steps)`` is the vectorised form, bit for bit the same.

    The scalar call of an int step in ``[0, 2**63)`` is answered from a memo of
    ``values()`` over the aligned block of 1024 steps around it (see
    :func:`globalstep._memo.memo_fill`): after the first call in a block it costs
    a dict and a list lookup, and it equals ``values()`` by construction. Every other step
    (a float, a negative int, a NumPy scalar) goes to :meth:`_call_other`, never to the memo.

    A subclass gets the memo with nothing to do, as long as it keeps ``__call__`` and its
    ``values(steps)`` is a pure function of each step (no state, no randomness drawn per
    call). A subclass that overrides ``__call__`` should answer int steps as this one does
    and hand the rest to ``super().__call__``. Set ``_any_step = True`` where the peer
    takes float and negative steps (TensorFlow, Keras): they are then computed by
    :meth:`_formula` on a one-element array, in the step's own dtype (a Python float as
    float32, as TensorFlow converts it), instead of being refused.
    """

    _fields: tuple[str, ...] = ()
    _any_step: ClassVar[bool] = False

    def _keep(self, *values: Any) -> None:
        """Keeps the constructor's arguments under the peer's names: one value for each of
        ``_fields``, in order (what :meth:`get_config` returns)."""
        for name, value in zip(self._fields, values, strict=True):
            setattr(self, name, value)

    def _init(self, initial: Any) -> None:
        dtype = np.float64 if isinstance(initial, np.float64) else np.float32
        self._ops = F32Ops(dtype, via_float32=True)
        self._schedule = Formula(self._flushed, dtype=np.dtype(dtype).name)

    def _flushed(self, steps: Steps) -> Values:
        """The formula on ``steps``, flushed; a long 1-D array in blocks of
        :data:`FORMULA_BLOCK` steps (the formula is a function of each step alone), whose
        float32 temporaries are reused from the allocator's free lists instead of being
        fresh pages each time."""
        ops = self._ops
        if steps.ndim != 1 or steps.size <= FORMULA_BLOCK:
            return ops.flush(self._formula(steps))
        out = np.empty(steps.shape, dtype=ops.dtype)
        for start in range(0, steps.size, FORMULA_BLOCK):
            block = steps[start : start + FORMULA_BLOCK]
            out[start : start + block.size] = ops.flush(self._formula(block))
        return out

    @abstractmethod
    def _formula(self, steps: Steps) -> Values:
        """The peer's values at ``steps`` (int64, checked), before flush-to-zero."""

    def __call__(self, step: int) -> float:
        """Returns the value at ``step``, an int >= 0 (any real number where ``_any_step``)."""
        if type(step) is int and 0 <= step <= MAX_STEP:
            try:
                return self.__dict__["_memo"][step >> MEMO_BITS][step & MEMO_MASK]  # type: ignore[no-any-return]
            except KeyError:
                return memo_fill(self, step >> MEMO_BITS)[step & MEMO_MASK]
        return self._call_other(step)

    def _call_other(self, step: Any) -> float:
        """The value at a step the memo does not hold: refused unless ``_any_step``."""
        if self._any_step:
            value: float = self._values_any(step_array(step)).reshape(-1)[0].item()
            return value
        return self._schedule(step)

    def _values_any(self, steps: Any) -> Values:
        """The values at an array of any real steps (ints of any sign, floats)."""
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            out = self._flushed(steps.reshape(-1))
        return np.asarray(out, dtype=self._ops.dtype).reshape(steps.shape)

    def values(self, steps: Any) -> Values:
        """Returns the values at every step of ``steps``, in the peer's dtype."""
        if self._any_step:
            array = np.asarray(steps)
            if array.dtype.kind not in "iuf" or (array.dtype.kind == "f" and array.size == 0):
                return self._schedule.values(steps)
            if array.dtype.kind == "f" or (array.size and array.min() < 0):
                return self._values_any(array)
        return self._schedule.values(steps)

    def get_config(self) -> dict[str, Any]:
        """Returns the constructor's arguments, as the peer's ``get_config()`` does."""
        return {name: getattr(self, name) for name in self._fields}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        """Builds the schedule from :meth:`get_config`'s output."""
        return cls(**config)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PeerSchedule)
            and type(other) is type(self)
            and (self.get_config() == other.get_config())
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(sorted(self.get_config().items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


MEMO_CALLS.add(PeerSchedule.__call__)
