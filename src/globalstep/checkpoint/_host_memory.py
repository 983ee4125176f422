"""The host memory that async saves hold: one count per process, and the wait it bounds.

An async save copies the state's arrays to host memory and writes the copy on its save
thread; the copy is freed when the save ends. :data:`HELD` counts the bytes of every copy
that a background save of this process holds (every :class:`CheckpointManager
<globalstep.checkpoint.CheckpointManager>`'s: a fast tier's beside the durable one's), and
:meth:`HostMemory.reserve` makes a save wait until its copy fits under a bound.
"""

from __future__ import annotations

import threading
import time

__all__ = ["HELD", "HostMemory", "check_max_host_bytes"]


def check_max_host_bytes(value: object, *, async_save: bool, distributed: object) -> int | None:
    """Returns ``max_host_bytes`` checked: None, or a positive int with ``async_save``.

    Raises:
        ConfigError: it is not None or an int >= 1, or it is given without ``async_save``
            (a synchronous save holds no copy) or with ``distributed`` (not bounded yet).
    """
    from globalstep._errors import ConfigError

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError("max_host_bytes", "must be None or an int >= 1 (bytes)", value)
    if not async_save:
        raise ConfigError(
            "max_host_bytes",
            "must be None unless async_save=True (a synchronous save holds no copy)",
            value,
        )
    if distributed:
        raise ConfigError(
            "max_host_bytes",
            "must be None for a distributed manager (its shards' copies are not bounded yet)",
            value,
        )
    return value


class HostMemory:
    """The bytes held by background saves' copies, and the wait for room under a bound.

    Attributes:
        held: the bytes held now.
        peak: the most bytes held at once since the count began (or :meth:`reset_peak`).
        waiting: the saves waiting for room now.
    """

    def __init__(self) -> None:
        self._room = threading.Condition()
        self.held = 0
        self.peak = 0
        self.waiting = 0

    def reserve(self, nbytes: int, limit: int) -> float:
        """Waits until ``nbytes`` more fit under ``limit`` (``nbytes <= limit``), counts them
        held, and returns the seconds waited (0.0 where they fitted at once)."""
        with self._room:
            if self.held + nbytes <= limit:
                waited = 0.0
            else:
                began = time.perf_counter()
                self.waiting += 1
                self._room.wait_for(lambda: self.held + nbytes <= limit)
                self.waiting -= 1
                waited = time.perf_counter() - began
            self.held += nbytes
            self.peak = max(self.peak, self.held)
        return waited

    def release(self, nbytes: int) -> None:
        """Counts ``nbytes`` freed (their copy is gone) and wakes the saves waiting."""
        with self._room:
            self.held -= nbytes
            self._room.notify_all()

    def reset_peak(self) -> None:
        """Starts :attr:`peak` again from the bytes held now."""
        with self._room:
            self.peak = self.held


HELD = HostMemory()
"""The process's count: every bounded async save reserves its copy here."""
