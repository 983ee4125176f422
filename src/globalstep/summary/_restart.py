"""Restart detection: the step each write lands on, where a restart is marked, and the warnings.

A writer opened on a run whose logs already hold points (a run resumed from a checkpoint,
whose crashed attempt logged past it) reads the highest step that stands there
(:func:`existing_max_step`); its first point then decides the purge step
(:func:`first_purge`): the points at that step and above, written before, are void for
TensorBoard and the reader. A step lower than the one before it, with no restart mark
between, draws a curve folding back: a :class:`~globalstep._errors.StepOrderWarning` says
so, once per writer. Writes that keep landing on one step warn that the step is frozen
(:class:`~globalstep._guards.StaleStepDetector`). :class:`StepTracker`, the writer's base,
holds that state; the writer's per-update paths read and update its attributes in place.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from typing import Any

from globalstep._clock import MAX_STEP, Clock
from globalstep._errors import ConfigError, MissingDependencyError, StepOrderWarning
from globalstep._guards import StaleStepDetector
from globalstep.summary._base import RESTART, Closing, Item
from globalstep.summary._checks import check_step

__all__ = ["StepTracker", "existing_max_step", "first_purge"]


def existing_max_step(logdir: str, storage_options: Mapping[str, Any] | None) -> int | None:
    """The highest step that stands in the run's logs, in any format (a tracker's record
    too), or None where there is none (or only event files and no ``tensorboard`` extra
    to read them)."""
    from globalstep.storage import is_remote
    from globalstep.summary._reader import last_standing_step
    from globalstep.summary._tracker import recorded_max_step

    try:
        logged = last_standing_step(logdir, storage_options=storage_options)
    except MissingDependencyError:
        logged = None
    # A tracker's record holds its points too (the only ones where it is the only format).
    recorded = None if is_remote(logdir) else recorded_max_step(logdir)
    steps = [s for s in (logged, recorded) if s is not None]
    return max(steps) if steps else None


def first_purge(existing: int | None, step: int, clock_step: int | None) -> int | None:
    """The purge step to mark before a writer's first point, at ``step``, or None.

    Args:
        existing: the highest step already logged (:func:`existing_max_step`).
        step: the first point's step.
        clock_step: the writer's clock's step, or None for a writer without a clock.

    The mark goes at ``step``, or at the clock's step + 1 if that is lower (a loop that
    logs before ``clock.tick()``), where the logs already reach it.
    """
    purge = step if clock_step is None else min(step, clock_step + 1)
    if existing is not None and existing >= purge:
        return purge
    return None


class StepTracker(Closing):
    """A writer's steps: which step a call writes at, the restart marks, the warnings.

    Args:
        logdir: the writer's directory, named by the warnings.
        clock: the clock whose step a call uses when it gives none, or None.
        purge_step: the restart marked at opening, or None.
        existing: with no ``purge_step``, the highest step already logged: the first
            point marks a restart where the logs reach its step.
        stale_threshold: writes at one unchanged step after which to warn.

    A subclass queues the restart marks (:meth:`_enqueue`).
    """

    def __init__(
        self,
        logdir: str,
        *,
        clock: Clock | None,
        purge_step: int | None,
        existing: int | None,
        stale_threshold: int,
    ) -> None:
        self._stale = StaleStepDetector(
            "SummaryWriter",
            threshold=stale_threshold,
            used="written to",
            effect="every point lands on that one step",
        )
        self.logdir = logdir
        self._clock = clock
        self._clock_name = clock.name if clock is not None else None
        self._stale_step: int | None = None
        # The first tag written at _stale_step, or the group of scalars it is the first of.
        self._stale_tag: str | dict[str, Any] | None = None
        self._warned_order = False
        # Without an explicit purge_step, the first point written decides whether to mark
        # a restart.
        self._pending_restart = existing if purge_step is None else None
        self.purge_step = purge_step
        """The step of the latest restart mark this writer wrote, or None."""
        self._last_step = -1 if purge_step is None else purge_step - 1

    def _enqueue(self, item: Item) -> None:
        """Queues ``item`` for the files."""
        raise NotImplementedError

    def _resolve_step(self, step: Any) -> int:
        """The step a write at ``step`` (None: the clock's) lands on; marks the restart of
        the first point where needed, and warns once where steps go back.

        Raises:
            ConfigError: ``step`` is not an int in [0, 2**63-1], or None with no clock.
        """
        if step is None:
            if self._clock is None:
                raise ConfigError(
                    "step",
                    "must be given when the writer has no clock",
                    step,
                    hint="Pass step=..., or SummaryWriter(logdir, clock=clock).",
                )
            step = self._clock.step
        elif type(step) is not int or step < 0 or step > MAX_STEP:
            step = check_step(step)
        if self._pending_restart is not None:
            self._first_point(step)
        if step < self._last_step:
            self._step_went_back(step)
        self._last_step = step
        return int(step)

    def _first_point(self, step: int) -> None:
        """Marks a restart before the first point if the logs already reach its step."""
        existing, self._pending_restart = self._pending_restart, None
        clock_step = None if self._clock is None else self._clock.step
        purge = first_purge(existing, step, clock_step)
        if purge is not None:
            self._queue_restart(purge)

    def _queue_restart(self, purge_step: int) -> None:
        self._enqueue((RESTART, "", purge_step, time.time(), None))
        self.purge_step = purge_step
        self._last_step = purge_step - 1

    def restart(self, purge_step: int) -> None:
        """Marks a restart now: points at ``purge_step`` and above written before are void.

        For a run rolled back to an older checkpoint at step S in the same process:
        ``restart(S + 1)`` before logging the steps after S again. TensorBoard and the
        reader then show each step once, with the value written last.

        Raises:
            ConfigError: ``purge_step`` is not an int in [0, 2**63-1], or the writer is
                closed.
        """
        self._check_open()
        purge = check_step(purge_step, "purge_step")
        self._pending_restart = None
        self._queue_restart(purge)

    def _check_open(self) -> None:
        """Raises where the writer cannot take a call."""
        raise NotImplementedError

    def _step_went_back(self, step: int) -> None:
        if self._warned_order:
            return
        self._warned_order = True
        warnings.warn(
            f"SummaryWriter for {self.logdir!r} got step {step} after step {self._last_step}, "
            "without a restart mark, so TensorBoard will draw the curve folding back. After "
            "restoring a checkpoint, open a new SummaryWriter with the restored clock (it marks "
            "the restart itself) or pass purge_step=<first step to rewrite>.",
            StepOrderWarning,
            stacklevel=4,
        )

    def _repeats(self, step: int, tag: str) -> bool:
        """Whether a write counts toward the frozen-step warning (see ``stale_threshold``)."""
        if step != self._stale_step:
            self._stale_step, self._stale_tag = step, tag
            return True
        return tag == self._stale_first()

    def _stale_first(self) -> str | None:
        """The first tag written at ``_stale_step``."""
        first = self._stale_tag
        if type(first) is dict:
            first = self._stale_tag = next(iter(first))
        return first  # type: ignore[return-value]
