"""Durations: an amount in a unit, such as ``"500st"``, ``"3ep"``, ``"1e6sp"`` or ``"30min"``.

The grammar is ``NUMBER UNIT`` where NUMBER is a non-negative decimal (``500``, ``0.5``,
``1e6``) and UNIT is one of

=========  ==============================================================
``st``     optimizer steps (``ba``, batches, is the same unit)
``ep``     epochs; fractions allowed (``0.5ep``)
``sp``     samples
``tok``    tokens
``s``      seconds of training time (``min`` and ``h`` are 60 and 3,600 s)
=========  ==============================================================

A bare int (``500`` or ``"500"``) means steps. Steps, samples and tokens are whole numbers.
A step is the number of optimizer updates applied (see :mod:`globalstep._clock`).

Example:
    >>> Duration.parse("3ep").to_steps(steps_per_epoch=12)
    36
    >>> Duration.parse("1e6sp").to_steps(batch_size=1000)
    1000
    >>> str(Duration.parse("30min"))
    '1800s'
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeAlias

from globalstep._clock import Clock, Progress
from globalstep._errors import ConfigError, ConversionError, DurationError

__all__ = ["Duration", "DurationLike", "Unit"]

GRAMMAR = (
    "NUMBER UNIT with UNIT one of st, ba, ep, sp, tok, s, min, h, e.g. '500st', '3ep', "
    "'1e6sp', '2e9tok', '90s', '30min', '2h'; a bare int means steps"
)


class Unit(enum.Enum):
    """The unit a duration is counted in."""

    STEPS = "st"
    EPOCHS = "ep"
    SAMPLES = "sp"
    TOKENS = "tok"
    SECONDS = "s"


_SUFFIXES: dict[str, tuple[Unit, int]] = {
    "st": (Unit.STEPS, 1),
    "ba": (Unit.STEPS, 1),
    "ep": (Unit.EPOCHS, 1),
    "sp": (Unit.SAMPLES, 1),
    "tok": (Unit.TOKENS, 1),
    "s": (Unit.SECONDS, 1),
    "min": (Unit.SECONDS, 60),
    "h": (Unit.SECONDS, 3600),
}
_PATTERN = re.compile(
    r"^\s*(?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>[a-z]*)\s*$"
)
_WHOLE_UNITS = (Unit.STEPS, Unit.SAMPLES, Unit.TOKENS)


@dataclass(frozen=True)
class Duration:
    """An amount of training, in one unit.

    Attributes:
        value: the amount, exact (a Fraction), in ``unit``; seconds for wall time.
        unit: the unit it is counted in.
    """

    value: Fraction
    unit: Unit

    def __post_init__(self) -> None:
        if not isinstance(self.unit, Unit):
            raise ConfigError("unit", "must be a globalstep._units.Unit", self.unit)
        if not isinstance(self.value, Fraction) or self.value < 0:
            raise ConfigError("value", "must be a Fraction >= 0", self.value)
        if self.unit in _WHOLE_UNITS and self.value.denominator != 1:
            raise ConfigError(
                "value", f"must be a whole number of {self.unit.name.lower()}", float(self.value)
            )

    @classmethod
    def parse(cls, text: Duration | str | int, parameter: str = "duration") -> Duration:
        """Reads a duration from a string, an int of steps, or a Duration.

        Args:
            text: e.g. ``"500st"``, ``"1.5ep"``, ``"2h"``, or ``500``.
            parameter: the name to use in error messages.

        Raises:
            DurationError: the text does not follow the grammar.
            ConfigError: a whole-number unit was given a fraction, or the value is negative.
        """
        if isinstance(text, Duration):
            return text
        if isinstance(text, bool):
            raise DurationError(parameter, text, GRAMMAR)
        if isinstance(text, int):
            if text < 0:
                raise ConfigError(parameter, "must be >= 0", text)
            return cls(Fraction(text), Unit.STEPS)
        if not isinstance(text, str):
            raise DurationError(parameter, text, GRAMMAR)
        match = _PATTERN.match(text)
        if match is None:
            raise DurationError(parameter, text, GRAMMAR)
        suffix = match["unit"] or "st"
        if suffix not in _SUFFIXES:
            raise DurationError(parameter, text, GRAMMAR)
        unit, factor = _SUFFIXES[suffix]
        value = Fraction(match["number"]) * factor
        if unit in _WHOLE_UNITS and value.denominator != 1:
            raise ConfigError(parameter, f"must be a whole number of {unit.name.lower()}", text)
        return cls(value, unit)

    def __str__(self) -> str:
        number = (
            str(self.value.numerator) if self.value.denominator == 1 else repr(float(self.value))
        )
        return f"{number}{self.unit.value}"

    def to_steps(
        self,
        *,
        steps_per_epoch: int | None = None,
        batch_size: int | None = None,
        tokens_per_step: int | None = None,
    ) -> int:
        """Converts to optimizer steps, rounding a fractional result up.

        Raises:
            ConversionError: the conversion needs a number that was not given (it is
                named), or the duration is wall time, which has no fixed number of steps.
        """
        if self.unit is Unit.STEPS:
            return int(self.value)
        if self.unit is Unit.SECONDS:
            raise ConversionError(
                f"{self} is wall time, which has no fixed number of steps: use a step, epoch, "
                "sample or token duration here, or a trigger (every('30min')) for timed work.",
                "steps_per_second",
            )
        needed = {
            Unit.EPOCHS: ("steps_per_epoch", steps_per_epoch),
            Unit.SAMPLES: ("batch_size", batch_size),
            Unit.TOKENS: ("tokens_per_step", tokens_per_step),
        }[self.unit]
        name, per = needed
        if per is None:
            raise ConversionError(
                f"Converting {self} to steps needs `{name}`: give it to the Clock "
                f"(Clock({name}=...)) or to the plan.",
                name,
            )
        steps = self.value * per if self.unit is Unit.EPOCHS else self.value / per
        return math.ceil(steps)

    def to_steps_for(self, source: Clock | Progress) -> int:
        """Converts to steps with what a clock (or its snapshot) knows."""
        return self.to_steps(
            steps_per_epoch=source.steps_per_epoch,
            batch_size=source.batch_size,
            tokens_per_step=source.tokens_per_step,
        )

    def count(self, progress: Progress) -> Fraction:
        """Returns how much of this duration's unit ``progress`` has covered.

        Raises:
            ConversionError: a fractional epoch duration on a clock without
                ``steps_per_epoch``, or a sample or token duration on a clock that counts none.
        """
        unit = self.unit
        if unit is Unit.STEPS:
            return Fraction(progress.step)
        if unit is Unit.EPOCHS:
            if self.value.denominator == 1:
                return Fraction(progress.epoch)
            if progress.steps_per_epoch is None:
                raise ConversionError(
                    f"A fractional epoch duration ({self}) needs the clock's `steps_per_epoch`.",
                    "steps_per_epoch",
                )
            return progress.epoch + Fraction(progress.step_in_epoch, progress.steps_per_epoch)
        if unit is Unit.SECONDS:
            return Fraction(progress.elapsed_seconds)
        counted = progress.samples if unit is Unit.SAMPLES else progress.tokens
        if counted == 0 and progress.step > 0:
            name = "batch_size" if unit is Unit.SAMPLES else "tokens_per_step"
            kind = "samples" if unit is Unit.SAMPLES else "tokens"
            raise ConversionError(
                f"{self} counts {kind}, but clock {progress.clock!r} has counted none: give "
                f"Clock({name}=...) or tick(..., {kind}=...).",
                name,
            )
        return Fraction(counted)


DurationLike: TypeAlias = Duration | str | int
"""What every ``duration`` parameter accepts: a Duration, a string, or an int of steps."""
