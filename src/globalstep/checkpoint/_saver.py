"""The saver: a save as a :class:`SaveJob` value, committed on the caller's or a save thread.

The manager checks a save and takes its copy (the flat arrays, the document), as a
``SaveJob``; a :class:`Committer` commits it (the logs made durable, the abandoned
timeline deleted, the bytes committed, the round told, retention applied). A
:class:`SyncSaver` runs that on the caller's thread; an :class:`AsyncSaver` on a thread of
its own, one save at a time, keeping a failure for the next save, ``wait`` or ``close``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from globalstep import _durability
from globalstep._errors import CheckpointError
from globalstep.checkpoint._directory.catalogue import Catalogue
from globalstep.checkpoint._directory.index import StepIndex, step_name
from globalstep.checkpoint._directory.retention import Retention
from globalstep.checkpoint._directory.timeline import Timeline
from globalstep.checkpoint._files.commit import CommitProtocol
from globalstep.checkpoint._files.document import Document
from globalstep.checkpoint._ranks.rounds import Round

__all__ = ["AsyncSaver", "Committer", "SaveJob", "SyncSaver"]


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
        began: when the caller's save began (``time.perf_counter()``), for the ledger.
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
    began: float = 0.0


class Committer:
    """Commits a :class:`SaveJob` into the writer's directory (on any thread).

    Args:
        protocol: the directory's commit protocol.
        index: its step index, told of each change.
        catalogue: its summary index, told of each new checkpoint.
        retention: applied after each commit.
        saved: told of each commit: ``saved(step, nbytes, stall_seconds,
            background_seconds)``: the arrays' bytes, the caller's wait and the save
            thread's time (see ``CheckpointManager._saved``); None tells nobody.
        background: whether commits run on a save thread (an async saver).
    """

    def __init__(
        self,
        protocol: CommitProtocol,
        index: StepIndex,
        catalogue: Catalogue,
        retention: Retention,
        saved: Callable[[int, int, float, float], None] | None = None,
        *,
        background: bool = False,
    ) -> None:
        self._protocol = protocol
        self._index = index
        self._catalogue = catalogue
        self._retention = retention
        self._saved = saved
        self._background = background

    def __call__(self, job: SaveJob) -> None:
        """Commits ``job``; on failure, tells the round (every rank) and raises."""
        start = time.perf_counter()
        try:
            self._commit(job)
        except BaseException as err:
            job.round.abort(err)
            raise
        if self._saved is not None:
            end = time.perf_counter()
            stall, spent = (
                (start - job.began, end - start) if self._background else (end - job.began, 0.0)
            )
            size = sum(int(getattr(a, "nbytes", 0)) for a in job.arrays.values())
            self._saved(job.step, size, stall, spent)

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
    """

    copy = True
    """Whether a save copies the state first (the caller goes on changing it)."""

    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._pool: Any = None  # the thread pool of one, made at the first save
        self.in_flight: _InFlight | None = None
        """The save in flight (``is_alive()``, ``join()``), or None."""
        self._error: BaseException | None = None

    def run(self, work: Callable[[], None]) -> None:
        """Runs ``work`` on the save thread, made at the first save and kept (so a save
        does not wait for a new thread to be scheduled); interpreter exit waits for the
        save in flight, as it would for a thread of its own. Call :meth:`wait` first."""
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="globalstep-save")
        self.in_flight = _InFlight(self._pool.submit(self._in_background, work))

    def _in_background(self, work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as err:  # surfaced by the next save, wait or close
            self._error = err

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
