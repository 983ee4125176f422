"""``torch.optim.lr_scheduler``'s schedulers (and ``swa_utils.SWALR``) as functions of the step.

Each class is named and parameterised like its PyTorch namesake, with the optimizer replaced
by ``base_lr`` (the optimizer's ``lr``; ``OneCycleLR`` keeps ``max_lr`` and ``CyclicLR`` its
``base_lr``/``max_lr``, as they set the rate themselves). ``schedule(k)`` equals
``scheduler.get_last_lr()[0]`` after ``k`` calls of ``scheduler.step()``, the rate update
number ``k`` uses (the step, as defined in :mod:`globalstep._clock`), bit for bit: PyTorch's
recursive updates are replayed in its order of operations (see
:mod:`globalstep.compat._torch_base`), so its quirks are kept too (``CosineAnnealingLR`` past
``T_max`` follows the cosine back up; ``OneCycleLR`` accepts step ``total_steps`` and fails
after it). :meth:`~TorchSchedule.momentum` gives the momentum (or Adam's beta1) where torch
cycles it (``OneCycleLR``, ``CyclicLR``), None elsewhere.

Units: lengths (``step_size``, ``milestones``, ``T_max``, ``total_iters``, ``T_0``,
``total_steps``, ``step_size_up``, ``anneal_epochs``) take durations such as ``"30ep"``,
turned into steps by ``schedule.resolve(clock)``; ``interval="epoch"`` (or an int of steps)
makes the scheduler advance once per epoch, as a torch scheduler stepped once per epoch.
Both keep a per-epoch scheduler's numbers when it is read at ``clock.step``.

Composition: ``ChainedScheduler`` multiplies its parts' factors step by step, as several
schedulers stepped on one optimizer do; ``SequentialLR`` hands over at milestones.

Where compat differs from torch (every accepted input gives torch's numbers; these inputs
are refused instead, each with a test that shows why): a list of per-group values
(``max_lr=[...]``: one schedule drives one param group, build one per group); a negative
rate (torch's optimizers refuse it); a fractional length (``step_size=2.5``: torch's
stepping decays at multiples of 5, its closed form at multiples of 2.5); ``total_iters=0``
for ``LinearLR``/``PolynomialLR`` and negative or fractional milestones (torch's stepping and
its closed form disagree); a zero length torch divides by (refused at construction with
``ConfigZeroDivisionError``, a ``ZeroDivisionError``, where torch fails at the first step that
divides); a negative ``div_factor``, a non-finite factor, an unknown ``scale_mode``, unsorted
``SequentialLR`` milestones, a ``ChainedScheduler`` that ``SequentialLR`` would hand over to
at a milestone, or a ``SequentialLR`` inside one (torch misbehaves silently or raises
later; a ``ChainedScheduler`` first in a ``SequentialLR`` is taken, with torch's numbers).
Where torch divides by zero only at a later step (``ConstantLR`` with ``factor=0``,
``PolynomialLR`` with ``power < 0``), that step raises
``StepZeroDivisionError`` here too. Past 2**22 steps the rates are torch's closed form, which
differs from its stepping by that stepping's accumulated rounding (about ``k * 2**-53``).
Lambda-based schedulers (``LambdaLR``, ``MultiplicativeLR``, ``CyclicLR(scale_fn=...)``) hold
Python callables: they work everywhere, but ``to_config()`` raises, as a config cannot hold
code; the callable is called only for the steps the run reaches, as torch calls it
(:attr:`~TorchSchedule.calls_user_code`).

No PyTorch is needed: the numbers are Python floats (float64), as PyTorch computes them.

Example:
    >>> sched = StepLR(base_lr=0.1, step_size=30, gamma=0.1)
    >>> [sched(k) for k in (0, 29, 30, 60)]
    [0.1, 0.1, 0.010000000000000002, 0.0010000000000000002]
    >>> per_epoch = StepLR(base_lr=0.1, step_size="30ep", gamma=0.1)
    >>> per_epoch.resolve(steps_per_epoch=100)(3000)
    0.010000000000000002
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from globalstep._errors import ConfigError
from globalstep.compat._torch_base import (
    CACHE_STEPS,
    ConfigTypeError,
    ConfigZeroDivisionError,
    StepZeroDivisionError,
    TorchSchedule,
    call_reached,
    check_rate,
    check_real,
    libm64,
    plain,
)
from globalstep.compat._torch_compose import ChainedScheduler, SequentialLR
from globalstep.compat._torch_cyclic import (
    SWALR,
    CosineAnnealingWarmRestarts,
    CyclicLR,
    OneCycleLR,
)
from globalstep.compat._torch_plateau import ReduceLROnPlateau

__all__ = [
    "CACHE_STEPS",
    "SWALR",
    "ChainedScheduler",
    "ConfigTypeError",
    "ConfigZeroDivisionError",
    "ConstantLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "CyclicLR",
    "ExponentialLR",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "MultiplicativeLR",
    "OneCycleLR",
    "PolynomialLR",
    "ReduceLROnPlateau",
    "SequentialLR",
    "StepLR",
    "StepZeroDivisionError",
    "TorchSchedule",
]


def _power(base: float, exponent: int) -> float:
    """``base ** exponent`` for a closed form, inf (not OverflowError) past the float range."""
    try:
        return base**exponent
    except OverflowError:
        return math.copysign(math.inf, base) if exponent % 2 else math.inf


def _check_lambda(cls: type, value: Any) -> None:
    if isinstance(value, list | tuple):
        raise ConfigError(
            "lr_lambda",
            "must be one callable: a compat schedule drives one param group",
            value,
            "Build one schedule per param group.",
        )
    if not callable(value):
        raise ConfigTypeError(
            "lr_lambda",
            "must be a function of the step (torch raises TypeError too)",
            value,
            f"Pass a callable, e.g. {cls.__name__}(base_lr, lambda step: 0.95 ** step).",
        )


@dataclasses.dataclass(frozen=True)
class LambdaLR(TorchSchedule):
    """``base_lr * lr_lambda(step)``.

    ``lr_lambda`` is a Python callable: the schedule works like any other, but
    ``to_config()`` raises, as a config cannot hold code. ``schedule(step)`` calls it for
    that step only (see :attr:`~TorchSchedule.calls_user_code`), as torch calls it once per
    ``scheduler.step()``; ``values(steps)`` calls it for each step asked.

    Example:
        >>> LambdaLR(base_lr=0.5, lr_lambda=lambda k: 1 / (k + 1)).values([0, 1, 3]).tolist()
        [0.5, 0.25, 0.125]
    """

    __call__ = call_reached  # computes no step ahead where it calls user code

    base_lr: float
    lr_lambda: Callable[[int], float]

    _recursive: ClassVar[bool] = False
    absolute_rate: ClassVar[bool] = True

    def _check(self) -> None:
        check_rate("base_lr", self.base_lr)
        _check_lambda(type(self), self.lr_lambda)

    def closed_form(self, k: int) -> float:
        return self.base_lr * self.lr_lambda(k)

    def _closed_array(self, ks: Any) -> Any:
        """``lr_lambda`` called once per step (it is Python code: no other way), with none
        of the per-step lookups, and the products taken as one array."""
        lam = self.lr_lambda
        try:
            factors = [lam(k) for k in ks.tolist()]
        except ZeroDivisionError:
            return None  # each step on its own, raising at the right one
        kinds = set(map(type, factors))
        if (
            not plain(self.base_lr)
            or not kinds <= {float, int}
            or (int in kinds and not plain(*factors))
        ):
            return None  # a NumPy or torch number, a huge int: Python's arithmetic per step
        return self.base_lr * np.asarray(factors, dtype=np.float64)


@dataclasses.dataclass(frozen=True)
class MultiplicativeLR(TorchSchedule):
    """``base_lr * lr_lambda(1) * ... * lr_lambda(step)``, multiplied in that order.

    ``lr_lambda`` is a Python callable: ``to_config()`` raises. It is called once for each
    step reached, in order, when a step is first read (reading step ``k`` calls it for the
    steps up to ``k`` not yet multiplied in, never for a later one); the rates of the first
    2**22 steps are kept, past them the furthest one reached.

    Example:
        >>> MultiplicativeLR(base_lr=1.0, lr_lambda=lambda k: 0.5).values([0, 1, 3]).tolist()
        [1.0, 0.5, 0.125]
    """

    __call__ = call_reached  # computes no step ahead where it calls user code

    base_lr: float
    lr_lambda: Callable[[int], float]

    def _check(self) -> None:
        check_rate("base_lr", self.base_lr)
        _check_lambda(type(self), self.lr_lambda)

    def next_rate(self, lr: float, k: int) -> float:
        return lr * self.lr_lambda(k)

    def restart_rate(self, lr: float) -> float:
        return lr * self.lr_lambda(0)

    def closed_form(self, k: int) -> float:
        # Past the table: multiplied on from the furthest step reached (kept), so that the
        # next step calls lr_lambda once; a step behind it multiplies on from the table.
        far: tuple[int, float] | None = self.__dict__.get("_far")
        if far is not None and far[0] <= k:
            j, lr = far
        else:
            j, lr = CACHE_STEPS - 1, self._at(CACHE_STEPS - 1)
        for step in range(j + 1, k + 1):
            lr = lr * self.lr_lambda(step)
        self.__dict__["_far"] = (k, lr)
        return lr


@dataclasses.dataclass(frozen=True)
class StepLR(TorchSchedule):
    """``base_lr * gamma ** (step // step_size)``, multiplied by ``gamma`` at each multiple.

    Example:
        >>> StepLR(base_lr=1.0, step_size=2, gamma=0.5).values([0, 1, 2, 4]).tolist()
        [1.0, 1.0, 0.5, 0.25]
    """

    base_lr: float
    step_size: int | str
    gamma: float = 0.1

    _lengths: ClassVar[dict[str, int]] = {"step_size": 1}
    _size: ClassVar[int]  # per instance: step_size in steps

    def _check(self) -> None:
        check_rate("base_lr", self.base_lr)
        check_real("gamma", self.gamma)

    def _prepare(self) -> None:
        object.__setattr__(self, "_size", self._n["step_size"])

    def next_rate(self, lr: float, k: int) -> float:
        return lr if k % self._size else lr * self.gamma

    def zero_rate(self, lr: float) -> float:
        return lr

    def _factors(self, ks: Any) -> Any:
        if not plain(self.gamma):
            return None
        return np.where(ks % self._size == 0, float(self.gamma), 1.0)

    def closed_form(self, k: int) -> float:
        return self.base_lr * _power(self.gamma, k // self._size)


@dataclasses.dataclass(frozen=True)
class MultiStepLR(TorchSchedule):
    """``base_lr * gamma ** (number of milestones <= step)``; a repeated milestone counts twice.

    Example:
        >>> MultiStepLR(base_lr=1.0, milestones=(2, 4), gamma=0.5).values([1, 2, 4]).tolist()
        [1.0, 0.5, 0.25]
    """

    base_lr: float
    milestones: Sequence[int | str]
    gamma: float = 0.1

    _lengths: ClassVar[dict[str, int]] = {"milestones": 0}
    _sequences: ClassVar[frozenset[str]] = frozenset({"milestones"})
    _counts: ClassVar[Counter[int]]  # per instance: how often each milestone repeats
    _sorted: ClassVar[tuple[int, ...]]

    def _check(self) -> None:
        check_rate("base_lr", self.base_lr)
        check_real("gamma", self.gamma)

    def _prepare(self) -> None:
        milestones = self._n["milestones"]
        object.__setattr__(self, "_counts", Counter(milestones))
        object.__setattr__(self, "_sorted", tuple(sorted(milestones)))

    def first_rate(self, lr: float) -> float:
        return self.next_rate(lr, 0)

    def next_rate(self, lr: float, k: int) -> float:
        count = self._counts.get(k)
        return lr if count is None else lr * self.gamma**count

    def _factors(self, ks: Any) -> Any:
        if not plain(self.gamma):
            return None
        start, stop = int(ks[0]), int(ks[-1]) + 1
        factors = np.ones(ks.shape, dtype=np.float64)
        try:
            for milestone, count in self._counts.items():
                if start <= milestone < stop:
                    factors[milestone - start] = float(self.gamma**count)
        except OverflowError:
            return None
        return factors

    def closed_form(self, k: int) -> float:
        return self.base_lr * _power(self.gamma, bisect.bisect_right(self._sorted, k))


@dataclasses.dataclass(frozen=True)
class ConstantLR(TorchSchedule):
    """``base_lr * factor`` before ``total_iters``, then ``base_lr * factor * (1 / factor)``.

    With ``factor=0`` torch divides by zero at step ``total_iters``; so does this schedule
    (``StepZeroDivisionError``). ``total_iters=0`` keeps ``base_lr * factor`` for ever, as
    torch's stepping does.

    Example:
        >>> ConstantLR(base_lr=0.3, factor=0.5, total_iters=2).values([0, 1, 2]).tolist()
        [0.15, 0.15, 0.3]
    """

    base_lr: float
    factor: float = 1.0 / 3
    total_iters: int | str = 5

    _lengths: ClassVar[dict[str, int]] = {"total_iters": 0}
    _total: ClassVar[int]  # per instance: total_iters in steps
    _zero_hint: ClassVar[str] = "Use factor > 0."

    def _check(self) -> None:
        check_rate("base_lr", self.base_lr)
        check_real("factor", self.factor)
        if not 0 <= self.factor <= 1:
            raise ConfigError("factor", "must be between 0 and 1 (torch raises too)", self.factor)

    def _prepare(self) -> None:
        object.__setattr__(self, "_total", self._n["total_iters"])

    def first_rate(self, lr: float) -> float:
        return lr * self.factor

    def next_rate(self, lr: float, k: int) -> float:
        return lr * (1.0 / self.factor) if k == self._total else lr

    def zero_rate(self, lr: float) -> float:
        return self.first_rate(lr)

    def _factors(self, ks: Any) -> Any:
        if not plain(self.factor) or self.factor == 0:
            return None
        factors = np.ones(ks.shape, dtype=np.float64)
        start = int(ks[0])
        if start <= self._total < start + ks.size:
            factors[self._total - start] = 1.0 / self.factor
        return factors

    def closed_form(self, k: int) -> float:
        if self._total == 0:
            return float(self.base_lr * self.factor)
        return float(self.base_lr * (self.factor + (k >= self._total) * (1 - self.factor)))


@dataclasses.dataclass(frozen=True)
class LinearLR(TorchSchedule):
    """From ``base_lr * start_factor`` to ``base_lr * end_factor`` over ``total_iters``.

    Example:
        >>> LinearLR(base_lr=1.0, start_factor=0.5, total_iters=2).values([0, 1, 2, 9]).tolist()
        [0.5, 0.75, 1.0, 1.0]
    """

    base_lr: float
    start_factor: float = 1.0 / 3
    end_factor: float = 1.0
    total_iters: int | str = 5

    _lengths: ClassVar[dict[str, int]] = {"total_iters": 1}
    _total: ClassVar[int]  # per instance: total_iters in steps

    def _check(self) -> None:
        check_rate("base_lr", self.base_lr)
        check_real("start_factor", self.start_factor)
        if not 0 < self.start_factor <= 1:
            raise ConfigError(
                "start_factor", "must be > 0 and <= 1 (torch raises too)", self.start_factor
            )
        check_real("end_factor", self.end_factor)
        if not 0 <= self.end_factor <= 1:
            raise ConfigError(
                "end_factor", "must be between 0 and 1 (torch raises too)", self.end_factor
            )

    def _prepare(self) -> None:
        object.__setattr__(self, "_total", self._n["total_iters"])

    def first_rate(self, lr: float) -> float:
        return lr * self.start_factor

    def zero_rate(self, lr: float) -> float:
        return self.first_rate(lr)

    def next_rate(self, lr: float, k: int) -> float:
        if k > self._total:
            return lr
        s, e = self.start_factor, self.end_factor
        return lr * (1.0 + (e - s) / (self._total * s + (k - 1) * (e - s)))

    def _factors(self, ks: Any) -> Any:
        s, e, total = self.start_factor, self.end_factor, self._total
        if not plain(s, e, total):
            return None
        d = float(e - s)
        with np.errstate(all="ignore"):
            under = float(total * s) + (ks - 1).astype(np.float64) * d
            inside = ks <= total
            if (under[inside] == 0).any():  # torch divides by zero there
                return None
            return np.where(inside, 1.0 + d / under, 1.0)

    def closed_form(self, k: int) -> float:
        s, e, total = self.start_factor, self.end_factor, self._total
        return self.base_lr * (s + (e - s) * min(total, k) / total)


@dataclasses.dataclass(frozen=True)
class ExponentialLR(TorchSchedule):
    """``base_lr * gamma ** step``, multiplied by ``gamma`` at each step.

    Example:
        >>> ExponentialLR(base_lr=1.0, gamma=0.5)(3)
        0.125
    """

    base_lr: float
    gamma: float

    def _check(self) -> None:
        check_rate("base_lr", self.base_lr)
        check_real("gamma", self.gamma)

    def next_rate(self, lr: float, k: int) -> float:
        return lr * self.gamma

    def _factors(self, ks: Any) -> Any:
        if not plain(self.gamma):
            return None
        return np.full(ks.shape, float(self.gamma))

    def closed_form(self, k: int) -> float:
        return self.base_lr * _power(self.gamma, k)


@dataclasses.dataclass(frozen=True)
class PolynomialLR(TorchSchedule):
    """``base_lr * (1 - min(step, total_iters) / total_iters) ** power``.

    A negative ``power`` divides by zero at step ``total_iters``, in torch and here.

    Example:
        >>> PolynomialLR(base_lr=1.0, total_iters=4, power=2.0).values([0, 2, 4, 6]).tolist()
        [1.0, 0.25, 0.0, 0.0]
    """

    base_lr: float
    total_iters: int | str = 5
    power: float = 1.0

    _lengths: ClassVar[dict[str, int]] = {"total_iters": 1}
    _total: ClassVar[int]  # per instance: total_iters in steps
    _zero_hint: ClassVar[str] = "Use power >= 0."

    def _check(self) -> None:
        check_rate("base_lr", self.base_lr)
        check_real("power", self.power)

    def _prepare(self) -> None:
        object.__setattr__(self, "_total", self._n["total_iters"])

    def next_rate(self, lr: float, k: int) -> float:
        total = self._total
        if k > total:
            return lr
        rate: float = lr * ((1.0 - k / total) / (1.0 - (k - 1) / total)) ** self.power
        return rate

    def _factors(self, ks: Any) -> Any:
        total, power = self._total, self.power
        if not plain(power, total) or power < 0 or math.isinf(power):
            return None
        inside = ks <= total
        k = np.where(inside, ks, total).astype(np.float64)
        ratio = (1.0 - k / total) / (1.0 - (k - 1.0) / total)
        return np.where(inside, libm64(np.power, ratio, np.full(ratio.shape, float(power))), 1.0)

    def closed_form(self, k: int) -> float:
        total = self._total
        rate: float = self.base_lr * (1.0 - min(total, k) / total) ** self.power
        return rate


@dataclasses.dataclass(frozen=True)
class CosineAnnealingLR(TorchSchedule):
    r"""Cosine from ``base_lr`` down to ``eta_min`` over ``T_max`` steps, then back up.

    .. math::

        \eta_k = \eta_{min} + (\eta_{base} - \eta_{min}) \frac{1 + \cos(\pi k / T_{max})}{2}

    for every ``k`` (torch's recursion keeps following the cosine past ``T_max``, so the
    rate rises again: period ``2 * T_max``), computed as torch's recursion computes it.

    Example:
        >>> s = CosineAnnealingLR(base_lr=1.0, T_max=2)
        >>> s.values([0, 1, 2, 3, 4]).round(12).tolist()
        [1.0, 0.5, 0.0, 0.5, 1.0]
    """

    base_lr: float
    T_max: int | str
    eta_min: float = 0.0

    _lengths: ClassVar[dict[str, int]] = {"T_max": 1}
    _tmax: ClassVar[int]  # per instance: T_max in steps

    def _check(self) -> None:
        check_rate("base_lr", self.base_lr)
        check_real("eta_min", self.eta_min)

    def _prepare(self) -> None:
        object.__setattr__(self, "_tmax", self._n["T_max"])

    def next_rate(self, lr: float, k: int) -> float:
        t, eta = self._tmax, self.eta_min
        if (k - 1 - t) % (2 * t) == 0:
            return lr + (self.base_lr - eta) * (1 - math.cos(math.pi / t)) / 2
        return (1 + math.cos(math.pi * k / t)) / (1 + math.cos(math.pi * (k - 1) / t)) * (
            lr - eta
        ) + eta

    def _block(self, lr: float, start: int, stop: int) -> Any:
        """Vectorised where ``eta_min`` is 0: each step then multiplies the rate by a
        factor (``f * (lr - 0.0) + 0.0`` is ``f * lr`` for the rates >= 0 torch allows),
        except the steps just past an odd multiple of ``T_max``, which add a term; between
        those the rates are running products. With ``eta_min != 0`` each step subtracts,
        multiplies and adds (three roundings a step, no running product reproduces them):
        the factors are still computed at once, and the recursion runs over them."""
        t, eta, base = self._tmax, self.eta_min, self.base_lr
        if not plain(eta, base):
            return None
        ks = np.arange(start, stop, dtype=np.int64)
        with np.errstate(all="ignore"):
            cosines = libm64(np.cos, (math.pi * np.arange(start - 1, stop, dtype=np.float64)) / t)
            above = 1 + cosines[1:]
            below = 1 + cosines[:-1]
            adds = (ks - 1 - t) % (2 * t) == 0
            if (below[~adds] == 0).any():  # torch divides by zero there
                return None
            factors = above / below
        jump = (base - eta) * (1 - math.cos(math.pi / t)) / 2
        if eta != 0 or math.copysign(1.0, base) < 0:  # (a rate of -0.0 would turn +0.0)
            rates: list[float] = []
            append = rates.append
            for f, add in zip(factors.tolist(), adds.tolist(), strict=True):
                lr = lr + jump if add else f * (lr - eta) + eta
                append(lr)
            return np.array(rates, dtype=np.float64)
        out = np.empty(ks.size, dtype=np.float64)
        edges = [*np.flatnonzero(adds).tolist(), ks.size]
        begin = 0
        for edge in edges:
            if edge > begin:
                chain = np.empty(edge - begin + 1, dtype=np.float64)
                chain[0] = lr
                chain[1:] = factors[begin:edge]
                out[begin:edge] = np.multiply.accumulate(chain)[1:]
                lr = float(out[edge - 1])
            if edge < ks.size:
                lr = lr + jump
                out[edge] = lr
            begin = edge + 1
        return out

    def closed_form(self, k: int) -> float:
        eta = self.eta_min
        return eta + (self.base_lr - eta) * (1 + math.cos(math.pi * k / self._tmax)) / 2
