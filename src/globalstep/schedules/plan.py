"""``globalstep plan``: a run's steps from its data, and the warnings nobody gives today.

A step is one optimizer update (see :mod:`globalstep.clock`). With ``dataset_size`` rows,
``world_size`` processes, each taking ``batch_size`` rows per micro-batch and
``grad_accum`` micro-batches per update, an epoch is ``ceil(dataset_size / world_size /
batch_size)`` micro-batches per process (``floor`` with ``drop_last``; samplers that pad
make each process see ``ceil(dataset_size / world_size)`` rows), grouped into updates of
``grad_accum`` (a last, partial group is an update too, unless ``drop_last``).

Example:
    >>> plan = Plan(dataset_size=1200, batch_size=100, epochs=2000)
    >>> plan.steps_per_epoch, plan.total_steps
    (12, 24000)
    >>> from globalstep.schedules import ExponentialDecay
    >>> lr = ExponentialDecay(0.1, decay_steps=100_000, rate=0.96, staircase=True)
    >>> print(plan.lint(lr)[0])
    decay_steps=100000 but the run has 24,000 steps: the rate stays 0.1 for the whole run
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from globalstep.errors import ConfigError, ConversionError
from globalstep.schedules._base import Schedule
from globalstep.schedules._cli import add_schedule_arguments, schedule_from_args
from globalstep.schedules.compose import Join, Warmup
from globalstep.schedules.core import (
    Constant,
    ExponentialDecay,
    InverseSqrt,
    InverseTimeDecay,
    NaturalExpDecay,
    OneCycle,
    PiecewiseConstant,
    WarmupStableDecay,
)
from globalstep.units import Duration, Unit

__all__ = ["Plan", "add_parser"]


def _count(parameter: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(parameter, f"must be an int >= {minimum}", value)


@dataclass(frozen=True)
class Plan:
    """A run's shape: how many updates an epoch and the whole run have.

    Args:
        dataset_size: training rows, >= 1.
        batch_size: rows per micro-batch per process, >= 1.
        epochs: passes over the data, >= 1.
        grad_accum: micro-batches per optimizer update, >= 1.
        world_size: data-parallel processes, >= 1.
        drop_last: drop the last partial batch and the last partial accumulation group.

    Raises:
        ConfigError: a count out of range, or an epoch with no update at all.
    """

    dataset_size: int
    batch_size: int
    epochs: int
    grad_accum: int = 1
    world_size: int = 1
    drop_last: bool = False

    def __post_init__(self) -> None:
        for name, minimum in (
            ("dataset_size", 1),
            ("batch_size", 1),
            ("epochs", 1),
            ("grad_accum", 1),
            ("world_size", 1),
        ):
            _count(name, getattr(self, name), minimum)
        if not isinstance(self.drop_last, bool):
            raise ConfigError("drop_last", "must be a bool", self.drop_last)
        if self.steps_per_epoch == 0:
            raise ConfigError(
                "batch_size",
                f"leaves no full update per epoch with drop_last (dataset_size="
                f"{self.dataset_size}, world_size={self.world_size}, grad_accum={self.grad_accum})",
                self.batch_size,
            )

    @property
    def samples_per_step(self) -> int:
        """Rows per optimizer update, all processes together (the global batch)."""
        return self.batch_size * self.grad_accum * self.world_size

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer updates per epoch."""
        rounding = math.floor if self.drop_last else math.ceil
        per_process = rounding(self.dataset_size / self.world_size)
        micro_batches = rounding(per_process / self.batch_size)
        return int(rounding(micro_batches / self.grad_accum))

    @property
    def total_steps(self) -> int:
        """Optimizer updates in the whole run."""
        return self.steps_per_epoch * self.epochs

    @property
    def samples(self) -> int:
        """Rows the run trains on (padding and dropped rows accounted as the sampler does)."""
        if self.drop_last:
            return self.total_steps * self.samples_per_step
        return self.dataset_size * self.epochs

    def steps(self, duration: Duration | str | int, parameter: str = "duration") -> int:
        """Converts a duration (``"3ep"``, ``"1e6sp"``, ``500``) to steps of this run.

        Raises:
            ConversionError: a wall-time duration, which has no fixed number of steps.
        """
        return Duration.parse(duration, parameter).to_steps(
            steps_per_epoch=self.steps_per_epoch, batch_size=self.samples_per_step
        )

    def resolve(self, schedule: Schedule) -> Schedule:
        """Returns ``schedule`` with its durations converted to this run's steps."""
        return schedule.resolve(
            steps_per_epoch=self.steps_per_epoch, batch_size=self.samples_per_step
        )

    def lint(
        self, schedule: Schedule | None = None, triggers: Mapping[str, Any] | None = None
    ) -> list[str]:
        """Returns a warning for each way the schedule or a trigger misfits this run.

        Args:
            schedule: checked for a staircase that never fires, a warm-up longer than the
                run, an end before the run's end, and boundaries past the end.
            triggers: ``{name: period}``, each period as given to ``every()``; checked for
                a first firing after the run's end (wall-time periods cannot be checked).
        """
        warnings: list[str] = []
        if schedule is not None:
            schedule = self.resolve(schedule)
            warnings += _lint_schedule(schedule, self.total_steps, top=True)
        for name, period in (triggers or {}).items():
            warnings += self._lint_trigger(name, period)
        return warnings

    def _lint_trigger(self, name: str, period: Any) -> list[str]:
        duration = Duration.parse(period, name)
        if duration.unit is Unit.SECONDS:
            return []
        first = self.steps(duration, name)
        if first > self.total_steps:
            # A trigger named by its period alone (as `plan --every` names them) is not
            # named twice.
            label = "a trigger" if name == period else f"trigger {name!r}"
            return [
                f"{label} every {duration} first fires at step {first:,}, but the run "
                f"has {self.total_steps:,} steps: it never fires"
            ]
        return []


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _lint_schedule(schedule: Schedule, total: int, *, top: bool) -> list[str]:
    """The warnings for ``schedule`` over the ``total`` steps it sees: the run's at the top,
    and for a part of a warm-up or a join, the steps from where the part starts."""
    warnings: list[str] = []
    scope = "the run" if top else f"the {schedule.name} part"
    if isinstance(schedule, ExponentialDecay | NaturalExpDecay | InverseTimeDecay):
        begin = schedule.begin if isinstance(schedule, ExponentialDecay) else 0
        first_change = int(begin) + int(schedule.decay_steps)
        if (
            schedule.staircase
            and first_change >= total
            and schedule.rate != (1 if isinstance(schedule, ExponentialDecay) else 0)
        ):
            warnings.append(
                f"decay_steps={schedule.decay_steps} but {scope} has {total:,} steps: the rate "
                f"stays {_fmt(schedule(0))} for the whole {'run' if top else 'part'}"
            )
    warmup = _warmup(schedule)
    if warmup is not None and warmup[1] >= total:
        warnings.append(
            f"the warm-up of {warmup[0]:,} steps is not shorter than {scope}'s {total:,} steps: "
            "the rate never reaches its peak"
        )
    if isinstance(schedule, PiecewiseConstant | Join):
        for boundary in schedule.boundaries:
            if int(boundary) >= total:
                warnings.append(
                    f"boundary {int(boundary):,} is at or past {scope}'s end ({total:,} steps): "
                    "what follows it is never used"
                )
    if top and not isinstance(schedule, Constant | PiecewiseConstant):
        end = schedule.end_step()
        # Reaching the final value at the run's last step (end == total - 1) is on time.
        if end is not None and 0 < end < total - 1:
            tail = total - end
            warnings.append(
                f"the schedule ends at step {end:,}: its final value {_fmt(schedule(end))} is "
                f"used for the last {tail:,} steps ({100 * tail / total:.1f}% of the run)"
            )
    for part, start in _parts(schedule):
        if start < total:
            warnings += _lint_schedule(part, total - start, top=False)
    return warnings


def _parts(schedule: Schedule) -> list[tuple[Schedule, int]]:
    """Each part with the step where it starts (its step 0)."""
    if isinstance(schedule, Warmup):
        return [(schedule.schedule, int(schedule.steps))]
    if isinstance(schedule, Join):
        starts = (0, *(int(b) for b in schedule.boundaries))
        return list(zip(schedule.schedules, starts, strict=True))
    return [(part, 0) for part in schedule.parts()]


def _warmup(schedule: Schedule) -> tuple[int, int] | None:
    """The warm-up's length and the first step at its peak, or None without a warm-up."""
    if isinstance(schedule, Warmup):
        return int(schedule.steps), int(schedule.steps)
    if isinstance(schedule, WarmupStableDecay) and int(schedule.warmup_steps):
        return int(schedule.warmup_steps), int(schedule.warmup_steps)
    if isinstance(schedule, InverseSqrt):
        # The peak comes at step warmup_steps - 1, the warm-up's last update.
        return int(schedule.warmup_steps), int(schedule.warmup_steps) - 1
    if isinstance(schedule, OneCycle):
        peak = math.ceil(schedule.pct_start * int(schedule.total_steps))
        return peak, peak
    return None


def _run(args: argparse.Namespace) -> int:
    plan = Plan(
        dataset_size=args.dataset_size,
        batch_size=args.batch_size,
        epochs=args.epochs,
        grad_accum=args.grad_accum,
        world_size=args.world_size,
        drop_last=args.drop_last,
    )
    schedule = schedule_from_args(args, plan.total_steps)
    triggers = {period: period for period in args.every or []}
    rows = [
        ("steps per epoch", f"{plan.steps_per_epoch:,}"),
        ("total steps", f"{plan.total_steps:,}"),
        ("samples per step", f"{plan.samples_per_step:,}"),
        ("samples", f"{plan.samples:,}"),
    ]
    if schedule is not None:
        try:
            resolved = plan.resolve(schedule)
        except ConversionError as err:
            raise ConfigError("schedule", f"cannot be resolved ({err})", schedule) from err
        rows += [
            ("schedule", resolved.describe()),
            ("value at step 0", _fmt(resolved(0))),
            (f"value at step {plan.total_steps - 1:,}", _fmt(resolved(plan.total_steps - 1))),
        ]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    for warning in plan.lint(schedule, triggers):
        print(f"warning: {warning}")
    return 0


def add_parser(subparsers: Any) -> None:
    """Registers ``globalstep plan``."""
    parser = subparsers.add_parser(
        "plan",
        help="steps per epoch, total steps, and what misfits the run",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--dataset-size", type=int, required=True, help="training rows")
    parser.add_argument("--batch-size", type=int, required=True, help="rows per micro-batch")
    parser.add_argument("--epochs", type=int, required=True, help="passes over the data")
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per update")
    parser.add_argument("--world-size", type=int, default=1, help="data-parallel processes")
    parser.add_argument("--drop-last", action="store_true", help="drop partial batches")
    parser.add_argument(
        "--every",
        action="append",
        metavar="DURATION",
        help="a trigger's period, e.g. 30000st or 5ep (repeatable)",
    )
    add_schedule_arguments(parser, positional=False)
    parser.set_defaults(func=_run)
