"""What every :mod:`globalstep.compat.torch` scheduler shares: torch's own recursion, replayed.

PyTorch updates most rates recursively: ``scheduler.step()`` reads the optimizer's current
rate and multiplies it by a factor (``get_lr``), so the rate after ``k`` steps carries the
rounding of every step before it. Each scheduler here states the same recursion in three
methods, copied operation for operation from ``torch.optim.lr_scheduler`` (PyTorch 2.x):

``first_rate(lr)``
    the rate the constructor's initial step sets, from the optimizer's rate ``lr``;
``next_rate(lr, k)``
    the rate ``step()`` number ``k`` sets from the current rate ``lr`` (``get_lr``);
``restart_rate(lr)``
    the rate ``SequentialLR`` sets when this scheduler takes over at its milestone;
``zero_rate(lr)``
    the rate a plain ``step()`` sets at step 0 (a ``ChainedScheduler`` first in a
    ``SequentialLR`` steps its parts so).

These, with ``closed_form(k)``, ``momentum_at(k)``, ``initial_lr``, ``absolute_rate`` and
``base_is_rate``, are public so that the composers (``ChainedScheduler``,
``SequentialLR``) replay their parts through them, calling them directly: training code
reads ``scheduler(step)`` and ``values(steps)`` instead.

The rates of steps ``0 .. 2**22 - 1`` are computed once, in order, and kept (8 bytes a step,
allocated only as far as asked), so they equal a real scheduler's ``get_last_lr()[0]`` bit
for bit. Where a step multiplies the rate by a factor (``StepLR``, ``MultiStepLR``,
``ConstantLR``, ``LinearLR``, ``ExponentialLR``, ``PolynomialLR``, and ``CosineAnnealingLR``
with ``eta_min=0``), the factors of a block of steps are computed as arrays, with the
operations ``next_rate`` performs, and the rates are their running product
(``np.multiply.accumulate``: one rounding a step, in order, exactly the recursion's);
``CosineAnnealingLR`` with ``eta_min != 0`` (subtract, multiply, add: three roundings a
step) gets its factors as arrays and runs the recursion over them in a plain loop. The
others replay ``next_rate`` step by step: ``MultiplicativeLR`` (a Python function of the
step), ``ChainedScheduler`` and ``SequentialLR``, and any scheduler given a NumPy scalar
parameter (Python's arithmetic then follows NumPy's promotion rules). The closed forms of
``OneCycleLR`` and ``CosineAnnealingWarmRestarts`` are evaluated on arrays too
(``_closed_array``); cos and pow in float64 are NumPy's where NumPy's loop calls the C
library (checked once per process), as ``math.cos`` does.
Past ``2**22`` steps a scheduler falls back to torch's closed form
(``_get_closed_form_lr``, what ``step(epoch)`` uses), which differs from torch's recursion by
that recursion's accumulated rounding, about ``k * 2**-53`` relative. Schedulers that torch
computes in closed form (``LambdaLR``, ``OneCycleLR``, ``CyclicLR``,
``CosineAnnealingWarmRestarts``) need no table.

A step is the number of optimizer updates applied (see :mod:`globalstep._clock`); with
``interval=N`` (or ``"epoch"``) the scheduler advances once every ``N`` updates, as a torch
scheduler stepped once per epoch does.
"""

from __future__ import annotations

import array
import dataclasses
import math
import threading
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from globalstep._clock import MAX_STEP, check_step
from globalstep._errors import (
    ConfigError,
    ConfigTypeError,
    ConfigZeroDivisionError,
    StepZeroDivisionError,
)
from globalstep._memo import MEMO_CALLS
from globalstep._units import Duration, Unit
from globalstep.compat._common import _FLOAT64, _numpy_call, numpy_is_libm
from globalstep.schedules import Schedule, Steps, Values, parse_length

__all__ = [
    "CACHE_STEPS",
    "ConfigTypeError",
    "ConfigZeroDivisionError",
    "StepZeroDivisionError",
    "TorchSchedule",
    "call_reached",
    "check_choice",
    "check_flag",
    "check_rate",
    "check_real",
    "check_scalar",
    "libm64",
    "plain",
    "registry",
]

CACHE_STEPS = 1 << 22
"""Steps whose rates are kept, bit for bit torch's recursion; closed forms past them."""

_MIN_BLOCK = 16  # steps from which a table extension is vectorised (see TorchSchedule._block)


def plain(*values: Any) -> bool:
    """Whether every value is a Python float, or an int that float64 holds exactly: the
    numbers whose arithmetic NumPy's float64 reproduces (a NumPy scalar would make Python's
    own arithmetic follow NumPy's promotion rules instead)."""
    return all(type(v) is float or (type(v) is int and -(2**53) <= v <= 2**53) for v in values)


def libm64(ufunc: np.ufunc, *args: Any) -> Any:
    """``ufunc`` (``np.cos`` or ``np.power``) on float64 arrays, bit for bit Python's
    ``math.cos`` / ``float.__pow__`` (the C library's): NumPy's own loop where it calls the
    C library (checked once per process), else the C library element by element."""
    wide = [np.asarray(a, dtype=np.float64) for a in args]
    with np.errstate(all="ignore"):
        if numpy_is_libm(ufunc, np.float64, _FLOAT64[ufunc]):
            return _numpy_call(ufunc, wide)
        return np.asarray(_FLOAT64[ufunc](*wide), dtype=np.float64)


_REGISTRY: dict[str, type[Any]] = {}


def registry() -> dict[str, type[Any]]:
    """Every compat torch class by its name (what ``to_config()`` records)."""
    return _REGISTRY


def check_real(parameter: str, value: Any, *, finite: bool = True) -> None:
    """Raises ConfigError unless ``value`` is a real number (finite unless told otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ConfigError(parameter, "must be a real number", value)
    if math.isnan(value) or (finite and math.isinf(value)):
        raise ConfigError(parameter, "must be a finite number", value)


def check_scalar(parameter: str, value: Any, *, finite: bool = True) -> None:
    """As :func:`check_real`, but a list (torch's one value per param group) gets a hint."""
    if isinstance(value, list | tuple):
        raise ConfigError(
            parameter,
            "must be one number: a compat schedule drives one param group",
            value,
            "Build one schedule per param group (integrations.torch.attach takes one per group).",
        )
    check_real(parameter, value, finite=finite)


def check_rate(parameter: str, value: Any) -> None:
    """As :func:`check_scalar`, and >= 0: torch's optimizers refuse a negative rate."""
    check_scalar(parameter, value)
    if value < 0:
        raise ConfigError(
            parameter, "must be >= 0 (torch's optimizers raise ValueError for a negative lr)", value
        )


def check_choice(parameter: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raises ConfigError unless ``value`` is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(parameter, f"must be one of {', '.join(map(repr, choices))}", value)


def check_flag(parameter: str, value: Any) -> None:
    """Raises ConfigError unless ``value`` is a bool."""
    if not isinstance(value, bool):
        raise ConfigError(parameter, "must be a bool", value)


def _duration(cls: type, field: str, value: Any, minimum: int) -> Duration:
    """``value`` as a duration, with torch's division by a zero length named."""
    if minimum >= 1 and (
        (isinstance(value, int | np.integer) and not isinstance(value, bool) and value == 0)
        or (isinstance(value, str) and value.strip() in ("0", "0st", "0ep", "0ba"))
    ):
        raise ConfigZeroDivisionError(
            field,
            f"must be >= {minimum}",
            value,
            f"torch.optim.lr_scheduler.{cls.__name__} divides by it (ZeroDivisionError).",
        )
    duration = parse_length(field, value, minimum)
    if duration.unit is not Unit.STEPS and duration.value == 0 and minimum >= 1:
        raise ConfigError(field, f"must be >= {minimum} steps", value)
    return duration


@dataclasses.dataclass(frozen=True)
class TorchSchedule(Schedule):
    """A ``torch.optim.lr_scheduler`` scheduler as a function of the step.

    ``schedule(step)`` is ``scheduler.get_last_lr()[0]`` after ``step // interval`` calls
    of ``scheduler.step()``; :meth:`momentum` is the momentum (SGD) or beta1 (Adam) the
    scheduler writes into the param group, or None where it writes none.

    Args:
        interval: optimizer updates per ``scheduler.step()``: ``1`` (per batch, the
            default), an int, a duration such as ``"1ep"``, or ``"epoch"`` (Lightning's
            ``interval="epoch"``, the same as ``"1ep"``). Durations are turned into steps
            by :meth:`resolve` (a clock's ``steps_per_epoch``).
    """

    interval: int | str = dataclasses.field(default=1, kw_only=True)

    # Per instance, set in __post_init__ (ClassVar only to keep them out of the fields).
    _table: ClassVar[array.array[float]]  # the rates of steps 0 .. len - 1, torch's recursion
    _lock: ClassVar[threading.Lock]
    _done: ClassVar[bool]  # every length, here and in the parts, is in steps
    _code: ClassVar[bool]  # calls a user's Python function (see calls_user_code)
    _last: ClassVar[tuple[int, float]]  # (step, value) of the last step read where _code

    # field -> minimum, for the lengths that take durations ("30ep"); set by subclasses.
    _lengths: ClassVar[Mapping[str, int]] = {}
    _sequences: ClassVar[frozenset[str]] = frozenset()  # lengths that are lists
    _floats: ClassVar[frozenset[str]] = frozenset()  # lengths torch also takes as floats
    _recursive: ClassVar[bool] = True  # False: torch computes it in closed form
    #: True where the scheduler sets the rate outright, not as a factor of ``initial_lr``
    #: (a ``ChainedScheduler`` past its kept steps then takes its closed form as it is).
    absolute_rate: ClassVar[bool] = False
    #: True where ``base_lr`` is the optimizer's rate (``CyclicLR``'s is its cycle's floor).
    base_is_rate: ClassVar[bool] = True
    _zero_hint: ClassVar[str] = ""  # what to change where torch divides by zero

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.__name__] = cls

    # -- construction ------------------------------------------------------------------
    def __post_init__(self) -> None:
        self._check()
        self._setup()
        self._setup_lengths()
        object.__setattr__(self, "_table", array.array("d"))
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "_done", self.resolved)
        object.__setattr__(self, "_code", self._holds_code())
        object.__setattr__(self, "_last", (-1, 0.0))
        if self._done:
            self._prepare()
            try:  # torch's constructor takes the first step: its errors surface here too
                self._reached(0) if self._code else self._at(0)
            except StepZeroDivisionError:
                raise ConfigZeroDivisionError(
                    "arguments",
                    f"make torch's {type(self).__name__} divide by zero in its constructor",
                    {f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                    self._zero_hint,
                ) from None

    def _check(self) -> None:
        """Validates the fields (subclasses); never rewrites them."""

    def _holds_code(self) -> bool:
        """Whether a field (here or in a part) is a Python callable of the user's."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if callable(value) and not isinstance(value, TorchSchedule):
                return True
        return any(isinstance(p, TorchSchedule) and p.calls_user_code for p in self.parts())

    @property
    def calls_user_code(self) -> bool:
        """True where the rate calls a Python function of the user's (``lr_lambda``,
        ``scale_fn``, here or in a part).

        Such a schedule computes a step only when it is read, never a block ahead: the
        function is called for the steps the run reaches, once each, as torch calls it
        once per ``scheduler.step()`` (a function that reads state changing during
        training sees it as it is at that step; one that only knows the steps of the run
        is never asked about others). The last step read is kept, so reading it again
        (the rate, then its log) calls nothing. ``integrations.torch.attach`` reads the
        next step right after each update, where torch's ``scheduler.step()`` runs.
        """
        return self._code

    def _prepare(self) -> None:
        """Precomputes what the formula needs once every length is in steps (subclasses)."""

    def _setup_lengths(self) -> None:
        n: dict[str, Any] = self._n
        pending: dict[str, Any] = self._pending
        cls = type(self)
        interval = self.interval
        if isinstance(interval, str) and interval.strip() in ("step", "epoch"):
            if interval.strip() == "step":
                n["interval"] = 1
            else:
                pending["interval"] = Duration(Fraction(1), Unit.EPOCHS)
        else:
            self._store(n, pending, "interval", _duration(cls, "interval", interval, 1))
        for field, minimum in self._lengths.items():
            value = getattr(self, field)
            if value is None:
                n[field] = None
            elif field in self._floats and isinstance(value, float):
                check_real(field, value)
                if value <= 0:
                    raise ConfigError(field, "must be > 0", value)
                n[field] = value
            elif field in self._sequences:
                if not isinstance(value, Sequence) or isinstance(value, str):
                    raise ConfigError(field, "must be a list of ints or durations", value)
                durations = tuple(_duration(cls, field, v, minimum) for v in value)
                if all(d.unit is Unit.STEPS for d in durations):
                    n[field] = tuple(int(d.value) for d in durations)
                else:
                    pending[field] = durations
            else:
                self._store(n, pending, field, _duration(cls, field, value, minimum))

    @staticmethod
    def _store(n: dict[str, Any], pending: dict[str, Any], field: str, d: Duration) -> None:
        if d.unit is Unit.STEPS:
            n[field] = int(d.value)
        else:
            pending[field] = d

    # -- torch's recursion (subclasses; public for the composers) -------------------------
    @property
    def initial_lr(self) -> float:
        """The optimizer's initial rate (``group["initial_lr"]``), read-only."""
        rate: float = getattr(self, "base_lr")  # noqa: B009 (not every subclass has one)
        return float(rate)

    def first_rate(self, lr: float) -> float:
        """The rate the constructor's initial step sets: ``lr`` unchanged for most, the closed
        form at 0 for the schedulers torch computes in closed form."""
        return lr if self._recursive else self.closed_form(0)

    def next_rate(self, lr: float, k: int) -> float:
        """The rate ``step()`` number ``k`` >= 1 sets from the current rate ``lr``."""
        return self.closed_form(k)

    def restart_rate(self, lr: float) -> float:
        """The rate at this scheduler's milestone in a ``SequentialLR`` (``_update_lr(0)``)."""
        return self.closed_form(0)

    def zero_rate(self, lr: float) -> float:
        """The rate a plain ``step()`` sets at step 0, outside the constructor's initial
        step: a ``ChainedScheduler`` that is a ``SequentialLR``'s first part steps its parts
        so, once torch's ``SequentialLR`` has undone their constructors' steps."""
        return self.next_rate(lr, 0)

    def closed_form(self, k: int) -> float:
        """Torch's closed form at scheduler step ``k`` (used past :data:`CACHE_STEPS`)."""
        raise NotImplementedError

    def momentum_at(self, k: int) -> float | None:
        """The momentum (or beta1) at scheduler step ``k``; None where torch writes none."""
        return None

    # -- evaluation ----------------------------------------------------------------------
    def _reached(self, step: int) -> float:
        """The rate at ``step`` computed alone (the last one read kept): the user's code
        is called for this step only (and, for a recursion, the steps before it not yet
        computed)."""
        known, value = self._last  # one tuple: a step and its value, read together
        if known == step:
            return value
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            value = float(self.compute(np.array([step], dtype=np.int64))[0])
        object.__setattr__(self, "_last", (step, value))
        return value

    def _zero(self, k: int) -> StepZeroDivisionError:
        name = type(self).__name__
        return StepZeroDivisionError(
            f"{name} divides by zero at step {k}, as torch.optim.lr_scheduler.{name} does "
            f"with these arguments. {self._zero_hint}".rstrip(),
            k,
        )

    def _at(self, k: int) -> float:
        """The rate after ``k`` scheduler steps."""
        if not self._recursive:
            try:
                return self.closed_form(k)
            except ZeroDivisionError:
                raise self._zero(k) from None
        table: array.array[float] = self._table
        if k < len(table):
            return table[k]
        if k < CACHE_STEPS:
            self._extend(k)
            return table[k]
        try:
            return self.closed_form(k)
        except ZeroDivisionError:
            raise self._zero(k) from None

    def _factors(self, ks: Any) -> Any:
        """The float64 factors ``f`` with ``next_rate(lr, k) == lr * f[i]`` exactly, for every
        ``k = ks[i]`` (int64, >= 1), computed as ``next_rate`` computes them; None where the
        scheduler's recursion is not such a product, or where a factor would raise (the
        step-by-step replay then raises at the right step). Subclasses."""
        return None

    def _block(self, lr: float, start: int, stop: int) -> Any:
        """The rates of steps ``start .. stop - 1`` from ``lr``, the rate of ``start - 1``,
        bit for bit torch's recursion, as a float64 array; None where there is no vectorised
        form (the step-by-step replay is used).

        Where each step multiplies the rate by a factor (:meth:`_factors`), the rates are the
        running product ``np.multiply.accumulate``, which multiplies in order, one rounding
        a step, exactly as the recursion does."""
        factors = self._factors(np.arange(start, stop, dtype=np.int64))
        if factors is None:
            return None
        with np.errstate(all="ignore"):
            chain = np.empty(stop - start + 1, dtype=np.float64)
            chain[0] = lr
            chain[1:] = factors
            return np.multiply.accumulate(chain)[1:]

    def _extend(self, k: int) -> None:
        table: array.array[float] = self._table
        with self._lock:
            j = len(table)
            try:
                if j == 0:
                    lr = self.first_rate(self.initial_lr)
                    table.append(lr)
                    j = 1
                if k - j >= _MIN_BLOCK:
                    block = self._block(table[-1], j, k + 1)
                    if block is not None:
                        table.frombytes(np.ascontiguousarray(block, dtype=np.float64).tobytes())
                        return
                lr = table[-1]
                step = self.next_rate
                while j <= k:
                    lr = step(lr, j)
                    table.append(lr)
                    j += 1
            except ZeroDivisionError:
                raise self._zero(j) from None

    def _ready(self) -> int:
        """Returns the interval in steps; raises ConversionError while a length is a duration."""
        if not self._done:
            self.raise_unresolved()
        every: int = self._n["interval"]
        return every

    def raise_unresolved(self) -> None:
        """Raises the ConversionError of the first length still a duration (parts included);
        returns where every length is in steps.

        Raises:
            ConversionError: a length (here or in a part) is a duration not yet resolved.
        """
        if self._pending:
            self.steps_of(next(iter(self._pending)))
        for part in self.parts():
            if isinstance(part, TorchSchedule):
                part.raise_unresolved()

    def compute(self, steps: Steps) -> Values:
        every = self._ready()
        if every != 1:
            steps = steps // every
        if self._recursive and steps.size > 8:
            top = int(steps.max())
            if top >= len(self._table):
                self._extend(min(top, CACHE_STEPS - 1))
            table = np.frombuffer(self._table, dtype=np.float64)[: len(self._table)]
            out = np.empty(steps.shape, dtype=np.float64)
            inside = steps < len(table)
            out[inside] = table[steps[inside]]
            if not inside.all():
                out[~inside] = [self._at(k) for k in steps[~inside].tolist()]
            return out
        if not self._recursive and steps.size > 8:
            out = self._closed_array(steps)
            if out is not None:
                return out
        at = self._at
        return [at(k) for k in steps.tolist()]  # a list: values() makes it an array

    def _closed_array(self, ks: Any) -> Any:
        """:meth:`closed_form` at every ``k`` of ``ks`` (int64, >= 0), vectorised and bit for bit
        the same, as a float64 array; None where there is no such form or a step would
        raise (each step is then computed on its own, raising as torch does). Subclasses
        that torch computes in closed form."""
        return None

    def momentum(self, step: int) -> float | None:
        """Returns the momentum (SGD) or beta1 (Adam, AdamW) update number ``step`` uses, as
        torch writes it into ``param_group["momentum"]`` / ``param_group["betas"][0]``;
        None for a scheduler that writes none (every one but ``OneCycleLR`` and ``CyclicLR``
        with ``cycle_momentum=True``, and compositions of them).

        Raises:
            StepError: ``step`` is negative or not an int.
            ConversionError: a length is a duration that was not resolved.
        """
        k = check_step(step)
        return self.momentum_at(k // self._ready())

    @property
    def has_momentum(self) -> bool:
        """True when :meth:`momentum` returns numbers (the scheduler cycles momentum)."""
        return False

    def values(self, steps: Any) -> Values:
        """Returns the rate at every step of ``steps`` (ints >= 0), in their shape, each equal
        to ``self(step)``.

        Raises:
            StepError: a step is negative, or the steps are not ints.
            ConversionError: a length is a duration that was not resolved.
        """
        array = np.asarray(steps)
        if array.size == 0:
            return np.zeros(array.shape, dtype=np.float64)
        return super().values(array)

    def state_dict(self) -> dict[str, Any]:
        """Returns ``{}``: the rate is a function of the step, which the clock carries.

        Torch keeps a scheduler's position (``last_epoch``) in the scheduler; here the clock
        holds it, so saving a schedule beside its clock in a checkpoint tree (as torch users
        save ``{"scheduler": ...}``) and restoring both gives the same rate and momentum.
        """
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Accepts what :meth:`state_dict` returned (nothing to restore).

        Raises:
            ConfigError: ``state`` is not the empty mapping ``state_dict()`` returns.
        """
        if not isinstance(state, Mapping) or state:
            raise ConfigError(
                "state",
                f"must be the empty mapping {type(self).__name__}.state_dict() returns",
                state,
                "Restore the clock: it carries the schedule's position.",
            )

    # -- configuration ------------------------------------------------------------------
    def parts(self) -> tuple[Schedule, ...]:
        """The schedulers this one is built from (for ``ChainedScheduler``/``SequentialLR``)."""
        return ()

    def to_config(self) -> dict[str, Any]:
        """Returns a JSON-ready config that :meth:`from_config` turns back into this schedule.

        Raises:
            ConfigError: a field is a Python callable (``lr_lambda``, ``scale_fn``), which a
                config cannot hold.
        """
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if callable(value) and not isinstance(value, TorchSchedule):
                raise ConfigError(
                    f.name,
                    "is a Python callable, which a config cannot hold",
                    value,
                    f"Keep the {type(self).__name__} in code (it still works everywhere "
                    "else), or express the rate with a core schedule (globalstep.schedules).",
                )
            if isinstance(value, tuple | list) and value and isinstance(value[0], TorchSchedule):
                value = [v.to_config() for v in value]
            elif isinstance(value, tuple | list):
                value = [v.item() if isinstance(v, np.generic) else v for v in value]
            elif isinstance(value, np.generic):
                value = value.item()
            fields[f.name] = value
        return {"class": type(self).__name__, "config": fields}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Any:
        """Builds a schedule from :meth:`to_config`'s output.

        Raises:
            ConfigError: the class is not one of :mod:`globalstep.compat.torch`'s.
        """
        name = config.get("class") if isinstance(config, Mapping) else None
        target = _REGISTRY.get(name) if isinstance(name, str) else None
        if target is None:
            raise ConfigError("config['class']", f"must be one of {sorted(_REGISTRY)}", name)
        fields = dict(config.get("config", {}))
        if "schedulers" in fields:
            fields["schedulers"] = [TorchSchedule.from_config(c) for c in fields["schedulers"]]
        return target(**fields)

    def describe(self) -> str:
        """Returns the class and its arguments (torch's schedulers have no one formula)."""
        args = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))
        return f"torch.{type(self).__name__}({args})"


def call_reached(self: TorchSchedule, step: Any) -> float:
    """Returns the rate at ``step`` (an int >= 0), bit for bit ``values([step])[0]``.

    The ``__call__`` of the schedulers that may call user code (``LambdaLR``,
    ``MultiplicativeLR``, ``CyclicLR``, the compositions): where one does
    (:attr:`~TorchSchedule.calls_user_code`) it computes the step asked and no other;
    otherwise the step is read from the memo of the block around it, as every schedule's.

    Raises:
        StepError: ``step`` is negative or not an int.
        ConversionError: a length is a duration that was not resolved.
    """
    if self._code and type(step) is int and 0 <= step <= MAX_STEP:
        return self._reached(step)
    return Schedule.__call__(self, step)


# Its int steps are answered from the memo as Schedule.__call__ answers them, except where the
# schedule calls user code: that one keeps no memo (the dict stays empty, so a per-update
# reader always calls it). The other schedulers keep Schedule.__call__ (no extra frame).
MEMO_CALLS.add(call_reached)
