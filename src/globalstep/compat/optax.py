"""optax's schedules, with optax's names, arguments, defaults and float32 numbers.

Migrating is renaming an import: ``optax.warmup_cosine_decay_schedule(...)`` becomes
``globalstep.compat.optax.warmup_cosine_decay_schedule(...)``. Each returns a schedule
called with a count (optax's name for the step: optimizer updates applied, see
:mod:`globalstep.clock`), computed as optax computes it eagerly with JAX's default 32-bit
types, operation for operation, with the C library's float32 pow and cos and
flush-to-zero, as XLA's eager kernels (see :mod:`globalstep.compat._common`).

Where optax silently turns bad input into a constant schedule (``transition_steps <= 0``,
``decay_rate == 0``, a negative ``transition_begin``) or ignores it (``join_schedules``
with a wrong number of boundaries, or boundaries out of order), this module raises
ConfigError.

Example:
    >>> lr = warmup_cosine_decay_schedule(0.0, 1.0, warmup_steps=10, decay_steps=110)
    >>> lr(0), lr(10), lr(110)
    (0.0, 1.0, 0.0)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from globalstep.compat._common import F32Ops, Formula, PeerSchedule
from globalstep.errors import ConfigError
from globalstep.schedules._base import Steps, Values, check_flag, check_number

__all__ = [
    "OptaxSchedule",
    "constant_schedule",
    "cosine_decay_schedule",
    "cosine_onecycle_schedule",
    "exponential_decay",
    "join_schedules",
    "linear_onecycle_schedule",
    "linear_schedule",
    "piecewise_constant_schedule",
    "polynomial_schedule",
    "sgdr_schedule",
    "warmup_cosine_decay_schedule",
    "warmup_exponential_decay_schedule",
]

_F32 = F32Ops(np.float32)
_Fn = Callable[[Steps], Values]


class OptaxSchedule(PeerSchedule):
    """An optax schedule: called with a count (an int >= 0), vectorised by ``values``.

    Attributes:
        fn_name: the optax function that built it.
        arguments: the arguments it was built with.
    """

    def __init__(self, fn_name: str, arguments: dict[str, Any], fn: _Fn, dtype: str) -> None:
        self.fn_name = fn_name
        self.arguments = arguments
        self._fn = fn
        self._schedule = Formula(self._formula, dtype=dtype)

    def _formula(self, steps: Steps) -> Values:
        values = np.broadcast_to(self._fn(steps), steps.shape)
        # XLA runs with flush-to-zero: a float32 rate below the smallest normal is 0.
        return _F32.flush(values) if self._schedule.dtype == "float32" else values

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
        schedule: OptaxSchedule = _BUILDERS[name](**arguments)
        return schedule

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        return f"{self.fn_name}({args})"


def _steps_arg(parameter: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(parameter, "must be an int", value)
    if value < minimum:
        raise ConfigError(parameter, f"must be >= {minimum}", value)


def _counts(count: Steps) -> Values:
    """Counts as float32, as JAX divides int32 counts."""
    return count.astype(np.float32)


def _polynomial(init: float, end: float, power: float, steps: int, begin: int) -> _Fn:
    if steps <= 0:
        return lambda count: np.full(count.shape, np.float32(init))
    exact = isinstance(power, int)

    def fn(count: Steps) -> Values:
        frac = np.float32(1) - _counts(np.clip(count - begin, 0, steps)) / np.float32(steps)
        # An int power is integer_pow in JAX: exact for 1.
        scaled = frac**power if exact else _F32.pow(frac, np.float32(power))
        return np.float32(init - end) * scaled + np.float32(end)

    return fn


def _exponential(
    init: float, steps: int, rate: float, begin: int, staircase: bool, end: float | None
) -> _Fn:
    def fn(count: Steps) -> Values:
        decreased = count - begin
        p = _counts(decreased) / np.float32(steps)
        if staircase:
            p = np.floor(p)
        value = np.where(
            decreased <= 0, np.float32(init), np.float32(init) * _F32.pow(np.float32(rate), p)
        )
        if end is not None:
            value = (np.maximum if rate < 1.0 else np.minimum)(value, np.float32(end))
        return value

    return fn


def _cosine(init: float, steps: float, alpha: float, exponent: float) -> _Fn:
    def fn(count: Steps) -> Values:
        t = np.minimum(_counts(count), np.float32(steps))
        cosine = np.float32(0.5) * (
            np.float32(1) + _F32.cos(np.float32(math.pi) * t / np.float32(steps))
        )
        decayed = np.float32(1 - alpha) * _F32.pow(cosine, np.float32(exponent))
        return np.float32(init) * (decayed + np.float32(alpha))

    return fn


def _join(fns: Sequence[_Fn], boundaries: Sequence[int]) -> _Fn:
    def fn(count: Steps) -> Values:
        out = np.broadcast_to(fns[0](count), count.shape)
        for boundary, part in zip(boundaries, fns[1:], strict=False):
            out = np.where(count < boundary, out, part(count - boundary))
        return out

    return fn


def _warmup_cosine(
    init: float, peak: float, warmup: int, decay: int, end: float, exponent: float
) -> _Fn:
    alpha = 0.0 if peak == 0.0 else end / peak
    parts = [_polynomial(init, peak, 1, warmup, 0), _cosine(peak, decay - warmup, alpha, exponent)]
    return _join(parts, [warmup])


def _interpolate(kind: str, init: float, boundaries_and_scales: Mapping[int, float]) -> _Fn:
    items = sorted(boundaries_and_scales.items())
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


def _check_numbers(**values: Any) -> None:
    for name, value in values.items():
        check_number(name, value)


def constant_schedule(value: float) -> OptaxSchedule:
    """Returns ``value`` at every count (the value itself, as optax does).

    Example:
        >>> constant_schedule(0.1)(10**6)
        0.1
    """
    _check_numbers(value=value)
    return OptaxSchedule(
        "constant_schedule",
        {"value": value},
        lambda count: np.full(count.shape, value, dtype=np.float64),
        "float64",
    )


def polynomial_schedule(
    init_value: float,
    end_value: float,
    power: float,
    transition_steps: int,
    transition_begin: int = 0,
) -> OptaxSchedule:
    """``(init - end) * (1 - t / transition_steps) ** power + end``, t clipped to the range.

    Example:
        >>> polynomial_schedule(1.0, 0.0, 2, 10)(5)
        0.25
    """
    _check_numbers(init_value=init_value, end_value=end_value, power=power)
    _steps_arg("transition_steps", transition_steps, 1)
    _steps_arg("transition_begin", transition_begin, 0)
    return OptaxSchedule(
        "polynomial_schedule",
        {
            "init_value": init_value,
            "end_value": end_value,
            "power": power,
            "transition_steps": transition_steps,
            "transition_begin": transition_begin,
        },
        _polynomial(init_value, end_value, power, transition_steps, transition_begin),
        "float32",
    )


def linear_schedule(
    init_value: float, end_value: float, transition_steps: int, transition_begin: int = 0
) -> OptaxSchedule:
    """A line from ``init_value`` to ``end_value`` over ``transition_steps`` counts.

    Example:
        >>> linear_schedule(0.0, 1.0, 4)(1)
        0.25
    """
    schedule = polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)
    schedule.fn_name = "linear_schedule"
    del schedule.arguments["power"]
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

    Example:
        >>> exponential_decay(1.0, 10, 0.5)(10)
        0.5
    """
    _check_numbers(init_value=init_value, decay_rate=decay_rate)
    check_number("end_value", end_value, optional=True)
    _steps_arg("transition_steps", transition_steps, 1)
    _steps_arg("transition_begin", transition_begin, 0)
    check_flag("staircase", staircase)
    if decay_rate == 0:
        raise ConfigError("decay_rate", "must not be 0", decay_rate)
    return OptaxSchedule(
        "exponential_decay",
        {
            "init_value": init_value,
            "transition_steps": transition_steps,
            "decay_rate": decay_rate,
            "transition_begin": transition_begin,
            "staircase": staircase,
            "end_value": end_value,
        },
        _exponential(
            init_value, transition_steps, decay_rate, transition_begin, staircase, end_value
        ),
        "float32",
    )


def piecewise_constant_schedule(
    init_value: float, boundaries_and_scales: Mapping[int, float] | None = None
) -> OptaxSchedule:
    """``init_value`` multiplied by each scale from its boundary count on.

    Example:
        >>> lr = piecewise_constant_schedule(1.0, {10: 0.5})
        >>> lr(9), lr(10)
        (1.0, 0.5)
    """
    _check_numbers(init_value=init_value)
    items = sorted((boundaries_and_scales or {}).items())
    for boundary, scale in items:
        _steps_arg("boundaries_and_scales", boundary, 0)
        check_number("boundaries_and_scales", scale)
        if scale < 0:
            raise ConfigError("boundaries_and_scales", "must hold scales >= 0", scale)

    def fn(count: Steps) -> Values:
        value: Any = np.float32(init_value)
        for threshold, scale in items:
            indicator = (count < threshold).astype(np.float32)
            value = value * indicator + (np.float32(1) - indicator) * np.float32(scale) * value
        return value

    return OptaxSchedule(
        "piecewise_constant_schedule",
        {"init_value": init_value, "boundaries_and_scales": dict(items)},
        fn,
        "float32",
    )


def cosine_decay_schedule(
    init_value: float, decay_steps: int, alpha: float = 0.0, exponent: float = 1.0
) -> OptaxSchedule:
    """``init * ((1 - alpha) * (0.5 * (1 + cos(pi * min(count, d) / d))) ** exponent + alpha)``.

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

    Example:
        >>> warmup_cosine_decay_schedule(0.0, 1.0, 10, 20)(5)
        0.5
    """
    _check_numbers(
        init_value=init_value, peak_value=peak_value, end_value=end_value, exponent=exponent
    )
    _steps_arg("warmup_steps", warmup_steps, 0)
    _steps_arg("decay_steps", decay_steps, warmup_steps + 1)
    arguments = {
        "init_value": init_value,
        "peak_value": peak_value,
        "warmup_steps": warmup_steps,
        "decay_steps": decay_steps,
        "end_value": end_value,
        "exponent": exponent,
    }
    fn = _warmup_cosine(init_value, peak_value, warmup_steps, decay_steps, end_value, exponent)
    return OptaxSchedule("warmup_cosine_decay_schedule", arguments, fn, "float32")


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

    Example:
        >>> warmup_exponential_decay_schedule(0.0, 1.0, 10, 10, 0.5)(20)
        0.5
    """
    decay = exponential_decay(
        peak_value, transition_steps, decay_rate, transition_begin, staircase, end_value
    )
    _check_numbers(init_value=init_value)
    _steps_arg("warmup_steps", warmup_steps, 0)
    warm = _polynomial(init_value, peak_value, 1, warmup_steps, 0)
    arguments = {"init_value": init_value, "peak_value": peak_value, "warmup_steps": warmup_steps}
    arguments.update({k: v for k, v in decay.arguments.items() if k != "init_value"})
    fn = _join([warm, decay._fn], [warmup_steps])
    return OptaxSchedule("warmup_exponential_decay_schedule", arguments, fn, "float32")


def join_schedules(schedules: Sequence[OptaxSchedule], boundaries: Sequence[int]) -> OptaxSchedule:
    """Runs ``schedules[i]`` from ``boundaries[i - 1]`` on, each with its count restarted.

    Example:
        >>> lr = join_schedules([constant_schedule(1.0), linear_schedule(1.0, 0.0, 10)], [5])
        >>> lr(4), lr(10)
        (1.0, 0.5)
    """
    if not schedules or not all(isinstance(s, OptaxSchedule) for s in schedules):
        raise ConfigError(
            "schedules", "must be a non-empty list of compat.optax schedules", schedules
        )
    for b in boundaries:
        _steps_arg("boundaries", b, 0)
    if len(boundaries) != len(schedules) - 1:
        raise ConfigError(
            "boundaries",
            f"must hold one fewer element than schedules ({len(schedules)})",
            list(boundaries),
        )
    if any(b <= a for a, b in itertools.pairwise(boundaries)):
        raise ConfigError("boundaries", "must be strictly increasing", list(boundaries))
    dtype = "float64" if all(s.fn_name == "constant_schedule" for s in schedules) else "float32"
    fn = _join([s._fn for s in schedules], list(boundaries))
    arguments = {"schedules": list(schedules), "boundaries": list(boundaries)}
    return OptaxSchedule("join_schedules", arguments, fn, dtype)


def sgdr_schedule(cosine_kwargs: Iterable[dict[str, Any]]) -> OptaxSchedule:
    """Warm-up cosine decays one after another (SGDR), one per dict of keyword arguments.

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
    return OptaxSchedule("sgdr_schedule", {"cosine_kwargs": kwargs}, joined._fn, "float32")


def _check_onecycle(transition_steps: Any, **values: Any) -> None:
    _steps_arg("transition_steps", transition_steps, 1)
    _check_numbers(**values)
    for name in ("div_factor", "final_div_factor"):
        if values[name] <= 0:
            raise ConfigError(name, "must be > 0", values[name])


def cosine_onecycle_schedule(
    transition_steps: int,
    peak_value: float,
    pct_start: float = 0.3,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> OptaxSchedule:
    """One cycle along half cosines: up to ``peak_value``, then down (optax's boundaries).

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
    fn = _interpolate("cosine", peak_value / div_factor, scales)
    return OptaxSchedule("cosine_onecycle_schedule", arguments, fn, "float32")


def linear_onecycle_schedule(
    transition_steps: int,
    peak_value: float,
    pct_start: float = 0.3,
    pct_final: float = 0.85,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> OptaxSchedule:
    """One cycle along lines: up to ``peak_value``, back down, then to the floor.

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
    fn = _interpolate("linear", peak_value / div_factor, scales)
    return OptaxSchedule("linear_onecycle_schedule", arguments, fn, "float32")


_BUILDERS: dict[str, Callable[..., OptaxSchedule]] = {
    name: globals()[name] for name in __all__ if name != "OptaxSchedule"
}
