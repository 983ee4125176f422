"""Signals: the stop signals while a :class:`~globalstep.run.Run` is open (SIGINT,
SIGTERM and SIGUSR1 by default), agreed over the ranks.

The first signal is handed to a :class:`~globalstep.distributed.Preemption`: on one process
the Run saves a checkpoint after the update in flight and exits with status 128 + the
signal's number (:func:`exit_status`: 130, 143, 138); on several ranks of a process group
every rank does so at one common update, within ``2 * Ranks.stop_every`` updates of the
signal. A second one exits at once, as the default action does. The handlers that were
there before are given back on close.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from globalstep.distributed import Preemption, exit_status
from globalstep.run._messages import Messages
from globalstep.run._ranks import RankPlan

__all__ = ["exit_status", "stop_for"]


def stop_for(
    signals: tuple[int, ...],
    handle: bool,
    plan: RankPlan,
    messages: Messages,
    on_stop: Callable[[int], None],
) -> Preemption:
    """Returns the Preemption a Run holds: ``signals`` caught where ``handle`` and this is
    the main thread (only it can have handlers), agreed over the ranks of ``plan`` where
    they form a process group (a collective: every rank makes its Run at the same point).

    Args:
        signals: the signals, checked (see :func:`~globalstep.distributed.check_signals`).
        handle: the Run's ``handle_signals``.
        plan: the Run's ranks.
        messages: where the first signal is told (the writer rank).
        on_stop: called with the agreed signal number at the update that stops.
    """
    if not handle or threading.current_thread() is not threading.main_thread():
        signals = ()
    every = plan.ranks.stop_every if plan.ranks is not None else 1
    agree = bool(signals) and plan.grouped
    within = 2 * every if agree else 0

    def told(signum: int) -> None:
        messages.got_signal(signum, within)

    return Preemption(
        signals, every=every, agree=agree, group=plan.group, on_signal=told, on_stop=on_stop
    )
