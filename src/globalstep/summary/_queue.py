"""The queue between a writer's training thread and its files, and the thread that drains it.

The training thread appends items (:data:`~globalstep.summary._base.Item`: plain tuples
``(kind, tag, step, wall_time, payload)``, see there why) to :attr:`BackgroundQueue.items`.
A daemon thread writes them to the backends in batches of :data:`BATCH_ITEMS`, every
``flush_seconds`` or sooner when the queue fills; past :data:`MAX_QUEUED` the training
thread writes them itself. A write that fails loses the batch in hand, is kept
(:attr:`BackgroundQueue.error`) for the training thread to raise once, and does not stop
later writes.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from globalstep._errors import ConfigError, NonFiniteError, SummaryWriteError
from globalstep.summary._audit import ResumeAuditor
from globalstep.summary._base import KIND, PAYLOAD, SCALARS, Backend, Item
from globalstep.summary._formats import backend_for
from globalstep.summary._tracker import Tracker
from globalstep.summary._values import TensorReader

__all__ = ["BATCH_ITEMS", "MAX_QUEUED", "BackgroundQueue", "open_backends", "reported"]

BATCH_ITEMS = 20_000
"""The most items written in one batch, and the queue's length that wakes the thread."""

MAX_QUEUED = 50 * BATCH_ITEMS
"""The queue's length past which the training thread writes it itself."""


def open_backends(
    logdir: str,
    formats: tuple[str | Tracker, ...],
    purge_step: int | None,
    storage_options: Mapping[str, Any] | None,
) -> list[Backend]:
    """Opens the files, marks the restart in each (if any) and flushes; on any failure
    closes what it opened.

    Raises:
        ConfigError: a file cannot be opened or written (the message says why).
        MissingDependencyError: ``"tensorboard"`` is asked for and the extra is missing.
    """
    backends: list[Backend] = []
    try:
        for name in formats:
            backends.append(backend_for(name, logdir, storage_options))
        wall_time = time.time()
        for backend in backends:
            if purge_step is not None:
                backend.mark_restart(purge_step, wall_time)
            backend.flush()
    except BaseException as err:
        for backend in backends:
            backend.close()
        if isinstance(err, OSError):
            raise ConfigError(
                "logdir", "must be a directory this process can write", logdir, hint=str(err)
            ) from err
        raise
    return backends


def reported(error: BaseException, path: str | None, lost: int) -> BaseException:
    """The exception that reports a background error to a caller."""
    if isinstance(error, NonFiniteError):  # a guarded tensor, read in the background
        return NonFiniteError(error.tag, error.value, error.step)
    if isinstance(error, ConfigError):
        return ConfigError(
            error.parameter,
            error.rule,
            error.value,
            hint="That tensor was read after the call returned; the point was not written.",
        )
    lost_text = f"{lost} points were lost; " if lost else ""
    return SummaryWriteError(
        f"the summary writer could not write {path}: {error} ({lost_text}the writer goes "
        "on and writes later calls)",
        path,
    )


class BackgroundQueue:
    """A writer's queue of items, its backends and the thread that writes one to the other.

    Args:
        logdir: the writer's directory (or fsspec URL), named by errors and by the thread.
        backends: the open output formats (:func:`open_backends`).
        flush_seconds: the longest time, in seconds, an item waits in the queue.
        remote: whether ``logdir`` is an fsspec URL (no directory to fsync).
        float32: whether event files are written (a tensor's value must fit a float32).
        guarded: the tags whose values must be finite (checked as tensors are read).

    Attributes:
        items: the queue; the training thread appends, the drain pops from the left.
        error: the first error not yet reported, or None; read without the lock by the
            training thread's fast check.
        tensors: set by the training thread once a tensor (read here) was queued.
        on_device: set once a torch tensor on an accelerator was (read together).
        wake: set to wake the thread before its ``flush_seconds`` are up.
        thread: the daemon thread, started by :meth:`start`.
        auditor: a resume audit that each batch written is shown to until it ends, or
            None (see :mod:`globalstep.summary._audit`).
    """

    def __init__(
        self,
        logdir: str,
        backends: list[Backend],
        *,
        flush_seconds: float,
        remote: bool,
        float32: bool,
        guarded: frozenset[str],
    ) -> None:
        self.items: collections.deque[Item] = collections.deque()
        self.error: BaseException | None = None
        self.tensors = False
        self.on_device = False
        self.wake = threading.Event()
        self.thread = threading.Thread(
            target=self._run, name=f"globalstep-summary-{logdir}", daemon=True
        )
        self.backends = backends
        self.auditor: ResumeAuditor | None = None
        self._logdir = logdir
        self._flush_seconds = flush_seconds
        self._remote = remote
        self._lock = threading.Lock()
        self._error_path: str | None = None
        self._error_lost = 0
        self._stopped = False
        self._files_closed = False  # set under the lock: no drain writes after it
        self._dir_synced = False
        self._reader = TensorReader(logdir, float32=float32, guarded=guarded, record=self.record)

    def start(self) -> None:
        """Starts the background thread."""
        self.thread.start()

    def grew(self) -> None:
        """Called when the queue reaches :data:`BATCH_ITEMS`: wakes the thread, or past
        :data:`MAX_QUEUED` writes the queue on the caller's thread."""
        if len(self.items) >= MAX_QUEUED:
            # The disk is slower than the training loop: write here rather than grow.
            self.drain()
        else:
            self.wake.set()

    def record(self, err: BaseException, path: str, lost: int = 0) -> None:
        """Keeps the first error not yet reported and counts the points lost (called under
        the lock, by the drain)."""
        if self.error is None:
            self.error, self._error_path = err, path
        self._error_lost += lost

    def take_error(self) -> tuple[BaseException | None, str | None, int]:
        """Returns the error not yet reported, its path and the points lost, and forgets
        them (an error is reported once)."""
        with self._lock:
            kept = self.error, self._error_path, self._error_lost
            self.error, self._error_path, self._error_lost = None, None, 0
        return kept

    def peek_error(self) -> tuple[BaseException | None, str | None, int]:
        """:meth:`take_error` that leaves the error for the next caller to report too."""
        with self._lock:
            return self.error, self._error_path, self._error_lost

    def drain(self, sync: bool = False) -> None:
        """Writes the queue and flushes the files (fsyncs them with ``sync``); a failure
        loses the batch in hand, is recorded for the training thread, and does not stop
        later drains."""
        with self._lock:
            if self._files_closed:  # a save's sync that lost the race with close()
                return
            queue = self.items
            popleft = queue.popleft
            backend: Backend | None = None
            items: list[Item] = []
            try:
                while queue:
                    items = [popleft() for _ in range(min(len(queue), BATCH_ITEMS))]
                    if self.tensors:
                        self._reader.read(items, self.on_device)
                    for backend in self.backends:
                        backend.write(items)
                    if self.auditor is not None and self.auditor.see(items):
                        self.auditor = None  # the audit ended: nothing more to compare
                    items = []
                for backend in self.backends:
                    if sync:
                        backend.sync()
                    else:
                        backend.flush()
                if sync and not self._dir_synced:
                    self._sync_directory()
            except Exception as err:
                lost = sum(len(item[PAYLOAD]) if item[KIND] == SCALARS else 1 for item in items)
                self.record(err, backend.path if backend else self._logdir, lost)

    def _sync_directory(self) -> None:
        """Makes the new files' names durable (once: later syncs only grow the files)."""
        if hasattr(os, "O_DIRECTORY") and not self._remote:
            fd = os.open(self._logdir, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._dir_synced = True

    def stop(self) -> None:
        """Stops the thread and waits for it (its last drain included)."""
        self._stopped = True
        self.wake.set()
        self.thread.join()

    def close_files(self) -> None:
        """Closes the backends' files, recording an error; no drain writes after it (a
        sync on a save's thread, under way, ends before this)."""
        with self._lock:
            self._files_closed = True
            for backend in self.backends:
                try:
                    backend.close()
                except OSError as err:
                    self.record(err, backend.path)
        for backend in self.backends:  # a tracker's one warning, once every file is closed
            report = getattr(backend, "report", None)
            if report is not None:
                report()

    def set_params(self, params: Mapping[str, Any]) -> None:
        """Hands the run's parameters to the tracker formats (the others have none)."""
        for backend in self.backends:
            set_params = getattr(backend, "set_params", None)
            if set_params is not None:
                set_params(params)

    def _run(self) -> None:
        while not self._stopped:
            self.wake.wait(self._flush_seconds)
            self.wake.clear()
            self.drain()
