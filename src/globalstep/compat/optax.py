"""optax's schedules, with optax's names, arguments, defaults, errors and float32 numbers.

Migrating is renaming an import: ``optax.warmup_cosine_decay_schedule(...)`` becomes
``globalstep.compat.optax.warmup_cosine_decay_schedule(...)``, and the schedule goes to
``optax.adamw(...)`` (or ``optax.inject_hyperparams``) as optax's own would. Each returns a
schedule called with a count (optax's name for the step: optimizer updates applied, see
:mod:`globalstep.clock`).

What a schedule returns depends on what it is called with, as in optax:

- **A Python int** (as a person calls it): a Python float, exactly optax's float32 value for
  that int, computed with NumPy, operation for operation in optax's order, with the C
  library's float32 pow and cos and flush-to-zero, as XLA's eager kernels (see
  :mod:`globalstep.compat._common`), and an int power or exponent as JAX's
  ``integer_pow`` (square and multiply, each product rounded); ``values(counts)`` is the
  vectorised form, bit for bit the same. No framework is imported.
- **Anything else optax takes** (a ``jax.Array``, a tracer inside ``jax.jit``, a NumPy scalar
  or array, a float): the schedule runs optax's own sequence of ``jax.numpy`` operations on
  it and returns what optax returns (a ``jax.Array``, or a tracer). Eagerly this is optax's
  eager value bit for bit; under ``jax.jit`` it is optax's jitted value bit for bit (the same
  program, so XLA compiles and fuses it the same way).

Parity therefore has two meanings, both tested against optax itself: *eager parity* (a
count given as a Python int or a concrete array gives optax's eager result, which is also
what ``values()`` gives) and *jitted parity* (inside ``jax.jit`` the result is optax's
jitted result). The two differ from each other by a few ulps at some counts, because XLA
fuses float32 kernels under jit (and optax's eager values for an int32 array differ from
those for a Python int where optax does its division in Python); neither is "more right".
The NumPy path reproduces XLA's CPU kernels; on a GPU, optax's eager values for a Python
int come from the GPU's kernels and may differ from it in the last bits, while a
``jax.Array`` or traced count still gives the GPU's own optax values (the same program).

Deliberate differences from optax, each warned about or documented:

- A degenerate schedule that optax turns into a constant with an INFO log line
  (``transition_steps <= 0``, ``decay_rate == 0``) or corrects (a negative
  ``transition_begin`` falls back to 0), and ``join_schedules`` whose boundaries are not one
  fewer than the schedules or not increasing (optax ignores the extra ones), behave as in
  optax and also emit :class:`OptaxScheduleWarning` at construction.
- Hyper-parameters are numbers (optax also takes arrays, for a schedule per element);
  ``*_steps`` and ``transition_begin`` are ints; ``join_schedules`` and ``sgdr_schedule``
  refuse an empty list at construction (optax fails at the first call with IndexError).
- A Python-int count returns a Python float (optax: a 0-d ``jax.Array`` of the same value),
  so that no framework is needed; counts beyond int32 (where optax raises or overflows)
  are computed in int64.

Example:
    >>> lr = warmup_cosine_decay_schedule(0.0, 1.0, warmup_steps=10, decay_steps=110)
    >>> lr(0), lr(10), lr(110)
    (0.0, 1.0, 0.0)
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from globalstep.compat._common import FORMULA_BLOCK, F32Ops, Formula, PeerSchedule
from globalstep.errors import ConfigError, MissingDependencyError, OptaxScheduleWarning, StepError
from globalstep.schedules._base import Steps, Values, check_flag, check_number

__all__ = [
    "OptaxSchedule",
    "OptaxScheduleWarning",
    "constant_schedule",
    "cosine_decay_schedule",
    "cosine_onecycle_schedule",
    "exponential_decay",
    "join_schedules",
    "linear_onecycle_schedule",
    "linear_schedule",
    "piecewise_constant_schedule",
    "piecewise_interpolate_schedule",
    "polynomial_schedule",
    "sgdr_schedule",
    "warmup_constant_schedule",
    "warmup_cosine_decay_schedule",
    "warmup_exponential_decay_schedule",
]

_F32 = F32Ops(np.float32)
_Fn = Callable[[Steps], Values]
# Builds the jax.numpy form of a schedule, given the jax.numpy module.
_JaxMaker = Callable[[Any], Callable[[Any], Any]]


def _warn(message: str) -> None:
    warnings.warn(message, OptaxScheduleWarning, stacklevel=4)


def _jnp() -> Any:
    try:
        import jax.numpy as jnp
    except ImportError as err:  # pragma: no cover - jax is a dev dependency
        raise MissingDependencyError(
            "jax", "jax", "Calling a compat.optax schedule with an array or a float count"
        ) from err
    return jnp


class OptaxSchedule(PeerSchedule):
    """An optax schedule: called with a count, vectorised by ``values``.

    Attributes:
        fn_name: the optax function that built it.
        arguments: the arguments it was built with.
    """

    def __init__(
        self,
        fn_name: str,
        arguments: dict[str, Any],
        fn: _Fn,
        dtype: str,
        jax_maker: _JaxMaker,
        *,
        constant: bool = False,
    ) -> None:
        self.fn_name = fn_name
        self.arguments = arguments
        self._fn = fn
        self._jax_maker = jax_maker
        self._jax_fn: Callable[[Any], Any] | None = None
        # A constant schedule returns optax's value object itself, whatever the count.
        self._constant = constant
        self._schedule = Formula(self._formula, dtype=dtype)

    def _formula(self, steps: Steps) -> Values:
        if steps.ndim == 1 and steps.size > FORMULA_BLOCK:  # see PeerSchedule._flushed
            blocks = np.split(steps, range(FORMULA_BLOCK, steps.size, FORMULA_BLOCK))
            return np.concatenate([self._block(block) for block in blocks])
        return self._block(steps)

    def _block(self, steps: Steps) -> Values:
        # optax evaluates both branches of its where()s (0 ** -1 before the count begins):
        # IEEE results, no warnings, as in XLA.
        with np.errstate(all="ignore"):
            values = np.broadcast_to(self._fn(steps), steps.shape)
        # XLA runs with flush-to-zero: a float32 rate below the smallest normal is 0.
        return _F32.flush(values) if self._schedule.dtype == "float32" else values

    def __call__(self, count: Any) -> Any:
        """Returns the value at ``count``, as optax's schedule does (see the module doc).

        Args:
            count: a Python int (any sign) gives a Python float; a ``jax.Array``, a tracer,
                a NumPy scalar or array, or a float gives what optax's schedule gives
                (a ``jax.Array``, traceable under ``jax.jit``).

        Raises:
            StepError: ``count`` is not a number or an array of numbers.

        Example:
            >>> exponential_decay(1.0, 10, 0.5)(20)
            0.25
        """
        if type(count) is int:
            if self._constant:
                return self.arguments[self._constant_key()]
            if count >= 0:
                return super().__call__(count)
            return float(self._formula(np.array([count], dtype=np.int64))[0])
        if self._constant:
            return self.arguments[self._constant_key()]
        if isinstance(count, str | bytes) or count is None:
            raise StepError(
                f"`count` must be an int, a float or an array of them; got count={count!r}.",
                count,
            )
        return self.jax_fn(count)

    def _constant_key(self) -> str:
        return "value" if self.fn_name == "constant_schedule" else "init_value"

    @property
    def jax_fn(self) -> Callable[[Any], Any]:
        """optax's schedule as ``jax.numpy`` operations (built on first use; imports jax)."""
        if self._jax_fn is None:
            self._jax_fn = self._jax_maker(_jnp())
        return self._jax_fn

    def get_config(self) -> dict[str, Any]:
        """Returns the building function's name (``fn_name``) and its arguments.

        Example:
            >>> constant_schedule(0.5).get_config()
            {'fn_name': 'constant_schedule', 'value': 0.5}
        """
        return {"fn_name": self.fn_name, **self.arguments}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> OptaxSchedule:
        """Builds the schedule again from :meth:`get_config`'s output.

        Raises:
            ConfigError: ``config['fn_name']`` names no schedule of this module.

        Example:
            >>> lr = exponential_decay(0.1, 1000, 0.96)
            >>> OptaxSchedule.from_config(lr.get_config()) == lr
            True
        """
        arguments = dict(config)
        name = arguments.pop("fn_name", None)
        if name not in _BUILDERS:
            raise ConfigError(
                "config['fn_name']", f"must be one of {', '.join(sorted(_BUILDERS))}", name
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptaxScheduleWarning)  # warned when first built
            schedule: OptaxSchedule = _BUILDERS[name](**arguments)
        return schedule

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        return f"{self.fn_name}({args})"


def _steps_arg(parameter: str, value: Any, minimum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(parameter, "must be an int", value)
    if minimum is not None and value < minimum:
        raise ConfigError(parameter, f"must be >= {minimum}", value)


def _f32(value: Any) -> Any:
    """A Python hyper-parameter as the float32 XLA reads it: rounded, and a subnormal taken
    as a (signed) zero (XLA's CPU kernels run denormals-are-zero)."""
    return _F32.flush(np.float32(value))[()]


def _power(base: Values, exponent: Any) -> Values:
    """``base ** exponent`` in float32 as ``jnp.power`` computes it: for an int exponent
    (Python or NumPy), JAX's ``integer_pow``, square-and-multiply with a rounding at each
    product (``x ** 3`` is ``(x * x) * x``, which can differ from ``powf`` in the last bit);
    otherwise the C library's ``powf``.

    Example:
        >>> x = np.float32(1) - np.float32(1) / np.float32(21)
        >>> _power(np.array([x]), 3).view(np.uint32), (x * x * x).view(np.uint32)
        (array([1063068791], dtype=uint32), np.uint32(1063068791))
    """
    if isinstance(exponent, bool) or not isinstance(exponent, int | np.integer):
        return _F32.pow(base, _f32(exponent))
    base = np.asarray(base, dtype=np.float32)
    if exponent == 0:
        return np.ones_like(base)
    y = abs(int(exponent))
    acc = None
    while y:  # JAX's _integer_pow, product for product
        if y & 1:
            acc = base if acc is None else acc * base
        y >>= 1
        if y:
            base = base * base
    if exponent > 0:
        return acc
    with np.errstate(divide="ignore"):  # 1 / 0 is inf, as XLA gives it
        return np.float32(1) / _F32.flush(acc)  # a subnormal divisor is read as zero


def _counts(count: Steps) -> Values:
    """Counts as float32, as JAX divides int32 counts."""
    return count.astype(np.float32)


def _constant_fn(value: Any) -> _Fn:
    return lambda count: np.full(count.shape, value, dtype=np.float64)


def _constant_jax(value: Any) -> _JaxMaker:
    return lambda jnp: lambda count: value


# -- the formulas: NumPy for Python-int counts, jax.numpy as optax runs them -------------


def _polynomial(init: float, end: float, power: float, steps: int, begin: int) -> _Fn:
    def fn(count: Steps) -> Values:
        frac = np.float32(1) - _counts(
            np.minimum(np.maximum(count - begin, 0), steps)
        ) / np.float32(steps)
        return _f32(init - end) * _power(frac, power) + _f32(end)

    return fn


def _polynomial_jax(init: Any, end: Any, power: Any, steps: int, begin: int) -> _JaxMaker:
    def make(jnp: Any) -> Callable[[Any], Any]:
        def schedule(count: Any) -> Any:
            count = jnp.clip(count - begin, 0, steps)
            frac = 1 - count / steps
            return (init - end) * (frac**power) + end

        return schedule

    return make


def _exponential(
    init: float, steps: int, rate: float, begin: int, staircase: bool, end: float | None
) -> _Fn:
    def fn(count: Steps) -> Values:
        decreased = count - begin
        # A Python-int count is divided in Python (float64), then rounded into JAX.
        p = (decreased / steps).astype(np.float32)
        if staircase:
            p = np.floor(p)
        value = np.where(decreased <= 0, _f32(init), _f32(init) * _F32.pow(_f32(rate), p))
        if end is not None:
            value = (np.maximum if rate < 1.0 else np.minimum)(value, _f32(end))
        return value

    return fn


def _exponential_jax(
    init: Any, steps: int, rate: Any, begin: int, staircase: bool, end: Any
) -> _JaxMaker:
    def make(jnp: Any) -> Callable[[Any], Any]:
        clip = jnp.maximum if rate < 1.0 else jnp.minimum

        def schedule(count: Any) -> Any:
            decreased = count - begin
            p = decreased / steps
            if staircase:
                p = jnp.floor(p)
            value = jnp.where(decreased <= 0, init, init * jnp.power(rate, p))
            return value if end is None else clip(value, end)

        return schedule

    return make


def _cosine(init: float, steps: float, alpha: float, exponent: float) -> _Fn:
    def fn(count: Steps) -> Values:
        t = np.minimum(_counts(count), np.float32(steps))
        cosine = np.float32(0.5) * (
            np.float32(1) + _F32.cos(np.float32(math.pi) * t / np.float32(steps))
        )
        decayed = _f32(1 - alpha) * _power(cosine, exponent)
        return _f32(init) * (decayed + _f32(alpha))

    return fn


def _cosine_jax(init: Any, steps: Any, alpha: Any, exponent: Any) -> _JaxMaker:
    def make(jnp: Any) -> Callable[[Any], Any]:
        length = float(steps) if isinstance(steps, int) else steps

        def schedule(count: Any) -> Any:
            count = float(count) if isinstance(count, int) else count
            count = jnp.minimum(count, length)
            cosine = 0.5 * (1 + jnp.cos(jnp.pi * count / length))
            return init * ((1 - alpha) * cosine**exponent + alpha)

        return schedule

    return make


def _join(fns: Sequence[_Fn], boundaries: Sequence[int]) -> _Fn:
    def fn(count: Steps) -> Values:
        out = np.broadcast_to(fns[0](count), count.shape)
        for boundary, part in zip(boundaries, fns[1:], strict=False):
            out = np.where(count < boundary, out, part(count - boundary))
        return out

    return fn


def _join_jax(makers: Sequence[_JaxMaker], boundaries: Sequence[int]) -> _JaxMaker:
    def make(jnp: Any) -> Callable[[Any], Any]:
        parts = [m(jnp) for m in makers]

        def schedule(count: Any) -> Any:
            out = parts[0](count)
            for boundary, part in zip(boundaries, parts[1:], strict=False):
                out = jnp.where(count < boundary, out, part(count - boundary))
            return out

        return schedule

    return make


def _interpolate(kind: str, init: float, items: Sequence[tuple[int, float]]) -> _Fn:
    bounds = np.array([0, *(b for b, _ in items)], dtype=np.int64)
    values = np.cumprod(np.array([init, *(s for _, s in items)], dtype=np.float32))
    sizes = np.maximum(bounds[1:] - bounds[:-1], 1)

    def fn(count: Steps) -> Values:
        c = count[:, None]
        inside = (bounds[:-1] <= c) & (c < bounds[1:])
        pct = _counts(c - bounds[:-1]) / sizes.astype(np.float32)
        start, end = values[:-1], values[1:]
        if kind == "linear":
            interpolated = (end - start) * pct + start
        else:
            half = (start - end) / np.float32(2.0)
            interpolated = end + half * (_F32.cos(np.float32(math.pi) * pct) + np.float32(1))
        picked = np.where(inside, interpolated, np.float32(0)).sum(axis=1, dtype=np.float32)
        return picked + (bounds[-1] <= count).astype(np.float32) * values[-1]

    return fn


def _interpolate_jax(kind: str, init: Any, items: Sequence[tuple[Any, Any]]) -> _JaxMaker:
    boundaries = tuple(b for b, _ in items)
    scales = tuple(s for _, s in items)

    def make(jnp: Any) -> Callable[[Any], Any]:
        def interpolate(start: Any, end: Any, pct: Any) -> Any:
            if kind == "linear":
                return (end - start) * pct + start
            return end + (start - end) / 2.0 * (jnp.cos(jnp.pi * pct) + 1)

        def schedule(count: Any) -> Any:
            bounds = jnp.stack((0, *boundaries))
            values = jnp.cumprod(jnp.stack((init, *scales)))
            sizes = jnp.maximum(bounds[1:] - bounds[:-1], 1)
            inside = jnp.logical_and(bounds[:-1] <= count, count < bounds[1:])
            pct = (count - bounds[:-1]) / sizes
            picked = inside.dot(interpolate(values[:-1], values[1:], pct))
            return picked + (bounds[-1] <= count) * values[-1]

        return schedule

    return make


def _check_numbers(**values: Any) -> None:
    for name, value in values.items():
        check_number(name, value)


def _degenerate(fn_name: str, arguments: dict[str, Any], init_value: Any) -> OptaxSchedule:
    return OptaxSchedule(
        fn_name,
        arguments,
        _constant_fn(init_value),
        "float64",
        _constant_jax(init_value),
        constant=True,
    )


# -- the public schedules ----------------------------------------------------------------


def constant_schedule(value: float) -> OptaxSchedule:
    """Returns ``value`` at every count (the value object itself, as optax does).

    .. math:: v(c) = V

    Args:
        value: the value to return.

    Example:
        >>> constant_schedule(0.1)(10**6)
        0.1
    """
    _check_numbers(value=value)
    return OptaxSchedule(
        "constant_schedule",
        {"value": value},
        _constant_fn(value),
        "float64",
        _constant_jax(value),
        constant=True,
    )


def polynomial_schedule(
    init_value: float,
    end_value: float,
    power: float,
    transition_steps: int,
    transition_begin: int = 0,
) -> OptaxSchedule:
    """A polynomial from ``init_value`` to ``end_value`` over ``transition_steps`` counts.

    .. math::
        v(c) = (I - E) \\left(1 - \\frac{\\min(\\max(c - B, 0), T)}{T}\\right)^P + E

    with :math:`I` ``init_value``, :math:`E` ``end_value``, :math:`P` ``power``, :math:`T`
    ``transition_steps`` and :math:`B` ``transition_begin``.

    Args:
        init_value: the value up to ``transition_begin``.
        end_value: the value from ``transition_begin + transition_steps`` on.
        power: the polynomial's power (an int one is JAX's ``integer_pow``, as in optax).
        transition_steps: counts over which the value moves; ``<= 0`` gives a constant
            ``init_value`` schedule, as in optax (with :class:`OptaxScheduleWarning`).
        transition_begin: counts before the move starts; a negative one is taken as 0, as
            in optax (with :class:`OptaxScheduleWarning`).

    Raises:
        ConfigError: a value is not a finite number, or a count argument not an int.

    Example:
        >>> polynomial_schedule(1.0, 0.0, 2, 10)(5)
        0.25
    """
    _check_numbers(init_value=init_value, end_value=end_value, power=power)
    _steps_arg("transition_steps", transition_steps)
    _steps_arg("transition_begin", transition_begin)
    arguments = {
        "init_value": init_value,
        "end_value": end_value,
        "power": power,
        "transition_steps": transition_steps,
        "transition_begin": transition_begin,
    }
    if transition_steps <= 0:
        _warn(
            "A polynomial schedule was set with a non-positive `transition_steps` value; "
            f"got transition_steps={transition_steps}; this results in a constant schedule "
            "with value `init_value`, as in optax. Pass transition_steps > 0 for a transition."
        )
        return _degenerate("polynomial_schedule", arguments, init_value)
    begin = transition_begin
    if begin < 0:
        _warn(
            "A polynomial schedule was set with a negative `transition_begin` value; "
            f"got transition_begin={begin}; it falls back to 0, as in optax."
        )
        begin = 0
    return OptaxSchedule(
        "polynomial_schedule",
        arguments,
        _polynomial(init_value, end_value, power, transition_steps, begin),
        "float32",
        _polynomial_jax(init_value, end_value, power, transition_steps, begin),
    )


def _renamed(schedule: OptaxSchedule, fn_name: str, drop: Iterable[str]) -> OptaxSchedule:
    schedule.fn_name = fn_name
    for key in drop:
        del schedule.arguments[key]
    return schedule


def linear_schedule(
    init_value: float, end_value: float, transition_steps: int, transition_begin: int = 0
) -> OptaxSchedule:
    """A line from ``init_value`` to ``end_value`` over ``transition_steps`` counts
    (:func:`polynomial_schedule` with ``power=1``).

    .. math:: v(c) = I + \\frac{\\min(\\max(c - B, 0), T)}{T} (E - I)

    Args:
        init_value: the value up to ``transition_begin``.
        end_value: the value from ``transition_begin + transition_steps`` on.
        transition_steps: counts over which the value moves (``<= 0``: constant, warned).
        transition_begin: counts before the move starts (negative: 0, warned).

    Example:
        >>> linear_schedule(0.0, 1.0, 4)(1)
        0.25
    """
    schedule = polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)
    return _renamed(schedule, "linear_schedule", ["power"])


def warmup_constant_schedule(
    init_value: float, peak_value: float, warmup_steps: int
) -> OptaxSchedule:
    """A linear warm-up from ``init_value`` to ``peak_value``, then ``peak_value`` for ever.

    .. math:: v(c) = I + \\frac{\\min(\\max(c, 0), W)}{W} (P - I)

    Args:
        init_value: the value at count 0.
        peak_value: the value from ``warmup_steps`` on.
        warmup_steps: the warm-up's length in counts (``<= 0``: constant ``init_value``,
            as in optax, warned).

    Example:
        >>> warmup_constant_schedule(0.0, 1.0, 4)(2), warmup_constant_schedule(0.0, 1.0, 4)(9)
        (0.5, 1.0)
    """
    schedule = polynomial_schedule(init_value, peak_value, 1, warmup_steps, 0)
    schedule.fn_name = "warmup_constant_schedule"
    schedule.arguments = {
        "init_value": init_value,
        "peak_value": peak_value,
        "warmup_steps": warmup_steps,
    }
    return schedule


def exponential_decay(
    init_value: float,
    transition_steps: int,
    decay_rate: float,
    transition_begin: int = 0,
    staircase: bool = False,
    end_value: float | None = None,
) -> OptaxSchedule:
    """``init_value * decay_rate ** ((count - transition_begin) / transition_steps)``.

    .. math::
        v(c) = \\begin{cases} I & c \\le B \\\\
        \\operatorname{clip}_E\\left(I \\, r^{p}\\right), \\;
        p = \\frac{c - B}{T} \\text{ (floored if staircase)} & c > B \\end{cases}

    where :math:`\\operatorname{clip}_E` bounds from below by ``end_value`` when
    :math:`r < 1`, from above otherwise.

    Args:
        init_value: the value up to ``transition_begin``.
        transition_steps: counts per factor of ``decay_rate`` (``<= 0``: constant, warned).
        decay_rate: the factor per ``transition_steps`` (``0``: constant, warned).
        transition_begin: counts before the decay starts (negative: 0, warned).
        staircase: decay in whole steps of ``transition_steps``.
        end_value: the bound the value stops at, or None.

    Example:
        >>> exponential_decay(1.0, 10, 0.5)(10)
        0.5
    """
    _check_numbers(init_value=init_value, decay_rate=decay_rate)
    check_number("end_value", end_value, optional=True)
    _steps_arg("transition_steps", transition_steps)
    _steps_arg("transition_begin", transition_begin)
    check_flag("staircase", staircase)
    arguments = {
        "init_value": init_value,
        "transition_steps": transition_steps,
        "decay_rate": decay_rate,
        "transition_begin": transition_begin,
        "staircase": staircase,
        "end_value": end_value,
    }
    if transition_steps <= 0 or decay_rate == 0:
        parameter = "transition_steps" if transition_steps <= 0 else "decay_rate"
        rule = "non-positive" if transition_steps <= 0 else "zero"
        _warn(
            f"An exponential schedule was set with a {rule} `{parameter}` value; got "
            f"{parameter}={arguments[parameter]}; this results in a constant schedule with "
            "value `init_value`, as in optax. Pass transition_steps > 0 and a non-zero "
            "decay_rate for a decay."
        )
        return _degenerate("exponential_decay", arguments, init_value)
    begin = transition_begin
    if begin < 0:
        _warn(
            "An exponential schedule was set with a negative `transition_begin` value; "
            f"got transition_begin={begin}; it falls back to 0, as in optax."
        )
        begin = 0
    return OptaxSchedule(
        "exponential_decay",
        arguments,
        _exponential(init_value, transition_steps, decay_rate, begin, staircase, end_value),
        "float32",
        _exponential_jax(init_value, transition_steps, decay_rate, begin, staircase, end_value),
    )


def piecewise_constant_schedule(
    init_value: float, boundaries_and_scales: Mapping[int, float] | None = None
) -> OptaxSchedule:
    """``init_value`` multiplied by each scale from its boundary count on.

    .. math:: v(c) = I \\prod_{i: c \\ge b_i} s_i

    Args:
        init_value: the value before the first boundary.
        boundaries_and_scales: ``{boundary count: scale}``; scales must be >= 0.

    Raises:
        ConfigError: a scale is negative (a ValueError, as optax raises).

    Example:
        >>> lr = piecewise_constant_schedule(1.0, {10: 0.5})
        >>> lr(9), lr(10)
        (1.0, 0.5)
    """
    _check_numbers(init_value=init_value)
    items = _boundaries_and_scales(boundaries_and_scales)

    def fn(count: Steps) -> Values:
        value: Any = _f32(init_value)
        for threshold, scale in items:
            indicator = (count < threshold).astype(np.float32)
            value = value * indicator + (np.float32(1) - indicator) * _f32(scale) * value
        return value

    def make(jnp: Any) -> Callable[[Any], Any]:
        def schedule(count: Any) -> Any:
            value = init_value
            for threshold, scale in items:
                indicator = jnp.maximum(0.0, jnp.sign(threshold - count))
                value = value * indicator + (1 - indicator) * scale * value
            return value

        return schedule

    arguments = {
        "init_value": init_value,
        "boundaries_and_scales": None if boundaries_and_scales is None else dict(items),
    }
    if not items:  # optax returns init_value itself, unrounded and unflushed
        return _degenerate("piecewise_constant_schedule", arguments, init_value)
    return OptaxSchedule("piecewise_constant_schedule", arguments, fn, "float32", make)


def _boundaries_and_scales(given: Mapping[Any, Any] | None) -> list[tuple[int, float]]:
    if given is None:
        return []
    if not isinstance(given, Mapping):
        raise ConfigError("boundaries_and_scales", "must be a dict {count: scale}", given)
    for boundary, scale in given.items():
        _steps_arg("boundaries_and_scales", boundary)
        check_number("boundaries_and_scales", scale)
        if scale < 0:
            raise ConfigError(
                "boundaries_and_scales", "must hold scales >= 0 (non-negative factors)", scale
            )
    return sorted(given.items())


def piecewise_interpolate_schedule(
    interpolate_type: str,
    init_value: float,
    boundaries_and_scales: Mapping[int, float] | None = None,
) -> OptaxSchedule:
    """Moves linearly or along a half cosine between the accumulated values at boundaries.

    With the boundaries :math:`b_1 < b_2 < \\dots` (:math:`b_0 = 0`) and the values
    :math:`v_i = I \\prod_{j \\le i} s_j`, between :math:`b_i` and :math:`b_{i+1}`:

    .. math::
        v(c) = \\operatorname{interp}\\left(v_i, v_{i+1},
        \\frac{c - b_i}{\\max(b_{i+1} - b_i, 1)}\\right)

    (linear: :math:`a + (b - a) x`; cosine: :math:`b + \\frac{a - b}{2}(\\cos \\pi x + 1)`),
    and :math:`v_{\\text{last}}` from the last boundary on.

    Args:
        interpolate_type: ``'linear'`` or ``'cosine'``.
        init_value: the value at count 0.
        boundaries_and_scales: ``{boundary count: scale}``; scales must be >= 0.

    Raises:
        ConfigError: another ``interpolate_type``, or a negative scale (ValueErrors, as
            optax raises).

    Example:
        >>> lr = piecewise_interpolate_schedule("linear", 1.0, {4: 0.5})
        >>> lr(0), lr(2), lr(4), lr(9)
        (1.0, 0.75, 0.5, 0.5)
    """
    if interpolate_type not in ("linear", "cosine"):
        raise ConfigError(
            "interpolate_type", "must be either 'cosine' or 'linear'", interpolate_type
        )
    _check_numbers(init_value=init_value)
    items = _boundaries_and_scales(boundaries_and_scales)
    arguments = {
        "interpolate_type": interpolate_type,
        "init_value": init_value,
        "boundaries_and_scales": None if boundaries_and_scales is None else dict(items),
    }
    return OptaxSchedule(
        "piecewise_interpolate_schedule",
        arguments,
        _interpolate(interpolate_type, init_value, items),
        "float32",
        _interpolate_jax(interpolate_type, init_value, items),
    )


def cosine_decay_schedule(
    init_value: float, decay_steps: int, alpha: float = 0.0, exponent: float = 1.0
) -> OptaxSchedule:
    """A cosine decay from ``init_value`` to ``alpha * init_value`` over ``decay_steps``.

    .. math::
        v(c) = I \\left((1 - \\alpha)
        \\left(\\tfrac12 \\left(1 + \\cos \\frac{\\pi \\min(c, T)}{T}\\right)\\right)^p
        + \\alpha\\right)

    Args:
        init_value: the value at count 0.
        decay_steps: the decay's length in counts, > 0.
        alpha: the final value as a fraction of ``init_value``.
        exponent: the power :math:`p` of the cosine factor.

    Raises:
        ConfigError: ``decay_steps <= 0`` (a ValueError, as optax raises).

    Example:
        >>> cosine_decay_schedule(1.0, 100)(100)
        0.0
    """
    _check_numbers(init_value=init_value, alpha=alpha, exponent=exponent)
    _steps_arg("decay_steps", decay_steps, 1)
    return OptaxSchedule(
        "cosine_decay_schedule",
        {
            "init_value": init_value,
            "decay_steps": decay_steps,
            "alpha": alpha,
            "exponent": exponent,
        },
        _cosine(init_value, decay_steps, alpha, exponent),
        "float32",
        _cosine_jax(init_value, decay_steps, alpha, exponent),
    )


def _warmup(init: float, peak: float, warmup_steps: int) -> tuple[_Fn, _JaxMaker]:
    """optax's linear warm-up part (a constant ``init`` for ``warmup_steps <= 0``)."""
    if warmup_steps <= 0:
        return _constant_fn(init), _constant_jax(init)
    return _polynomial(init, peak, 1, warmup_steps, 0), _polynomial_jax(
        init, peak, 1, warmup_steps, 0
    )


def warmup_cosine_decay_schedule(
    init_value: float,
    peak_value: float,
    warmup_steps: int,
    decay_steps: int,
    end_value: float = 0.0,
    exponent: float = 1.0,
) -> OptaxSchedule:
    """A linear warm-up to ``peak_value``, then a cosine decay to ``end_value`` at
    ``decay_steps`` (which counts the warm-up).

    .. math::
        v(c) = \\begin{cases} I + \\frac{c}{W}(P - I) & c < W \\\\
        \\operatorname{cosine}_{P, D - W, E / P, p}(c - W) & c \\ge W \\end{cases}

    Args:
        init_value: the value at count 0.
        peak_value: the value at ``warmup_steps``.
        warmup_steps: the warm-up's length (``<= 0``: no warm-up, as in optax).
        decay_steps: the whole schedule's length, > ``warmup_steps``.
        end_value: the value from ``decay_steps`` on.
        exponent: the power of the cosine factor.

    Raises:
        ConfigError: ``decay_steps <= warmup_steps`` (a ValueError, as optax raises).

    Example:
        >>> warmup_cosine_decay_schedule(0.0, 1.0, 10, 20)(5)
        0.5
    """
    _check_numbers(
        init_value=init_value, peak_value=peak_value, end_value=end_value, exponent=exponent
    )
    _steps_arg("warmup_steps", warmup_steps)
    _steps_arg("decay_steps", decay_steps, warmup_steps + 1)
    arguments = {
        "init_value": init_value,
        "peak_value": peak_value,
        "warmup_steps": warmup_steps,
        "decay_steps": decay_steps,
        "end_value": end_value,
        "exponent": exponent,
    }
    alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
    warm, warm_jax = _warmup(init_value, peak_value, warmup_steps)
    length = decay_steps - warmup_steps
    fn = _join([warm, _cosine(peak_value, length, alpha, exponent)], [warmup_steps])
    make = _join_jax([warm_jax, _cosine_jax(peak_value, length, alpha, exponent)], [warmup_steps])
    return OptaxSchedule("warmup_cosine_decay_schedule", arguments, fn, "float32", make)


def warmup_exponential_decay_schedule(
    init_value: float,
    peak_value: float,
    warmup_steps: int,
    transition_steps: int,
    decay_rate: float,
    transition_begin: int = 0,
    staircase: bool = False,
    end_value: float | None = None,
) -> OptaxSchedule:
    """A linear warm-up to ``peak_value``, then :func:`exponential_decay` from it.

    .. math::
        v(c) = \\begin{cases} I + \\frac{c}{W}(P - I) & c < W \\\\
        \\operatorname{exponential}_{P, T, r, B}(c - W) & c \\ge W \\end{cases}

    Args:
        init_value: the value at count 0.
        peak_value: the value at ``warmup_steps``.
        warmup_steps: the warm-up's length (``<= 0``: no warm-up, as in optax).
        transition_steps: see :func:`exponential_decay`.
        decay_rate: see :func:`exponential_decay`.
        transition_begin: counts after the warm-up before the decay starts.
        staircase: decay in whole steps of ``transition_steps``.
        end_value: the bound the value stops at, or None.

    Example:
        >>> warmup_exponential_decay_schedule(0.0, 1.0, 10, 10, 0.5)(20)
        0.5
    """
    decay = exponential_decay(
        peak_value, transition_steps, decay_rate, transition_begin, staircase, end_value
    )
    _check_numbers(init_value=init_value)
    _steps_arg("warmup_steps", warmup_steps)
    warm, warm_jax = _warmup(init_value, peak_value, warmup_steps)
    arguments = {"init_value": init_value, "peak_value": peak_value, "warmup_steps": warmup_steps}
    arguments.update({k: v for k, v in decay.arguments.items() if k != "init_value"})
    fn = _join([warm, decay._fn], [warmup_steps])
    make = _join_jax([warm_jax, decay._jax_maker], [warmup_steps])
    return OptaxSchedule("warmup_exponential_decay_schedule", arguments, fn, "float32", make)


def join_schedules(schedules: Sequence[OptaxSchedule], boundaries: Sequence[int]) -> OptaxSchedule:
    """Runs ``schedules[i]`` from ``boundaries[i - 1]`` on, each with its count restarted.

    .. math:: v(c) = s_i(c - b_{i-1}) \\quad \\text{for } b_{i-1} \\le c < b_i

    Args:
        schedules: compat.optax schedules, at least one.
        boundaries: the counts at which the next schedule starts; optax pairs them with
            ``schedules[1:]`` and ignores the surplus of either (warned here).

    Raises:
        ConfigError: no schedules, or one that is not a compat.optax schedule.

    Example:
        >>> lr = join_schedules([constant_schedule(1.0), linear_schedule(1.0, 0.0, 10)], [5])
        >>> lr(4), lr(10)
        (1.0, 0.5)
    """
    if not schedules or not all(isinstance(s, OptaxSchedule) for s in schedules):
        raise ConfigError(
            "schedules",
            "must be a non-empty list of compat.optax schedules",
            schedules,
            "Build each part with globalstep.compat.optax.",
        )
    for b in boundaries:
        _steps_arg("boundaries", b)
    if len(boundaries) != len(schedules) - 1:
        _warn(
            f"`boundaries` should hold one fewer element than schedules ({len(schedules)}); "
            f"got boundaries={list(boundaries)}; as in optax, the surplus is ignored."
        )
    if any(b <= a for a, b in itertools.pairwise(boundaries)):
        _warn(
            f"`boundaries` should be strictly increasing; got boundaries={list(boundaries)}; "
            "as in optax, each later schedule still takes over where its boundary is reached."
        )
    fn = _join([s._fn for s in schedules], list(boundaries))
    make = _join_jax([s._jax_maker for s in schedules], list(boundaries))
    arguments = {"schedules": list(schedules), "boundaries": list(boundaries)}
    return OptaxSchedule("join_schedules", arguments, fn, "float32", make)


def sgdr_schedule(cosine_kwargs: Iterable[dict[str, Any]]) -> OptaxSchedule:
    """Warm-up cosine decays one after another (SGDR), one per dict of keyword arguments of
    :func:`warmup_cosine_decay_schedule`; each lasts its ``decay_steps``.

    .. math:: v(c) = \\operatorname{warmup\\_cosine}_k(c - D_{<k})
        \\quad \\text{for } D_{<k} \\le c < D_{<k} + D_k

    Example:
        >>> kw = {"init_value": 0.0, "peak_value": 1.0, "warmup_steps": 0, "decay_steps": 10}
        >>> lr = sgdr_schedule([kw, kw])
        >>> lr(0), lr(10)
        (1.0, 1.0)
    """
    kwargs = [dict(k) for k in cosine_kwargs]
    if not kwargs:
        raise ConfigError("cosine_kwargs", "must hold at least one dict", kwargs)
    parts, boundaries, step = [], [], 0
    for kw in kwargs:
        parts.append(warmup_cosine_decay_schedule(**kw))
        step += kw["decay_steps"]
        boundaries.append(step)
    joined = join_schedules(parts, boundaries[:-1])
    return OptaxSchedule(
        "sgdr_schedule", {"cosine_kwargs": kwargs}, joined._fn, "float32", joined._jax_maker
    )


def _check_onecycle(transition_steps: Any, **values: Any) -> None:
    _steps_arg("transition_steps", transition_steps, 1)
    _check_numbers(**values)
    for name in ("div_factor", "final_div_factor"):
        if values[name] == 0:
            raise ConfigError(name, "must not be 0", values[name])


def _onecycle(
    fn_name: str, kind: str, arguments: dict[str, Any], init: float, scales: dict[int, float]
) -> OptaxSchedule:
    items = _boundaries_and_scales(scales)
    fn = _interpolate(kind, init, items)
    return OptaxSchedule(fn_name, arguments, fn, "float32", _interpolate_jax(kind, init, items))


def cosine_onecycle_schedule(
    transition_steps: int,
    peak_value: float,
    pct_start: float = 0.3,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> OptaxSchedule:
    """One cycle along half cosines: up to ``peak_value``, then down (optax's boundaries):
    :func:`piecewise_interpolate_schedule` ``('cosine', peak / div_factor, {int(pct_start *
    T): div_factor, T: 1 / (div_factor * final_div_factor)})``.

    Raises:
        ConfigError: ``transition_steps <= 0`` (a ValueError, as optax raises).

    Example:
        >>> cosine_onecycle_schedule(100, 1.0)(30)
        1.0
    """
    arguments = {
        "transition_steps": transition_steps,
        "peak_value": peak_value,
        "pct_start": pct_start,
        "div_factor": div_factor,
        "final_div_factor": final_div_factor,
    }
    _check_onecycle(**arguments)
    scales = {
        int(pct_start * transition_steps): div_factor,
        int(transition_steps): 1.0 / (div_factor * final_div_factor),
    }
    return _onecycle(
        "cosine_onecycle_schedule", "cosine", arguments, peak_value / div_factor, scales
    )


def linear_onecycle_schedule(
    transition_steps: int,
    peak_value: float,
    pct_start: float = 0.3,
    pct_final: float = 0.85,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> OptaxSchedule:
    """One cycle along lines: up to ``peak_value``, back down, then to the floor:
    :func:`piecewise_interpolate_schedule` ``('linear', peak / div_factor, {int(pct_start *
    T): div_factor, int(pct_final * T): 1 / div_factor, T: 1 / final_div_factor})``.

    Raises:
        ConfigError: ``transition_steps <= 0`` (a ValueError, as optax raises).

    Example:
        >>> linear_onecycle_schedule(100, 1.0)(30)
        1.0
    """
    arguments = {
        "transition_steps": transition_steps,
        "peak_value": peak_value,
        "pct_start": pct_start,
        "pct_final": pct_final,
        "div_factor": div_factor,
        "final_div_factor": final_div_factor,
    }
    _check_onecycle(**arguments)
    scales = {
        int(pct_start * transition_steps): div_factor,
        int(pct_final * transition_steps): 1.0 / div_factor,
        transition_steps: 1.0 / final_div_factor,
    }
    return _onecycle(
        "linear_onecycle_schedule", "linear", arguments, peak_value / div_factor, scales
    )


_BUILDERS: dict[str, Callable[..., OptaxSchedule]] = {
    name: globals()[name]
    for name in __all__
    if name not in ("OptaxSchedule", "OptaxScheduleWarning")
}
