"""``globalstep schedule``: a schedule's values, its explanation, and a plot.

:func:`explain` states what a schedule does over a run: the formula with its parameters,
the value at step 0 (the first update's, see :mod:`globalstep._clock`), the first step where
the value changes, the first step where it has fallen to half, and the final value.

Example:
    >>> from globalstep.schedules import ExponentialDecay
    >>> e = explain(ExponentialDecay(1.0, 10, 0.5, staircase=True), total_steps=100)
    >>> e.value_at_zero, e.first_change, e.half_step, e.final_value
    (1.0, 10, 10, 0.001953125)
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from globalstep._errors import ConfigError, ConversionError
from globalstep._optional import require
from globalstep._units import Duration
from globalstep.schedules._base import Schedule
from globalstep.schedules._cli import add_schedule_arguments, schedule_from_args

__all__ = ["Explanation", "add_parser", "explain", "terminal_plot"]

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Explanation:
    """What a schedule does over ``total_steps`` steps.

    Attributes:
        formula: the formula with the parameters filled in.
        total_steps: the run's length the explanation covers.
        value_at_zero: the value at step 0.
        first_change: the first step whose value differs from step 0's, or None.
        peak_value: the largest value in the run (step 0's for a decay).
        peak_step: the first step at the peak (0 for a decay; the warm-up's end after one).
        half_step: the first step after the peak whose value is at most half the peak
            (for a positive peak), or None.
        final_value: the value at the run's last step, ``total_steps - 1``.
    """

    formula: str
    total_steps: int
    value_at_zero: float
    first_change: int | None
    half_step: int | None
    final_value: float
    peak_value: float = 0.0
    peak_step: int = 0

    def lines(self) -> list[str]:
        """The explanation as lines of text."""

        def step(value: int | None) -> str:
            return (
                f"step {value:,}"
                if value is not None
                else f"never within {self.total_steps:,} steps"
            )

        lines = [
            f"formula        {self.formula}",
            f"step 0         {self.value_at_zero:.6g}",
            f"first change   {step(self.first_change)}",
        ]
        if self.peak_step > 0:
            lines.append(f"peak           {self.peak_value:.6g} at step {self.peak_step:,}")
        if self.peak_value <= 0:
            half = "does not apply (no value is positive)"
        elif self.peak_step > 0:
            half = f"{step(self.half_step)} (half the peak)"
        else:
            half = step(self.half_step)
        lines.append(f"falls to half  {half}")
        lines.append(f"final value    {self.final_value:.6g} (step {self.total_steps - 1:,})")
        return lines


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _chunks(schedule: Schedule, begin: int, end: int) -> Iterator[tuple[int, np.ndarray]]:
    for low in range(begin, end, _CHUNK):
        yield low, schedule.values(np.arange(low, min(low + _CHUNK, end), dtype=np.int64))


def explain(schedule: Schedule, total_steps: int) -> Explanation:
    """Explains ``schedule`` over a run of ``total_steps`` steps, scanned up to the run's
    end or the schedule's :meth:`~Schedule.end_step`, after which nothing changes.

    Raises:
        ConfigError: ``total_steps`` is not an int >= 1.
    """
    if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1:
        raise ConfigError("total_steps", "must be an int >= 1", total_steps)
    start = schedule(0)
    end = schedule.end_step()
    scanned = total_steps if end is None else min(total_steps, end + 1)
    first_change = half_step = None
    peak, peak_step = start, 0
    for low, values in _chunks(schedule, 0, scanned):
        if first_change is None and (found := _first(values != start)) is not None:
            first_change = low + found
        if half_step is None and start > 0 and (found := _first(values <= start / 2)) is not None:
            half_step = low + found
        top = int(np.argmax(values))
        if values[top] > peak:
            peak, peak_step = float(values[top]), low + top
    if peak_step > 0:  # it rises first: half of the peak, after the peak
        half_step = None
    if peak_step > 0 and peak > 0:
        for low, values in _chunks(schedule, peak_step, scanned):
            if (found := _first(values <= peak / 2)) is not None:
                half_step = low + found
                break
    return Explanation(
        formula=schedule.describe(),
        total_steps=total_steps,
        value_at_zero=start,
        first_change=first_change,
        half_step=half_step,
        final_value=schedule(total_steps - 1),
        peak_value=peak,
        peak_step=peak_step,
    )


def _sample_steps(total_steps: int, count: int) -> np.ndarray:
    return np.unique(np.linspace(0, total_steps - 1, num=count).round().astype(np.int64))


def _table_steps(total_steps: int) -> list[int]:
    """Steps at each tenth of the run (0, 100, ..., 900 for 1,000 steps) and its last step."""
    tenths = {total_steps * i // 10 for i in range(10)}
    return sorted(tenths | {total_steps - 1})


def terminal_plot(schedule: Schedule, total_steps: int, width: int = 64, height: int = 12) -> str:
    """Draws the schedule over ``total_steps`` as text, ``width`` by ``height`` characters.

    Example:
        >>> from globalstep.schedules import Linear
        >>> print(terminal_plot(Linear(0.0, 1.0, 10), 11, width=11, height=3))
                 1 |        •••
                   |   •••••
                 0 |•••
                   +-----------
                    0        10
    """
    steps = _sample_steps(total_steps, width)
    values = schedule.values(steps).astype(np.float64)
    # The labels give the true extremes, which the sampled steps may miss (a one-cycle peak).
    every = schedule.values(_sample_steps(total_steps, min(total_steps, _CHUNK)))
    low, high = float(min(values.min(), every.min())), float(max(values.max(), every.max()))
    span = high - low or 1.0
    rows = np.round((values - low) / span * (height - 1)).astype(int)
    grid = [[" "] * len(steps) for _ in range(height)]
    for column, row in enumerate(rows):
        grid[height - 1 - row][column] = "•"
    labels = {0: f"{high:.4g}", height - 1: f"{low:.4g}"}
    lines = [f"{labels.get(i, ''):>10} |{''.join(row)}".rstrip() for i, row in enumerate(grid)]
    lines.append(f"{'':>10} +{'-' * len(steps)}")
    last = str(int(steps[-1]))
    lines.append(f"{'':>10}  0{last:>{len(steps) - 1}}")
    return "\n".join(lines)


def write_plot(
    schedule: Schedule, total_steps: int, path: str | Path, *, log_y: bool = False
) -> Path:
    """Writes a PNG of the schedule over ``total_steps`` to ``path`` (needs matplotlib).

    The title names the schedule with its parameters; ``log_y`` draws the values on a
    logarithmic axis (for decays over several orders of magnitude).

    Raises:
        MissingDependencyError: matplotlib is not installed (``globalstep[plot]``).
        ConfigError: ``log_y`` with a value that is not positive.
    """
    matplotlib = require("matplotlib", "plot", "globalstep schedule --plot")
    matplotlib.use("Agg")
    pyplot = require("matplotlib.pyplot", "plot", "globalstep schedule --plot")
    steps = _sample_steps(total_steps, 4000)
    values = schedule.values(steps)
    if log_y and float(values.min()) <= 0:
        raise ConfigError("--log-y", "needs values > 0; this schedule reaches", float(values.min()))
    figure, axes = pyplot.subplots(figsize=(9, 4.5))
    try:
        axes.plot(steps, values, drawstyle="steps-post", linewidth=1.6)
        axes.set_xlabel(f"step (optimizer updates applied; {total_steps:,} steps shown)")
        axes.set_ylabel("value (log scale)" if log_y else "value")
        if log_y:
            axes.set_yscale("log")
        axes.set_xlim(0, max(1, total_steps - 1))
        axes.set_title(_title(schedule), fontsize=10, wrap=True)
        axes.grid(True, alpha=0.3)
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        pyplot.close(figure)
    return Path(path)


def _default_total(schedule: Schedule, end: int | None) -> int:
    """A range that shows the whole schedule: past its end by a quarter, so that the last
    level of a piecewise schedule is seen as a level, not a one-step blip."""
    if not end:
        return 1000
    return end + 1 + max(1, end // 4)


def _title(schedule: Schedule, width: int = 100) -> str:
    """The schedule's name and parameters, wrapped: ``cosine_decay(initial=0.1, ...)``."""
    text = schedule.describe().split("): ", 1)[0] + ")"
    for noise in (", dtype='float64'", "dtype='float64', ", ", dtype=None"):
        text = text.replace(noise, "")
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + len(word) + 1 > width:
            lines.append(line)
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join([*lines, line])


def _parse_steps(text: str) -> list[int]:
    try:
        steps = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise ConfigError("at", "must be comma-separated ints >= 0", text) from err
    if not steps or min(steps) < 0:
        raise ConfigError("at", "must be comma-separated ints >= 0", text)
    return steps


def _run(args: argparse.Namespace) -> int:
    known = {
        "steps_per_epoch": args.steps_per_epoch,
        "batch_size": args.batch_size,
        "tokens_per_step": args.tokens_per_step,
    }
    given_total = None
    if args.total_steps is not None:
        try:
            given_total = Duration.parse(args.total_steps, "--total-steps").to_steps(**known)
        except ConversionError as err:
            raise ConfigError(
                "--total-steps", f"cannot be converted to steps ({err})", args.total_steps
            ) from err
        if given_total < 1:
            raise ConfigError("--total-steps", "must be at least 1 step", args.total_steps)
    schedule = schedule_from_args(args, given_total)
    if schedule is None:
        raise ConfigError("name", "must name a schedule (or give --config FILE)", None)
    try:
        schedule = schedule.resolve(**known)
    except ConversionError as err:
        raise ConfigError(
            "schedule",
            f"has a length this command cannot convert to steps ({err})",
            schedule.name,
            hint="Give --steps-per-epoch, --batch-size or --tokens-per-step, or lengths in "
            "steps (`globalstep plan ... --schedule` knows the run).",
        ) from err
    end = schedule.end_step()
    total = given_total if given_total is not None else _default_total(schedule, end)
    steps = _parse_steps(args.at) if args.at else _table_steps(total)
    values = schedule.values(np.asarray(steps, dtype=np.int64))
    width = max(len(f"{s:,}") for s in steps)
    print(f"{'step':>{width}}  value")
    for step, value in zip(steps, values.tolist(), strict=True):
        print(f"{step:>{width},}  {value:.9g}")
    if args.explain:
        print()
        print("\n".join(explain(schedule, total).lines()))
    if args.plot:
        try:
            written = write_plot(schedule, total, args.plot, log_y=args.log_y)
        except OSError as err:
            raise ConfigError(
                "--plot", "must be a file that can be written", args.plot, hint=str(err)
            ) from err
        print(f"\nwrote {written}")
    else:
        print()
        print(terminal_plot(schedule, total))
    return 0


def add_parser(subparsers: Any) -> None:
    """Registers ``globalstep schedule``."""
    parser = subparsers.add_parser(
        "schedule",
        help="print, explain and plot a schedule",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--at", metavar="STEPS", help="comma-separated steps to tabulate")
    parser.add_argument(
        "--total-steps",
        metavar="DURATION",
        help="the run's length, in steps or a duration such as 3ep (also the schedule's "
        "total_steps where it has one)",
    )
    parser.add_argument(
        "--steps-per-epoch", type=int, metavar="N", help="to convert epoch lengths (3ep)"
    )
    parser.add_argument(
        "--batch-size", type=int, metavar="N", help="samples per step, for sample lengths"
    )
    parser.add_argument(
        "--tokens-per-step", type=int, metavar="N", help="tokens per step, for token lengths"
    )
    parser.add_argument("--explain", action="store_true", help="explain the schedule")
    parser.add_argument("--plot", metavar="FILE", help="write a PNG plot (needs matplotlib)")
    parser.add_argument("--log-y", action="store_true", help="with --plot: a log-scale value axis")
    add_schedule_arguments(parser, positional=True, skip=("total_steps",))
    parser.set_defaults(func=_run)
