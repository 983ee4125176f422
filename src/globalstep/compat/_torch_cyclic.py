"""The compat torch schedulers that set the rate outright: warm restarts, 1cycle, cyclic, SWA.

``CosineAnnealingWarmRestarts``, ``OneCycleLR`` and ``CyclicLR`` are closed forms in
PyTorch too (computed from the step, not from the previous rate), so they equal torch bit
for bit at every step, and are evaluated on arrays; ``SWALR`` is recursive (it inverts the
previous rate) and is replayed like the others through its anneal, then holds one rate.
See :mod:`globalstep.compat.torch`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from globalstep._clock import Clock, Progress
from globalstep._errors import ConfigError, StepError
from globalstep.compat._torch_base import (
    ConfigZeroDivisionError,
    TorchSchedule,
    call_reached,
    check_choice,
    check_flag,
    check_rate,
    check_real,
    check_scalar,
    libm64,
    plain,
)
from globalstep.schedules import Values

__all__ = ["SWALR", "CosineAnnealingWarmRestarts", "CyclicLR", "OneCycleLR"]


def _cos_anneal(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


def _linear_anneal(start: float, end: float, pct: float) -> float:
    return (end - start) * pct + start


def _check_int(parameter: str, value: Any, minimum: int, torch_text: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ConfigError(parameter, f"must be an int >= {minimum} ({torch_text})", value)


@dataclasses.dataclass(frozen=True)
class CosineAnnealingWarmRestarts(TorchSchedule):
    r"""SGDR: cosine cycles of ``T_0``, ``T_0 * T_mult``, ... steps, each restarting at
    ``base_lr``.

    .. math::

        \eta = \eta_{min} + (\eta_{base} - \eta_{min}) \frac{1 + \cos(\pi T_{cur} / T_i)}{2}

    An int ``step`` counts ``scheduler.step()`` calls; a float is the ``epoch`` of
    ``scheduler.step(epoch)``, PyTorch's documented per-batch use
    (``scheduler.step(epoch + i / iters)``), computed with torch's formula for it (which,
    through ``math.log``, can place a step that lands exactly on a restart in the cycle
    before, as torch does).

    Example:
        >>> s = CosineAnnealingWarmRestarts(base_lr=1.0, T_0=2, T_mult=2)
        >>> s.values([0, 1, 2, 4, 6]).round(12).tolist()
        [1.0, 0.5, 1.0, 0.5, 1.0]
        >>> s(0.5)  # scheduler.step(0.5): half-way through the first cycle's first step
        0.8535533905932737
    """

    base_lr: float
    T_0: int | str
    T_mult: int = 1
    eta_min: float = 0.0

    _lengths: ClassVar[dict[str, int]] = {"T_0": 1}
    _t0: ClassVar[int]  # per instance: T_0 in steps
    _recursive: ClassVar[bool] = False
    absolute_rate: ClassVar[bool] = True

    def _check(self) -> None:
        check_rate("base_lr", self.base_lr)
        _check_int("T_mult", self.T_mult, 1, "torch raises ValueError too")
        check_real("eta_min", self.eta_min)

    def _prepare(self) -> None:
        object.__setattr__(self, "_t0", self._n["T_0"])

    def _cosine(self, t_cur: float, t_i: float) -> float:
        eta = self.eta_min
        return eta + (self.base_lr - eta) * (1 + math.cos(math.pi * t_cur / t_i)) / 2

    def closed_form(self, k: int) -> float:
        start, length, mult = 0, self._t0, self.T_mult
        if mult == 1:
            return self._cosine(k % length, length)
        while k >= start + length:  # cycle lengths grow geometrically: O(log k) rounds
            start += length
            length *= mult
        return self._cosine(k - start, length)

    def _closed_array(self, ks: Any) -> Any:
        eta, base = self.eta_min, self.base_lr
        if not plain(eta, base):
            return None
        length, mult = self._t0, self.T_mult
        if mult == 1:
            t_cur, t_i = ks % length, np.full(ks.shape, length, dtype=np.int64)
        else:
            starts, lengths = [0], [length]  # the cycles up to the last step asked for
            top = int(ks.max())
            while top >= starts[-1] + lengths[-1]:
                starts.append(starts[-1] + lengths[-1])
                lengths.append(lengths[-1] * mult)
            if starts[-1] + lengths[-1] >= 2**53:
                return None
            cycle = np.searchsorted(np.array(starts, dtype=np.int64), ks, side="right") - 1
            t_cur = ks - np.array(starts, dtype=np.int64)[cycle]
            t_i = np.array(lengths, dtype=np.int64)[cycle]
        with np.errstate(all="ignore"):
            angle = (math.pi * t_cur.astype(np.float64)) / t_i.astype(np.float64)
            return eta + (base - eta) * (1 + libm64(np.cos, angle)) / 2

    def _epoch(self, epoch: float) -> float:
        """The rate after ``scheduler.step(epoch)``, torch's formula for a given epoch."""
        if not math.isfinite(epoch) or epoch < 0:
            raise StepError(
                f"`step` must be a finite epoch >= 0 (torch raises ValueError too); "
                f"got step={epoch!r}.",
                epoch,
            )
        self._ready()
        t0, mult = self._t0, self.T_mult
        t_i: float = t0
        if epoch >= t0:
            if mult == 1:
                t_cur = epoch % t0
            else:
                n = int(math.log((epoch / t0 * (mult - 1) + 1), mult))
                t_cur = epoch - t0 * (mult**n - 1) / (mult - 1)
                t_i = t0 * mult**n
        else:
            t_cur = epoch
        return self._cosine(t_cur, t_i)

    def __call__(self, step: int | float | Clock | Progress) -> float:
        """Returns the rate after ``step`` calls of ``scheduler.step()`` (an int), or after
        ``scheduler.step(step)`` (a float epoch, fractions allowed).

        Raises:
            StepError: ``step`` is negative, not finite, or not a number.
        """
        if isinstance(step, float | np.floating):
            return self._epoch(float(step))
        return super().__call__(step)

    def values(self, steps: Any) -> Values:
        """Returns the rate at every step of ``steps``: ints count ``step()`` calls, floats
        are epochs given to ``step(epoch)``."""
        array = np.asarray(steps)
        if array.dtype.kind == "f":
            flat = [self._epoch(e) for e in array.reshape(-1).tolist()]
            return np.array(flat, dtype=np.float64).reshape(array.shape)
        return super().values(steps)


@dataclasses.dataclass(frozen=True)
class OneCycleLR(TorchSchedule):
    """The 1cycle policy: up from ``max_lr / div_factor`` to ``max_lr``, then down to
    ``max_lr / div_factor / final_div_factor`` (and momentum the other way).

    Valid steps are 0 to ``total_steps`` inclusive, as in PyTorch, whose scheduler raises on
    the step after that; so does this schedule. :meth:`momentum` cycles between
    ``max_momentum`` and ``base_momentum`` when ``cycle_momentum`` (SGD's momentum, or
    Adam's beta1: the value is the same).

    Example:
        >>> s = OneCycleLR(max_lr=1.0, total_steps=10, anneal_strategy="linear")
        >>> s.values([0, 2]).round(6).tolist()
        [0.04, 1.0]
        >>> round(s.momentum(2), 6)
        0.85
        >>> s(11)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        globalstep._errors.StepError: `step` must be <= total_steps=10 ...; got step=11.
    """

    max_lr: float
    total_steps: int | str | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    pct_start: float = 0.3
    anneal_strategy: str = "cos"
    cycle_momentum: bool = True
    base_momentum: float = 0.85
    max_momentum: float = 0.95
    div_factor: float = 25.0
    final_div_factor: float = 1e4
    three_phase: bool = False

    _lengths: ClassVar[dict[str, int]] = {"total_steps": 1}
    _recursive: ClassVar[bool] = False
    absolute_rate: ClassVar[bool] = True
    # Per instance: (end step, start rate, end rate, start momentum, end momentum) per phase.
    _phases: ClassVar[list[tuple[float, float, float, float, float]]]
    _total: ClassVar[int]
    _anneal: ClassVar[Any]  # _cos_anneal or _linear_anneal
    _zero_hint: ClassVar[str] = (
        "A phase of no steps: choose pct_start so that pct_start * total_steps is not 1."
    )

    def _check(self) -> None:
        check_rate("max_lr", self.max_lr)
        if self.total_steps is None:
            if self.epochs is None or self.steps_per_epoch is None:
                raise ConfigError(
                    "total_steps",
                    "must be given, or else both epochs and steps_per_epoch (torch raises "
                    "ValueError too)",
                    self.total_steps,
                )
            _check_int("epochs", self.epochs, 1, "torch raises ValueError too")
            _check_int("steps_per_epoch", self.steps_per_epoch, 1, "torch raises ValueError too")
        if not isinstance(self.pct_start, float) or not 0 <= self.pct_start <= 1:
            raise ConfigError(
                "pct_start", "must be a float between 0 and 1 (torch raises too)", self.pct_start
            )
        check_choice("anneal_strategy", self.anneal_strategy, ("cos", "linear"))
        check_flag("cycle_momentum", self.cycle_momentum)
        check_scalar("base_momentum", self.base_momentum)
        check_scalar("max_momentum", self.max_momentum)
        for name in ("div_factor", "final_div_factor"):
            value = getattr(self, name)
            check_real(name, value)
            if value == 0:
                raise ConfigZeroDivisionError(name, "must be > 0 (torch divides by it)", value)
            if value < 0:
                raise ConfigError(
                    name, "must be > 0 (torch turns a negative one into negative rates)", value
                )
        check_flag("three_phase", self.three_phase)

    @property
    def steps_total(self) -> int:
        """The cycle's length: ``total_steps``, or ``epochs * steps_per_epoch``."""
        total = self._n["total_steps"]
        if total is None:
            assert self.epochs is not None  # _check made sure of both
            assert self.steps_per_epoch is not None
            return int(self.epochs * self.steps_per_epoch)
        return int(total)

    @property
    def initial_lr(self) -> float:
        return self.max_lr / self.div_factor

    @property
    def has_momentum(self) -> bool:
        """True when ``cycle_momentum``."""
        return self.cycle_momentum

    def _prepare(self) -> None:
        total = self.steps_total
        initial = self.max_lr / self.div_factor
        low = initial / self.final_div_factor
        top, bottom = self.max_momentum, self.base_momentum
        pct = self.pct_start
        phases: list[tuple[float, float, float, float, float]]
        if self.three_phase:
            phases = [
                (float(pct * total) - 1, initial, self.max_lr, top, bottom),
                (float(2 * pct * total) - 2, self.max_lr, initial, bottom, top),
                (total - 1, initial, low, top, top),
            ]
        else:
            phases = [
                (float(pct * total) - 1, initial, self.max_lr, top, bottom),
                (total - 1, self.max_lr, low, bottom, top),
            ]
        object.__setattr__(self, "_phases", phases)
        object.__setattr__(self, "_total", total)
        anneal = _cos_anneal if self.anneal_strategy == "cos" else _linear_anneal
        object.__setattr__(self, "_anneal", anneal)

    def _locate(self, k: int) -> tuple[float, tuple[float, float, float, float, float]]:
        if k > self._total:
            raise StepError(
                f"`step` must be <= total_steps={self._total} (OneCycleLR's last valid step; "
                f"torch raises ValueError after it too); got step={k}.",
                k,
            )
        start = 0.0
        phases = self._phases
        last = len(phases) - 1
        for i, phase in enumerate(phases):
            if k <= phase[0] or i == last:
                return (k - start) / (phase[0] - start), phase
            start = phase[0]
        raise AssertionError("unreachable")  # pragma: no cover

    def closed_form(self, k: int) -> float:
        pct, phase = self._locate(k)
        result: float = self._anneal(phase[1], phase[2], pct)
        return result

    def _closed_array(self, ks: Any) -> Any:
        phases = self._phases
        if int(ks.max()) > self._total or not plain(*(v for p in phases for v in p)):
            return None
        out = np.empty(ks.shape, dtype=np.float64)
        remaining = np.ones(ks.shape, dtype=bool)
        start = 0.0
        last = len(phases) - 1
        with np.errstate(all="ignore"):
            for i, (end, rate_start, rate_end, _, _) in enumerate(phases):
                here = remaining & (ks <= end) if i < last else remaining
                if here.any():
                    span = end - start
                    if span == 0:  # torch divides by zero there
                        return None
                    pct = (ks[here].astype(np.float64) - start) / span
                    if self._anneal is _cos_anneal:
                        half = (rate_start - rate_end) / 2.0
                        out[here] = rate_end + half * (libm64(np.cos, math.pi * pct) + 1)
                    else:
                        out[here] = (rate_end - rate_start) * pct + rate_start
                remaining &= ~here
                start = end
        return out

    def momentum_at(self, k: int) -> float | None:
        if not self.cycle_momentum:
            return None
        try:
            pct, phase = self._locate(k)
        except ZeroDivisionError:
            raise self._zero(k) from None
        result: float = self._anneal(phase[3], phase[4], pct)
        return result


@dataclasses.dataclass(frozen=True)
class CyclicLR(TorchSchedule):
    """Cyclical rates between ``base_lr`` and ``max_lr`` (triangular, triangular2,
    exp_range, or a custom ``scale_fn``), momentum cycled the other way.

    ``scale_fn`` is a Python callable: ``to_config()`` raises. Torch keeps no state beyond
    the step here, so restoring the clock restores the rate and the momentum.

    Example:
        >>> s = CyclicLR(base_lr=0.1, max_lr=1.0, step_size_up=2, mode="triangular2")
        >>> s.values([0, 1, 2, 3, 4, 6]).round(6).tolist()
        [0.1, 0.55, 1.0, 0.55, 0.1, 0.55]
        >>> round(s.momentum(2), 6)
        0.8
    """

    __call__ = call_reached  # computes no step ahead where it calls user code

    base_lr: float
    max_lr: float
    step_size_up: int | float | str = 2000
    step_size_down: int | float | str | None = None
    mode: str = "triangular"
    gamma: float = 1.0
    scale_fn: Callable[[float], float] | None = None
    scale_mode: str = "cycle"
    cycle_momentum: bool = True
    base_momentum: float = 0.8
    max_momentum: float = 0.9

    _lengths: ClassVar[dict[str, int]] = {"step_size_up": 1, "step_size_down": 0}
    _floats: ClassVar[frozenset[str]] = frozenset({"step_size_up", "step_size_down"})
    _recursive: ClassVar[bool] = False
    absolute_rate: ClassVar[bool] = True
    base_is_rate: ClassVar[bool] = False
    _size: ClassVar[float]  # per instance: the cycle's length, its rising share, its scale
    _ratio: ClassVar[float]
    _scale: ClassVar[Any]  # a function of the cycle or of the step
    _by_cycle: ClassVar[bool]

    def _check(self) -> None:
        check_rate("base_lr", self.base_lr)
        check_rate("max_lr", self.max_lr)
        if self.scale_fn is None:
            check_choice("mode", self.mode, ("triangular", "triangular2", "exp_range"))
        else:
            if not callable(self.scale_fn):
                raise ConfigError("scale_fn", "must be callable or None", self.scale_fn)
            check_choice("scale_mode", self.scale_mode, ("cycle", "iterations"))
        check_real("gamma", self.gamma)
        check_flag("cycle_momentum", self.cycle_momentum)
        check_scalar("base_momentum", self.base_momentum)
        check_scalar("max_momentum", self.max_momentum)

    @property
    def has_momentum(self) -> bool:
        """True when ``cycle_momentum``."""
        return self.cycle_momentum

    def _prepare(self) -> None:
        up = float(self._n["step_size_up"])
        down_steps = self._n["step_size_down"]
        down = float(down_steps) if down_steps is not None else up
        total = up + down
        object.__setattr__(self, "_size", total)
        object.__setattr__(self, "_ratio", up / total)
        scale: Callable[[Any], float]
        if self.scale_fn is not None:
            scale, by_cycle = self.scale_fn, self.scale_mode == "cycle"
        elif self.mode == "triangular":
            scale, by_cycle = (lambda x: 1.0), True
        elif self.mode == "triangular2":
            scale, by_cycle = (lambda x: 1 / (2.0 ** (x - 1))), True
        else:
            gamma = self.gamma
            scale, by_cycle = (lambda x: gamma**x), False
        object.__setattr__(self, "_scale", scale)
        object.__setattr__(self, "_by_cycle", by_cycle)

    def _factors(self, k: int) -> tuple[float, float]:
        """(the position in the cycle's ramp, the scale) at step ``k``, as torch's get_lr."""
        cycle = math.floor(1 + k / self._size)
        x = 1.0 + k / self._size - cycle
        ratio = self._ratio
        factor = x / ratio if x <= ratio else (x - 1) / (ratio - 1)
        return factor, self._scale(cycle if self._by_cycle else k)

    def closed_form(self, k: int) -> float:
        factor, scale = self._factors(k)
        return self.base_lr + (self.max_lr - self.base_lr) * factor * scale

    def _closed_array(self, ks: Any) -> Any:
        """:meth:`closed_form` on an array: the ramp with ``_factors``' float64 operations, the
        scale by the scalar function once per distinct cycle (or, by iteration,
        ``gamma ** k`` through the C library's pow, a custom ``scale_fn`` per step)."""
        base, top, size, ratio = self.base_lr, self.max_lr, self._size, self._ratio
        if not plain(base, top, size, ratio, self.gamma) or int(ks.max()) >= 2**53:
            return None
        with np.errstate(all="ignore"):
            q = ks.astype(np.float64) / size
            cycle = np.floor(1 + q)
            x = (1.0 + q) - cycle
            factor = np.where(x <= ratio, x / ratio, (x - 1) / (ratio - 1))
            if self._by_cycle:
                cycles = cycle.astype(np.int64)
                low, high = int(cycles.min()), int(cycles.max())
                if high - low > 2 * ks.size:  # sparse steps: the distinct cycles only
                    distinct, where = np.unique(cycles, return_inverse=True)
                    numbers, where = distinct.tolist(), where.reshape(ks.shape)
                else:
                    numbers, where = list(range(low, high + 1)), cycles - low
                try:
                    scales = [self._scale(c) for c in numbers]
                except Exception:  # an overflow, or at a cycle not asked for
                    return None  # each step on its own: raising where torch raises
                if not plain(*scales):
                    return None
                scale = np.asarray(scales, dtype=np.float64)[where]
            elif self.scale_fn is None:  # exp_range: gamma ** k, Python's float pow
                scale = libm64(np.power, np.float64(self.gamma), ks.astype(np.float64))
                if not np.isfinite(scale).all():
                    return None  # Python raises OverflowError there: each step on its own
            else:
                scales = [self._scale(k) for k in ks.tolist()]
                if not plain(*scales):
                    return None
                scale = np.asarray(scales, dtype=np.float64)
            return base + (top - base) * factor * scale

    def momentum_at(self, k: int) -> float | None:
        if not self.cycle_momentum:
            return None
        factor, scale = self._factors(k)
        return self.max_momentum - (self.max_momentum - self.base_momentum) * factor * scale


@dataclasses.dataclass(frozen=True)
class SWALR(TorchSchedule):
    """``torch.optim.swa_utils.SWALR``: anneals from the current rate to ``swa_lr`` over
    ``anneal_epochs`` steps (cosine or linear), then holds ``swa_lr``.

    ``base_lr`` is the rate when it starts (torch reads it from the optimizer); inside a
    ``SequentialLR`` it starts from the rate the previous scheduler left, as in torch.

    Example:
        >>> s = SWALR(base_lr=1.0, swa_lr=0.5, anneal_epochs=2, anneal_strategy="linear")
        >>> s.values([0, 1, 2, 3]).tolist()
        [1.0, 0.75, 0.5, 0.5]
    """

    base_lr: float
    swa_lr: float
    anneal_epochs: int | str = 10
    anneal_strategy: str = "cos"

    _lengths: ClassVar[dict[str, int]] = {"anneal_epochs": 0}
    _epochs: ClassVar[int]  # per instance: anneal_epochs in steps

    def _check(self) -> None:
        check_rate("base_lr", self.base_lr)
        check_rate("swa_lr", self.swa_lr)
        check_choice("anneal_strategy", self.anneal_strategy, ("cos", "linear"))

    def _prepare(self) -> None:
        object.__setattr__(self, "_epochs", self._n["anneal_epochs"])

    def _alpha(self, t: float) -> float:
        if self.anneal_strategy == "cos":
            return (1 - math.cos(math.pi * t)) / 2
        return t

    def next_rate(self, lr: float, k: int) -> float:
        epochs, swa = self._epochs, self.swa_lr
        step = max(1, k) if epochs == 0 else k
        prev_alpha = self._alpha(max(0, min(1, (step - 1) / max(1, epochs))))
        prev = swa if prev_alpha == 1 else (lr - prev_alpha * swa) / (1 - prev_alpha)
        alpha = self._alpha(max(0, min(1, step / max(1, epochs))))
        return swa * alpha + prev * (1 - alpha)

    def first_rate(self, lr: float) -> float:
        return self.next_rate(lr, 0)

    def restart_rate(self, lr: float) -> float:
        return self.next_rate(lr, 0)

    def closed_form(self, k: int) -> float:
        alpha = self._alpha(max(0, min(1, k / max(1, self._epochs))))
        return self.swa_lr * alpha + self.base_lr * (1 - alpha)

    def _block(self, lr: float, start: int, stop: int) -> Any:
        """The recursion's rates from ``start`` to ``stop - 1``: replayed through the anneal,
        then constant. From step ``max(1, anneal_epochs) + 1`` on, ``next_rate`` reads the
        previous rate as ``swa_lr`` (its ``prev_alpha`` is ``_alpha(1)``, which is 1) and
        ignores ``lr``, so every later step sets one rate, computed once by ``next_rate``."""
        if self._alpha(1) != 1:  # a C library whose cos(pi) is not -1: replay every step
            return None
        steady = max(1, self._epochs) + 1
        out = np.empty(stop - start, dtype=np.float64)
        k = start
        while k < min(stop, steady):
            lr = self.next_rate(lr, k)
            out[k - start] = lr
            k += 1
        if k < stop:
            out[k - start :] = self.next_rate(lr, steady)
        return out
