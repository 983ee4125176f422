"""Where the summary writers meet the checkpoint manager: logs durable before a commit.

A checkpoint promises that a resumed run starts from it; a writer's points are the curves
up to it. A point the writer accepted before a checkpoint commits must therefore be on disk
when the checkpoint is, or a crash after the commit loses it for good (the resumed run
starts after it and never logs it again). ``globalstep.Run`` wires its writer to its
manager; a loop that uses the two alone (``manager.maybe_save(clock, state)`` beside
``SummaryWriter(logdir, clock=clock)``) has nobody to do it.

This module is that meeting point, below both ``checkpoint/`` and ``summary/`` (which never
import each other): every open writer registers a callable that makes the points it accepted
durable (``SummaryWriter.sync_points``), and every checkpoint save calls them all before
its checkpoint can exist: :func:`begin_sync` at the start of the commit, on a thread of
their own so that the logs' fsyncs overlap the arrays' writing, and
:meth:`Syncing.wait` before state.json and the marker (a rank that only writes its part
of a distributed save calls :func:`sync_registered` before it). A writer drops out when it
closes, or when it is garbage collected (the registry holds weak references only).

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
    >>> from globalstep.summary.reader import read_run
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
import weakref
from collections.abc import Callable

__all__ = ["Registration", "Syncing", "begin_sync", "register", "registered", "sync_registered"]

_lock = threading.Lock()
_syncs: dict[int, weakref.WeakMethod[Callable[[], None]]] = {}
_ids = itertools.count()


class Registration:
    """A registered sync; :meth:`cancel` drops it (idempotent)."""

    __slots__ = ("_key",)

    def __init__(self, key: int) -> None:
        self._key = key

    def cancel(self) -> None:
        """Drops the sync from the registry; later saves no longer call it."""
        with _lock:
            _syncs.pop(self._key, None)


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
    _call_all(registered())


def _call_all(syncs: list[Callable[[], None]]) -> None:
    first: BaseException | None = None
    for sync in syncs:
        try:
            sync()
        except BaseException as err:
            if first is None:
                first = err
    if first is not None:
        raise first


class Syncing:
    """The registered syncs running on a thread of their own, begun by :func:`begin_sync`:
    a checkpoint writes its arrays meanwhile and waits (:meth:`wait`) before its marker."""

    def __init__(self, syncs: list[Callable[[], None]]) -> None:
        self._syncs = syncs
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="globalstep-log-sync", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            _call_all(self._syncs)
        except BaseException as err:  # raised by wait(), on the save's thread
            self._error = err

    def wait(self) -> None:
        """Waits until every sync has returned; raises the first error (once).

        Raises:
            BaseException: the first error a sync raised, as it was raised.
        """
        self._thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def join(self) -> None:
        """Waits until every sync has returned, raising nothing (a save that failed
        before it waited: it has its own error to raise)."""
        self._thread.join()


def begin_sync() -> Syncing | None:
    """Starts every registered sync on a thread of its own; None when none is registered
    (no thread is started).

    The caller must :meth:`~Syncing.wait` before anything that depends on the points being
    durable (a checkpoint's marker), and :meth:`~Syncing.join` on every other path.
    """
    syncs = registered()
    return Syncing(syncs) if syncs else None
