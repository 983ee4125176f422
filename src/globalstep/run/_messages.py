"""Messages: the lines a Run prints, on the writer rank only, each after ``globalstep: ``."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TextIO

__all__ = ["Messages"]


def _name(signum: int) -> str:
    return signal.Signals(signum).name


class Messages:
    """Prints a Run's messages to ``stream``, where ``enabled`` (the writer rank).

    Args:
        stream: where the lines go.
        enabled: print them (False: say nothing, off the writer rank).
        run: the run's directory.
        checkpoints: the checkpoints' directory (or URL).
        total_steps: the run's length, where known.

    Example:
        >>> import sys
        >>> say = Messages(sys.stdout, True, Path("r"), "r/c", None)
        >>> say.finished(20)
        globalstep: finished at step 20; checkpoint saved in r/c
    """

    def __init__(
        self,
        stream: TextIO,
        enabled: bool,
        run: Path,
        checkpoints: object,
        total_steps: int | None,
    ) -> None:
        self.stream = stream
        self.enabled = enabled
        self._run, self._checkpoints, self._total = run, checkpoints, total_steps

    def say(self, line: str) -> None:
        """Prints ``line`` (and flushes), where enabled."""
        if not self.enabled:
            return
        self.stream.write(f"globalstep: {line}\n")
        self.stream.flush()

    def started(
        self, latest: int | None, step: int, *, done: bool, source: str | None = None
    ) -> None:
        """A new run, or one resumed from ``latest`` (at ``step``, read from ``source``,
        default the checkpoints' directory); and, where ``done``, that the resumed run is
        complete already."""
        if latest is None:
            self.say(f"new run in {self._run}")
            return
        self.say(f"resumed from step {step} ({source or self._checkpoints})")
        if done:
            self.say(
                f"the run is complete (step {step} of {self._total}); "
                "pass a larger total_steps to go on"
            )

    def finished(self, step: int) -> None:
        """The run ended, with its final checkpoint saved."""
        self.say(f"finished at step {step}; checkpoint saved in {self._checkpoints}")

    def got_signal(self, signum: int, within: int = 0) -> None:
        """The first stop signal arrived; on several ranks, every rank stops ``within``
        updates of it (0: one process, after the update in flight)."""
        name = _name(signum)
        when = (
            f"every rank saves a checkpoint within {within} updates"
            if within
            else "saving a checkpoint after the update in flight"
        )
        self.say(f"got {name}: {when}, then exiting (send {name} again to exit at once)")

    def saved_after_signal(self, signum: int, step: int) -> None:
        """The checkpoint at ``step`` was saved after the signal."""
        self.say(f"saved step {step} after {_name(signum)}; run again to resume")
