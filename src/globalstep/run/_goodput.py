"""The Run's part of the ledger: the resume record, and the ``goodput/*`` series.

The checkpoint manager records each attempt, save and restore in the run's
``ledger.jsonl`` (see :mod:`globalstep.checkpoint._ledger`); the Run adds what only it
knows, the steps redone: the highest step standing in its logs after a crash (the crashed
attempt's last point) less the step it resumed from, and the wall time of that point. The
same figures go to the run's writer, so that TensorBoard, the JSONL file and the trackers
show them beside the curves:

- after a resume, ``goodput/restore_seconds`` and ``goodput/steps_redone``;
- for the saves the ledger recorded since the last point, ``goodput/save_stall_seconds``
  and ``goodput/save_background_seconds`` (their sums) and ``goodput/save_gbps`` (their
  bytes over their time);
- at close, ``goodput/share``, the ledger's goodput over every attempt so far.

They are logged at the step of the next save, before it commits (so that checkpoint makes
them durable, and a tracker receives nothing a crash can take back, as every point), and
at close, at the final step (with the figures of a save at that step): never at the step
resumed from (whose points the crashed attempt logged: a restart mark there would void
them; a run resumed complete logs none) nor ahead of the clock (a loop logging at the
clock's step would draw a curve folding back). So a save's own figures appear at the next
save's step (or the close's).

Nothing is logged by a rank without the ledger (not the writer), and only where the run's
writer is open (a run that logs nothing gets no series).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from globalstep._errors import GlobalStepError
from globalstep.checkpoint import Ledger, read_ledger
from globalstep.summary import SummaryWriter, last_standing_step, last_wall_time

if TYPE_CHECKING:
    from globalstep.run._run import Run

__all__ = ["Goodput"]


class Goodput:
    """What the Run adds to its manager's ledger, and logs of it.

    Args:
        ledger: the manager's ledger, or None (then this does nothing).
        run: the Run (its directory, clock and ``done``).
        writer: returns the run's writer where it is open, else None.
    """

    def __init__(
        self,
        ledger: Ledger | None,
        run: Run,
        writer: Callable[[], SummaryWriter | None],
    ) -> None:
        self._ledger = self.ledger = ledger
        self._logs = run.directory / "logs"
        self._run = run
        self._writer = writer
        self._pending: dict[str, float] = {}  # a resume's figures, for the next point
        self._resumed_at: int | None = None  # the step resumed from, until the clock moves
        self._logged: tuple[int, set[str]] = (-1, set())  # the step of the last point, its tags

    def resumed(self, step: int | None) -> None:
        """Records the resume from ``step`` (None: a new run, nothing to record) with the
        steps redone, read from the logs; keeps the figures for the next save or close."""
        ledger = self._ledger
        if ledger is None or step is None:
            return
        self._resumed_at = step
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

    def before_save(self) -> None:
        """Before a save: logs what the ledger recorded since the last point, at the step
        (not at the last step: the close logs them there, with the final save's)."""
        if not self._run.done:
            self._log(closing=False)

    def close(self) -> None:
        """After the manager closed (the ledger's end written): the figures not yet shown
        and the goodput share, at the clock's step."""
        self._log(closing=True)

    def _log(self, *, closing: bool) -> None:
        ledger, writer = self._ledger, self._writer()
        step = self._run.step
        if ledger is None or writer is None or step == self._resumed_at:
            return  # at the step resumed from, a point would void the crashed attempt's
        if step == self._logged[0] and not closing:
            return  # a second save at this step (both tiers): its figures wait for the next
        scalars, self._pending = {**self._pending, **_save_scalars(ledger.take_saves())}, {}
        if closing:
            share = read_ledger(ledger.path).goodput.get("share")
            if share is not None:
                scalars["goodput/share"] = float(share)
        if step == self._logged[0]:
            # One point per tag and step (W&B refuses a second, TensorBoard would draw two):
            # the final save's figures, at the step the last ones went out, stay in the ledger.
            scalars = {tag: v for tag, v in scalars.items() if tag not in self._logged[1]}
        else:
            self._logged = (step, set())
        if scalars:
            writer.scalars(scalars, step=step)
            self._logged[1].update(scalars)

    def stopped_by(self, error: BaseException | None) -> None:
        """Notes what ends the run (None: nothing went wrong), for the ledger's ``end``."""
        if self._ledger is not None and error is not None:
            name, text = type(error).__name__, str(error)
            self._ledger.error = f"{name}: {text}" if text else name


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
