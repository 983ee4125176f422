"""Triggers: pure decisions "is it time?" taken from a :class:`~globalstep._clock.Progress`.

A trigger fires when a boundary has been crossed since it last fired. It never counts how
often it was called, so a run that ticks by 3, or is stopped and resumed (trigger state
restored from a checkpoint), fires exactly where an uninterrupted run would. Boundaries are
counted in the duration's own unit: steps (see :mod:`globalstep._clock` for what a step is),
epochs completed, samples, tokens, or seconds of training time (the clock's
``elapsed_seconds``, read from its injectable monotonic ``time_fn``).

A new trigger has fired at no boundary yet: the first time it looks at a run that has
passed one, it fires (once). Restore its state with the clock's to resume without that, or,
for a trigger made in the middle of a run, call :meth:`Trigger.skip_past` first.

Example:
    >>> from globalstep import Clock
    >>> clock, log = Clock(), every(100)
    >>> fired = []
    >>> for _ in range(1000):
    ...     clock.tick()
    ...     if log.should_fire(clock):
    ...         fired.append(clock.step)
    >>> fired
    [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]
"""

from __future__ import annotations

import bisect
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from globalstep._clock import Clock, Progress
from globalstep._errors import ConfigError, UncountedEpochWarning
from globalstep._units import Duration, DurationLike, Unit

__all__ = ["Trigger", "UncountedEpochWarning", "all_of", "any_of", "at", "every", "once"]


def _snapshot(source: Progress | Clock) -> Progress:
    if isinstance(source, Clock):
        return source.progress()
    if isinstance(source, Progress):
        return source
    raise ConfigError("progress", "must be a globalstep Progress or Clock", source)


def _counter(*durations: Duration) -> Duration:
    """The duration (of one unit) to count progress with: a fractional one where there is
    one, so that ``"1.5ep"`` is counted in fractions of an epoch, not in whole epochs."""
    return next((d for d in durations if d.value.denominator != 1), durations[0])


Amount = Fraction | int
"""A count in a trigger's unit: an int where it is whole (steps), so the per-step check
does no Fraction arithmetic."""


_NEVER = 2**64
"""Above every count a trigger of steps can see (steps stop at 2**63-1)."""


def _whole(value: Fraction) -> Amount:
    return value.numerator if value.denominator == 1 else value


def _fraction_to_json(value: Amount | None) -> str | None:
    return None if value is None else str(value)


class Trigger(ABC):
    """A decision "is it time?" whose state round-trips through a checkpoint."""

    @abstractmethod
    def should_fire(self, progress: Progress | Clock) -> bool:
        """Returns True when a boundary was crossed since the trigger last fired.

        Args:
            progress: the run's snapshot (a Clock is read through ``progress()``).
        """

    @abstractmethod
    def skip_past(self, progress: Progress | Clock) -> None:
        """Counts every boundary the run has reached as fired, without firing.

        For a trigger made in the middle of a run (after a restore) that should fire only
        at boundaries still ahead.

        Example:
            >>> from globalstep import Clock
            >>> clock = Clock()
            >>> clock.tick(250)
            >>> log = every(100)
            >>> log.skip_past(clock)
            >>> log.should_fire(clock)
            False
        """

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Returns the trigger's state as a JSON-ready dict."""

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores the state saved by :meth:`state_dict`."""

    def _check_spec(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping):
            raise ConfigError("state", "must be a mapping from Trigger.state_dict()", state)
        if state.get("spec") != repr(self):
            raise ConfigError(
                "state['spec']",
                f"must describe this trigger, {self!r}",
                state.get("spec"),
                hint="Restore each trigger from its own saved state.",
            )


class _BoundaryTrigger(Trigger):
    """Fires when the counter in ``unit`` passes a new boundary; subclasses place them."""

    def __init__(self, unit_of: Duration) -> None:
        self._unit_of = unit_of
        # Steps and whole epochs are one int read, from a Clock or a snapshot alike.
        whole_epochs = unit_of.unit is Unit.EPOCHS and unit_of.value.denominator == 1
        self._field = "step" if unit_of.unit is Unit.STEPS else "epoch" if whole_epochs else ""
        self._by_step = unit_of.unit is Unit.STEPS
        self._last: Amount | None = None
        # The least count at which should_fire() can be True (the first boundary above
        # _last): below it, a trigger of steps answers False with one comparison.
        self._next: Amount = 0
        self._warned = False

    @abstractmethod
    def _boundary_at_or_below(self, value: Amount) -> Amount | None:
        """Returns the greatest boundary <= value, or None."""

    @abstractmethod
    def _boundary_above(self, value: Amount | None) -> Amount:
        """Returns the least boundary > value (the first one for None); _NEVER if none."""

    def _set_last(self, last: Amount | None) -> None:
        self._last = last
        self._next = self._boundary_above(last)

    def _count(self, progress: Progress | Clock) -> Amount:
        if self._field and isinstance(progress, Clock | Progress):
            value: int = getattr(progress, self._field)
            if value == 0 and self._field == "epoch" and not self._warned:
                self._warn_uncounted(progress)
            return value
        return self._unit_of.count(_snapshot(progress))

    def _warn_uncounted(self, progress: Progress | Clock) -> None:
        """Says once that epochs are not counted, where nothing can advance them by itself."""
        if progress.steps_per_epoch is None and progress.step > 0:
            self._warned = True
            name = progress.clock if isinstance(progress, Progress) else progress.name
            warnings.warn(
                f"{self!r} counts epochs, but clock {name!r} does not count them itself (it "
                "has no steps_per_epoch): it fires only after you call clock.end_epoch(). "
                "Give Clock(steps_per_epoch=...), or call clock.end_epoch() at the end of "
                "each epoch.",
                UncountedEpochWarning,
                stacklevel=4,
            )

    def should_fire(self, progress: Progress | Clock) -> bool:
        if self._by_step:
            kind = type(progress)
            # The per-update path: below the next boundary nothing can fire.
            if (kind is Clock or kind is Progress) and progress.step < self._next:
                return False
        boundary = self._boundary_at_or_below(self._count(progress))
        if boundary is None:
            return False
        if self._last is None or boundary > self._last:
            self._set_last(boundary)
            return True
        return False

    def skip_past(self, progress: Progress | Clock) -> None:
        boundary = self._boundary_at_or_below(self._count(progress))
        if boundary is not None and (self._last is None or boundary > self._last):
            self._set_last(boundary)

    def state_dict(self) -> dict[str, Any]:
        return {"spec": repr(self), "last": _fraction_to_json(self._last)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._check_spec(state)
        last = state.get("last")
        if last is not None and not isinstance(last, str):
            raise ConfigError("state['last']", "must be None or a fraction string", last)
        try:
            value = None if last is None else _whole(Fraction(last))
        except ValueError as err:
            raise ConfigError("state['last']", "must be None or a fraction string", last) from err
        self._set_last(value)


class _Every(_BoundaryTrigger):
    def __init__(self, interval: Duration, start: Duration) -> None:
        super().__init__(_counter(interval, start))
        self._interval = _whole(interval.value)
        self._start = _whole(start.value)
        self._text = (str(interval), str(start))
        self._next = self._start

    def __repr__(self) -> str:
        return f"every({self._text[0]!r}, start={self._text[1]!r})"

    def _boundary_at_or_below(self, value: Amount) -> Amount | None:
        if value < self._start:
            return None
        return self._start + (value - self._start) // self._interval * self._interval

    def _boundary_above(self, value: Amount | None) -> Amount:
        if value is None or value < self._start:
            return self._start
        return self._start + ((value - self._start) // self._interval + 1) * self._interval


class _At(_BoundaryTrigger):
    def __init__(self, name: str, points: Sequence[Duration]) -> None:
        super().__init__(_counter(*points))
        self._name = name
        self._points = sorted({_whole(p.value) for p in points})
        self._text = ", ".join(repr(str(p)) for p in points)
        self._next = self._points[0]

    def __repr__(self) -> str:
        return f"{self._name}({self._text})"

    def _boundary_at_or_below(self, value: Amount) -> Amount | None:
        index = bisect.bisect_right(self._points, value)
        return self._points[index - 1] if index else None

    def _boundary_above(self, value: Amount | None) -> Amount:
        if value is None:
            return self._points[0]
        index = bisect.bisect_right(self._points, value)
        return self._points[index] if index < len(self._points) else _NEVER


def every(duration: DurationLike, *, start: DurationLike | None = None) -> Trigger:
    """Fires each time the run passes ``start``, ``start + duration``, ``start + 2 * duration``...

    Args:
        duration: the period: ``100`` (steps), ``"1ep"``, ``"1e6sp"``, ``"30min"``, ...
        start: the first boundary, in the duration's unit (an int counts in that unit);
            defaults to one period, so ``every(100)`` fires at 100, 200, ... and never at
            step 0, while ``every(100, start=0)`` also fires at step 0.

    Raises:
        DurationError: ``duration`` or ``start`` is not a duration.
        ConfigError: the period is not > 0, the start is negative, or its unit differs.

    Example:
        >>> from globalstep import Clock
        >>> clock, evaluate = Clock(), every(100, start=0)
        >>> evaluate.should_fire(clock)
        True
    """
    interval = Duration.parse(duration, "duration")
    if interval.value <= 0:
        raise ConfigError("duration", "must be > 0", duration)
    if start is None:
        first = interval
    elif isinstance(start, int) and not isinstance(start, bool):
        if start < 0:
            raise ConfigError("start", "must be >= 0", start)
        first = Duration(Fraction(start), interval.unit)
    else:
        first = Duration.parse(start, "start")
        if first.unit is not interval.unit:
            raise ConfigError(
                "start", f"must be in the duration's unit ({interval.unit.value})", start
            )
    return _Every(interval, first)


def at(*steps: DurationLike) -> Trigger:
    """Fires once at each of the given points (steps, or durations of one unit).

    Raises:
        ConfigError: no point given, or points in different units.

    Example:
        >>> from globalstep import Clock
        >>> clock, milestones = Clock(), at(2, 5)
        >>> fired = []
        >>> for _ in range(6):
        ...     clock.tick()
        ...     fired += [clock.step] if milestones.should_fire(clock) else []
        >>> fired
        [2, 5]
    """
    if not steps:
        raise ConfigError("steps", "must name at least one point", steps)
    points = [Duration.parse(s, "steps") for s in steps]
    units = {p.unit for p in points}
    if len(units) != 1:
        raise ConfigError("steps", "must all be in one unit", tuple(str(p) for p in points))
    return _At("at", points)


def once(duration: DurationLike) -> Trigger:
    """Fires once, when the run first reaches ``duration`` (any unit).

    Example:
        >>> from globalstep import Clock
        >>> clock, warm = Clock(steps_per_epoch=4), once("1ep")
        >>> clock.tick(3); warm.should_fire(clock)
        False
        >>> clock.tick(); warm.should_fire(clock)
        True
    """
    return _At("once", [Duration.parse(duration, "duration")])


class _Combined(Trigger):
    def __init__(self, name: str, triggers: tuple[Trigger, ...]) -> None:
        if not triggers:
            raise ConfigError("triggers", "must hold at least one trigger", triggers)
        for t in triggers:
            if not isinstance(t, Trigger):
                raise ConfigError("triggers", "must all be triggers (every, at, once, ...)", t)
        self._name = name
        self._triggers = triggers

    def __repr__(self) -> str:
        return f"{self._name}({', '.join(repr(t) for t in self._triggers)})"

    def skip_past(self, progress: Progress | Clock) -> None:
        snapshot = _snapshot(progress)
        for trigger in self._triggers:
            trigger.skip_past(snapshot)

    def state_dict(self) -> dict[str, Any]:
        return {"spec": repr(self), "children": [t.state_dict() for t in self._triggers]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._check_spec(state)
        children = state.get("children")
        if not isinstance(children, list) or len(children) != len(self._triggers):
            raise ConfigError("state['children']", "must list one state per trigger", children)
        for trigger, child in zip(self._triggers, children, strict=True):
            trigger.load_state_dict(child)


class _AnyOf(_Combined):
    def should_fire(self, progress: Progress | Clock) -> bool:
        snapshot = _snapshot(progress)
        # Every child looks, so each one's state stays current.
        decisions = [t.should_fire(snapshot) for t in self._triggers]
        return any(decisions)


class _AllOf(_Combined):
    def __init__(self, name: str, triggers: tuple[Trigger, ...]) -> None:
        super().__init__(name, triggers)
        self._latched = [False] * len(triggers)

    def should_fire(self, progress: Progress | Clock) -> bool:
        snapshot = _snapshot(progress)
        for i, t in enumerate(self._triggers):
            self._latched[i] = t.should_fire(snapshot) or self._latched[i]
        if all(self._latched):
            self._latched = [False] * len(self._triggers)
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "latched": list(self._latched)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        latched = state.get("latched")
        if (
            not isinstance(latched, list)
            or len(latched) != len(self._triggers)
            or not all(isinstance(x, bool) for x in latched)
        ):
            raise ConfigError("state['latched']", "must list one bool per trigger", latched)
        self._latched = list(latched)


def any_of(*triggers: Trigger) -> Trigger:
    """Fires when any of ``triggers`` fires (every one of them is evaluated each time).

    Example:
        >>> from globalstep import Clock
        >>> clock, t = Clock(steps_per_epoch=3), any_of(every(2), every("1ep"))
        >>> [t.should_fire((clock.tick(), clock)[1]) for _ in range(4)]
        [False, True, True, True]
    """
    return _AnyOf("any_of", triggers)


def all_of(*triggers: Trigger) -> Trigger:
    """Fires once every one of ``triggers`` has fired since ``all_of`` last fired.

    ``all_of(every(100), every("30min"))`` fires at most every 100 steps and at most every
    30 minutes of training.

    Example:
        >>> from globalstep import Clock
        >>> clock, t = Clock(), all_of(every(2), every(3))
        >>> [s for s in range(1, 13) if t.should_fire((clock.tick(), clock)[1])]
        [3, 6, 9, 12]
    """
    return _AllOf("all_of", triggers)
