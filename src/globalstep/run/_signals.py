"""Signals: SIGINT and SIGTERM while a :class:`~globalstep.run.Run` is open.

The first signal is handed to the Run (which saves a checkpoint after the update in
flight and exits with status 130 or 143, :func:`exit_status`); a second one exits at once,
as the default action does. The handlers that were there before are given back on close.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["SignalStop", "exit_status"]

_EXIT_STATUS: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143}


def exit_status(signum: int) -> int:
    """Returns the exit status of a run stopped by ``signum``: 128 + its number, as a shell
    reports a process killed by it (130 for SIGINT, 143 for SIGTERM)."""
    return _EXIT_STATUS[signum]


class SignalStop:
    """Handles SIGINT and SIGTERM: the first goes to ``on_first``, a second exits at once.

    Args:
        on_first: called with the signal's number when the first one arrives (in the
            handler, so it only notes the request).
    """

    def __init__(self, on_first: Callable[[int], None]) -> None:
        self._on_first = on_first
        self._received: int | None = None
        self._old_handlers: dict[int, Any] = {}

    def install(self) -> None:
        """Installs the handlers, where this is the main thread (only it can have them)."""
        if threading.current_thread() is threading.main_thread():
            for signum in _EXIT_STATUS:
                self._old_handlers[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        """Gives the handlers that were there before back; twice does nothing."""
        handlers, self._old_handlers = self._old_handlers, {}
        for signum, handler in handlers.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._received is not None:
            # The second signal: exit at once, as the default action does.
            self.restore()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self._received = signum
        self._on_first(signum)
