"""Preemption agreed by all ranks: a stop signal received by any rank stops every rank at
one common update.

A scheduler pre-empts a job with a signal: SLURM sends SIGTERM (or, with
``--signal=USR1@...``, SIGUSR1) to every task, torchrun's agent forwards the SIGTERM it
gets to every worker, a cloud sends SIGTERM to one VM only. On several ranks each process
must then save the same step, once, and exit; a rank that stops alone leaves the others
waiting in their next collective. :class:`Preemption` catches the signals, and every
``every`` updates (its :meth:`Preemption.poll` is called once per update) every rank
issues one asynchronous ``all_reduce(MAX)`` of one int64 (the signal number received, 0
for none) on a gloo group of its own, and waits for the one it issued ``delay`` such
reductions before. Every rank reads the same maximum at the same poll, so every rank
learns of the signal at the same update. When no signal came nothing blocks (unless the
reduction issued ``every * delay`` updates before is still in flight): the per-update
cost is issuing one small collective every ``every`` updates.

**The bound.** A signal noted on any rank while its clock showed step ``s`` (the ranks
of a data-parallel loop are at the same step, give or take the update in flight) stops
every rank at one step ``<= s + every * (delay + 1)``, polling once per update after the
tick: ``s + 2`` with the defaults (``every=1, delay=1``).

On one process (no process group, or a group of one) the agreement is immediate: the
first poll after the signal returns it. :class:`~globalstep.run.Run` uses this class for
its ``stop_signals``; a plain loop uses it directly (see :class:`Preemption`).

The exit status of a process stopped by signal ``n`` is ``128 + n``
(:func:`exit_status`), as a shell reports a process killed by it: 130 for SIGINT, 143 for
SIGTERM, 138 for SIGUSR1. A second signal, while the first is being handled, exits at
once as the signal's default action does; one that comes less than
:data:`SAME_DELIVERY_SECONDS` after the first is taken as the same pre-emption delivered
twice and ignored: a cloud VM's shutdown (systemd signals every process of the session)
and SLURM's ``scancel`` (every process of the step) reach each worker directly *and*
through torchrun's agent, which forwards what it gets.
"""

from __future__ import annotations

import collections
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from globalstep._closing import Closing
from globalstep._optional import require
from globalstep.errors import ConfigError

__all__ = [
    "DEFAULT_STOP_SIGNALS",
    "SAME_DELIVERY_SECONDS",
    "Preemption",
    "check_signals",
    "exit_status",
]

DEFAULT_STOP_SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
"""The signals that stop a run by default: Ctrl-C, the schedulers' SIGTERM and SIGUSR1."""

SAME_DELIVERY_SECONDS = 1.0
"""A stop signal this soon after the first is the same pre-emption, delivered twice."""

_UNCATCHABLE = {signal.SIGKILL, signal.SIGSTOP}


def exit_status(signum: int) -> int:
    """Returns the exit status of a run stopped by ``signum``: 128 + its number, as a shell
    reports a process killed by it (130 for SIGINT, 143 for SIGTERM, 138 for SIGUSR1).

    Example:
        >>> exit_status(signal.SIGTERM), exit_status(signal.SIGUSR1)
        (143, 138)
    """
    return 128 + int(signum)


def check_signals(signals: Any, name: str = "signals") -> tuple[int, ...]:
    """Returns ``signals`` as a tuple of signal numbers, each once, in the order given.

    Args:
        signals: signal numbers (``signal.SIGTERM``, ``15``), as any iterable.
        name: the parameter's name, for the error.

    Raises:
        ConfigError: ``signals`` is not an iterable of signals, or holds one that cannot be
            caught (SIGKILL, SIGSTOP) or that this system does not know.

    Example:
        >>> check_signals([signal.SIGTERM, 10, signal.SIGTERM])
        (<Signals.SIGTERM: 15>, <Signals.SIGUSR1: 10>)
    """
    if isinstance(signals, str | bytes) or not isinstance(signals, Iterable):
        raise ConfigError(name, "must be a tuple of signal numbers (signal.SIGTERM, ...)", signals)
    found: list[int] = []
    for signum in signals:
        if isinstance(signum, bool) or not isinstance(signum, int):
            raise ConfigError(
                name,
                f"must hold signal numbers (signal.SIGTERM, ...); {signum!r} is not one",
                signals,
            )
        if signum not in signal.valid_signals():
            raise ConfigError(
                name, f"must hold signals this system knows; {signum} is not one", signals
            )
        if signum in _UNCATCHABLE:
            raise ConfigError(
                name,
                f"cannot hold {signal.Signals(signum).name}, which no process can catch",
                signals,
                hint="Stop on SIGTERM or SIGUSR1 instead (what schedulers send first).",
            )
        if signum not in found:
            found.append(signal.Signals(signum))
    return tuple(found)


def _process_group(group: Any) -> tuple[Any, Any]:
    """torch.distributed and the gloo group the agreement runs on, or (None, None) on one
    process. A group of one needs no agreement."""
    from globalstep import distributed

    if not distributed.initialised():
        if group is not None:
            raise ConfigError(
                "group",
                "needs an initialised default process group",
                group,
                hint="Call torch.distributed.init_process_group first, or pass group=None.",
            )
        return None, None
    dist = require("torch.distributed", "torch", "globalstep.preemption")
    if group is None:
        if distributed.world_size() == 1:
            return None, None
        # Every rank makes its Preemption at the same point: new_group is a collective.
        return dist, dist.new_group(backend="gloo")
    backend = dist.get_backend(group)
    if backend != "gloo":
        raise ConfigError(
            "group",
            "must be a gloo group (the agreement's tensor lives on the CPU)",
            backend,
            hint="Pass group=None (a gloo group of its own is made) or a group made by "
            'dist.new_group(backend="gloo").',
        )
    return (dist, group) if distributed.world_size(group) > 1 else (None, None)


class Preemption(Closing):
    """Stops every rank at one common update when any rank receives a stop signal.

    Make it at the same point on every rank (on several ranks it makes a gloo group: a
    collective), call :meth:`poll` once per update on every rank (the same number of
    times), and stop when it returns a signal number: every rank gets the same one at the
    same poll (the highest number received, where ranks received different signals),
    within ``every * (delay + 1)`` updates of the signal (see the module's docstring).

    Args:
        signals: the signals that request a stop; their handlers are installed now (the
            main thread only) and given back by :meth:`close`. ``()`` catches nothing
            (:meth:`request` still asks for a stop).
        every: polls between two reductions, >= 1: fewer collectives, a later stop.
        delay: reductions issued between issuing one and reading it, >= 1: more hides
            a slower reduction behind more updates, and stops later.
        group: a gloo process group to agree on; None makes one of its own over the
            whole run (on several ranks of an initialised process group) or agrees
            locally (one process).
        agree: False stops this process alone, at once, even on several ranks.
        on_signal: called with the signal's number when the first one arrives (in the
            handler: it should only note or print).
        on_stop: called once with the agreed signal number, at the poll that agrees on
            it (on one process: in the handler, as the stop is agreed at once).

    Raises:
        ConfigError: a bad ``signals``, ``every``, ``delay`` or ``group``, or
            ``signals`` given off the main thread.

    Example:
        A plain loop (here on one process; under torchrun the same code agrees across
        the ranks):

        >>> with Preemption() as stop:
        ...     for update in range(1, 100):
        ...         if update == 5:
        ...             os.kill(os.getpid(), signal.SIGTERM)  # the scheduler's signal
        ...         signum = stop.poll()
        ...         if signum:
        ...             break  # save a checkpoint, then raise SystemExit(exit_status(signum))
        >>> update, signum, exit_status(signum)
        (5, <Signals.SIGTERM: 15>, 143)
    """

    def __init__(
        self,
        signals: Iterable[int] = DEFAULT_STOP_SIGNALS,
        *,
        every: int = 1,
        delay: int = 1,
        group: Any = None,
        agree: bool = True,
        on_signal: Callable[[int], None] | None = None,
        on_stop: Callable[[int], None] | None = None,
    ) -> None:
        self.signals = check_signals(signals)
        for name, value in (("every", every), ("delay", delay)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, "must be an int >= 1", value)
        if self.signals and threading.current_thread() is not threading.main_thread():
            raise ConfigError(
                "signals",
                "can be caught only by a Preemption made in the main thread",
                self.signals,
                hint="Make it in the main thread, or pass signals=() and call request().",
            )
        self.every, self.delay = every, delay
        self._dist: Any
        self.group: Any
        self._dist, self.group = _process_group(group) if agree else (None, None)
        self._on_signal, self._on_stop = on_signal, on_stop
        self.requested: int | None = None
        self.agreed: int | None = None
        self.polls = 0
        self._first_signal_at: float | None = None
        self._pending: collections.deque[tuple[Any, Any]] = collections.deque()
        self._torch: Any = (
            require("torch", "torch", "globalstep.preemption") if self._dist else None
        )
        self._old_handlers: dict[int, Any] = {}
        for signum in self.signals:
            self._old_handlers[signum] = signal.signal(signum, self._handle)

    @property
    def distributed(self) -> bool:
        """Whether the stop is agreed across several ranks (else it is local and at once)."""
        return self._dist is not None

    def request(self, signum: int = signal.SIGTERM) -> None:
        """Asks for a stop, as receiving ``signum`` would (a time limit, a file appearing);
        a second request changes nothing.

        Raises:
            ConfigError: ``signum`` is not an int >= 1.
        """
        if isinstance(signum, bool) or not isinstance(signum, int) or signum < 1:
            raise ConfigError("signum", "must be an int >= 1 (a signal number)", signum)
        if self.requested is not None:
            return
        self.requested = signum
        if self._dist is None and self.agreed is None:
            self.agreed = signum
            if self._on_stop is not None:
                self._on_stop(signum)

    def poll(self) -> int:
        """Returns the agreed signal number once every rank knows of a stop, else 0.

        Call it once per update on every rank (a collective, issued without waiting). Once
        it returned a signal it returns the same one and issues nothing more.

        Raises:
            RuntimeError: the process group failed (a rank died): torch's error.
        """
        agreed = self.agreed
        if agreed is not None:
            return agreed
        dist = self._dist
        if dist is None:
            return 0
        self.polls = polls = self.polls + 1
        if polls % self.every:
            return 0
        pending = self._pending
        if len(pending) == self.delay:
            work, tensor = pending.popleft()
            work.wait()
            value = tensor.item()
            if value:
                return self._agree(value)
        else:
            tensor = self._torch.zeros(1, dtype=self._torch.int64)
        tensor.fill_(self.requested or 0)
        work = dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        pending.append((work, tensor))
        return 0

    def _agree(self, value: int) -> int:
        try:
            agreed: int = signal.Signals(value)
        except ValueError:  # a request() with a number that names no signal
            agreed = value
        self.agreed = agreed
        if self._on_stop is not None:
            self._on_stop(agreed)
        return agreed

    def close(self) -> None:
        """Gives the signal handlers back; twice does nothing. The reductions in flight are
        not waited for: every rank issued the same ones, and they end with the process
        group."""
        handlers, self._old_handlers = self._old_handlers, {}
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        self._pending.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        first = self._first_signal_at
        if first is not None:
            if now - first < SAME_DELIVERY_SECONDS:
                return  # the same pre-emption again (directly and through torchrun's agent)
            # The second signal: exit at once, as the default action does.
            self.close()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self._first_signal_at = now
        if self._on_signal is not None:
            self._on_signal(signum)
        self.request(signal.Signals(signum))

    def __repr__(self) -> str:
        where = "distributed" if self.distributed else "local"
        return (
            f"Preemption({where}, every={self.every}, delay={self.delay}, "
            f"requested={self.requested}, agreed={self.agreed})"
        )
