"""optax's single schedules (constant, polynomial and linear, exponential, piecewise,
cosine), with the checks and warnings of their arguments that every compat.optax schedule
shares; see :mod:`globalstep.compat.optax` for what a call returns.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from globalstep._errors import ConfigError, OptaxScheduleWarning
from globalstep.compat._optax_formulas import (
    constant_jax,
    constant_np,
    cosine_jax,
    cosine_np,
    exponential_jax,
    exponential_np,
    f32,
    interpolate_jax,
    interpolate_np,
    polynomial_jax,
    polynomial_np,
)
from globalstep.compat._optax_schedule import OptaxSchedule, register
from globalstep.schedules import Steps, Values, check_flag, check_number

__all__ = [
    "check_numbers",
    "checked_scales",
    "constant_schedule",
    "cosine_decay_schedule",
    "degenerate",
    "exponential_decay",
    "linear_schedule",
    "piecewise_constant_schedule",
    "piecewise_interpolate_schedule",
    "polynomial_schedule",
    "steps_arg",
    "warmup_constant_schedule",
    "warn",
]


def warn(message: str) -> None:
    """Emits :class:`OptaxScheduleWarning`, pointed at the line that called the public
    schedule function (two frames above the caller of this one)."""
    warnings.warn(message, OptaxScheduleWarning, stacklevel=4)


def steps_arg(parameter: str, value: Any, minimum: int | None = None) -> None:
    """Raises ConfigError unless ``value`` is an int (Python or NumPy, not a bool), and
    ``>= minimum`` where one is given."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(parameter, "must be an int", value)
    if minimum is not None and value < minimum:
        raise ConfigError(parameter, f"must be >= {minimum}", value)


def check_numbers(**values: Any) -> None:
    """Raises ConfigError for the first of ``values`` (by name) that is no finite number."""
    for name, value in values.items():
        check_number(name, value)


def degenerate(fn_name: str, arguments: dict[str, Any], init_value: Any) -> OptaxSchedule:
    """The constant schedule optax returns for degenerate arguments: ``init_value`` itself
    at every count."""
    return OptaxSchedule(
        fn_name,
        arguments,
        constant_np(init_value),
        "float64",
        constant_jax(init_value),
        constant=True,
    )


def checked_scales(given: Mapping[Any, Any] | None) -> list[tuple[int, float]]:
    """``boundaries_and_scales`` checked (int boundaries, scales >= 0), as sorted pairs.

    Raises:
        ConfigError: not a dict, a boundary not an int, or a scale negative or no number.
    """
    if given is None:
        return []
    if not isinstance(given, Mapping):
        raise ConfigError("boundaries_and_scales", "must be a dict {count: scale}", given)
    for boundary, scale in given.items():
        steps_arg("boundaries_and_scales", boundary)
        check_number("boundaries_and_scales", scale)
        if scale < 0:
            raise ConfigError(
                "boundaries_and_scales", "must hold scales >= 0 (non-negative factors)", scale
            )
    return sorted(given.items())


def constant_schedule(value: float) -> OptaxSchedule:
    """Returns ``value`` at every count (the value object itself, as optax does).

    .. math:: v(c) = V

    Args:
        value: the value to return.

    Example:
        >>> constant_schedule(0.1)(10**6)
        0.1
    """
    check_numbers(value=value)
    return OptaxSchedule(
        "constant_schedule",
        {"value": value},
        constant_np(value),
        "float64",
        constant_jax(value),
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
    check_numbers(init_value=init_value, end_value=end_value, power=power)
    steps_arg("transition_steps", transition_steps)
    steps_arg("transition_begin", transition_begin)
    arguments = {
        "init_value": init_value,
        "end_value": end_value,
        "power": power,
        "transition_steps": transition_steps,
        "transition_begin": transition_begin,
    }
    if transition_steps <= 0:
        warn(
            "A polynomial schedule was set with a non-positive `transition_steps` value; "
            f"got transition_steps={transition_steps}; this results in a constant schedule "
            "with value `init_value`, as in optax. Pass transition_steps > 0 for a transition."
        )
        return degenerate("polynomial_schedule", arguments, init_value)
    begin = transition_begin
    if begin < 0:
        warn(
            "A polynomial schedule was set with a negative `transition_begin` value; "
            f"got transition_begin={begin}; it falls back to 0, as in optax."
        )
        begin = 0
    return OptaxSchedule(
        "polynomial_schedule",
        arguments,
        polynomial_np(init_value, end_value, power, transition_steps, begin),
        "float32",
        polynomial_jax(init_value, end_value, power, transition_steps, begin),
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
    check_numbers(init_value=init_value, decay_rate=decay_rate)
    check_number("end_value", end_value, optional=True)
    steps_arg("transition_steps", transition_steps)
    steps_arg("transition_begin", transition_begin)
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
        warn(
            f"An exponential schedule was set with a {rule} `{parameter}` value; got "
            f"{parameter}={arguments[parameter]}; this results in a constant schedule with "
            "value `init_value`, as in optax. Pass transition_steps > 0 and a non-zero "
            "decay_rate for a decay."
        )
        return degenerate("exponential_decay", arguments, init_value)
    begin = transition_begin
    if begin < 0:
        warn(
            "An exponential schedule was set with a negative `transition_begin` value; "
            f"got transition_begin={begin}; it falls back to 0, as in optax."
        )
        begin = 0
    return OptaxSchedule(
        "exponential_decay",
        arguments,
        exponential_np(init_value, transition_steps, decay_rate, begin, staircase, end_value),
        "float32",
        exponential_jax(init_value, transition_steps, decay_rate, begin, staircase, end_value),
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
    check_numbers(init_value=init_value)
    items = checked_scales(boundaries_and_scales)

    def fn(count: Steps) -> Values:
        value: Any = f32(init_value)
        for threshold, scale in items:
            indicator = (count < threshold).astype(np.float32)
            value = value * indicator + (np.float32(1) - indicator) * f32(scale) * value
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
        return degenerate("piecewise_constant_schedule", arguments, init_value)
    return OptaxSchedule("piecewise_constant_schedule", arguments, fn, "float32", make)


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
    check_numbers(init_value=init_value)
    items = checked_scales(boundaries_and_scales)
    arguments = {
        "interpolate_type": interpolate_type,
        "init_value": init_value,
        "boundaries_and_scales": None if boundaries_and_scales is None else dict(items),
    }
    return OptaxSchedule(
        "piecewise_interpolate_schedule",
        arguments,
        interpolate_np(interpolate_type, init_value, items),
        "float32",
        interpolate_jax(interpolate_type, init_value, items),
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
    check_numbers(init_value=init_value, alpha=alpha, exponent=exponent)
    steps_arg("decay_steps", decay_steps, 1)
    return OptaxSchedule(
        "cosine_decay_schedule",
        {
            "init_value": init_value,
            "decay_steps": decay_steps,
            "alpha": alpha,
            "exponent": exponent,
        },
        cosine_np(init_value, decay_steps, alpha, exponent),
        "float32",
        cosine_jax(init_value, decay_steps, alpha, exponent),
    )


register(
    constant_schedule,
    cosine_decay_schedule,
    exponential_decay,
    linear_schedule,
    piecewise_constant_schedule,
    piecewise_interpolate_schedule,
    polynomial_schedule,
    warmup_constant_schedule,
)
