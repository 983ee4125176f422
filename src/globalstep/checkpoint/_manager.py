"""CheckpointManager: saves and restores state trees keyed by the step, and keeps a few.

The manager holds and calls its parts, one job each: the save trigger decides when to
save (``save_every``, :mod:`~globalstep.checkpoint._save_trigger`); the step index lists the
directory only when it changed (``_index``); reading resolves a step and retries a read
that a pruning writer outran (``_reading``); the saver commits a save, a ``SaveJob``, on
the caller's thread or a save thread (``_saver``), through the commit protocol
(:mod:`~globalstep.checkpoint._files.commit`), in a round of one rank or of many (``_rounds``);
retention applies the policy (:mod:`~globalstep.checkpoint._directory.policy`, ``_retention``); the
timeline drops what a rollback abandoned (``_timeline``); the catalogue describes the
checkpoints for ``ckpt ls`` (``_catalogue``); the follower yields each new one
(``_follower``). One process writes a directory at a time; ``read_only=True`` inspects
without the lock.

Example:
    >>> import numpy as np, tempfile
    >>> from globalstep import Clock
    >>> clock, weights = Clock(), np.zeros(3)
    >>> directory = tempfile.mkdtemp()
    >>> with CheckpointManager(directory, max_to_keep=2, save_every=100) as manager:
    ...     for _ in range(500):
    ...         weights += 1.0
    ...         clock.tick()
    ...         _ = manager.maybe_save(clock, {"clock": clock, "weights": weights})
    ...     manager.steps()
    [400, 500]
    >>> resumed_clock, resumed = Clock(), np.zeros(3)
    >>> with CheckpointManager(directory, max_to_keep=2, save_every=100) as manager:
    ...     tree = manager.restore({"clock": resumed_clock, "weights": resumed})
    >>> resumed_clock.step, float(resumed[0]), tree["weights"] is resumed
    (500, 500.0, True)
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, overload

from globalstep import _durability
from globalstep._clock import Clock
from globalstep._closing import Closing
from globalstep._errors import (
    CheckpointError,
    CheckpointExistsError,
    CheckpointNotFoundError,
    CheckpointWarning,
    ConfigError,
    CorruptCheckpointError,
)
from globalstep._triggers import Trigger
from globalstep._units import DurationLike
from globalstep.checkpoint._directory.catalogue import Catalogue, CheckpointSummary
from globalstep.checkpoint._directory.index import StepIndex, step_name, step_of
from globalstep.checkpoint._directory.policy import (
    KeepBest,
    KeepPolicy,
    policy_from_options,
)
from globalstep.checkpoint._directory.reading import Reading
from globalstep.checkpoint._directory.retention import Retention, WarnOnce
from globalstep.checkpoint._directory.timeline import Timeline
from globalstep.checkpoint._fast_tier import (
    FastTier,
    Restored,
    Tiers,
    check_fast_tier,
    fast_manager,
    open_fast_tier,
)
from globalstep.checkpoint._files.commit import protocol_for
from globalstep.checkpoint._files.document import Document
from globalstep.checkpoint._files.metadata import metrics_to_json
from globalstep.checkpoint._follower import CheckpointFollower
from globalstep.checkpoint._inspection import Inspection
from globalstep.checkpoint._ledger import Ledger, checkpoint_bytes, open_ledger, timed
from globalstep.checkpoint._ranks.rounds import Round, Rounds
from globalstep.checkpoint._save_trigger import SaveTrigger
from globalstep.checkpoint._saver import Committer, SaveJob, saver_for
from globalstep.checkpoint._tree.build import RestoreReport
from globalstep.checkpoint._tree.flatten import Flattened
from globalstep.storage import DirectoryLock, Storage, open_storage

__all__ = [
    "CheckpointFollower",
    "CheckpointManager",
    "CheckpointSummary",
    "CheckpointWarning",
    "step_name",
]


def _document(
    step: int,
    metrics: Mapping[str, float] | None,
    flat: Flattened,
    policy: KeepPolicy,
    trigger: SaveTrigger | None,
    previous_step: int | None,
) -> Document:
    """The new checkpoint's state.json, less its files."""
    return Document(
        step=step,
        created_unix=time.time(),
        metrics=metrics_to_json(metrics),
        clocks=flat.clocks,
        tree=flat.structure,
        manager={
            "keep": policy.to_config(),
            "save_trigger": trigger.state_dict() if trigger else None,
        },
        previous_step=previous_step,
    )


class CheckpointManager(Inspection, Closing):
    """Saves state trees by step into ``directory``, keeps some, and restores them.

    Args:
        directory: a local path or an fsspec URL (``memory://...``, ``s3://...``).
        max_to_keep: keep the newest N; ``None`` keeps every checkpoint.
        keep_every_n_hours: also keep one checkpoint per N hours of wall time.
        keep_every_n_steps: also keep each checkpoint whose step is a multiple of N.
        keep_best: also keep the best k by a metric, e.g. ``KeepBest("loss", k=2)``.
        save_every: when :meth:`maybe_save` saves: a duration (``500``, ``"1ep"``,
            ``"30min"``) or a :class:`~globalstep._triggers.Trigger`.
        async_save: write in a background thread; the caller waits only for the copy.
            The thread still takes the GIL for its Python work and after each system
            call, which slows a training loop that gives the GIL up in every op (torch):
            for a small state saved every few milliseconds a synchronous save costs the
            loop less (BENCHMARKS.md, "Run: the per-update path"); async pays off when
            writing and syncing the files takes long.
        max_host_bytes: with ``async_save``, the most bytes the copies of the process's
            background saves may hold at once: a save waits for room (``_saver.py``).
        read_only: inspect and restore without taking the writer's lock.
        distributed: ``True`` or a
            :class:`~globalstep.checkpoint._ranks.coordinated.DistributedOptions`: open it on every
            rank of an initialised torch.distributed group and save on every rank with the
            same step; one rank writes replicated state and commits once every rank wrote
            its shards (see :mod:`globalstep.checkpoint._ranks.coordinated`).
        storage_options: keyword arguments for the fsspec file system of a URL
            ``directory``, e.g. ``{"endpoint_url": "http://127.0.0.1:9000"}`` for an
            S3-compatible store (see :class:`~globalstep.storage.FsspecStorage`
            for listing consistency, retries and the writer's lock there).
        fast_tier: a :class:`~globalstep.checkpoint.FastTier` saved often beside this
            durable directory; restore takes the newest step of either (see
            :mod:`~globalstep.checkpoint._fast_tier` for its rules).
        ledger: the writer's record of attempts, saves and restores of both tiers
            (``globalstep ckpt ledger``, :mod:`~globalstep.checkpoint._ledger`): True:
            ``ledger.jsonl`` here (if local), False: none, or a local path (a Run's: its
            directory's).

    Raises:
        ConfigError: a parameter is out of range.
        LockError: another live writer holds ``directory``.

    Retention keeps what any policy keeps, plus the newest checkpoint, and deletes only
    after the new checkpoint is committed. See the module docstring for an example.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_to_keep: int | None = 5,
        keep_every_n_hours: float | None = None,
        keep_every_n_steps: int | None = None,
        keep_best: KeepBest | None = None,
        save_every: DurationLike | Trigger | None = None,
        async_save: bool = False,
        max_host_bytes: int | None = None,
        read_only: bool = False,
        distributed: Any = False,
        storage_options: Mapping[str, Any] | None = None,
        fast_tier: FastTier | None = None,
        ledger: bool | str | os.PathLike[str] = True,
    ) -> None:
        policy = policy_from_options(max_to_keep, keep_every_n_hours, keep_every_n_steps, keep_best)
        check_fast_tier(fast_tier, distributed)
        self.policy: KeepPolicy = policy
        self._trigger = SaveTrigger.of(save_every)
        self._storage = open_storage(directory, storage_options)
        self.directory = self._storage.location
        self._saver = saver_for(self.directory, async_save, max_host_bytes, distributed)
        self._rounds = Rounds(distributed, self._storage, read_only=read_only)
        self._participant = self._rounds.participant
        self._read_only = read_only
        self._closed = False
        protocol = protocol_for(self._storage)
        self._index = StepIndex(protocol, writer=not read_only)
        self._reading = Reading(
            self._storage,
            self._index,
            self.directory,
            rebuild=self._rounds.distributed,
            ranks=self._rounds.rank_and_world,
        )
        warn_once = WarnOnce()
        self._catalogue = Catalogue(self._reading, warn_once)
        self._retention = Retention(self._reading, protocol, policy, warn_once)
        self._timeline = Timeline()
        self._commit = Committer(protocol, self._index, self._catalogue, self._retention)
        self._background = async_save is True
        self._lock: DirectoryLock | None = None
        self._restored: Restored | None = None  # the last restore (see last_restore)
        self.fast_tier = fast_tier
        self.ledger: Ledger | None = None  # see the ledger argument
        if not read_only and not self._participant:
            self._lock = DirectoryLock(self._storage)
            self._lock.acquire()
        try:
            self._tiers: Tiers | None = open_fast_tier(
                fast_tier,
                self._storage,
                distributed,
                writable=self._lock is not None,
                make=lambda tier: FastManager(
                    tier, async_save, max_host_bytes, read_only, self._ledger_saved
                ),
            )
            if not read_only:  # a participant: maybe_save must fire where the writer's fires
                self._resume_trigger()
            if self._lock is not None:
                self.ledger = open_ledger(ledger, self._storage)
        except BaseException:
            if getattr(self, "_tiers", None) is not None:
                self._tiers.fast.close()  # type: ignore[union-attr]
            if self._lock is not None:
                self._lock.release()  # no manager is returned, so nobody else could
            raise

    # ----------------------------------------------------------------- saving

    def save(
        self,
        step: int | Clock,
        state: Any,
        *,
        metrics: Mapping[str, float] | None = None,
        force: bool = False,
        before_commit: Callable[[], None] | None = None,
        tier: Literal["durable", "fast"] = "durable",
    ) -> None:
        """Saves ``state`` as the checkpoint of ``step``, then applies retention.

        Args:
            step: the step (an int, or a NumPy integer or anything else ``operator.index``
                takes, but a bool), or a Clock whose step is used.
            state: the state tree (see :mod:`globalstep.checkpoint.tree`).
            metrics: numbers for ``keep_best`` and ``globalstep ckpt ls``.
            force: replace an existing checkpoint of this step (atomically).
            before_commit: called once before anything is written: what else must be on
                disk before this checkpoint exists. It runs on the save's thread (the
                background one for an async save); if it raises, nothing is saved and the
                save fails with its error.
            tier: ``"fast"`` saves to the fast tier (``fast_tier``), with its retention.

        Before anything is written (and before ``before_commit``), every open
        :class:`~globalstep.summary.SummaryWriter` of the process makes the points it
        accepted so far durable (see :mod:`globalstep._durability`, which says why all of
        them): a crash after the commit never loses a point logged before the save, with
        or without ``globalstep.Run``. A writer whose points cannot be written fails the
        save with its error (``SummaryWriteError``, or ``NonFiniteError`` for a guarded
        loss read as NaN), and nothing is saved.

        Raises:
            CheckpointExistsError: the step is saved already and ``force`` is False.
            CheckpointError: the manager is read-only or closed, a previous background
                save failed (a writer's error of an async save is its cause), or writing
                failed (earlier checkpoints stay intact).
            ConfigError: the step, state or metrics are invalid.
            SummaryWriteError: an open writer's points could not be written (raised as
                the writer raised it; nothing was saved).
            NonFiniteError: an open writer read a guarded value that is NaN or infinite.
        """
        began = time.perf_counter()  # for the ledger's stall
        self._check_writable()
        self.wait()
        number = step_of(step)
        fast = fast_manager(tier, self._tiers)
        if fast is not None:  # this directory's abandoned timeline goes before its commit
            Timeline.drop(number, self._timeline.abandoned(self._index.steps), self._retention)
        if self._tiers is not None:
            self._tiers.before_save(number, fast is not None)
        if fast is not None:
            fast.save(number, state, metrics=metrics, force=force, before_commit=before_commit)
            return
        round_ = self._rounds.begin(number)
        try:
            self._save(number, state, metrics, force, round_, before_commit, began)
        except BaseException as err:
            round_.abort(err)
            raise

    def _save(
        self,
        number: int,
        state: Any,
        metrics: Mapping[str, float] | None,
        force: bool,
        round_: Round,
        before_commit: Callable[[], None] | None,
        began: float,
    ) -> None:
        """Checks the save and takes its copy as a SaveJob, for the saver to commit."""
        if self._participant:
            self._participate(state, round_, before_commit)
            return
        name = step_name(number)
        abandoned = self._timeline.abandoned(self._index.steps)
        # Whether the step is committed already, asked once (the commit is told).
        marked = None if number in abandoned else self._index.committed(number)
        if marked and not force:
            raise CheckpointExistsError(
                f"checkpoint {name} exists in {self.directory}; pass force=True to replace it",
                self._storage.join(name),
            )
        flat = round_.flatten(state, copy=self._saver.copy)
        document = _document(number, metrics, flat, self.policy, self._trigger, self.latest_step())
        # The listing latest_step() just took: no entry of this step, nothing to clear.
        fresh = number not in self._index.listed()
        self._timeline.record(document, abandoned)
        flat.arrays = self._saver.hold(flat.arrays)  # an async save's copy (waits for room)
        job = SaveJob(
            number,
            flat.arrays,
            document,
            force,
            abandoned,
            round_,
            before_commit,
            fresh,
            marked,
        )
        work: Callable[[], None] = lambda: self._commit(job)  # noqa: E731
        if self._recording():  # recorded once committed, with the checkpoint's bytes
            size = functools.partial(checkpoint_bytes, self._storage, name)
            waited = self._saver.waited_for_memory_seconds  # by hold(), for this save
            record = functools.partial(self._ledger_saved, number, "durable")
            work = timed(
                work, began, self._background, lambda *t: record(size(), *t, waited=waited)
            )
        self._saver.run(work)

    def _recording(self) -> bool:
        """Whether this manager's saves are recorded in a ledger."""
        return self.ledger is not None

    def _ledger_saved(
        self,
        step: int,
        tier: str,
        nbytes: int,
        stall: float,
        background: float,
        storage: Storage | None = None,
        *,
        waited: float = 0.0,
    ) -> None:
        """The ledger's record of a committed save (a no-op without a ledger); ``storage``,
        where the tier's floor is measured: default this manager's directory; ``waited``,
        the seconds the save waited for host memory (``max_host_bytes``), part of the stall."""
        if self.ledger is not None:
            extra = {"waited_for_memory_seconds": round(waited, 6)} if waited else {}
            where = storage or self._storage
            self.ledger.saved(step, tier, nbytes, stall, background, where, **extra)

    def _ledger_restored(
        self, step: int, tier: str, seconds: float, fell_back_from: str | None
    ) -> None:
        """The ledger's record of a restore (a no-op without a ledger)."""
        if self.ledger is not None:
            self.ledger.restored(step, tier, seconds, fell_back_from)

    def _participate(
        self, state: Any, round_: Round, before_commit: Callable[[], None] | None
    ) -> None:
        """A rank other than the writer: writes its shards and waits for the commit."""
        # This rank's own logs and files, if any, before its part of the save.
        _durability.sync_registered()
        if before_commit is not None:
            before_commit()
        round_.flatten(state, copy=self._saver.copy)
        self._saver.run(round_.participate)

    def maybe_save(
        self, clock: Clock, state: Any, *, metrics: Mapping[str, float] | None = None
    ) -> bool:
        """Saves when the ``save_every`` trigger fires for ``clock``; returns whether it did.

        A save here is :meth:`save`'s: every open writer's points are made durable first.

        Raises:
            ConfigError: the manager has no ``save_every``.
            CheckpointError, SummaryWriteError, NonFiniteError: as :meth:`save` raises them.
        """
        if self._trigger is None and self._tiers is None:
            raise ConfigError("save_every", "must be set to use maybe_save", None)
        if not isinstance(clock, Clock):
            raise ConfigError("clock", "must be a globalstep Clock", clock)
        saved = False
        if self._trigger is not None and self._trigger.due(clock):
            self.save(clock, state, metrics=metrics)
            saved = True
        if self._tiers is not None and self._tiers.trigger.due(clock):
            self.save(clock, state, metrics=metrics, tier="fast")
            saved = True
        return saved

    def wait(self) -> None:
        """Waits for a background save; raises its error, if it failed.

        Raises:
            CheckpointError: the background save failed (the original error is its cause).
        """
        self._saver.wait()
        if self._tiers is not None:
            self._tiers.fast.wait()

    # ----------------------------------------------------------------- retention

    def prune(self, policy: KeepPolicy | None = None, *, dry_run: bool = False) -> list[int]:
        """Deletes what ``policy`` (default: the manager's) does not keep; returns those steps.

        The newest checkpoint is always kept.

        Raises:
            CheckpointError: the manager is read-only or closed.
        """
        self._check_writable()
        self.wait()
        if self._participant:
            return []  # the writer rank prunes
        if policy is not None and not isinstance(policy, KeepPolicy):
            raise ConfigError("policy", "must be a KeepPolicy", policy)
        return self._retention.apply(policy or self.policy, dry_run=dry_run)

    def _resume_trigger(self) -> None:
        if self._trigger is None or self.latest_step() is None:
            return
        try:
            saved = self._reading.read(None, self._reading.load)[1].manager  # this directory's
            self._trigger.resume(saved.get("save_trigger") if isinstance(saved, dict) else None)
        except (CorruptCheckpointError, CheckpointNotFoundError, ConfigError):
            # Another trigger, or a damaged newest checkpoint that restore will report:
            # the trigger then starts afresh.
            return

    # ----------------------------------------------------------------- restoring

    @overload
    def restore(
        self,
        template: Any = None,
        *,
        step: int | None = None,
        partial: Literal[False] = False,
        skip_corrupt: bool = False,
    ) -> Any: ...

    @overload
    def restore(
        self,
        template: Any = None,
        *,
        step: int | None = None,
        partial: Literal[True],
        skip_corrupt: bool = False,
    ) -> tuple[Any, RestoreReport]: ...

    def restore(
        self,
        template: Any = None,
        *,
        step: int | None = None,
        partial: bool = False,
        skip_corrupt: bool = False,
    ) -> Any:
        """Restores a checkpoint: the newest committed one, or ``step``'s.

        Args:
            template: a tree like the saved one; its writable arrays are filled in place
                and its stateful objects (Clock, triggers, ...) restored in place. The fit
                is checked before anything is touched; stateful objects are restored only
                after every checksum passed, but on a checksum failure the template's
                arrays may already hold the unverified bytes.
            step: the step to restore; default the newest.
            partial: restore what fits the template and return ``(tree, report)``.
            skip_corrupt: where the newest checkpoint is corrupt, restore the newest one
                that verifies instead (only without ``step``).

        Returns:
            The restored tree, or ``(tree, report)`` with ``partial=True``.

        Raises:
            CheckpointNotFoundError: no committed checkpoint (or none for ``step``).
            CorruptCheckpointError: the checkpoint fails verification; names the file.
            RestoreMismatchError: the checkpoint does not fit the template.
        """
        self.wait()
        began = time.perf_counter()

        def action(number: int) -> tuple[Any, RestoreReport]:
            return self._reading.restore(number, template, partial)

        def here(number: int | None) -> tuple[int, tuple[Any, RestoreReport]]:
            if number is not None or not skip_corrupt:
                return self._reading.read(number, action)
            return self._reading.newest_valid(action)

        tiers, newest, why = self._tiers, self._index.latest(), None
        if tiers is None:
            (chosen, result), tier = here(step), "durable"
        else:
            restored = tiers.restore(template, step, partial, here, self._index.steps, skip_corrupt)
            chosen, tier, result, why, newest = restored
        seconds = time.perf_counter() - began
        self._restored = Restored(chosen, tier, seconds, why)
        if why is None and step is None and newest not in (None, chosen):
            why = f"durable step {newest}"  # skip_corrupt passed a damaged newest
        self._ledger_restored(chosen, tier, seconds, why)
        if not self._read_only and not self._closed:
            # Resuming from an older step starts a new timeline: the first save abandons
            # the newer checkpoints (of both tiers), so that no later restore returns to them.
            self._timeline.restored(chosen, newest)
        return result if partial else result[0]

    @property
    def last_restore(self) -> Restored | None:
        """The last restore: its step, tier, seconds and why the fast tier was not used
        (see :class:`~globalstep.checkpoint.Restored`); None before the first."""
        return self._restored

    def drop_newer(self, step: int) -> list[int]:
        """Deletes the checkpoints newer than ``step``, oldest first, and returns their
        steps: a rewind's abandoned timeline, at once (a crash in between leaves the
        newest of them, never a mix of two timelines).

        Raises:
            CheckpointError: the manager is read-only or closed, or one could not be deleted.
        """
        self._check_writable()
        self.wait()
        doomed = [s for s in self._index.steps() if s > step_of(step)]
        Timeline.drop(step, doomed, self._retention)
        return doomed

    # ----------------------------------------------------------------- lifetime

    def _check_writable(self) -> None:
        if self._read_only:
            raise CheckpointError(
                f"this manager of {self.directory} is read-only; open it without "
                "read_only=True to save or prune",
                self.directory,
            )
        if self._closed:
            raise CheckpointError(f"this manager of {self.directory} is closed", self.directory)

    def close(self) -> None:
        """Waits for a background save, then releases the lock; closing twice is harmless.

        Raises:
            CheckpointError: the background save failed.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.wait()
        finally:
            self._saver.shutdown()
            if self.ledger is not None:
                self.ledger.close()
            if self._lock is not None:
                self._lock.release()
            if self._tiers is not None:
                self._tiers.fast.close()

    def __repr__(self) -> str:
        return f"CheckpointManager({self.directory!r}, policy={self.policy!r})"


class FastManager(CheckpointManager):
    """A fast tier's own manager: its saves go to the durable manager's ledger as the
    fast tier's (see :mod:`~globalstep.checkpoint._fast_tier`)."""

    def __init__(
        self,
        tier: FastTier,
        async_save: bool,
        max_host_bytes: int | None,
        read_only: bool,
        record: Callable[..., None],
    ) -> None:
        self._record = record  # the durable manager's _ledger_saved
        super().__init__(
            tier.path,
            max_to_keep=tier.max_to_keep,
            async_save=async_save,
            max_host_bytes=max_host_bytes,
            read_only=read_only,
            ledger=False,
        )

    def _recording(self) -> bool:
        return True  # the durable manager's _ledger_saved does nothing without its ledger

    def _ledger_saved(
        self,
        step: int,
        tier: str,
        nbytes: int,
        stall: float,
        background: float,
        storage: Storage | None = None,
        *,
        waited: float = 0.0,
    ) -> None:
        """The durable manager's ledger records this tier's save, and measures the floor
        of this tier's storage."""
        self._record(step, "fast", nbytes, stall, background, self._storage, waited=waited)
