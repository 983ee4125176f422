"""A rank's sign of life on the group's key-value store, and its peers' reading of it.

A rank that waits for another's key inside a save (see
:mod:`globalstep.checkpoint._ranks.coordinated`) asks the group which of the ranks it waits
for died (:meth:`globalstep._group.ProcessGroup.lost`): a peer blocked in a collective learns
of a dead rank from the engine in about a second, but a key that never comes says nothing
until the wait's timeout (600 s by default). So each rank of a group whose engine cannot
tell keeps a :class:`Heartbeat`: a daemon thread that adds 1 to the rank's own counter on
the store every :data:`BEAT_SECONDS`, on a connection of its own (the training thread's
blocking calls on the group's store do not hold it up), and nothing on the training
thread. A peer reads the counters of the ranks it waits for (:class:`Watch`) and calls a
rank lost when its counter did not move for :data:`SILENT_SECONDS` of the peer's own
monotonic clock (never comparing two hosts' clocks): a process that exited, was killed,
or stopped (SIGSTOP). A rank that is merely slow (a long update, a long write of its
part) beats on: the thread needs the interpreter for microseconds every half second,
and globalstep's own long calls (hashing a large chunk) let it in. Only one call into a
C extension that holds the interpreter for over ``SILENT_SECONDS`` without releasing it
would silence a live rank (torch's operations release it).

A counter never written (0) is a rank that has not started its heartbeat yet: never lost.

Example:
    >>> watch = Watch()
    >>> watch.silent("k", 3, now=0.0), watch.silent("k", 3, now=SILENT_SECONDS)
    (False, True)
    >>> watch.silent("k", 4, now=SILENT_SECONDS + 1), watch.silent("never", 0, now=99.0)
    (False, False)
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable
from typing import Any

__all__ = [
    "BEAT_SECONDS",
    "HEARTBEAT",
    "SILENT_SECONDS",
    "WATCH",
    "Heartbeat",
    "Watch",
    "silent_ranks",
]

BEAT_SECONDS = 0.5
"""How often, in seconds, a rank's heartbeat adds 1 to its counter."""
SILENT_SECONDS = 5.0
"""How long, in seconds, a counter must stand still before its rank is called lost: ten
beats missed. A rank waiting for a dead one notices within about ``SILENT_SECONDS + 1``."""


class Watch:
    """A peer's reading of the counters: when each last moved, by this process's clock."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def forget(self) -> None:
        """Forgets every reading (in a forked child: with a fresh lock, as the parent's may
        have been held)."""
        self._seen = {}
        self._lock = threading.Lock()

    def silent(self, key: str, value: int, now: float) -> bool:
        """Whether the counter ``key``, read as ``value`` at ``now`` (``time.monotonic()``),
        stood still for :data:`SILENT_SECONDS` since this process first saw that value."""
        if value <= 0:
            return False  # never beaten: its rank has not started its heartbeat
        with self._lock:
            seen = self._seen.get(key)
            if seen is None or seen[0] != value:
                self._seen[key] = (value, now)
                return False
            return now - seen[1] >= SILENT_SECONDS


class Heartbeat:
    """This process's heartbeat: one daemon thread, started by :meth:`start`, stopped by
    :meth:`stop`, at the process's exit, or once ``alive()`` turns false (the group was
    destroyed). A forked child starts without it (the parent's thread is not in the child,
    and the child is not the rank)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._key = ""

    def start(self, key: str, connect: Callable[[], Any], alive: Callable[[], bool]) -> None:
        """Beats on ``key`` (idempotent while the thread beats on it).

        Args:
            key: this rank's counter.
            connect: the store the thread adds to (called on the thread: a connection of
                its own, where the store can make one).
            alive: whether the group still exists (asked before each beat).
        """
        with self._lock:
            thread = self._thread
            if thread is not None and thread.is_alive() and self._key == key:
                return
            self._stop.set()
            self._stop = stop = threading.Event()
            self._key = key
            self._thread = thread = threading.Thread(
                target=_beat,
                args=(key, connect, alive, stop),
                name="globalstep-heartbeat",
                daemon=True,
            )
            thread.start()

    def stop(self, wait: float = 1.0) -> None:
        """Stops the thread (waiting up to ``wait`` seconds for it)."""
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(wait)

    @property
    def beating(self) -> bool:
        """Whether the thread runs."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def forked(self) -> None:
        """In a forked child: no thread, a fresh lock (the parent's may have been held)."""
        self._lock = threading.Lock()
        self._thread = None
        self._stop = threading.Event()
        self._key = ""


def _beat(key: str, connect: Callable[[], Any], alive: Callable[[], bool], stop: Any) -> None:
    """The thread: adds 1 to ``key`` every BEAT_SECONDS until stopped or the group is gone.

    A store that fails a call is not called again (its host died: the peers learn that
    from the store itself, and torch logs each failed call); the thread then only waits to
    be stopped, so that :meth:`Heartbeat.start` does not start another on the same key.
    Nothing is raised."""
    store: Any = None
    broken = False
    while not stop.is_set():
        if not alive():
            return
        if not broken:
            try:
                if store is None:
                    store = connect()
                store.add(key, 1)
            except Exception:
                broken = True
        stop.wait(BEAT_SECONDS)


def silent_ranks(store: Any, keys: dict[int, str]) -> list[int]:
    """The ranks whose counter (``keys``: rank -> its key on ``store``) stood still for
    :data:`SILENT_SECONDS` of this process's clock: what a group's ``lost`` answers. None
    where the store does not answer (the caller's own look at the store says so)."""
    import time

    now = time.monotonic()
    found = []
    for rank, key in keys.items():
        try:
            value = int(store.add(key, 0))  # 0 where the rank never beat
        except Exception:
            return []
        if WATCH.silent(key, value, now):
            found.append(rank)
    return found


HEARTBEAT = Heartbeat()
"""This process's heartbeat (one per process: its rank's)."""
WATCH = Watch()
"""This process's reading of its peers' counters."""


def _forked() -> None:
    """In a forked child: no heartbeat, and what the parent had seen forgotten."""
    HEARTBEAT.forked()
    WATCH.forget()


atexit.register(HEARTBEAT.stop)
os.register_at_fork(after_in_child=_forked)
