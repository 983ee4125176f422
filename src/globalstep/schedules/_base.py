"""The schedule protocol: a frozen dataclass that is a pure function of the step.

Every schedule has ``__call__(step) -> float`` and a vectorised ``values(steps)`` that give
the same numbers bit for bit (both run the one ``compute`` on int64 arrays), a JSON-ready
``to_config()`` / :func:`from_config`, ``describe()`` (its formula with the parameters filled
in), and a ``dtype``: ``"float64"`` by default, ``"float32"`` to compute as frameworks do.
A step is the number of optimizer updates applied (see :mod:`globalstep._clock`).

Lengths (``decay_steps``, ``warmup_steps``, ...) are an int of steps or a duration
(``"3ep"``, ``"1e6sp"``); a duration in epochs, samples or tokens is turned into steps by
:meth:`Schedule.resolve` with what a clock or a plan knows.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import Field
from typing import Any, ClassVar, TypeAlias, TypeVar

import numpy as np
from numpy.typing import NDArray

from globalstep._clock import MAX_STEP, Clock, Progress, check_step
from globalstep._errors import (
    ConfigError,
    ConversionError,
    GlobalStepError,
    StepError,
    TracingError,
)
from globalstep._memo import MEMO_BITS, MEMO_CALLS, MEMO_MASK, memo_fill
from globalstep._memo import MEMO_BLOCK as MEMO_BLOCK  # the tests' names, as before
from globalstep._memo import MEMO_BLOCKS as MEMO_BLOCKS
from globalstep._memo import memo_of as memo_of
from globalstep._tracing import traced_by
from globalstep._units import Duration, Unit

__all__ = [
    "Length",
    "Schedule",
    "Steps",
    "Values",
    "check_flag",
    "check_number",
    "check_step",
    "check_steps",
    "from_config",
    "parse_length",
    "registered",
]

_REGISTRY: dict[str, type[Schedule]] = {}
_ORIGINS: dict[str, tuple[str, str]] = {}  # each name's class, where it was defined
_DTYPES = {"float64": np.dtype(np.float64), "float32": np.dtype(np.float32)}

Steps = NDArray[np.int64]
"""The steps :meth:`Schedule.compute` is given: a 1-D int64 array, each step >= 0."""
# Float arrays of the schedule's dtype; Any because numpy's stubs cannot follow arithmetic
# that mixes dtype-typed scalars and arrays.
Values: TypeAlias = Any
"""What :meth:`Schedule.compute` returns: an array of floats, one a step."""
S = TypeVar("S", bound="Schedule")
Length = int | str
"""A length field: an int of steps, or a duration such as ``"3ep"``."""


def fields_of(obj: Any) -> tuple[Field[Any], ...]:
    """The dataclass fields of a schedule (or schedule class)."""
    return dataclasses.fields(obj)


def check_number(parameter: str, value: Any, *, optional: bool = False) -> None:
    """Raises ConfigError unless ``value`` is a finite real number (None if optional)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise ConfigError(parameter, "must be a finite number", value)
    if not math.isfinite(value):
        raise ConfigError(parameter, "must be a finite number", value)


def check_range(parameter: str, value: Any, rule: str, ok: bool) -> None:
    """Raises ConfigError(parameter, rule, value) unless ``ok``."""
    if not ok:
        raise ConfigError(parameter, rule, value)


def check_choice(parameter: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raises ConfigError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(parameter, f"must be one of {', '.join(map(repr, choices))}", value)


def check_flag(parameter: str, value: Any) -> None:
    """Raises ConfigError unless ``value`` is a bool."""
    if not isinstance(value, bool):
        raise ConfigError(parameter, "must be a bool", value)


def check_boundaries(parameter: str, boundaries: Any, count: int, count_name: str) -> None:
    """Raises ConfigError unless ``boundaries`` is a tuple of ``count`` items (one fewer
    than the ``count_name`` it separates)."""
    if not isinstance(boundaries, tuple):
        raise ConfigError(parameter, "must be a tuple of steps", boundaries)
    if len(boundaries) != count:
        raise ConfigError(
            parameter,
            f"must hold exactly {count} boundaries (one fewer than {count_name})",
            boundaries,
        )


def dtype_field(default: str | None) -> Any:
    """The keyword-only ``dtype`` field a schedule ends with: ``"float64"`` for a core
    schedule, None for a composite (which takes its first part's)."""
    return dataclasses.field(default=default, kw_only=True)


def parse_length(parameter: str, value: Any, minimum: int = 1) -> Duration:
    """Returns a length's value (an int of steps, or a duration such as ``"3ep"`` or
    ``"1e6sp"``) as a :class:`~globalstep._units.Duration`, checked.

    A schedule's ``lengths`` are checked with it when it is made; for a length the
    ``lengths`` mapping cannot hold.

    Raises:
        ConfigError: not an int or a duration, a wall-time duration, or fewer than
            ``minimum`` steps.

    Example:
        >>> parse_length("decay_steps", "3ep")
        Duration(value=Fraction(3, 1), unit=<Unit.EPOCHS: 'ep'>)
    """
    if isinstance(value, bool) or not isinstance(value, int | str | Duration | np.integer):
        raise ConfigError(parameter, "must be an int of steps or a duration such as '3ep'", value)
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, int) and value < minimum:
        raise ConfigError(parameter, f"must be >= {minimum}", value)
    duration = Duration.parse(value, parameter)
    if duration.unit is Unit.SECONDS:
        raise ConfigError(
            parameter, "must be counted in steps, epochs, samples or tokens, not wall time", value
        )
    if duration.unit is Unit.STEPS and duration.value < minimum:
        raise ConfigError(parameter, f"must be >= {minimum}", value)
    return duration


def traced_step_error(step: Any, what: str, kind: type[GlobalStepError]) -> GlobalStepError:
    """The refusal of ``schedule(step)`` while ``tf.function`` or ``jax.jit`` traces: a
    schedule is a Python function of an int step, so its value there would be computed
    once, at tracing (a Clock's step then), and be a constant of the graph. ``kind`` is
    :class:`~globalstep._errors.TracingError` for a Clock, :class:`StepError` for a traced
    value (a step that is no int)."""
    tracer = traced_by()
    if tracer == "tf.function":
        hint = (
            "Use a rate that is computed in the graph: a globalstep.compat.tf decay of a "
            "tf.Variable step (or of optimizer.iterations), or, for Keras, "
            "globalstep.integrations.keras's schedule; or compute the value outside the "
            "traced function and pass it in."
        )
    else:
        hint = (
            "Use a schedule that traces: a globalstep.compat.optax schedule of the step "
            "(optax's count), or compute the value outside the jitted function and pass it "
            "in as an argument."
        )
    message = (
        f"`step` must be an int >= 0 read in Python; got {what} inside {tracer} while it "
        f"traces, where the value would be computed once, at tracing, and frozen for every "
        f"later run (step={step!r}). {hint}"
    )
    if kind is TracingError:
        return TracingError(message, "schedule(clock)", str(tracer))
    err = StepError(message, step)
    setattr(err, "ag_pass_through", True)  # noqa: B010 (AutoGraph: let it out as it is)
    return err


def check_steps(steps: Any) -> Steps:
    """Returns ``steps`` as an int64 array, or raises StepError."""
    array = np.asarray(steps)
    if array.dtype.kind not in "iu":
        raise StepError(
            f"`steps` must be an array of ints >= 0; got dtype {array.dtype}: {steps!r}.", steps
        )
    if array.size and array.min() < 0:
        raise StepError(
            f"`steps` must be an array of ints >= 0; got step={int(array.min())}.",
            int(array.min()),
        )
    if array.dtype.kind == "u" and array.size and array.max() > MAX_STEP:
        raise StepError(
            f"`steps` must be <= 2**63-1; got step={int(array.max())}.", int(array.max())
        )
    return array.astype(np.int64, copy=False)


class Schedule(ABC):
    """The base of every schedule: a frozen dataclass that is a pure function of the step.

    A new schedule is one frozen dataclass on this base; its ``name`` registers it (the one
    line), and :func:`from_config`, ``globalstep schedule``, ``globalstep plan``, a Run's
    stored config and checkpoints (a schedule is saved as its fields) see it. It gives:

    - its parameters as dataclass fields, each a number, str, bool or tuple (an optional
      ``dtype: str = "float64"`` field last; ``"float32"`` computes as frameworks do);
    - ``name``, a ``ClassVar[str]``: the config and command-line name, unique among
      schedules (a second class with a registered name is refused);
    - :meth:`compute` (required): the values at an int64 array of steps, the one formula
      that :meth:`__call__` and :meth:`values` run, so they agree bit for bit;
    - :meth:`check` (optional): raises :class:`~globalstep._errors.ConfigError` for a bad
      field;
    - ``lengths`` (optional), a ``ClassVar``: ``{field: minimum}`` for the fields that are
      lengths in steps, which then also take durations (``"3ep"``, see :meth:`resolve`);
      :meth:`steps_of` reads one in steps;
    - ``formula`` (optional), a ``ClassVar[str]`` that :meth:`describe` fills in with the
      fields (``"v(s) = {initial} * 0.5 ** (s / {half_life})"``);
    - :meth:`end_step` (optional): the first step from which the value stays constant.

    In :meth:`compute`, :meth:`floats` turns the steps into floats of the schedule's dtype,
    :meth:`scalar` a number, and :meth:`apply` runs a NumPy function (``np.power``,
    ``np.exp``, ``np.cos``) as every core schedule does in float32.

    Example:
        >>> from dataclasses import dataclass
        >>> from typing import ClassVar
        >>> @dataclass(frozen=True)
        ... class Halving(Schedule):
        ...     initial: float
        ...     every: int
        ...     lengths: ClassVar[dict[str, int]] = {"every": 1}
        ...
        ...     def compute(self, steps: Steps) -> Values:
        ...         halvings = self.floats(steps // self.steps_of("every"))
        ...         return self.scalar(self.initial) * self.apply(np.power, 0.5, halvings)
        >>> Halving(1.0, 10)(25), Halving(1.0, "2ep").resolve(steps_per_epoch=5).values([9, 10])
        (0.25, array([1. , 0.5]))

        (Without a ``name`` it is not registered, as here; see ``docs/write-your-own-schedule.md``.)
    """

    name: ClassVar[str] = ""
    # Set by _setup: the numpy dtype, lengths already in steps, lengths still durations.
    _dt: np.dtype[Any]
    _n: dict[str, Any]
    _pending: dict[str, Any]
    lengths: ClassVar[Mapping[str, int]] = {}
    formula: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")  # its own: a subclass that sets none is unregistered
        if name:
            _register(name, cls)

    def __post_init__(self) -> None:
        """Runs :meth:`check`, then checks the dtype and the lengths. (The core schedules'
        own ``__post_init__`` does the same in one.)"""
        self.check()
        self._setup()

    def check(self) -> None:  # noqa: B027 (optional: a subclass's own, if it has any)
        """Raises :class:`~globalstep._errors.ConfigError` for a field that breaks a rule.

        A subclass's own checks (none here), run when it is made, before the dtype and the
        lengths (``lengths``) are checked; :func:`check_number` checks a number.
        """

    # -- validation shared by every subclass -------------------------------------------
    def _setup(self, default_dtype: str = "float64") -> None:
        """Checks dtype and lengths; caches resolved lengths (fields are never rewritten)."""
        dtype = getattr(self, "dtype", None) or default_dtype
        check_choice("dtype", dtype, tuple(_DTYPES))
        object.__setattr__(self, "_dt", _DTYPES[dtype])
        resolved: dict[str, Any] = {}
        pending: dict[str, Any] = {}
        for field, minimum in self.lengths.items():
            value = getattr(self, field)
            if isinstance(value, tuple):
                durations = tuple(parse_length(field, v, minimum) for v in value)
                if all(d.unit is Unit.STEPS for d in durations):
                    resolved[field] = tuple(int(d.value) for d in durations)
                else:
                    pending[field] = durations
                continue
            duration = parse_length(field, value, minimum)
            if duration.unit is Unit.STEPS:
                resolved[field] = int(duration.value)
            else:
                pending[field] = duration
        object.__setattr__(self, "_n", resolved)
        object.__setattr__(self, "_pending", pending)

    @property
    def resolved(self) -> bool:
        """True when every length, here and in the parts, is a number of steps."""
        if self._pending:
            return False
        return all(part.resolved for part in self.parts())

    def parts(self) -> tuple[Schedule, ...]:
        """The schedules this one is built from (none for a core schedule)."""
        return ()

    def steps_of(self, field: str) -> Any:
        """The length ``field`` (one of ``lengths``) in steps: an int, or a tuple of ints
        for a tuple field.

        Raises:
            ConversionError: the length is a duration (``"3ep"``) not yet resolved to steps
                (see :meth:`resolve`).
        """
        n: dict[str, Any] = self._n
        try:
            return n[field]
        except KeyError:
            pending = self._pending[field]
            units = {d.unit for d in pending} if isinstance(pending, tuple) else {pending.unit}
            unit = next(u for u in (Unit.EPOCHS, Unit.SAMPLES, Unit.TOKENS) if u in units)
            needed = {Unit.EPOCHS: "steps_per_epoch", Unit.SAMPLES: "batch_size"}.get(
                unit, "tokens_per_step"
            )
            raise ConversionError(
                f"`{field}`={getattr(self, field)!r} is a duration; resolve it to steps first "
                f"with schedule.resolve(clock) or schedule.resolve({needed}=...).",
                needed,
            ) from None

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        """The numpy dtype the values are computed in (a composite's may be its part's)."""
        return self._dt

    def scalar(self, value: float) -> Any:
        """``value`` as a NumPy scalar of the schedule's dtype, for :meth:`compute`."""
        return self._dt.type(value)

    def apply(self, ufunc: np.ufunc, *args: Any) -> Values:
        """``ufunc(*args)`` (pow, exp, log, cos); in float32 computed in float64 and rounded
        once, the correctly rounded value in all but rare cases. (The compat layers call
        the C library's float32 functions one element at a time to equal TensorFlow and
        optax bit for bit; here the vectorised path keeps ``values()`` fast, within an ulp
        or two of them.)"""
        if self._dt == np.float32:
            return ufunc(*(np.asarray(a, dtype=np.float64) for a in args)).astype(np.float32)
        return ufunc(*args)

    def floats(self, steps: Steps) -> Values:
        """``steps`` (an int64 array) as floats of the schedule's dtype, for :meth:`compute`."""
        return steps.astype(self._dt)

    def _half_cosine(self, fraction: Values) -> Values:
        """``0.5 * (1 + cos(pi * fraction))``, in the schedule's dtype."""
        return 0.5 * (self.scalar(1.0) + self.apply(np.cos, np.pi * fraction))

    def _ramp(self, shape: str, start: Any, end: Any, pct: Values) -> Values:
        """From ``start`` (exactly, at pct 0) to ``end`` along a half cosine or a line."""
        if shape == "cosine":
            return start + (end - start) * ((1 - self.apply(np.cos, np.pi * pct)) / 2)
        return start + (end - start) * pct

    def _setup_pieces(
        self, parameter: str, kind: str, check: Any, boundaries: Any, dtype_of: Any = None
    ) -> None:
        """Checks the pieces of a piecewise schedule, the field ``parameter`` (a non-empty
        tuple of ``kind``, each checked by ``check(parameter, piece)``), and the
        ``boundaries`` between them (one fewer, rising), with the dtype and lengths between:
        the dtype is ``dtype_of(first piece)`` where given, else float64."""
        pieces = getattr(self, parameter)
        if not isinstance(pieces, tuple) or not pieces:
            raise ConfigError(parameter, f"must be a non-empty tuple of {kind}", pieces)
        for piece in pieces:
            check(parameter, piece)
        check_boundaries("boundaries", boundaries, len(pieces) - 1, parameter)
        if dtype_of is None:
            self._setup()
        else:
            self._setup(dtype_of(pieces[0]))
        self._check_increasing("boundaries")

    def _check_increasing(self, parameter: str) -> None:
        """Raises ConfigError unless the steps of the length ``parameter`` (a tuple) rise
        strictly; a tuple still in durations is checked once resolved."""
        resolved = self._n.get(parameter)
        if resolved is not None and any(b <= a for a, b in itertools.pairwise(resolved)):
            raise ConfigError(parameter, "must be strictly increasing", getattr(self, parameter))

    # -- evaluation --------------------------------------------------------------------
    @abstractmethod
    def compute(self, steps: Steps) -> Values:
        """Returns the values at ``steps``, a 1-D int64 array already checked (>= 0).

        The one formula of a schedule, which a subclass implements: :meth:`values` and the
        scalar call check the steps and run it under ``np.errstate`` (IEEE results, no
        warnings), and a composite runs its parts' ``compute`` on the steps it has checked
        itself (a part's value at a relative step), so the checks are made once. It returns
        values of :attr:`numpy_dtype` or any array that casts to it.
        """

    def __call__(self, step: int | Clock | Progress) -> float:
        """Returns the value at ``step`` (an int >= 0), bit for bit ``values([step])[0]``.

        ``lr(clock)`` is ``lr(clock.step)``: a :class:`~globalstep._clock.Clock` or a
        :class:`~globalstep._clock.Progress` stands for its step.

        An int step is answered from a memo of :meth:`values` over the aligned block of
        ``MEMO_BLOCK`` steps around it (see :func:`memo_value`), so a call after the first
        in a block costs a dict and a list lookup.

        Example:
            >>> from globalstep.schedules import Linear
            >>> Linear(0.0, 1.0, 10)(5)
            0.5

        Raises:
            StepError: ``step`` is negative or not an int.
            ConversionError: a length is a duration that was not resolved.
            TracingError: ``step`` is a Clock, read while ``tf.function`` or ``jax.jit``
                traces (its value would be frozen at the step of tracing).
        """
        if type(step) is int and 0 <= step <= MAX_STEP:
            try:
                return self.__dict__["_memo"][step >> MEMO_BITS][step & MEMO_MASK]  # type: ignore[no-any-return]
            except KeyError:
                pass
            try:
                return memo_fill(self, step >> MEMO_BITS)[step & MEMO_MASK]
            except (GlobalStepError, ArithmeticError):
                # Another step of the block is invalid (past a one-cycle's last step, where
                # torch divides by zero): this step alone, which raises if it is the bad one.
                return float(self.values(np.array([step], dtype=np.int64))[0])
        if type(step).__name__ in ("Clock", "Progress"):
            # A clock or its snapshot stands for its step (by name: a test that reloads
            # globalstep makes a second Clock class).
            if type(step).__name__ == "Clock" and traced_by() is not None:
                raise traced_step_error(step, "a globalstep Clock", TracingError)
            return self(step.step)  # type: ignore[union-attr]
        if not isinstance(step, int | np.integer) and traced_by() is not None:
            raise traced_step_error(step, "a traced value", StepError)
        array = np.array([check_step(step)], dtype=np.int64)
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            return float(self.compute(array)[0])

    def values(self, steps: Any) -> Values:
        """Returns the values at every step of ``steps`` (ints >= 0), bit for bit ``self(s)``.

        Example:
            >>> from globalstep.schedules import Linear
            >>> Linear(0.0, 1.0, 10).values([0, 5, 20]).tolist()
            [0.0, 0.5, 1.0]

        Raises:
            StepError: a step is negative, or the array is not of ints.
        """
        array = check_steps(steps)
        flat = array.reshape(-1)
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            out = self.compute(flat)
        return np.asarray(out, dtype=self._dt).reshape(array.shape)

    # -- description and serialisation ----------------------------------------------------
    def describe(self) -> str:
        """Returns the formula with the parameters filled in.

        Example:
            >>> from globalstep.schedules import Constant
            >>> Constant(0.5).describe()
            "constant(value=0.5, dtype='float64'): v(s) = 0.5"
        """
        params = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{self.name}({params}): {self.formula.format(**self._format_fields())}"

    def _format_fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields_of(self)}

    def _params(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields_of(self)}

    def to_config(self) -> dict[str, Any]:
        """Returns a JSON-ready dict that :func:`from_config` turns back into an equal schedule.

        Example:
            >>> from globalstep.schedules import ExponentialDecay
            >>> ExponentialDecay(0.1, 1000, 0.96).to_config()["name"]
            'exponential_decay'
        """
        return {"name": self.name, **{k: _to_json(v) for k, v in self._params().items()}}

    @classmethod
    def from_config(cls: type[S], config: Mapping[str, Any]) -> S:
        """Builds a schedule from :meth:`to_config`'s output.

        Raises:
            ConfigError: an unknown schedule name, or a config of another class.
        """
        schedule = from_config(config)
        if not isinstance(schedule, cls):
            raise ConfigError("config['name']", f"must name a {cls.__name__}", config)
        return schedule

    def resolve(self: S, source: Clock | Progress | None = None, **known: int | None) -> S:
        """Returns a copy whose duration lengths are steps, converted with ``source``.

        Args:
            source: a clock or snapshot that knows steps per epoch, batch size, tokens.
            **known: ``steps_per_epoch``, ``batch_size``, ``tokens_per_step`` given by hand.

        Raises:
            ConversionError: a conversion needs a number neither source gives (it is named).

        Example:
            >>> from globalstep.schedules import CosineDecay
            >>> CosineDecay(1.0, "3ep").resolve(steps_per_epoch=12).decay_steps
            36
        """
        if source is not None:
            known = {
                "steps_per_epoch": source.steps_per_epoch,
                "batch_size": source.batch_size,
                "tokens_per_step": source.tokens_per_step,
                **{k: v for k, v in known.items() if v is not None},
            }
        changes: dict[str, Any] = {}
        for field, pending in self._pending.items():
            if isinstance(pending, tuple):
                changes[field] = tuple(d.to_steps(**known) for d in pending)
            else:
                changes[field] = pending.to_steps(**known)
        for spec in fields_of(self):
            value = getattr(self, spec.name)
            if isinstance(value, Schedule):
                changes[spec.name] = value.resolve(source, **known)
            elif isinstance(value, tuple) and value and isinstance(value[0], Schedule):
                changes[spec.name] = tuple(v.resolve(source, **known) for v in value)
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def end_step(self) -> int | None:
        """The first step from which the value stays constant, or None if it never does.

        Example:
            >>> from globalstep.schedules import CosineDecay
            >>> CosineDecay(1.0, 100).end_step()
            100
        """
        return None


MEMO_CALLS.add(Schedule.__call__)


def _to_json(value: Any) -> Any:
    if isinstance(value, Schedule):
        return value.to_config()
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _from_json(value: Any) -> Any:
    if isinstance(value, Mapping) and "name" in value:
        return from_config(value)
    if isinstance(value, list):
        return tuple(_from_json(v) for v in value)
    return value


def from_config(config: Mapping[str, Any]) -> Schedule:
    """Builds any registered schedule from its ``to_config()`` dict.

    Raises:
        ConfigError: not a mapping, no ``name`` key, an unknown name, or bad parameters.

    Example:
        >>> s = from_config({"name": "constant", "value": 0.5})
        >>> s(10)
        0.5
    """
    if not isinstance(config, Mapping):
        raise ConfigError("config", "must be a mapping with a 'name' key", config)
    name = config.get("name")
    if name not in _REGISTRY:
        raise ConfigError(
            "config['name']",
            f"must be one of {', '.join(sorted(_REGISTRY))}",
            name,
            hint="A schedule of your own is known once the module that defines it is imported.",
        )
    cls = _REGISTRY[name]
    params = {k: _from_json(v) for k, v in config.items() if k != "name"}
    names = {f.name for f in fields_of(cls)}
    unknown = sorted(set(params) - names)
    if unknown:
        raise ConfigError(
            "config", f"has parameters {name} does not take ({', '.join(sorted(names))})", unknown
        )
    return cls(**params)


def public_name(cls: type) -> str:
    """Where a user imports ``cls`` from: a door's name for globalstep's own classes (their
    modules are private), the defining module's for anyone else's."""
    module = cls.__module__
    if module.startswith("globalstep.") and "._" in module:
        module = module[: module.index("._")]
    return f"{module}.{cls.__qualname__}"


def _register(name: Any, cls: type[Schedule]) -> None:
    """Registers ``cls`` under ``name``; refuses a name another class holds.

    The same class defined again (a notebook cell run twice, a module reloaded: the same
    module and qualified name where it was defined) takes its own name back.
    """
    if not isinstance(name, str):
        raise ConfigError(f"{cls.__name__}.name", "must be a str", name)
    origin = (cls.__module__, cls.__qualname__)
    held = _REGISTRY.get(name)
    if held is not None and _ORIGINS[name] != origin:
        raise ConfigError(
            f"{cls.__name__}.name",
            f"must be a schedule name no other class has; {public_name(held)} has it",
            name,
            hint=f"Give {cls.__module__}.{cls.__qualname__} a name of its own "
            "(globalstep.schedules.registered() lists the names taken).",
        )
    _REGISTRY[name] = cls
    _ORIGINS[name] = origin


def registered() -> dict[str, type[Schedule]]:
    """Returns every schedule class by its config name."""
    return dict(sorted(_REGISTRY.items()))
