"""The Run's part of the ledger: the resume record, and the ``goodput/*`` series.

The checkpoint manager records each attempt, save and restore in the run's
``ledger.jsonl`` (see :mod:`globalstep.checkpoint._ledger`); the Run adds what only it
knows, the steps redone: the highest step standing in its logs after a crash (the crashed
attempt's last point) less the step it resumed from, and the wall time of that point. The
same figures go to the run's writer, so that TensorBoard, the JSONL file and the trackers
show them beside the curves:

- at a resume, at the first step the attempt logs (the step resumed from + 1):
  ``goodput/restore_seconds`` and ``goodput/steps_redone``;
- at each save, the saves the ledger recorded since the last point (a synchronous save:
  itself; an async one: the one before, which this save waited for), at the step saved:
  ``goodput/save_stall_seconds`` and ``goodput/save_background_seconds`` (their sums) and
  ``goodput/save_gbps`` (their bytes over their time);
- at close, at the final step: the saves not yet shown, and ``goodput/share``, the ledger's
  goodput over every attempt so far.

Nothing is logged by a rank without the ledger (not the writer), and at a save or close
only where the run's writer is open (a run that logs nothing gets no series).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from globalstep._errors import GlobalStepError
from globalstep.checkpoint import Ledger, read_ledger
from globalstep.summary import SummaryWriter, last_standing_step, last_wall_time

__all__ = ["Goodput"]


class Goodput:
    """What the Run adds to its manager's ledger, and logs of it.

    Args:
        ledger: the manager's ledger, or None (then this does nothing).
        logs: the run's log directory.
    """

    def __init__(self, ledger: Ledger | None, logs: Path) -> None:
        self._ledger = ledger
        self._logs = logs
        self._step: Callable[[], int] = lambda: 0
        self._writer: Callable[[], SummaryWriter | None] = lambda: None

    def bind(self, step: Callable[[], int], writer: Callable[[], SummaryWriter | None]) -> None:
        """Where the clock's step and the open writer (or None) are read at close."""
        self._step, self._writer = step, writer

    def resumed(self, step: int, open_writer: Callable[[], SummaryWriter], *, done: bool) -> None:
        """Records the resume from ``step`` (the steps redone, read from the logs) and logs
        the restore's figures at ``step + 1`` unless the run is ``done`` already."""
        ledger = self._ledger
        if ledger is None:
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
        if done:
            return
        scalars = {"goodput/steps_redone": float(redone)}
        restore = ledger.last_restore
        if restore is not None and restore.get("step") == step:
            scalars["goodput/restore_seconds"] = float(restore["seconds"])
        open_writer().scalars(scalars, step=step + 1)

    def saved(self, writer: SummaryWriter | None, step: int) -> None:
        """Logs the saves the ledger recorded since the last call at ``step``."""
        if self._ledger is None or writer is None:
            return
        scalars = _save_scalars(self._ledger.take_saves())
        if scalars:
            writer.scalars(scalars, step=step)

    def close(self) -> None:
        """After the manager closed (the ledger's end written): the last saves and the
        goodput share, at the clock's step."""
        ledger, writer = self._ledger, self._writer()
        if ledger is None or writer is None:
            return
        scalars = _save_scalars(ledger.take_saves())
        share = read_ledger(ledger.path).goodput.get("share")
        if share is not None:
            scalars["goodput/share"] = float(share)
        if scalars:
            writer.scalars(scalars, step=self._step())

    def stopped_by(self, error: BaseException) -> None:
        """Notes what ends the run, for the ledger's ``end`` record."""
        if self._ledger is not None:
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
