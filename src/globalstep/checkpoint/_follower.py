"""The follower: each checkpoint a live run commits, opened once, for an evaluator.

Like TensorFlow's ``tf.train.checkpoints_iterator``: it polls the directory through the
step index and opens each new checkpoint; one the writer pruned before it could be opened
is skipped with a :class:`CheckpointWarning` and listed in ``missed``.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterator

from globalstep._errors import CheckpointWarning, ConfigError
from globalstep.checkpoint._directory.reading import Reading, VanishedError
from globalstep.checkpoint._files.lazy import CheckpointReader

__all__ = ["CheckpointFollower"]


class CheckpointFollower(Iterator[CheckpointReader]):
    """The iterator of :meth:`CheckpointManager.follow`: each new checkpoint, opened, once.

    Attributes:
        missed: the steps it knew of (listed, or named as a checkpoint's predecessor) that
            were pruned before it could open them, in the order found.
        last_step: the step of the checkpoint yielded last, or None.

    Args:
        reading: how the directory's checkpoints are read.
        after: yield checkpoints above this step; None starts with the newest.
        timeout_seconds: stop when no new checkpoint came for this long; None waits.
        poll_seconds: how often to look for a new checkpoint.

    Raises:
        ConfigError: ``timeout_seconds`` or ``poll_seconds`` is not a number of seconds.
    """

    def __init__(
        self,
        reading: Reading,
        after: int | None,
        timeout_seconds: float | None,
        poll_seconds: float,
    ) -> None:
        for name, value in (("timeout_seconds", timeout_seconds), ("poll_seconds", poll_seconds)):
            if value is None and name == "timeout_seconds":
                continue
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number and math.isfinite(value) and value >= 0):  # type: ignore[arg-type, operator]
                raise ConfigError(name, "must be a finite number of seconds >= 0", value)
        self._reading = reading
        self._timeout = timeout_seconds
        self._poll = poll_seconds
        self._start_at_newest = after is None
        self.last_step: int | None = after
        self.missed: list[int] = []

    def _miss(self, step: int, why: str) -> None:
        if step in self.missed:
            return
        self.missed.append(step)
        warnings.warn(
            f"checkpoint step {step} of {self._reading.directory} was {why} before it could "
            "be read; it is skipped",
            CheckpointWarning,
            stacklevel=3,
        )

    def _next_pending(self) -> CheckpointReader | None:
        reading = self._reading
        if self._start_at_newest:
            latest = reading.index.latest()
            if latest is None:
                return None
            self._start_at_newest = False
            self.last_step = latest - 1
        floor = -1 if self.last_step is None else self.last_step
        for step in [s for s in reading.index.steps() if s > floor]:
            try:
                reader = reading.checked(step, reading.reader)
            except VanishedError:
                self._miss(step, "pruned")
                self.last_step = step
                continue
            previous = reader.state.previous_step
            if (
                isinstance(previous, int)
                and not isinstance(previous, bool)
                and previous > floor
                and previous < step
                and self.last_step is not None
                and previous not in self.missed
            ):
                self._miss(previous, "committed and pruned")
            self.last_step = step
            return reader
        return None

    def __next__(self) -> CheckpointReader:
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            reader = self._next_pending()
            if reader is not None:
                return reader
            if deadline is not None and time.monotonic() >= deadline:
                raise StopIteration
            pause = self._poll
            if deadline is not None:
                pause = min(pause, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
