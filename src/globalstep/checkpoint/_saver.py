"""The saver: a save as a :class:`SaveJob` value, committed on the caller's or a save thread.

The manager checks a save and takes its copy (the flat arrays, the document), as a
``SaveJob``; a :class:`Committer` commits it (the logs made durable, the abandoned
timeline deleted, the bytes committed, the round told, retention applied). A
:class:`SyncSaver` runs that on the caller's thread; an :class:`AsyncSaver` on a thread of
its own, one save at a time, keeping a failure for the next save, ``wait`` or ``close``.
An async save's copy is counted in :data:`~globalstep.checkpoint._host_memory.HELD` while
it is held; with ``max_host_bytes`` the saver takes the copy itself, once it fits under
that bound (see :meth:`AsyncSaver.hold`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from globalstep import _durability
from globalstep._errors import CheckpointError, CheckpointWarning, ConfigError
from globalstep.checkpoint._directory.catalogue import Catalogue
from globalstep.checkpoint._directory.index import StepIndex, step_name
from globalstep.checkpoint._directory.retention import Retention
from globalstep.checkpoint._directory.timeline import Timeline
from globalstep.checkpoint._files.commit import CommitProtocol
from globalstep.checkpoint._files.document import Document
from globalstep.checkpoint._host_memory import HELD, check_max_host_bytes
from globalstep.checkpoint._ranks.rounds import Round

__all__ = ["AsyncSaver", "Committer", "SaveJob", "SyncSaver", "saver_for"]


def saver_for(
    directory: str, async_save: object, max_host_bytes: object, distributed: object
) -> SyncSaver | AsyncSaver:
    """The manager's saver for its ``async_save`` and ``max_host_bytes`` options.

    Raises:
        ConfigError: ``async_save`` is not a bool, or ``max_host_bytes`` breaks its rule
            (see :func:`~globalstep.checkpoint._host_memory.check_max_host_bytes`).
    """
    if not isinstance(async_save, bool):
        raise ConfigError("async_save", "must be a bool", async_save)
    bound = check_max_host_bytes(max_host_bytes, async_save=async_save, distributed=distributed)
    return AsyncSaver(directory, bound) if async_save else SyncSaver()


@dataclass(frozen=True)
class SaveJob:
    """One save, checked and copied, ready to commit.

    Attributes:
        step: the checkpoint's step.
        arrays: the arrays by flat name (copies, for an async save).
        document: the rest of state.json.
        force: replace a committed checkpoint of this step.
        abandoned: the abandoned timeline's steps, deleted before the commit.
        round: the save's round (solo, or of every rank).
        before_commit: called once before anything is written, or None.
        fresh: the writer's listing had no entry of this step (nothing to clear).
        marked: whether the step was committed when the save began (None: look).
    """

    step: int
    arrays: Mapping[str, Any]
    document: Document
    force: bool
    abandoned: list[int]
    round: Round
    before_commit: Callable[[], None] | None = None
    fresh: bool = False
    marked: bool | None = None


class Committer:
    """Commits a :class:`SaveJob` into the writer's directory (on any thread).

    Args:
        protocol: the directory's commit protocol.
        index: its step index, told of each change.
        catalogue: its summary index, told of each new checkpoint.
        retention: applied after each commit.
    """

    def __init__(
        self,
        protocol: CommitProtocol,
        index: StepIndex,
        catalogue: Catalogue,
        retention: Retention,
    ) -> None:
        self._protocol = protocol
        self._index = index
        self._catalogue = catalogue
        self._retention = retention

    def __call__(self, job: SaveJob) -> None:
        """Commits ``job``; on failure, tells the round (every rank) and raises."""
        try:
            self._commit(job)
        except BaseException as err:
            job.round.abort(err)
            raise

    def _commit(self, job: SaveJob) -> None:
        step = job.step

        def before() -> None:
            # The protocol has made the curves up to this step durable (every commit
            # does); then the caller's hook, and the abandoned timeline goes.
            if job.before_commit is not None:
                job.before_commit()
            Timeline.drop(step, job.abandoned, self._retention)

        try:
            self._protocol.commit(
                step_name(step),
                job.arrays,
                job.document,
                force=job.force,
                hooks=job.round.hooks,
                fresh=job.fresh and step not in job.abandoned,
                marked=job.marked,
                before=before,
            )
        except BaseException:
            self._retention.failed()  # leftovers of this attempt go at the next save
            self._index.forget(step)
            raise
        job.round.committed()
        # Those who wait for a commit (a tracker's points at and below this step).
        _durability.committed(step)
        self._index.changed(added=step)
        self._catalogue.record(step, job.document)
        # The checkpoint is committed: nothing below may fail the save.
        self._retention.saved(step, job.document)


class SyncSaver:
    """Runs each save on the caller's thread."""

    copy = False
    """Whether a save copies the state first (it is written before ``save`` returns)."""

    in_flight = None
    """The save in flight: never one."""

    waited_for_memory_seconds = 0.0
    """The seconds the last save waited for host memory: never any."""

    def hold(self, arrays: dict[str, Any]) -> dict[str, Any]:
        """The arrays the save writes: ``arrays`` themselves (no copy)."""
        return arrays

    def run(self, work: Callable[[], None]) -> None:
        """Runs ``work`` now; its error is the save's."""
        work()

    def wait(self) -> None:
        """Nothing to wait for."""

    def shutdown(self) -> None:
        """Nothing to stop."""


class _InFlight:
    """An async save handed to the save thread."""

    def __init__(self, future: Any) -> None:
        self._future = future

    def join(self) -> None:
        """Waits until the save has finished (its errors are kept by the saver)."""
        self._future.result()

    def is_alive(self) -> bool:
        """True until the save has finished."""
        return not self._future.done()


class AsyncSaver:
    """Runs each save on a save thread, one at a time; the caller waits only for the copy.

    Args:
        directory: the directory's name in messages.
        max_host_bytes: the most bytes that the copies of every background save of the
            process may hold at once, or None for no bound (see :meth:`hold`).
    """

    def __init__(self, directory: str, max_host_bytes: int | None = None) -> None:
        self._directory = directory
        self._pool: Any = None  # the thread pool of one, made at the first save
        self.in_flight: _InFlight | None = None
        """The save in flight (``is_alive()``, ``join()``), or None."""
        self._error: BaseException | None = None
        self.max_host_bytes = max_host_bytes
        self.copy = max_host_bytes is None
        """Whether flattening copies the state (else :meth:`hold` copies it, bounded)."""
        self.waited_for_memory_seconds = 0.0
        """The seconds the last save's training thread waited for host memory."""
        self._held: dict[str, Any] = {}  # the copy the next run() writes
        self._held_bytes = 0
        self._synchronous = False  # the next run() is a save larger than the bound alone
        self._warned = False

    def hold(self, arrays: dict[str, Any]) -> dict[str, Any]:
        """The arrays the next :meth:`run` writes, counted as held until its save ends.

        Without ``max_host_bytes`` they are the copy flattening took. With it, they are
        copied here, once the bytes held by every background save of the process leave
        room for them: the caller (the training thread) waits until then, and
        :attr:`waited_for_memory_seconds` says how long. A save larger than the bound
        alone is not copied: it runs on the caller's thread, as a synchronous save does,
        with a :class:`~globalstep._errors.CheckpointWarning` the first time.
        """
        nbytes = sum(int(getattr(array, "nbytes", 0)) for array in arrays.values())
        bound, self.waited_for_memory_seconds = self.max_host_bytes, 0.0
        if bound is not None and nbytes > bound:
            self._synchronous = True
            self._warn_too_large(nbytes, bound)
            return arrays
        self.waited_for_memory_seconds = HELD.reserve(
            nbytes, sys.maxsize if bound is None else bound
        )
        if bound is not None:
            import numpy as np

            arrays = {name: np.array(array, copy=True) for name, array in arrays.items()}
        self._held, self._held_bytes = arrays, nbytes
        return arrays

    def _warn_too_large(self, nbytes: int, bound: int) -> None:
        if self._warned:
            return
        self._warned = True
        warnings.warn(
            f"a save of {nbytes} bytes is larger than max_host_bytes={bound}: it is written "
            f"on the training thread, without a copy, into {self._directory} (and every save "
            "as large; raise max_host_bytes to save it in the background)",
            CheckpointWarning,
            stacklevel=5,
        )

    def run(self, work: Callable[[], None]) -> None:
        """Runs ``work`` on the save thread, made at the first save and kept (so a save
        does not wait for a new thread to be scheduled); interpreter exit waits for the
        save in flight, as it would for a thread of its own. Call :meth:`wait` first, and
        :meth:`hold` for the arrays ``work`` writes. A save larger than ``max_host_bytes``
        runs here, on the caller's thread; its error is the save's."""
        if self._synchronous:
            self._synchronous = False
            work()
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="globalstep-save")
        held, nbytes = self._held, self._held_bytes
        self._held, self._held_bytes = {}, 0
        self.in_flight = _InFlight(self._pool.submit(self._in_background, work, held, nbytes))

    def _in_background(self, work: Callable[[], None], held: dict[str, Any], nbytes: int) -> None:
        try:
            work()
        except BaseException as err:  # surfaced by the next save, wait or close
            self._error = err
        finally:
            held.clear()  # the copy goes before the next save may take its own
            HELD.release(nbytes)

    def wait(self) -> None:
        """Waits for the save in flight; raises its error, if it failed.

        Raises:
            CheckpointError: the save failed (the original error is its cause).
        """
        thread, self.in_flight = self.in_flight, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise CheckpointError(f"a background save failed: {error}", self._directory) from error

    def shutdown(self) -> None:
        """Stops the save thread (after :meth:`wait`)."""
        if self._pool is not None:
            self._pool.shutdown()
