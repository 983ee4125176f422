"""Throughput and progress: a step-rate meter and a progress display keyed to the clock.

:class:`ThroughputMeter` measures steps, samples and tokens per second between two
readings, like TensorFlow's ``StepCounterHook``, and can write its readings to a
:class:`~globalstep.summary._writer.SummaryWriter` (``global_step/sec`` for the default
clock, as TensorFlow names it). :class:`ProgressDisplay` shows step/total, epoch, rate, ETA
and chosen scalars (lr, loss): a live bar drawn by ``rich`` (the ``progress`` extra) when
the stream is a terminal, and a plain line every ``every_n_steps`` steps (above the bar,
where there is one).

Example:
    >>> import io
    >>> from globalstep import Clock
    >>> now = [0.0]
    >>> clock = Clock(steps_per_epoch=50)
    >>> out = io.StringIO()
    >>> display = ProgressDisplay(clock, total_steps=200, every_n_steps=100, stream=out,
    ...                           time_fn=lambda: now[0])
    >>> for _ in range(200):
    ...     clock.tick()
    ...     now[0] += 0.01
    ...     display.update(loss=0.5, lr=0.01)
    >>> display.close()
    >>> print(out.getvalue(), end="")
    step 100/200 (50%)  epoch 2  100 steps/s  ETA 1s  loss 0.5  lr 0.01
    step 200/200 (100%)  epoch 4  100 steps/s  ETA 0s  loss 0.5  lr 0.01
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from globalstep._clock import Clock
from globalstep._errors import ConfigError
from globalstep._triggers import every
from globalstep.summary._base import Closing

if TYPE_CHECKING:
    from globalstep.summary._writer import SummaryWriter

__all__ = ["ProgressDisplay", "Throughput", "ThroughputMeter", "format_seconds"]

_BAR_SECONDS = 0.1  # the live bar's shortest redraw interval


@dataclass(frozen=True)
class Throughput:
    """Rates over the ``seconds`` between two readings; None where the clock counts none."""

    steps_per_second: float
    samples_per_second: float | None
    tokens_per_second: float | None
    seconds: float


def format_seconds(seconds: float) -> str:
    """Formats a duration as ``1h02m03s``, ``4m05s`` or ``6s``.

    Example:
        >>> format_seconds(3723), format_seconds(245), format_seconds(6.4)
        ('1h02m03s', '4m05s', '6s')
    """
    if not math.isfinite(seconds):
        return "?"
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class ThroughputMeter:
    """Steps, samples and tokens per second between readings of a clock.

    Args:
        clock: the clock to read.
        time_fn: a monotonic clock in seconds, injectable for tests.

    Example:
        >>> from globalstep import Clock
        >>> now = [0.0]
        >>> clock = Clock(batch_size=32)
        >>> meter = ThroughputMeter(clock, time_fn=lambda: now[0])
        >>> clock.tick(10); now[0] = 2.0
        >>> reading = meter.read()
        >>> reading.steps_per_second, reading.samples_per_second, reading.tokens_per_second
        (5.0, 160.0, None)
    """

    def __init__(self, clock: Clock, *, time_fn: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(clock, Clock):
            raise ConfigError("clock", "must be a globalstep Clock", clock)
        self._clock = clock
        self._time_fn = time_fn
        self._last = (time_fn(), clock.progress())

    def read(self) -> Throughput | None:
        """Returns the rates since the last reading (or creation); None if no time passed."""
        now, progress = self._time_fn(), self._clock.progress()
        then, before = self._last
        seconds = now - then
        if seconds <= 0:
            return None
        self._last = (now, progress)
        samples = progress.samples - before.samples
        tokens = progress.tokens - before.tokens
        return Throughput(
            steps_per_second=(progress.step - before.step) / seconds,
            samples_per_second=samples / seconds if progress.batch_size or samples else None,
            tokens_per_second=tokens / seconds if progress.tokens_per_step or tokens else None,
            seconds=seconds,
        )

    def write(self, writer: SummaryWriter) -> Throughput | None:
        """Reads the rates and writes them at the clock's step.

        The tags are ``<clock name>/sec`` (``global_step/sec``, as TensorFlow's
        ``StepCounterHook``), ``samples/sec`` and ``tokens/sec``.
        """
        reading = self.read()
        if reading is not None:
            values = {f"{self._clock.name}/sec": reading.steps_per_second}
            if reading.samples_per_second is not None:
                values["samples/sec"] = reading.samples_per_second
            if reading.tokens_per_second is not None:
                values["tokens/sec"] = reading.tokens_per_second
            writer.scalars(values, step=self._clock.step)
        return reading


def _rich_available() -> bool:
    return importlib.util.find_spec("rich") is not None


class ProgressDisplay(Closing):
    """Shows training progress: step/total, epoch, rate, ETA and chosen scalars.

    The epoch is shown where the clock knows it: given ``steps_per_epoch``, or once the
    loop ended an epoch with ``clock.end_epoch()``; a clock that counts no epochs shows none.

    Args:
        clock: the clock whose step is shown.
        total_steps: the run's length in steps, for the percentage and ETA; None if unknown.
        every_n_steps: steps between plain lines (printed above the live bar, if any).
        stream: where to write; defaults to standard output.
        live: True for rich's live bar, False for plain lines; defaults to a live bar when
            the stream is a terminal and ``rich`` is installed.
        time_fn: a monotonic clock in seconds, injectable for tests.

    Raises:
        ConfigError: a parameter breaks its rule, or ``live=True`` without ``rich``.

    Attributes:
        next_due: the step from which :meth:`update` can do more than compare the step (a
            plain line may be due there); 0 while a live bar is shown (each call may
            redraw it). A loop that has other work per update reads it to skip the call
            below it (read only; :meth:`update` keeps it).
    """

    def __init__(
        self,
        clock: Clock,
        total_steps: int | None = None,
        *,
        every_n_steps: int = 100,
        stream: TextIO | None = None,
        live: bool | None = None,
        time_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(clock, Clock):
            raise ConfigError("clock", "must be a globalstep Clock", clock)
        if total_steps is not None and (
            isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1
        ):
            raise ConfigError("total_steps", "must be an int >= 1 or None", total_steps)
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int):
            raise ConfigError("every_n_steps", "must be an int >= 1", every_n_steps)
        if every_n_steps < 1:
            raise ConfigError("every_n_steps", "must be an int >= 1", every_n_steps)
        self._clock = clock
        self._total = total_steps
        self._stream = stream if stream is not None else sys.stdout
        if live is None:
            isatty = getattr(self._stream, "isatty", None)
            live = bool(isatty and isatty()) and _rich_available()
        if live and not _rich_available():
            raise ConfigError("live", "needs rich: pip install 'globalstep[progress]'", live)
        self._meter = ThroughputMeter(clock, time_fn=time_fn)
        self._line = every(every_n_steps)
        self._line.skip_past(clock)  # a resumed run prints at the boundaries still ahead
        self._every = every_n_steps
        self._next_line = 0  # the first update asks the trigger
        self._bar_time = -math.inf
        self._bar_scalars: dict[str, Any] = {}
        self._rate = math.nan
        self._rate_time = time_fn()
        self._time_fn = time_fn
        self._bar: Any = None
        self.next_due = 0  # the first update asks the trigger
        if live:
            self._start_bar()

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        self._bar = Progress(
            TextColumn("step {task.completed}/{task.total}"),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            console=Console(file=self._stream),
        )
        self._task = self._bar.add_task("train", total=self._total, info="")
        self._bar.start()

    def _describe(self, scalars: dict[str, Any]) -> str:
        p = self._clock.progress()
        # An epoch the clock knows: it counts them itself (steps_per_epoch) or the loop
        # ended one (end_epoch()); a clock that knows none would say "epoch 0" throughout.
        parts = [f"epoch {p.epoch}"] if p.steps_per_epoch or p.epoch else []
        if math.isfinite(self._rate):
            rate = f"{self._rate:,.0f}" if self._rate >= 100 else f"{self._rate:.3g}"
            parts.append(f"{rate} steps/s")
            if self._total is not None and self._rate > 0:
                parts.append(f"ETA {format_seconds((self._total - p.step) / self._rate)}")
        for k, v in scalars.items():
            if not isinstance(v, float | int) and callable(getattr(v, "item", None)):
                v = v.item()  # a tensor: read only when a line is drawn
            parts.append(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}")
        return "  ".join(parts)

    def update(self, **scalars: Any) -> None:
        """Refreshes the display; call once per step with the scalars to show (``loss=...``).

        A call between two lines costs a comparison; the live bar is redrawn at most ten
        times a second (and at close).
        """
        step = self._clock.step
        bar = self._bar
        if step < self._next_line:
            if bar is None:
                return
            now = self._time_fn()
            if now - self._bar_time < _BAR_SECONDS:
                self._bar_scalars = scalars
                return
            self._bar_time = now
        line_due = self._line.should_fire(self._clock)
        # The next step at which a line can be due: the next multiple of every_n_steps.
        self._next_line = (step // self._every + 1) * self._every
        if bar is None:
            self.next_due = self._next_line
        if line_due or (self._bar is not None and self._time_fn() - self._rate_time >= 0.5):
            self._refresh_rate()
        if line_due:
            total = f"/{self._total} ({100 * step // self._total}%)" if self._total else ""
            line = f"step {step}{total}  {self._describe(scalars)}"
            if self._bar is not None:
                self._bar.console.print(line, highlight=False, markup=False)  # above the bar
            else:
                self._stream.write(line + "\n")
                self._stream.flush()
        if self._bar is not None:
            self._bar_scalars = scalars
            self._bar.update(self._task, completed=step, info=self._describe(scalars))

    def _refresh_rate(self) -> None:
        reading = self._meter.read()
        self._rate_time = self._time_fn()
        if reading is not None:
            self._rate = reading.steps_per_second

    def close(self) -> None:
        """Stops the live bar, if any."""
        if self._bar is not None:
            info = self._describe(self._bar_scalars)
            self._bar.update(self._task, completed=self._clock.step, info=info)
            self._bar.stop()
            self._bar = None
            self.next_due = self._next_line
