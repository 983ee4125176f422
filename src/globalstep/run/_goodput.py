"""The Run's part of the ledger: the resume record, and the ``goodput/*`` series.

The checkpoint manager records each attempt, save and restore in the run's
``ledger.jsonl`` (see :mod:`globalstep.checkpoint._ledger`); the Run adds what only it
knows, the steps redone: the highest step standing in its logs after a crash (the crashed
attempt's last point) less the step it resumed from, and the wall time of that point. The
same figures go to the run's writer, so that TensorBoard, the JSONL file and the trackers
show them beside the curves:

- after a resume, ``goodput/restore_seconds`` and ``goodput/steps_redone``, at the
  attempt's first save (or its close): never at the step resumed from, whose points the
  crashed attempt logged and a restart mark there would void, nor ahead of the clock;
- at each save, the saves the ledger recorded since the last point (a synchronous save:
  itself; an async one: the one before, which this save waited for), at the step saved:
  ``goodput/save_stall_seconds`` and ``goodput/save_background_seconds`` (their sums) and
  ``goodput/save_gbps`` (their bytes over their time);
- at close, at the final step: the figures not yet shown, and ``goodput/share``, the
  ledger's goodput over every attempt so far.

Nothing is logged by a rank without the ledger (not the writer), and only where the run's
writer is open (a run that logs nothing gets no series).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from globalstep._clock import Clock
from globalstep._errors import GlobalStepError
from globalstep.checkpoint import Ledger, read_ledger
from globalstep.summary import SummaryWriter, last_standing_step, last_wall_time

__all__ = ["Goodput"]


class Goodput:
    """What the Run adds to its manager's ledger, and logs of it.

    Args:
        ledger: the manager's ledger, or None (then this does nothing).
        run: the run's directory (its logs are in ``logs/``).
        clock: the clock whose step the close logs at.
        writer: returns the run's writer where it is open, else None.
    """

    def __init__(
        self,
        ledger: Ledger | None,
        run: Path,
        clock: Clock,
        writer: Callable[[], SummaryWriter | None],
    ) -> None:
        self._ledger = ledger
        self._logs = run / "logs"
        self._clock = clock
        self._writer = writer
        self._pending: dict[str, float] = {}  # a resume's figures, for the next point

    def resumed(self, step: int | None) -> None:
        """Records the resume from ``step`` (None: a new run, nothing to record) with the
        steps redone, read from the logs; keeps the figures for the next save or close."""
        ledger = self._ledger
        if ledger is None or step is None:
            return
        logged_to: int | None = None
        if self._logs.is_dir():
            try:
                logged_to = last_standing_step(self._logs)
            except GlobalStepError:  # event files only, without the tensorboard extra
                logged_to = None
        redone = max(0, logged_to - step) if logged_to is not None else 0
        ledger.append(
            "resume",
            step=step,
            logged_to=logged_to,
            steps_redone=redone,
            last_logged_time=last_wall_time(self._logs),
        )
        self._pending = {"goodput/steps_redone": float(redone)}
        restore = ledger.last_restore
        if restore is not None and restore.get("step") == step:
            self._pending["goodput/restore_seconds"] = float(restore["seconds"])

    def saved(self) -> None:
        """After a save: logs what the ledger recorded since the last point, at the step."""
        self._log(closing=False)

    def close(self) -> None:
        """After the manager closed (the ledger's end written): the figures not yet shown
        and the goodput share, at the clock's step."""
        self._log(closing=True)

    def _log(self, *, closing: bool) -> None:
        ledger, writer = self._ledger, self._writer()
        if ledger is None or writer is None:
            return
        scalars, self._pending = {**self._pending, **_save_scalars(ledger.take_saves())}, {}
        if closing:
            share = read_ledger(ledger.path).goodput.get("share")
            if share is not None:
                scalars["goodput/share"] = float(share)
        if scalars:
            writer.scalars(scalars, step=self._clock.step)

    def stopped_by(self, error: BaseException | None) -> None:
        """Notes what ends the run (None: nothing went wrong), for the ledger's ``end``."""
        if self._ledger is not None and error is not None:
            self._ledger.error = f"{type(error).__name__}: {error}"


def _save_scalars(saves: list[dict[str, Any]]) -> dict[str, float]:
    if not saves:
        return {}
    stall = sum(float(s["stall_seconds"]) for s in saves)
    background = sum(float(s["background_seconds"]) for s in saves)
    scalars = {
        "goodput/save_stall_seconds": stall,
        "goodput/save_background_seconds": background,
    }
    if stall + background > 0:
        scalars["goodput/save_gbps"] = (
            sum(int(s["bytes"]) for s in saves) / (stall + background) / 1e9
        )
    return scalars
