"""optax's formulas, each twice: in NumPy for Python-int counts, operation for operation
in optax's float32 order (the C library's float32 pow and cos, flush-to-zero, JAX's
``integer_pow``), and in ``jax.numpy`` as optax runs them (a maker given the module).

A ``*_np`` function returns a formula of int64 counts (:data:`Fn`); a ``*_jax`` one returns
a :data:`JaxMaker`. :class:`~globalstep.compat._optax_schedule.OptaxSchedule` holds one of
each; the schedules of :mod:`globalstep.compat.optax` choose them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from globalstep.compat._common import F32Ops
from globalstep.schedules import Steps, Values

__all__ = [
    "F32",
    "Fn",
    "JaxMaker",
    "constant_jax",
    "constant_np",
    "cosine_jax",
    "cosine_np",
    "counts_f32",
    "exponential_jax",
    "exponential_np",
    "f32",
    "interpolate_jax",
    "interpolate_np",
    "join_jax",
    "join_np",
    "polynomial_jax",
    "polynomial_np",
    "pow32",
]

F32 = F32Ops(np.float32)
Fn = Callable[[Steps], Values]
# Builds the jax.numpy form of a schedule, given the jax.numpy module.
JaxMaker = Callable[[Any], Callable[[Any], Any]]


def f32(value: Any) -> Any:
    """A Python hyper-parameter as the float32 XLA reads it: rounded, and a subnormal taken
    as a (signed) zero (XLA's CPU kernels run denormals-are-zero)."""
    return F32.flush(np.float32(value))[()]


def pow32(base: Values, exponent: Any) -> Values:
    """``base ** exponent`` in float32 as ``jnp.power`` computes it: for an int exponent
    (Python or NumPy), JAX's ``integer_pow``, square-and-multiply with a rounding at each
    product (``x ** 3`` is ``(x * x) * x``, which can differ from ``powf`` in the last bit);
    otherwise the C library's ``powf``.

    Example:
        >>> x = np.float32(1) - np.float32(1) / np.float32(21)
        >>> pow32(np.array([x]), 3).view(np.uint32), (x * x * x).view(np.uint32)
        (array([1063068791], dtype=uint32), np.uint32(1063068791))
    """
    if isinstance(exponent, bool) or not isinstance(exponent, int | np.integer):
        return F32.pow(base, f32(exponent))
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
        return np.float32(1) / F32.flush(acc)  # a subnormal divisor is read as zero


def counts_f32(count: Steps) -> Values:
    """Counts as float32, as JAX divides int32 counts."""
    return count.astype(np.float32)


def constant_np(value: Any) -> Fn:
    """A constant ``value`` (float64: the value object, unrounded)."""
    return lambda count: np.full(count.shape, value, dtype=np.float64)


def constant_jax(value: Any) -> JaxMaker:
    """A constant ``value``, the object itself, whatever the count."""
    return lambda jnp: lambda count: value


def polynomial_np(init: float, end: float, power: float, steps: int, begin: int) -> Fn:
    """optax's ``polynomial_schedule`` (after its degenerate cases)."""

    def fn(count: Steps) -> Values:
        frac = np.float32(1) - counts_f32(
            np.minimum(np.maximum(count - begin, 0), steps)
        ) / np.float32(steps)
        return f32(init - end) * pow32(frac, power) + f32(end)

    return fn


def polynomial_jax(init: Any, end: Any, power: Any, steps: int, begin: int) -> JaxMaker:
    """optax's ``polynomial_schedule`` (after its degenerate cases)."""

    def make(jnp: Any) -> Callable[[Any], Any]:
        def schedule(count: Any) -> Any:
            count = jnp.clip(count - begin, 0, steps)
            frac = 1 - count / steps
            return (init - end) * (frac**power) + end

        return schedule

    return make


def exponential_np(
    init: float, steps: int, rate: float, begin: int, staircase: bool, end: float | None
) -> Fn:
    """optax's ``exponential_decay`` (after its degenerate cases)."""

    def fn(count: Steps) -> Values:
        decreased = count - begin
        # A Python-int count is divided in Python (float64), then rounded into JAX.
        p = (decreased / steps).astype(np.float32)
        if staircase:
            p = np.floor(p)
        value = np.where(decreased <= 0, f32(init), f32(init) * F32.pow(f32(rate), p))
        if end is not None:
            value = (np.maximum if rate < 1.0 else np.minimum)(value, f32(end))
        return value

    return fn


def exponential_jax(
    init: Any, steps: int, rate: Any, begin: int, staircase: bool, end: Any
) -> JaxMaker:
    """optax's ``exponential_decay`` (after its degenerate cases)."""

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


def cosine_np(init: float, steps: float, alpha: float, exponent: float) -> Fn:
    """optax's ``cosine_decay_schedule``."""

    def fn(count: Steps) -> Values:
        t = np.minimum(counts_f32(count), np.float32(steps))
        cosine = np.float32(0.5) * (
            np.float32(1) + F32.cos(np.float32(math.pi) * t / np.float32(steps))
        )
        decayed = f32(1 - alpha) * pow32(cosine, exponent)
        return f32(init) * (decayed + f32(alpha))

    return fn


def cosine_jax(init: Any, steps: Any, alpha: Any, exponent: Any) -> JaxMaker:
    """optax's ``cosine_decay_schedule``."""

    def make(jnp: Any) -> Callable[[Any], Any]:
        length = float(steps) if isinstance(steps, int) else steps

        def schedule(count: Any) -> Any:
            count = float(count) if isinstance(count, int) else count
            count = jnp.minimum(count, length)
            cosine = 0.5 * (1 + jnp.cos(jnp.pi * count / length))
            return init * ((1 - alpha) * cosine**exponent + alpha)

        return schedule

    return make


def join_np(fns: Sequence[Fn], boundaries: Sequence[int]) -> Fn:
    """optax's ``join_schedules`` of the parts' formulas."""

    def fn(count: Steps) -> Values:
        out = np.broadcast_to(fns[0](count), count.shape)
        for boundary, part in zip(boundaries, fns[1:], strict=False):
            out = np.where(count < boundary, out, part(count - boundary))
        return out

    return fn


def join_jax(makers: Sequence[JaxMaker], boundaries: Sequence[int]) -> JaxMaker:
    """optax's ``join_schedules`` of the parts' forms."""

    def make(jnp: Any) -> Callable[[Any], Any]:
        parts = [m(jnp) for m in makers]

        def schedule(count: Any) -> Any:
            out = parts[0](count)
            for boundary, part in zip(boundaries, parts[1:], strict=False):
                out = jnp.where(count < boundary, out, part(count - boundary))
            return out

        return schedule

    return make


def interpolate_np(kind: str, init: float, items: Sequence[tuple[int, float]]) -> Fn:
    """optax's ``piecewise_interpolate_schedule`` of checked, sorted ``items``."""
    bounds = np.array([0, *(b for b, _ in items)], dtype=np.int64)
    values = np.cumprod(np.array([init, *(s for _, s in items)], dtype=np.float32))
    sizes = np.maximum(bounds[1:] - bounds[:-1], 1)

    def fn(count: Steps) -> Values:
        c = count[:, None]
        inside = (bounds[:-1] <= c) & (c < bounds[1:])
        pct = counts_f32(c - bounds[:-1]) / sizes.astype(np.float32)
        start, end = values[:-1], values[1:]
        if kind == "linear":
            interpolated = (end - start) * pct + start
        else:
            half = (start - end) / np.float32(2.0)
            interpolated = end + half * (F32.cos(np.float32(math.pi) * pct) + np.float32(1))
        picked = np.where(inside, interpolated, np.float32(0)).sum(axis=1, dtype=np.float32)
        return picked + (bounds[-1] <= count).astype(np.float32) * values[-1]

    return fn


def interpolate_jax(kind: str, init: Any, items: Sequence[tuple[Any, Any]]) -> JaxMaker:
    """optax's ``piecewise_interpolate_schedule`` of checked, sorted ``items``."""
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
