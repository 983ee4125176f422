"""The timeline: after a restore of an older step, the newer checkpoints are abandoned.

Resuming from an older checkpoint than the newest starts a new timeline: the first save
after it deletes the checkpoints newer than the one resumed from, oldest first and before
its own commit, so that no later restore returns to the abandoned timeline and a crash
in between resumes at one timeline's newest, never at a mix of the two. The new
checkpoint records where it resumed from and what it abandoned.
"""

from __future__ import annotations

from collections.abc import Callable

from globalstep._errors import CheckpointError
from globalstep.checkpoint._directory.index import step_name
from globalstep.checkpoint._directory.retention import Retention
from globalstep.checkpoint._files.document import Document

__all__ = ["Timeline"]


class Timeline:
    """Which step the writer resumed from, and what its next save abandons."""

    def __init__(self) -> None:
        self.resumed_from: int | None = None
        """The older step restored last (a rollback), until the next save; else None."""

    def restored(self, chosen: int, latest: int | None) -> None:
        """Notes a restore of ``chosen`` where ``latest`` is the newest checkpoint."""
        self.resumed_from = chosen if latest is not None and chosen < latest else None

    def abandoned(self, steps: Callable[[], list[int]]) -> list[int]:
        """Returns the committed steps that the next save abandons (newer than the step
        resumed from), oldest first; ``steps()`` lists them only after a rollback."""
        if self.resumed_from is None:
            return []
        return [s for s in steps() if s > self.resumed_from]

    def record(self, document: Document, abandoned: list[int]) -> None:
        """Records the new timeline in the next checkpoint's ``document``; the save
        that carries it starts the new timeline."""
        if self.resumed_from is None:
            return
        document.timeline = {"resumed_from": self.resumed_from, "abandoned": abandoned}
        document.previous_step = self.resumed_from
        self.resumed_from = None

    @staticmethod
    def drop(step: int, abandoned: list[int], retention: Retention) -> None:
        """Deletes the ``abandoned`` checkpoints before ``step`` is committed.

        Oldest first, so that until the last deletion the old timeline's newest is the
        newest checkpoint (a crash resumes there, as if the rollback had not started),
        and after it the checkpoint resumed from is: never a mix of the two.

        Raises:
            CheckpointError: one could not be deleted; ``step`` must not be saved.
        """
        for old in abandoned:
            try:
                retention.delete(old)
            except CheckpointError as err:
                raise CheckpointError(
                    f"step {step} was not saved: the abandoned timeline's checkpoint "
                    f"{step_name(old)} could not be deleted ({err}); a later restore would "
                    "return to it. Make it deletable and save again.",
                    retention.path(old),
                ) from err
