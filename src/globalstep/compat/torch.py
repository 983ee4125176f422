"""``torch.optim.lr_scheduler``'s schedules as pure functions of the step.

Each class here is named and parameterised like its PyTorch namesake, with the optimizer
replaced by ``base_lr`` (the optimizer's initial ``lr``; ``OneCycleLR`` keeps ``max_lr``,
as it ignores the optimizer's rate). ``schedule(k)`` equals ``scheduler.get_last_lr()[0]``
after ``k`` calls of ``scheduler.step()``: the rate update number ``k`` uses (the step, as
defined in :mod:`globalstep.clock`). PyTorch updates most rates recursively, multiplying the
previous rate by a factor; these closed forms agree with it to a relative 1e-12, and keep
PyTorch's observable quirks: ``CosineAnnealingLR`` past ``T_max`` follows the cosine back up
(period ``2 * T_max``), and ``OneCycleLR`` accepts step ``total_steps`` (its last valid step)
and fails after it.

No PyTorch is needed: the numbers are computed in float64, as PyTorch computes them.

Example:
    >>> sched = StepLR(base_lr=0.1, step_size=30, gamma=0.1)
    >>> [sched(k) for k in (0, 29, 30, 60)]
    [0.1, 0.1, 0.010000000000000002, 0.0010000000000000002]
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from globalstep.errors import ConfigError, StepError
from globalstep.schedules._base import check_steps

__all__ = [
    "ConstantLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "ExponentialLR",
    "LinearLR",
    "MultiStepLR",
    "OneCycleLR",
    "PolynomialLR",
    "SequentialLR",
    "StepLR",
    "TorchSchedule",
]


def _check_step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, int | np.integer):
        raise StepError(f"`step` must be an int; got step={step!r}.", step)
    if step < 0:
        raise StepError(f"`step` must be >= 0; got step={step!r}.", step)
    return int(step)


def _number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(name, "must be a finite number", value)
    if low is not None and (value <= low if low_open else value < low):
        raise ConfigError(name, f"must be {'>' if low_open else '>='} {low}", value)
    if high is not None and value > high:
        raise ConfigError(name, f"must be <= {high}", value)


def _count(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, "must be an int", value)
    if value < minimum:
        raise ConfigError(name, f"must be >= {minimum}", value)


class TorchSchedule(ABC):
    """The shared surface: call with a step, ``values()`` for many, and a JSON config."""

    _registry: ClassVar[dict[str, type[TorchSchedule]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        TorchSchedule._registry[cls.__name__] = cls

    def __call__(self, step: int) -> float:
        """Returns the rate update number ``step`` uses."""
        return self._value(_check_step(step))

    @abstractmethod
    def _value(self, step: int) -> float:
        """The rate at ``step``, an int >= 0 already checked."""

    def values(
        self, steps: Iterable[int] | npt.NDArray[np.integer[Any]]
    ) -> npt.NDArray[np.float64]:
        """Returns the rate at each of ``steps``, equal element by element to ``__call__``,
        in the shape of ``steps``.

        Raises:
            StepError: a step is negative, or the steps are not ints.
        """
        array = np.asarray(steps)
        if array.size == 0:
            return np.zeros(array.shape, dtype=np.float64)
        array = check_steps(array)
        rates = [self._value(int(s)) for s in array.ravel()]
        return np.array(rates, dtype=np.float64).reshape(array.shape)

    def to_config(self) -> dict[str, Any]:
        """Returns a JSON-ready config that :meth:`from_config` turns back into this schedule."""
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, tuple) and value and isinstance(value[0], TorchSchedule):
                value = [v.to_config() for v in value]
            elif isinstance(value, tuple):
                value = list(value)
            fields[f.name] = value
        return {"class": type(self).__name__, "config": fields}

    @staticmethod
    def from_config(config: Mapping[str, Any]) -> TorchSchedule:
        """Builds a schedule from :meth:`to_config`'s output.

        Raises:
            ConfigError: the class is not one of this module's.
        """
        name = config.get("class") if isinstance(config, Mapping) else None
        cls = TorchSchedule._registry.get(name) if isinstance(name, str) else None
        if cls is None:
            raise ConfigError(
                "config['class']", f"must be one of {sorted(TorchSchedule._registry)}", name
            )
        fields = dict(config.get("config", {}))
        if cls is SequentialLR:
            fields["schedulers"] = [TorchSchedule.from_config(c) for c in fields["schedulers"]]
        return cls(**fields)


@dataclasses.dataclass(frozen=True)
class StepLR(TorchSchedule):
    """``base_lr * gamma ** (step // step_size)``.

    Example:
        >>> StepLR(base_lr=1.0, step_size=2, gamma=0.5).values([0, 1, 2, 4]).tolist()
        [1.0, 1.0, 0.5, 0.25]
    """

    base_lr: float
    step_size: int
    gamma: float = 0.1

    def __post_init__(self) -> None:
        _number("base_lr", self.base_lr, low=0)
        _count("step_size", self.step_size, 1)
        _number("gamma", self.gamma)

    def _value(self, step: int) -> float:
        return self.base_lr * self.gamma ** (step // self.step_size)


@dataclasses.dataclass(frozen=True)
class MultiStepLR(TorchSchedule):
    """``base_lr * gamma ** (number of milestones <= step)``; a repeated milestone counts twice.

    Example:
        >>> MultiStepLR(base_lr=1.0, milestones=(2, 4), gamma=0.5).values([1, 2, 4]).tolist()
        [1.0, 0.5, 0.25]
    """

    base_lr: float
    milestones: Sequence[int]
    gamma: float = 0.1

    def __post_init__(self) -> None:
        _number("base_lr", self.base_lr, low=0)
        if not isinstance(self.milestones, Sequence) or isinstance(self.milestones, str):
            raise ConfigError("milestones", "must be a sequence of ints", self.milestones)
        for m in self.milestones:
            _count("milestones", m, 0)
        _number("gamma", self.gamma)

    @functools.cached_property
    def _sorted_milestones(self) -> tuple[int, ...]:
        return tuple(sorted(self.milestones))

    def _value(self, step: int) -> float:
        return self.base_lr * self.gamma ** bisect.bisect_right(self._sorted_milestones, step)


@dataclasses.dataclass(frozen=True)
class ExponentialLR(TorchSchedule):
    """``base_lr * gamma ** step``.

    Example:
        >>> ExponentialLR(base_lr=1.0, gamma=0.5)(3)
        0.125
    """

    base_lr: float
    gamma: float

    def __post_init__(self) -> None:
        _number("base_lr", self.base_lr, low=0)
        _number("gamma", self.gamma)

    def _value(self, step: int) -> float:
        return self.base_lr * self.gamma**step


@dataclasses.dataclass(frozen=True)
class ConstantLR(TorchSchedule):
    """``base_lr * factor`` before ``total_iters``, then ``base_lr``.

    Example:
        >>> ConstantLR(base_lr=0.3, factor=0.5, total_iters=2).values([0, 1, 2]).tolist()
        [0.15, 0.15, 0.3]
    """

    base_lr: float
    factor: float = 1.0 / 3
    total_iters: int = 5

    def __post_init__(self) -> None:
        _number("base_lr", self.base_lr, low=0)
        _number("factor", self.factor, low=0, high=1)
        _count("total_iters", self.total_iters, 0)

    def _value(self, step: int) -> float:
        return self.base_lr * (self.factor if step < self.total_iters else 1.0)


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
    total_iters: int = 5

    def __post_init__(self) -> None:
        _number("base_lr", self.base_lr, low=0)
        _number("start_factor", self.start_factor, low=0, high=1, low_open=True)
        _number("end_factor", self.end_factor, low=0, high=1)
        _count("total_iters", self.total_iters, 1)

    def _value(self, step: int) -> float:
        done = min(self.total_iters, step)
        span = self.end_factor - self.start_factor
        return self.base_lr * (self.start_factor + span * done / self.total_iters)


@dataclasses.dataclass(frozen=True)
class PolynomialLR(TorchSchedule):
    """``base_lr * (1 - min(step, total_iters) / total_iters) ** power``.

    Example:
        >>> PolynomialLR(base_lr=1.0, total_iters=4, power=2.0).values([0, 2, 4, 6]).tolist()
        [1.0, 0.25, 0.0, 0.0]
    """

    base_lr: float
    total_iters: int = 5
    power: float = 1.0

    def __post_init__(self) -> None:
        _number("base_lr", self.base_lr, low=0)
        _count("total_iters", self.total_iters, 1)
        _number("power", self.power)

    def _value(self, step: int) -> float:
        remaining = 1.0 - min(self.total_iters, step) / self.total_iters
        return self.base_lr * float(remaining**self.power)


@dataclasses.dataclass(frozen=True)
class CosineAnnealingLR(TorchSchedule):
    r"""Cosine from ``base_lr`` down to ``eta_min`` over ``T_max`` steps, then back up.

    .. math::

        \eta_k = \eta_{min} + (\eta_{base} - \eta_{min}) \frac{1 + \cos(\pi k / T_{max})}{2}

    for every ``k``: PyTorch's recursive update keeps following the cosine past ``T_max``,
    so the rate rises again and the schedule has period ``2 * T_max``.

    Example:
        >>> s = CosineAnnealingLR(base_lr=1.0, T_max=2)
        >>> s.values([0, 1, 2, 3, 4]).round(12).tolist()
        [1.0, 0.5, 0.0, 0.5, 1.0]
    """

    base_lr: float
    T_max: int
    eta_min: float = 0.0

    def __post_init__(self) -> None:
        _number("base_lr", self.base_lr, low=0)
        _count("T_max", self.T_max, 1)
        _number("eta_min", self.eta_min, low=0)

    def _value(self, step: int) -> float:
        cosine = 1.0 + math.cos(math.pi * step / self.T_max)
        return self.eta_min + (self.base_lr - self.eta_min) * cosine / 2


@dataclasses.dataclass(frozen=True)
class CosineAnnealingWarmRestarts(TorchSchedule):
    """SGDR: cosine cycles of ``T_0``, ``T_0 * T_mult``, ... steps, each restarting at ``base_lr``.

    Example:
        >>> s = CosineAnnealingWarmRestarts(base_lr=1.0, T_0=2, T_mult=2)
        >>> s.values([0, 1, 2, 4, 6]).round(12).tolist()
        [1.0, 0.5, 1.0, 0.5, 1.0]
    """

    base_lr: float
    T_0: int
    T_mult: int = 1
    eta_min: float = 0.0

    def __post_init__(self) -> None:
        _number("base_lr", self.base_lr, low=0)
        _count("T_0", self.T_0, 1)
        _count("T_mult", self.T_mult, 1)
        _number("eta_min", self.eta_min, low=0)

    def _cycle(self, step: int) -> tuple[int, int]:
        """Returns (steps into the current cycle, the cycle's length)."""
        if self.T_mult == 1:
            return step % self.T_0, self.T_0
        start, length = 0, self.T_0
        # Cycle lengths grow geometrically, so this runs O(log(step)) times.
        while step >= start + length:
            start += length
            length *= self.T_mult
        return step - start, length

    def _value(self, step: int) -> float:
        t_cur, t_i = self._cycle(step)
        cosine = 1.0 + math.cos(math.pi * t_cur / t_i)
        return self.eta_min + (self.base_lr - self.eta_min) * cosine / 2


@dataclasses.dataclass(frozen=True)
class OneCycleLR(TorchSchedule):
    """The 1cycle policy: up from ``max_lr / div_factor`` to ``max_lr``, then down to the floor.

    Valid steps are 0 to ``total_steps`` inclusive, as in PyTorch, whose scheduler raises
    on the step after that; so does this schedule.

    Example:
        >>> s = OneCycleLR(max_lr=1.0, total_steps=10, anneal_strategy="linear")
        >>> s.values([0, 2]).round(6).tolist()
        [0.04, 1.0]
        >>> s(11)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        globalstep.errors.StepError: `step` must be <= total_steps=10 ...; got step=11.
    """

    max_lr: float
    total_steps: int | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    pct_start: float = 0.3
    anneal_strategy: str = "cos"
    div_factor: float = 25.0
    final_div_factor: float = 1e4
    three_phase: bool = False

    def __post_init__(self) -> None:
        _number("max_lr", self.max_lr, low=0)
        if self.total_steps is None:
            if self.epochs is None or self.steps_per_epoch is None:
                raise ConfigError(
                    "total_steps",
                    "must be given, or else both epochs and steps_per_epoch",
                    self.total_steps,
                )
            _count("epochs", self.epochs, 1)
            _count("steps_per_epoch", self.steps_per_epoch, 1)
        else:
            _count("total_steps", self.total_steps, 1)
        _number("pct_start", self.pct_start, low=0, high=1)
        if self.anneal_strategy not in ("cos", "linear"):
            raise ConfigError("anneal_strategy", "must be 'cos' or 'linear'", self.anneal_strategy)
        _number("div_factor", self.div_factor, low=0, low_open=True)
        _number("final_div_factor", self.final_div_factor, low=0, low_open=True)
        if not isinstance(self.three_phase, bool):
            raise ConfigError("three_phase", "must be a bool", self.three_phase)

    @property
    def steps_total(self) -> int:
        """The cycle's length: ``total_steps``, or ``epochs * steps_per_epoch``."""
        if self.total_steps is not None:
            return self.total_steps
        assert self.epochs is not None  # __post_init__ checked both
        assert self.steps_per_epoch is not None
        return self.epochs * self.steps_per_epoch

    def _phases(self) -> list[tuple[float, float, float]]:
        """Returns (end step, start rate, end rate) per phase, as PyTorch lays them out."""
        total = self.steps_total
        initial = self.max_lr / self.div_factor
        floor = initial / self.final_div_factor
        if self.three_phase:
            return [
                (float(self.pct_start * total) - 1, initial, self.max_lr),
                (float(2 * self.pct_start * total) - 2, self.max_lr, initial),
                (total - 1, initial, floor),
            ]
        return [
            (float(self.pct_start * total) - 1, initial, self.max_lr),
            (total - 1, self.max_lr, floor),
        ]

    def _value(self, step: int) -> float:
        if step > self.steps_total:
            raise StepError(
                f"`step` must be <= total_steps={self.steps_total} (OneCycleLR's last valid "
                f"step); got step={step}.",
                step,
            )
        phases = self._phases()
        # The first phase that ends at or after ``step``; the last one runs to total_steps.
        index = next((i for i, p in enumerate(phases[:-1]) if step <= p[0]), len(phases) - 1)
        start_step = phases[index - 1][0] if index else 0.0
        end_step, start_lr, end_lr = phases[index]
        pct = (step - start_step) / (end_step - start_step)
        if self.anneal_strategy == "cos":
            return end_lr + (start_lr - end_lr) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end_lr - start_lr) * pct + start_lr


@dataclasses.dataclass(frozen=True)
class SequentialLR(TorchSchedule):
    """Runs ``schedulers[i]`` from ``milestones[i - 1]`` on, each restarted at its milestone.

    Example:
        >>> warm = LinearLR(base_lr=1.0, start_factor=0.5, total_iters=2)
        >>> decay = ExponentialLR(base_lr=1.0, gamma=0.5)
        >>> SequentialLR((warm, decay), milestones=(2,)).values([0, 1, 2, 3]).tolist()
        [0.5, 0.75, 1.0, 0.5]
    """

    schedulers: Sequence[TorchSchedule]
    milestones: Sequence[int]

    def __post_init__(self) -> None:
        schedulers = tuple(self.schedulers) if isinstance(self.schedulers, Sequence) else None
        if not schedulers or not all(isinstance(s, TorchSchedule) for s in schedulers):
            raise ConfigError(
                "schedulers",
                "must be a non-empty sequence of compat.torch schedules",
                self.schedulers,
            )
        milestones = tuple(self.milestones) if isinstance(self.milestones, Sequence) else None
        if milestones is None or len(milestones) != len(schedulers) - 1:
            raise ConfigError(
                "milestones",
                f"must hold len(schedulers) - 1 = {len(schedulers) - 1} steps",
                self.milestones,
            )
        for m in milestones:
            _count("milestones", m, 1)
        if list(milestones) != sorted(set(milestones)):
            raise ConfigError("milestones", "must be strictly increasing", self.milestones)
        object.__setattr__(self, "schedulers", schedulers)
        object.__setattr__(self, "milestones", milestones)

    def _value(self, step: int) -> float:
        index = bisect.bisect_right(self.milestones, step)
        offset = self.milestones[index - 1] if index else 0
        return self.schedulers[index](step - offset)
