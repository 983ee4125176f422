"""The Run's resume audit: its ``audit`` option, the comparison begun on resuming, the outcome told.

On resuming from the checkpoint at step S, where the crashed attempt's points past S stand
in ``<run>/logs`` (the attempt logged past its last checkpoint), the Run reads them before
its writer writes, and hands a :class:`~globalstep.summary.ResumeAuditor` to the writer,
which compares, in its background thread, the first value logged again for each of their
tags and steps. Once the audit ends (every point compared, or the run past the last of
them) the Run tells it on the training thread, at its next save, progress line or close
(the per-update path is unchanged): one line, ``audit: N steps compared, identical``, or
that line naming the first difference and one
:class:`~globalstep._errors.ResumeDivergenceWarning` with the tag, the step and both
values. A run closed before the audit ended tells what was compared by its close.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

from globalstep._errors import ConfigError, ResumeDivergenceWarning
from globalstep.checkpoint import Ledger
from globalstep.run._messages import Messages
from globalstep.summary import ResumeAudit, ResumeAuditor, SummaryWriter, crashed_points

__all__ = ["RunAudit", "check_audit"]


def check_audit(option: Any) -> float | None:
    """The tolerance of the ``audit`` option: True is 0.0 (equal floats), a number >= 0 is
    itself, False is None (no audit).

    Raises:
        ConfigError: ``option`` is neither a bool nor a finite number >= 0.
    """
    if isinstance(option, bool):
        return 0.0 if option else None
    if isinstance(option, int | float) and math.isfinite(option) and option >= 0:
        return float(option)
    raise ConfigError(
        "audit",
        "must be True (equal floats), False (no audit) or a tolerance: a finite number >= 0",
        option,
    )


class RunAudit:
    """A Run's resume audit, from its ``audit`` option to the outcome told once.

    Args:
        option: the Run's ``audit`` (see :func:`check_audit`).

    Attributes:
        due: the audit ended in the writer's thread and is not told yet.
        outcome: the audit as told (None before, or without an audit).

    Raises:
        ConfigError: ``option`` breaks its rule.
    """

    def __init__(self, option: Any) -> None:
        self.tolerance = check_audit(option)
        self.due = False
        self.outcome: ResumeAudit | None = None
        self._auditor: ResumeAuditor | None = None

    def begin(self, logs: Path, latest: int | None) -> None:
        """On resuming from the checkpoint at step ``latest`` (None: a new run, nothing to
        audit), reads the points past it that stand in ``logs``."""
        if self.tolerance is None or latest is None:
            return
        before, float32 = crashed_points(logs, latest)
        if before:
            self._auditor = ResumeAuditor(
                before, tolerance=self.tolerance, float32=float32, on_done=self._ended
            )

    def _ended(self) -> None:
        self.due = True  # (on the writer's thread)

    def attach(self, writer: SummaryWriter) -> None:
        """Hands the audit to the run's writer, just opened (before its first point)."""
        if self._auditor is not None:
            writer.audit(self._auditor)

    def tell(self, messages: Messages, ledger: Ledger | None, *, closing: bool = False) -> None:
        """Tells the outcome once, and records it in ``ledger`` (the run's, or None): where
        the audit ended, or (``closing``) what the run compared before it closed (its
        writer closed, every point written)."""
        auditor = self._auditor
        if auditor is None or not (self.due or closing):
            return
        self._auditor, self.due = None, False
        self.outcome = outcome = auditor.result()
        if outcome.compared == 0:
            return
        messages.say(outcome.line())
        first = outcome.first
        if ledger is not None:
            where = None if first is None else {"tag": first.tag, "step": first.step}
            ledger.append_late(
                "audit", audit=outcome.line(), audit_compared=outcome.compared, diverged=where
            )
        if first is not None:
            warnings.warn(
                f"the resumed run logged {first.tag} = {first.after!r} at step {first.step}, "
                f"where the attempt before the crash logged {first.before!r}: it does not "
                "continue as the run would have without the crash. Likely causes: state "
                "that the checkpoint does not hold (a random generator not in the state "
                "tree, a data loader that starts its epoch again: draw batches with "
                "run.next_batch() and put generators in the state, e.g. GeneratorState), "
                "or nondeterministic kernels. Pass Run(audit=<tolerance>) to allow small "
                "differences, or audit=False.",
                ResumeDivergenceWarning,
                stacklevel=4,  # the line that called update() (or close())
            )
