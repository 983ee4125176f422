"""optax's schedules built from others: the warm-ups before a decay, ``join_schedules``,
SGDR, and the one-cycle schedules (a piecewise interpolation along half cosines or lines).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from globalstep._errors import ConfigError
from globalstep.compat._optax_formulas import (
    Fn,
    JaxMaker,
    constant_jax,
    constant_np,
    cosine_jax,
    cosine_np,
    interpolate_jax,
    interpolate_np,
    join_jax,
    join_np,
    polynomial_jax,
    polynomial_np,
)
from globalstep.compat._optax_schedule import OptaxSchedule, register
from globalstep.compat._optax_simple import (
    check_numbers,
    checked_scales,
    exponential_decay,
    steps_arg,
    warn,
)

__all__ = [
    "cosine_onecycle_schedule",
    "join_schedules",
    "linear_onecycle_schedule",
    "sgdr_schedule",
    "warmup_cosine_decay_schedule",
    "warmup_exponential_decay_schedule",
]


def _warmup(init: float, peak: float, warmup_steps: int) -> tuple[Fn, JaxMaker]:
    """optax's linear warm-up part (a constant ``init`` for ``warmup_steps <= 0``)."""
    if warmup_steps <= 0:
        return constant_np(init), constant_jax(init)
    return polynomial_np(init, peak, 1, warmup_steps, 0), polynomial_jax(
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
    check_numbers(
        init_value=init_value, peak_value=peak_value, end_value=end_value, exponent=exponent
    )
    steps_arg("warmup_steps", warmup_steps)
    steps_arg("decay_steps", decay_steps, warmup_steps + 1)
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
    fn = join_np([warm, cosine_np(peak_value, length, alpha, exponent)], [warmup_steps])
    make = join_jax([warm_jax, cosine_jax(peak_value, length, alpha, exponent)], [warmup_steps])
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
    check_numbers(init_value=init_value)
    steps_arg("warmup_steps", warmup_steps)
    warm, warm_jax = _warmup(init_value, peak_value, warmup_steps)
    arguments = {"init_value": init_value, "peak_value": peak_value, "warmup_steps": warmup_steps}
    arguments.update({k: v for k, v in decay.arguments.items() if k != "init_value"})
    fn = join_np([warm, decay.numpy_fn], [warmup_steps])
    make = join_jax([warm_jax, decay.jax_maker], [warmup_steps])
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
        >>> from globalstep.compat.optax import constant_schedule, linear_schedule
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
        steps_arg("boundaries", b)
    if len(boundaries) != len(schedules) - 1:
        warn(
            f"`boundaries` should hold one fewer element than schedules ({len(schedules)}); "
            f"got boundaries={list(boundaries)}; as in optax, the surplus is ignored."
        )
    if any(b <= a for a, b in itertools.pairwise(boundaries)):
        warn(
            f"`boundaries` should be strictly increasing; got boundaries={list(boundaries)}; "
            "as in optax, each later schedule still takes over where its boundary is reached."
        )
    fn = join_np([s.numpy_fn for s in schedules], list(boundaries))
    make = join_jax([s.jax_maker for s in schedules], list(boundaries))
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
        "sgdr_schedule", {"cosine_kwargs": kwargs}, joined.numpy_fn, "float32", joined.jax_maker
    )


def _onecycle(
    kind: str,
    transition_steps: int,
    peak_value: float,
    pct_start: float,
    div_factor: float,
    final_div_factor: float,
    pct_final: float | None = None,
) -> OptaxSchedule:
    """optax's one cycle of ``kind`` (``"cosine"`` or ``"linear"``): a piecewise
    interpolation from ``peak_value / div_factor``, up by ``div_factor`` at ``pct_start``
    of the cycle, then down; the cosine cycle goes down to its floor at the end, the linear
    one (``pct_final`` given) back to its start at ``pct_final``, then to its floor."""
    arguments: dict[str, Any] = {
        "transition_steps": transition_steps,
        "peak_value": peak_value,
        "pct_start": pct_start,
    }
    if pct_final is not None:
        arguments["pct_final"] = pct_final
    arguments.update(div_factor=div_factor, final_div_factor=final_div_factor)
    steps_arg("transition_steps", transition_steps, 1)
    check_numbers(**{k: v for k, v in arguments.items() if k != "transition_steps"})
    for name in ("div_factor", "final_div_factor"):
        if arguments[name] == 0:
            raise ConfigError(name, "must not be 0", arguments[name])
    # The boundaries and scales as optax writes them (an equal boundary: the later wins).
    scales = {int(pct_start * transition_steps): div_factor}
    if pct_final is None:
        scales[int(transition_steps)] = 1.0 / (div_factor * final_div_factor)
    else:
        scales[int(pct_final * transition_steps)] = 1.0 / div_factor
        scales[transition_steps] = 1.0 / final_div_factor
    items = checked_scales(scales)
    init = peak_value / div_factor
    return OptaxSchedule(
        f"{kind}_onecycle_schedule",
        arguments,
        interpolate_np(kind, init, items),
        "float32",
        interpolate_jax(kind, init, items),
    )


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

    Args:
        transition_steps: the cycle's length :math:`T` in counts, > 0.
        peak_value: the value at ``int(pct_start * T)``, the top of the cycle.
        pct_start: the rising share of the cycle.
        div_factor: the start is ``peak_value / div_factor`` (not 0).
        final_div_factor: the floor reached at :math:`T` is the start over this (not 0).

    Raises:
        ConfigError: ``transition_steps <= 0`` (a ValueError, as optax raises).

    Example:
        >>> cosine_onecycle_schedule(100, 1.0)(30)
        1.0
    """
    return _onecycle(
        "cosine", transition_steps, peak_value, pct_start, div_factor, final_div_factor
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

    Args:
        transition_steps: the cycle's length :math:`T` in counts, > 0.
        peak_value: the top, at ``int(pct_start * T)``.
        pct_start: where the line up ends and the line down starts, as a share of T.
        pct_final: where the line down is back at the start value, as a share of T; a
            third line from there to T falls to the floor.
        div_factor: the start value is ``peak_value / div_factor`` (not 0).
        final_div_factor: the floor, reached at T, is the start value over this (not 0).

    Raises:
        ConfigError: ``transition_steps <= 0`` (a ValueError, as optax raises).

    Example:
        >>> lr = linear_onecycle_schedule(100, 1.0)
        >>> lr(30), lr(85) == lr(0)  # the top; back at the start
        (1.0, True)
    """
    return _onecycle(
        "linear", transition_steps, peak_value, pct_start, div_factor, final_div_factor, pct_final
    )


register(
    cosine_onecycle_schedule,
    join_schedules,
    linear_onecycle_schedule,
    sgdr_schedule,
    warmup_cosine_decay_schedule,
    warmup_exponential_decay_schedule,
)
