"""The resume audit: did a resumed run log, step for step, what its crashed attempt logged?

A run resumed from the checkpoint at step S whose crashed attempt had logged past S still
holds those points in its logs (the restart mark voids them for the curves, the files keep
them). :func:`crashed_points` reads them before the resumed attempt writes; a
:class:`ResumeAuditor`, handed to the writer (:meth:`SummaryWriter.audit
<globalstep.summary.SummaryWriter.audit>`), compares the first value the resumed attempt
logs for each of their tags and steps with them, in the writer's background thread (the
training thread's calls cost the same), and ends once every point was compared, or once
the resumed attempt logs past the last of them. :class:`ResumeAudit` is the outcome.

Example:
    >>> auditor = ResumeAuditor({("loss", 11): 0.5, ("loss", 12): 0.25})
    >>> auditor.see([(0, "loss", 11, 0.0, 0.5), (0, "loss", 12, 0.0, 0.3)])
    True
    >>> auditor.result().line()
    'audit: 2 steps compared; first difference: loss at step 12 (before the crash 0.25, now 0.3)'
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from globalstep._errors import MissingDependencyError
from globalstep.summary._base import RESTART, SCALAR, SCALARS, Item

if TYPE_CHECKING:
    from globalstep.summary._queue import BackgroundQueue

__all__ = ["Audited", "Divergence", "ResumeAudit", "ResumeAuditor", "crashed_points"]


@dataclass(frozen=True)
class Divergence:
    """The first point where a resumed run logged another value than its crashed attempt.

    Attributes:
        tag: the series.
        step: the step both attempts logged it at.
        before: the crashed attempt's value.
        after: the resumed attempt's value.
    """

    tag: str
    step: int
    before: float
    after: float


@dataclass(frozen=True)
class ResumeAudit:
    """The outcome of a resume audit, so far or complete.

    Attributes:
        compared: the steps at which both attempts logged a value of some tag, compared.
        first: the first difference beyond the tolerance, in the order logged, or None.
    """

    compared: int
    first: Divergence | None

    @property
    def identical(self) -> bool:
        """Whether every value compared was equal (within the tolerance)."""
        return self.first is None

    def line(self) -> str:
        """One line: ``audit: N steps compared, identical``, or the first difference."""
        steps = f"audit: {self.compared} step{'s' if self.compared != 1 else ''} compared"
        first = self.first
        if first is None:
            return f"{steps}, identical"
        return (
            f"{steps}; first difference: {first.tag} at step {first.step} "
            f"(before the crash {first.before!r}, now {first.after!r})"
        )


def _float32(value: float) -> float:
    """``value`` as a float32 holds it (what event files keep)."""
    try:
        return float(struct.unpack("f", struct.pack("f", value))[0])
    except OverflowError:
        return value


class ResumeAuditor:
    """Compares a resumed attempt's scalars with its crashed attempt's, tag and step alike.

    Args:
        before: the crashed attempt's values past the checkpoint, by (tag, step)
            (:func:`crashed_points`).
        tolerance: the largest absolute difference taken as equal; 0.0 asks for the same
            float (NaN equal to NaN).
        float32: the values before were read from event files, which keep float32: the
            new values are rounded so before comparing.
        on_done: called once, on the thread that compared, when the audit ends.

    :meth:`see` runs on the writer's background thread (or the thread that flushes);
    :meth:`result` may be read from any thread.
    """

    def __init__(
        self,
        before: Mapping[tuple[str, int], float],
        *,
        tolerance: float = 0.0,
        float32: bool = False,
        on_done: Callable[[], None] | None = None,
    ) -> None:
        self._before = dict(before)
        self._last = max((step for _, step in self._before), default=-1)
        self._tolerance = tolerance
        self._float32 = float32
        self._on_done = on_done
        self._steps: set[int] = set()
        self._first: Divergence | None = None
        self._seen = False
        self.done = not self._before
        """Whether the audit has ended (nothing is compared after)."""

    def result(self) -> ResumeAudit:
        """The audit so far (complete once :attr:`done`)."""
        return ResumeAudit(len(self._steps), self._first)

    def see(self, items: list[Item]) -> bool:
        """Compares the scalars of ``items`` (written in this order); returns :attr:`done`."""
        for kind, tag, step, _, payload in items:
            if kind == SCALARS:
                for name, value in payload.items():
                    self._compare(name, step, value)
            elif kind == SCALAR:
                self._compare(tag, step, payload)
            elif kind == RESTART and self._seen:
                self._end()  # rolled back in the run: the steps after it are logged anew
            if step > self._last and kind != RESTART:
                self._end()
            if self.done:
                break
        return self.done

    def _compare(self, tag: str, step: int, value: Any) -> None:
        self._seen = True
        before = self._before.pop((tag, step), None)
        if before is None or type(value) is not float:
            return
        self._steps.add(step)
        after = _float32(value) if self._float32 else value
        if self._first is None and not self._equal(before, after):
            self._first = Divergence(tag, step, before, value)
        if not self._before:
            self._end()

    def _equal(self, before: float, after: float) -> bool:
        if before == after:
            return self._tolerance > 0.0 or math.copysign(1.0, before) == math.copysign(1.0, after)
        if before != before:
            return after != after
        return abs(after - before) <= self._tolerance

    def _end(self) -> None:
        if self.done:
            return
        self.done = True
        self._before.clear()
        if self._on_done is not None:
            self._on_done()


class Audited:
    """The writer's side of the audit: :class:`~globalstep.summary.SummaryWriter` is one."""

    _sink: BackgroundQueue

    def _check_open(self) -> None:
        raise NotImplementedError

    def audit(self, auditor: ResumeAuditor) -> None:
        """Shows ``auditor`` every point written from now on, in the writer's background
        thread (or the one that flushes), until its audit ends: the resume audit of
        :class:`~globalstep.run.Run`. Give it before the first point is logged.

        Raises:
            ConfigError: the writer is closed.
        """
        self._check_open()
        self._sink.auditor = None if auditor.done else auditor


def crashed_points(
    logdir: str | os.PathLike[str], step: int
) -> tuple[dict[tuple[str, int], float], bool]:
    """The scalars that stand in the run's logs past ``step``, by (tag, step): what a
    crashed attempt logged after the checkpoint of ``step``; and whether they were read
    from event files (float32). Read before the resumed attempt writes (its first point
    voids them).

    Nothing (an empty dict) where the directory or its points are missing, or where only
    event files are there without the ``tensorboard`` extra to read them.
    """
    from globalstep.summary._reader import read_run

    if not os.path.isdir(logdir):
        return {}, False
    try:
        run = read_run(logdir)
    except MissingDependencyError:
        return {}, False
    points = {
        (tag, point.step): point.value
        for tag, series in run.scalars.items()
        for point in series
        if point.step > step
    }
    return points, run.source == "tensorboard"
