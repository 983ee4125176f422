"""``globalstep plan``: a run's steps from its data, and the warnings nobody gives today.

A step is one optimizer update (see :mod:`globalstep._clock`). With ``dataset_size`` rows,
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
    >>> print(plan.lint(lr)[0])  # doctest: +NORMALIZE_WHITESPACE
    decay_steps=100000 but the run has 24,000 steps: the value stays at its initial 0.1
    for the whole run
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from globalstep._errors import ConfigError, ConversionError
from globalstep._units import Duration, Unit
from globalstep.schedules._base import Schedule
from globalstep.schedules._cli import add_schedule_arguments, schedule_from_args
from globalstep.schedules._compose import Join, Warmup
from globalstep.schedules._decay import ExponentialDecay, InverseTimeDecay, NaturalExpDecay
from globalstep.schedules._polynomial import Constant, PiecewiseConstant
from globalstep.schedules._warmup_decay import InverseSqrt, OneCycle, WarmupStableDecay

__all__ = ["Finding", "Plan", "add_parser"]


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
        tokens_per_sample: tokens in one row (a sequence length), for token durations.

    Raises:
        ConfigError: a count out of range, or an epoch with no update at all.
    """

    dataset_size: int
    batch_size: int
    epochs: int
    grad_accum: int = 1
    world_size: int = 1
    drop_last: bool = False
    tokens_per_sample: int | None = None

    def __post_init__(self) -> None:
        for name, minimum in (
            ("dataset_size", 1),
            ("batch_size", 1),
            ("epochs", 1),
            ("grad_accum", 1),
            ("world_size", 1),
        ):
            _count(name, getattr(self, name), minimum)
        if self.tokens_per_sample is not None:
            _count("tokens_per_sample", self.tokens_per_sample, 1)
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
            steps_per_epoch=self.steps_per_epoch,
            batch_size=self.samples_per_step,
            tokens_per_step=self.tokens_per_step,
        )

    @property
    def tokens_per_step(self) -> int | None:
        """Tokens per optimizer update, or None without ``tokens_per_sample``."""
        if self.tokens_per_sample is None:
            return None
        return self.samples_per_step * self.tokens_per_sample

    def resolve(self, schedule: Schedule) -> Schedule:
        """Returns ``schedule`` with its durations converted to this run's steps."""
        return schedule.resolve(
            steps_per_epoch=self.steps_per_epoch,
            batch_size=self.samples_per_step,
            tokens_per_step=self.tokens_per_step,
        )

    def lint(
        self, schedule: Schedule | None = None, triggers: Mapping[str, Any] | None = None
    ) -> list[str]:
        """Returns a warning for each way the schedule, a trigger or the batching misfits
        this run: the messages of :meth:`findings`."""
        return [finding.message for finding in self.findings(schedule, triggers)]

    def findings(
        self, schedule: Schedule | None = None, triggers: Mapping[str, Any] | None = None
    ) -> list[Finding]:
        """Returns every misfit this plan can prove, each with a code and a message.

        Args:
            schedule: checked for a staircase that never fires, a decay longer than the
                run or much slower than it, a warm-up longer than the run, an end before
                the run's end, boundaries past the end, and a value that never changes.
            triggers: ``{name: period}``, each period as given to ``every()``; checked for
                a first firing after the run's end, and for firing at every step
                (wall-time periods cannot be checked).

        Raises:
            ConfigError: a trigger period is not a positive duration.
            ConversionError: a duration needs a number this plan does not know.

        Example:
            >>> [f.code for f in Plan(1200, 5000, 3).findings()]
            ['batch-larger-than-data']
        """
        found = self._batching()
        if schedule is not None:
            schedule = self.resolve(schedule)
            found += _lint_schedule(schedule, self.total_steps, top=True)
            if not found_schedule(found) and not isinstance(schedule, Constant):
                last = self.total_steps - 1
                if schedule(0) == schedule(last):
                    found.append(
                        Finding(
                            "unchanged",
                            f"the value at the run's last step ({last:,}) equals the value at "
                            f"step 0 ({_fmt(schedule(0))}): the schedule has no effect",
                        )
                    )
        for name, period in (triggers or {}).items():
            found += self._lint_trigger(name, period)
        return found

    def _batching(self) -> list[Finding]:
        per_process = self.dataset_size // self.world_size
        found: list[Finding] = []
        if self.batch_size > per_process:
            found.append(
                Finding(
                    "batch-larger-than-data",
                    f"batch_size={self.batch_size:,} is larger than the {per_process:,} rows "
                    f"each process sees per epoch: every epoch is one partial batch",
                )
            )
            return found
        rows = math.ceil(self.dataset_size / self.world_size)
        if rows % self.batch_size:
            left = rows % self.batch_size
            fate = "dropped" if self.drop_last else "a smaller batch"
            found.append(
                Finding(
                    "partial-batch",
                    f"an epoch is {rows / self.batch_size:.4g} batches of {self.batch_size:,} "
                    f"rows per process: its last {left:,} rows are {fate}",
                )
            )
        rounding = math.floor if self.drop_last else math.ceil
        micro = int(rounding(rows / self.batch_size))
        if self.grad_accum > 1 and micro % self.grad_accum:
            fate = "dropped" if self.drop_last else "an update of fewer micro-batches"
            left = micro % self.grad_accum
            what = "micro-batch is" if left == 1 else f"{left} micro-batches are"
            found.append(
                Finding(
                    "partial-accumulation",
                    f"an epoch is {micro:,} micro-batches, not a multiple of "
                    f"grad_accum={self.grad_accum}: its last {what} {fate}",
                )
            )
        return found

    def trigger_steps(self, period: Any, name: str = "every") -> int:
        """The steps between a trigger's firings in this run (its first firing's step).

        Raises:
            ConfigError: the period is not a positive duration, or it is wall time.
            ConversionError: a token period without ``tokens_per_sample``.
        """
        duration = Duration.parse(period, name)
        if duration.value <= 0:
            raise ConfigError(name, "must be a positive duration, e.g. 500st or 1ep", period)
        if duration.unit is Unit.SECONDS:
            raise ConfigError(name, "is wall time, which has no fixed number of steps", period)
        if duration.unit is Unit.TOKENS and self.tokens_per_sample is None:
            raise ConfigError(
                name,
                "counts tokens: give the tokens in one row (--tokens-per-sample)",
                period,
            )
        return self.steps(duration, name)

    def _lint_trigger(self, name: str, period: Any) -> list[Finding]:
        duration = Duration.parse(period, name)
        if duration.unit is Unit.SECONDS:
            return []
        first = self.trigger_steps(duration, name)
        # A trigger named by its period alone (as `plan --every` names them) is not named twice.
        label = "a trigger" if name == period else f"trigger {name!r}"
        if first > self.total_steps:
            return [
                Finding(
                    "trigger-never-fires",
                    f"{label} every {duration} first fires at step {first:,}, but the run "
                    f"has {self.total_steps:,} steps: it never fires",
                )
            ]
        if first == 1 and duration.unit is not Unit.STEPS:
            return [
                Finding(
                    "trigger-every-step",
                    f"{label} every {duration} is at most one step in this run: it fires at "
                    f"every one of the {self.total_steps:,} steps",
                )
            ]
        return []


@dataclass(frozen=True)
class Finding:
    """One misfit of a plan: a short code (for tools and ``--json``) and a sentence.

    Attributes:
        code: e.g. ``"staircase-never-decays"``, ``"trigger-never-fires"``.
        message: what is wrong, with the numbers that show it.
    """

    code: str
    message: str

    def __str__(self) -> str:
        return self.message


_SCHEDULE_CODES = frozenset(
    {
        "staircase-never-decays",
        "slow-decay",
        "decay-longer-than-run",
        "warmup-longer-than-run",
        "boundary-past-end",
        "ends-early",
    }
)


def found_schedule(found: list[Finding]) -> bool:
    """True when a finding about the schedule is among ``found``."""
    return any(f.code in _SCHEDULE_CODES for f in found)


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _lint_schedule(schedule: Schedule, total: int, *, top: bool) -> list[Finding]:
    """The findings for ``schedule`` over the ``total`` steps it sees: the run's at the top,
    and for a part of a warm-up or a join, the steps from where the part starts."""
    found: list[Finding] = []
    scope = "the run" if top else f"the {schedule.name} part"
    whole = "run" if top else "part"
    if isinstance(schedule, ExponentialDecay | NaturalExpDecay | InverseTimeDecay):
        begin = int(schedule.begin) if isinstance(schedule, ExponentialDecay) else 0
        first_change = begin + int(schedule.decay_steps)
        neutral = 1 if isinstance(schedule, ExponentialDecay) else 0
        if schedule.rate != neutral and first_change >= total:
            if schedule.staircase:
                found.append(
                    Finding(
                        "staircase-never-decays",
                        f"decay_steps={schedule.decay_steps} but {scope} has {total:,} steps: "
                        f"the value stays at its initial {_fmt(schedule(0))} for the whole "
                        f"{whole}",
                    )
                )
            else:
                start, stop = float(schedule(0)), float(schedule(total - 1))
                change = 100 * (stop - start) / start if start else 0.0
                found.append(
                    Finding(
                        "slow-decay",
                        f"decay_steps={schedule.decay_steps} is longer than {scope}'s "
                        f"{total:,} steps: the value only goes from {_fmt(start)} to "
                        f"{_fmt(stop)} ({change:+.2g}%)",
                    )
                )
    warmup = _warmup(schedule)
    if warmup is not None and warmup[1] >= total:
        found.append(
            Finding(
                "warmup-longer-than-run",
                f"the warm-up of {warmup[0]:,} steps is not shorter than {scope}'s {total:,} "
                "steps: the rate never reaches its peak",
            )
        )
    if isinstance(schedule, PiecewiseConstant | Join):
        for boundary in schedule.boundaries:
            if int(boundary) >= total:
                found.append(
                    Finding(
                        "boundary-past-end",
                        f"boundary {int(boundary):,} is at or past {scope}'s end ({total:,} "
                        "steps): what follows it is never used",
                    )
                )
    if top and not isinstance(schedule, Constant | PiecewiseConstant | Join):
        end = schedule.end_step()
        # Reaching the final value at the run's last step (end == total - 1) is on time.
        if end is not None and 0 < end < total - 1:
            tail = total - end
            found.append(
                Finding(
                    "ends-early",
                    f"the schedule ends at step {end:,}: its final value {_fmt(schedule(end))} "
                    f"is used for the last {tail:,} steps ({100 * tail / total:.1f}% of the run)",
                )
            )
        elif end is not None and end > total and warmup is None and _left(schedule, end, total):
            found.append(
                Finding(
                    "decay-longer-than-run",
                    f"the schedule reaches its final value {_fmt(schedule(end))} at step "
                    f"{end:,}, but the run ends at step {total - 1:,}, where it is still at "
                    f"{_fmt(schedule(total - 1))} (from {_fmt(schedule(0))} at step 0)",
                )
            )
    for part, start in _parts(schedule):
        if start < total:
            found += _lint_schedule(part, total - start, top=False)
    return found


def _left(schedule: Schedule, end: int, total: int) -> bool:
    """True when more than 1% of the schedule's change is still to come at the run's end."""
    start, last, final = float(schedule(0)), float(schedule(total - 1)), float(schedule(end))
    change = abs(start - final)
    return change > 0 and abs(last - final) > 0.01 * change


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
    # The command's options are Plan's fields, by the same names (add_parser).
    plan = Plan(**{f.name: getattr(args, f.name) for f in fields(Plan)})
    schedule = schedule_from_args(args, plan.total_steps)
    # Everything is computed before anything is printed: a bad --every is one error line.
    triggers = {period: period for period in args.every or []}
    firings = {
        period: plan.trigger_steps(period, "--every")
        for period in triggers
        if Duration.parse(period, "--every").unit is not Unit.SECONDS
    }
    resolved = None
    if schedule is not None:
        try:
            resolved = plan.resolve(schedule)
        except ConversionError as err:
            raise ConfigError("schedule", f"cannot be resolved ({err})", schedule) from err
    findings = plan.findings(schedule, triggers)
    last = plan.total_steps - 1
    if args.json:
        print(json.dumps(_as_json(plan, resolved, triggers, firings, findings), indent=2))
    else:
        rows = [
            ("steps per epoch", f"{plan.steps_per_epoch:,}"),
            ("total steps", f"{plan.total_steps:,}"),
            ("samples per step", f"{plan.samples_per_step:,}"),
            ("samples", f"{plan.samples:,}"),
        ]
        if resolved is not None:
            rows += [
                ("schedule", resolved.describe()),
                ("value at step 0", _fmt(resolved(0))),
                (f"value at step {last:,}", _fmt(resolved(last))),
            ]
        for period in triggers:
            rows.append((f"every {period}", _firing_text(firings.get(period), plan.total_steps)))
        width = max(len(label) for label, _ in rows)
        for label, value in rows:
            print(f"{label:<{width}}  {value}")
    for finding in findings:
        print(f"warning: {finding.message}", file=sys.stderr)
    return 1 if findings and args.strict else 0


def _firing_text(period: int | None, total: int) -> str:
    if period is None:
        return "wall time: not known in steps"
    times = total // period
    if times == 0:
        return f"first at step {period:,}: never within the run"
    if times == 1:
        return f"once, at step {period:,}"
    return f"steps {period:,}, {2 * period:,}, ... ({times:,} times)"


def _as_json(
    plan: Plan,
    schedule: Schedule | None,
    triggers: Mapping[str, Any],
    firings: Mapping[str, int],
    findings: list[Finding],
) -> dict[str, Any]:
    last = plan.total_steps - 1
    return {
        "plan": {
            "dataset_size": plan.dataset_size,
            "batch_size": plan.batch_size,
            "epochs": plan.epochs,
            "grad_accum": plan.grad_accum,
            "world_size": plan.world_size,
            "drop_last": plan.drop_last,
            "tokens_per_sample": plan.tokens_per_sample,
            "steps_per_epoch": plan.steps_per_epoch,
            "total_steps": plan.total_steps,
            "samples_per_step": plan.samples_per_step,
            "samples": plan.samples,
        },
        "schedule": None
        if schedule is None
        else {
            "config": schedule.to_config(),
            "value_at_step_0": schedule(0),
            "value_at_last_step": schedule(last),
        },
        "triggers": [
            {
                "every": period,
                "period_steps": firings.get(period),
                "fires": None if period not in firings else plan.total_steps // firings[period],
            }
            for period in triggers
        ],
        "findings": [{"code": f.code, "message": f.message} for f in findings],
    }


def add_parser(subparsers: Any) -> None:
    """Registers ``globalstep plan``."""
    parser = subparsers.add_parser(
        "plan",
        help="steps per epoch, total steps, and what misfits the run",
        description="A run's steps from its data, and every misfit of its schedule, "
        "triggers and batching that can be proven (warnings on standard error).",
    )
    parser.add_argument("--dataset-size", type=int, required=True, help="training rows")
    parser.add_argument("--batch-size", type=int, required=True, help="rows per micro-batch")
    parser.add_argument("--epochs", type=int, required=True, help="passes over the data")
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per update")
    parser.add_argument("--world-size", type=int, default=1, help="data-parallel processes")
    parser.add_argument("--drop-last", action="store_true", help="drop partial batches")
    parser.add_argument(
        "--tokens-per-sample",
        type=int,
        metavar="N",
        help="tokens in one row (sequence length), for token durations such as 2e9tok",
    )
    parser.add_argument(
        "--every",
        action="append",
        metavar="DURATION",
        help="a trigger's period, e.g. 30000st or 5ep (repeatable)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit with status 1 when there is any warning"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the plan and its findings as JSON"
    )
    add_schedule_arguments(parser, positional=False)
    parser.set_defaults(func=_run)
