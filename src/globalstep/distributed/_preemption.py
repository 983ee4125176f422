"""Preemption agreed by all ranks: a stop signal received by any rank stops every rank at
one common update.

A scheduler pre-empts a job with a signal: SLURM sends SIGTERM (or, with
``--signal=USR1@...``, SIGUSR1) to every task, torchrun's agent forwards the SIGTERM it
gets to every worker, a cloud sends SIGTERM to one VM only. On several ranks each process
must then save the same step, once, and exit; a rank that stops alone leaves the others
waiting in their next collective. :class:`Preemption` catches the signals and agrees
through the process group's key-value store (:mod:`globalstep._group`'s: under
torch.distributed, the Store the group was made with), with no collective: the rank that
receives a signal writes one key, ``{signal}:{poll}``, naming the poll at which every
rank stops; it is written once (``compare_set``: the first request wins, a later one on
another rank adopts it). Every
``every`` polls each rank looks whether the key exists (one ``check`` of the Store, a
round trip on the loopback or the network, no other rank involved); a rank that finds it
stops at the poll it names. When no signal came nothing waits for another rank: the
per-update cost is one Store ``check`` every ``every`` updates.

**The bound.** The stop poll is the first poll at which every rank looks after the
request, counted ``delay`` looks ahead: with the ranks of a data-parallel loop at the same
step give or take the update in flight (DDP's gradient ``all_reduce`` keeps them so), a
signal noted on any rank while its clock showed step ``s`` stops every rank at one step
``<= s + every * (delay + 1)``, polling once per update after the tick: ``s + 2`` with the
defaults (``every=1, delay=1``). A rank that finds the key only after the poll it names
(ranks not in lockstep) stops at once, with a warning naming both polls.

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

import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from globalstep._closing import Closing
from globalstep._errors import ConfigError
from globalstep._group import ProcessGroup, active, how_to_initialise, initialised

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


def _agreement_store(group: Any) -> tuple[Any, str] | None:
    """The store the agreement writes its key into and the key, or None on one process
    (a group of one needs no agreement)."""
    if group is not None and not isinstance(group, ProcessGroup | str) and not initialised():
        raise ConfigError(
            "group",
            "needs an initialised default process group",
            group,
            hint=f"Call one of {how_to_initialise()} first, or pass group=None.",
        )
    ranks = active(group)
    if not ranks.connected or ranks.world_size == 1:
        return None
    # Every rank makes its agreements in the same order: the how-many-th names the key.
    return ranks.store(), ranks.scope("globalstep/preempt")


class Preemption(Closing):
    """Stops every rank at one common update when any rank receives a stop signal.

    Make it at the same point on every rank (every rank makes its agreements in the same
    order: the how-many-th names the Store key), call :meth:`poll` once per update on
    every rank (the same number of times), and stop when it returns a signal number: every
    rank gets the same one at the same poll (the first request's, where ranks received
    different signals), within ``every * (delay + 1)`` updates of the signal (see the
    module's docstring).

    Args:
        signals: the signals that request a stop; their handlers are installed now (the
            main thread only) and given back by :meth:`close`. ``()`` catches nothing
            (:meth:`request` still asks for a stop).
        every: polls between two looks at the Store, >= 1: fewer round trips, a later
            stop.
        delay: looks between the request and the stop, >= 1: more leaves ranks that lag
            further behind time to see the request, and stops later.
        group: the process group whose ranks agree (its size decides whether there is
            anything to agree on); None is the default group, or a
            ``globalstep._group.ProcessGroup``. Under torch.distributed the request goes
            through the default group's Store either way.
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
        self.every, self.delay, self.group = every, delay, group
        shared = _agreement_store(group) if agree else None
        self._store: Any = shared[0] if shared is not None else None
        self._key = shared[1] if shared is not None else ""
        self._on_signal, self._on_stop = on_signal, on_stop
        self.requested: int | None = None
        self.agreed: int | None = None
        self.polls = 0
        self._first_signal_at: float | None = None
        self._stop_at: tuple[int, int] | None = None  # (signal, poll) once known
        self._posted = False
        self._old_handlers: dict[int, Any] = {}
        for signum in self.signals:
            self._old_handlers[signum] = signal.signal(signum, self._handle)

    @property
    def distributed(self) -> bool:
        """Whether the stop is agreed across several ranks (else it is local and at once)."""
        return self._store is not None

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
        if self._store is None:
            if self.agreed is None:
                self._agree(signum)
            return
        self._post()

    def _post(self) -> None:
        """Writes the request (this signal, the stop poll) unless a rank wrote one first;
        notes the one in force. A Store that does not answer is tried again at the next
        poll (this may run in a signal handler)."""
        polls, every = self.polls, self.every
        first_look = (polls // every + 1) * every  # a rank one poll ahead may be past it
        value = f"{int(self.requested or 0)}:{first_look + every * self.delay}"
        try:
            raw = self._store.compare_set(self._key, "", value)
        except Exception:  # the Store's RuntimeError or DistStoreError: retried at poll
            return
        self._posted = True
        self._note(raw)

    def _note(self, raw: Any) -> None:
        text = bytes(raw).decode() if not isinstance(raw, str) else raw
        signum, _, at = text.partition(":")
        self._stop_at = (int(signum), int(at))

    def poll(self) -> int:
        """Returns the agreed signal number once every rank knows of a stop, else 0.

        Call it once per update on every rank. Every ``every`` polls it looks at the
        Store for a request (one ``check``, no collective). Once it returned a signal it
        returns the same one and looks no more.

        Raises:
            RuntimeError: the Store stopped answering (its host, rank 0, died): torch's
                error.
        """
        agreed = self.agreed
        if agreed is not None:
            return agreed
        store = self._store
        if store is None:
            return 0
        self.polls = polls = self.polls + 1
        stop_at = self._stop_at
        if stop_at is None:
            if self.requested is not None and not self._posted:
                self._post()
            elif polls % self.every == 0 and store.check([self._key]):
                self._note(store.get(self._key))
            stop_at = self._stop_at
            if stop_at is None:
                return 0
        signum, at = stop_at
        if polls < at:
            return 0
        if polls > at:
            warnings.warn(
                f"this rank learned of the stop at poll {polls}, after the poll every rank "
                f"stops at ({at}): the ranks are not in lockstep (a loop whose ranks drift "
                "by more than one update); pass a smaller `every`",
                stacklevel=2,
            )
        return self._agree(signum)

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
        """Gives the signal handlers back; twice does nothing."""
        handlers, self._old_handlers = self._old_handlers, {}
        for signum, handler in handlers.items():
            signal.signal(signum, handler)

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
