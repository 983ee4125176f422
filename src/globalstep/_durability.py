"""Where the summary writers meet the checkpoint manager: logs durable before a commit.

A checkpoint promises that a resumed run starts from it; a writer's points are the curves
up to it. A point the writer accepted before a checkpoint commits must therefore be on disk
when the checkpoint is, or a crash after the commit loses it for good (the resumed run
starts after it and never logs it again). ``globalstep.Run`` wires its writer to its
manager; a loop that uses the two alone (``manager.maybe_save(clock, state)`` beside
``SummaryWriter(logdir, clock=clock)``) has nobody to do it.

This module is that meeting point, below both ``checkpoint/`` and ``summary/`` (which never
import each other): every open writer registers a callable that makes the points it accepted
durable (``SummaryWriter.sync_points``), and every checkpoint save calls
:func:`sync_registered` before it writes anything. A writer drops out when it closes, or when
it is garbage collected (the registry holds weak references only).

The other way round, after each commit: a part that must know which steps a checkpoint
now covers (a tracker format sends a point only once no crash can take it back, see
:mod:`globalstep.summary._tracker`) registers a listener with :func:`listen`, and the
manager calls :func:`committed` with the step once the checkpoint is committed.

Which writers a save syncs: every writer open in the process, not only those logging for
a clock the checkpoint carries. A checkpoint cannot tell which curves depend on it: a writer
without a clock logs steps it is given (any clock's), and a tree saved at an int step may
hold no clock at all, so a choice by clock would lose points silently in those loops. The
price of syncing them all is one ``fsync`` per open writer per checkpoint (the checkpoint
itself fsyncs several files), and that a failing writer fails every save, loudly: a
checkpoint is never committed past curves that could not be written.

Example:
    >>> import tempfile
    >>> from globalstep import CheckpointManager, Clock, SummaryWriter
    >>> from globalstep.summary._reader import read_run
    >>> clock, logdir = Clock(), tempfile.mkdtemp()
    >>> writer = SummaryWriter(logdir, clock=clock, formats=("jsonl",), flush_seconds=3600)
    >>> clock.tick()
    >>> writer.scalars({"loss": 0.5})  # queued, not yet on disk
    >>> [p.step for p in read_run(logdir).scalars.get("loss", [])]
    []
    >>> with CheckpointManager(tempfile.mkdtemp()) as manager:
    ...     manager.save(clock, {"clock": clock})  # the writer's points go to disk first
    >>> [p.step for p in read_run(logdir).scalars["loss"]]
    [1]
    >>> writer.close()
"""

from __future__ import annotations

import itertools
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["Registration", "committed", "listen", "register", "registered", "sync_registered"]

_lock = threading.Lock()
_syncs: dict[int, weakref.WeakMethod[Callable[[], None]]] = {}
_listeners: dict[int, weakref.WeakMethod[Callable[[int], None]]] = {}
_ids = itertools.count()


class Registration:
    """A registered sync or commit listener; :meth:`cancel` drops it (idempotent)."""

    __slots__ = ("_key", "_table")

    def __init__(self, key: int, table: dict[int, Any] | None = None) -> None:
        self._key = key
        self._table = _syncs if table is None else table

    def cancel(self) -> None:
        """Drops the entry from its registry; later saves no longer call it."""
        with _lock:
            self._table.pop(self._key, None)


def register(sync: Callable[[], None]) -> Registration:
    """Registers ``sync``, a bound method, to be called before every checkpoint commit.

    Only a weak reference to its object is kept: a writer garbage collected drops out by
    itself. ``sync`` must be callable from any thread (an async save calls it on its own)
    and raise when the points cannot be made durable.

    Args:
        sync: a bound method, e.g. ``writer.sync_points``.

    Returns:
        The registration, whose ``cancel()`` drops it (a writer's ``close()``).

    Raises:
        TypeError: ``sync`` is not a bound method.
    """
    if getattr(sync, "__self__", None) is None:
        raise TypeError(f"`sync` must be a bound method; got sync={sync!r}")
    key = next(_ids)
    # No weakref callback: one can run inside any allocation, here too, with the lock held.
    with _lock:
        _syncs[key] = weakref.WeakMethod(sync)
    return Registration(key)


def registered() -> list[Callable[[], None]]:
    """Returns the live registered syncs, oldest first; drops those whose object is gone."""
    with _lock:
        live = [(key, ref()) for key, ref in _syncs.items()]
        for key, sync in live:
            if sync is None:
                del _syncs[key]
    return [sync for _, sync in live if sync is not None]


def sync_registered() -> None:
    """Calls every registered sync, oldest first: what a checkpoint save calls before it
    writes anything, on the save's own thread.

    All are called even when one fails (each writer's points reach the disk where they
    can); then the first error is raised, so that the save fails with it.

    Raises:
        BaseException: the first error a sync raised (a writer's ``SummaryWriteError``,
            ``NonFiniteError``, ...), as it was raised.
    """
    first: BaseException | None = None
    for sync in registered():
        try:
            sync()
        except BaseException as err:
            if first is None:
                first = err
    if first is not None:
        raise first


def listen(listener: Callable[[int], None]) -> Registration:
    """Registers ``listener``, a bound method, to be called with the step of every
    checkpoint committed in this process, after the commit.

    Only a weak reference to its object is kept. ``listener`` is called on the save's
    thread (an async save's own), must return quickly and must not raise: the checkpoint
    is committed already, so an error cannot fail the save (:func:`committed` turns one
    into a ``RuntimeWarning``).

    Args:
        listener: a bound method taking the committed step, e.g. a tracker's
            ``committed``.

    Returns:
        The registration, whose ``cancel()`` drops it.

    Raises:
        TypeError: ``listener`` is not a bound method.
    """
    if getattr(listener, "__self__", None) is None:
        raise TypeError(f"`listener` must be a bound method; got listener={listener!r}")
    key = next(_ids)
    with _lock:
        _listeners[key] = weakref.WeakMethod(listener)
    return Registration(key, _listeners)


def committed(step: int) -> None:
    """Tells every registered listener that the checkpoint of ``step`` is committed:
    what the manager calls after each commit, on the save's thread.

    A listener that raises does not keep the others from hearing of the commit; its
    error is given as a ``RuntimeWarning`` naming it (the checkpoint stays committed).

    Example:
        >>> class Listener:
        ...     def heard(self, step: int) -> None:
        ...         print("committed", step)
        >>> listener = Listener()
        >>> registration = listen(listener.heard)
        >>> committed(7)
        committed 7
        >>> registration.cancel()
        >>> committed(8)
    """
    with _lock:
        live = [(key, ref()) for key, ref in _listeners.items()]
        for key, listener in live:
            if listener is None:
                del _listeners[key]
    for _, listener in live:
        if listener is None:
            continue
        try:
            listener(step)
        except Exception as err:  # the checkpoint is committed: the save cannot fail now
            warnings.warn(
                f"the commit listener {listener!r} failed on step {step}: {err!r}; the "
                "checkpoint is committed",
                RuntimeWarning,
                stacklevel=2,
            )
