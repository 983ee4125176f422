"""The commit protocol: how a checkpoint directory becomes visible to readers whole, or not
at all, and how it goes away again.

Two protocols, one per kind of storage, chosen once by :func:`protocol_for`:

- :class:`RenameCommit` (local disks, where rename is atomic): a save writes into
  ``<dir>/.tmp-<name>-<random>/``, fsyncs each file, writes the ``COMMITTED`` marker,
  fsyncs the directory, renames it to its final name (or exchanges it with the one it
  replaces) and fsyncs the parent. A deletion renames the checkpoint aside
  (``.trash-<name>-<random>``) before removing it.
- :class:`MarkerCommit` (fsspec object stores, where rename is a copy): a save writes its
  files in place under the final name and the marker, written last, alone decides; a
  forced replacement is written whole beside the old checkpoint first. A deletion removes
  the marker first.

Every commit, whoever asks for it (the manager's saves, sync, async or distributed; the
compat managers; a user calling :func:`~globalstep.checkpoint._files.commit.commit`), first makes
the points every open summary writer accepted durable (:mod:`globalstep._durability`):
the one durability path, here, where every checkpoint passes, so a checkpoint is never
committed past curves a crash could take back.

Readers only see names that match and hold a marker (:meth:`CommitProtocol.is_committed`).
Both protocols write the same files (:mod:`globalstep.checkpoint._files.document`,
:mod:`globalstep.checkpoint._files.arrays`); only the way they are published differs.

Example:
    >>> import numpy as np
    >>> from globalstep.storage import open_storage
    >>> protocol = protocol_for(open_storage("memory://doc-commit"))
    >>> type(protocol).__name__
    'MarkerCommit'
    >>> protocol.commit("step-000000000007", {"w": np.arange(3.0)}, Document(step=7))
    >>> protocol.committed_names(), protocol.is_committed("step-000000000007")
    (['step-000000000007'], True)
"""

from __future__ import annotations

import contextlib
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from globalstep import _durability
from globalstep._errors import CheckpointExistsError
from globalstep.checkpoint._files.arrays import write_arrays
from globalstep.checkpoint._files.document import (
    ARRAYS_FILE,
    COMMIT_FILE,
    FORMAT_VERSION,
    STATE_FILE,
    Document,
    write_document,
)
from globalstep.storage import Storage, wrap_os_errors

__all__ = [
    "STALE_PREFIXES",
    "STEP_PATTERN",
    "CommitHooks",
    "CommitProtocol",
    "MarkerCommit",
    "RenameCommit",
    "protocol_for",
]

STALE_PREFIXES = (".tmp-", ".trash-")
"""Name prefixes of the temporary directories a save or a deletion leaves while it runs (and
behind, when killed): ``.tmp-`` for a save being written, ``.trash-`` for a checkpoint
being deleted or replaced."""
STEP_PATTERN = r"step-\d{12,}"
"""The names of checkpoint directories, as a regular expression."""


class CommitHooks(Protocol):
    """What a distributed save does inside :meth:`CommitProtocol.commit` (see
    ``checkpoint.distributed``)."""

    def started(self, staging: str) -> None:
        """Called once the directory being written exists, before any file is written."""

    def finishing(self, staging: str, document: Document) -> None:
        """Called after the arrays are written, before state.json and the marker; may add
        to ``document``; raising leaves nothing committed."""


@dataclass(frozen=True)
class _Save:
    """One checkpoint being committed: what :meth:`CommitProtocol.commit` was given."""

    name: str
    arrays: Mapping[str, np.ndarray[Any, Any]]
    document: Document
    hooks: CommitHooks | None


class CommitProtocol(ABC):
    """How checkpoints are committed to and deleted from one storage (see the module
    docstring); get one with :func:`protocol_for`.

    Attributes:
        storage: the storage the checkpoints live in.
        stale_prefixes: the name prefixes of temporary directories (:data:`STALE_PREFIXES`);
            an entry named so is never a checkpoint, and, when no save runs, a leftover.
        in_place: True where a save writes under the final name and the marker alone
            decides (:class:`MarkerCommit`). Then a listed step directory without its
            marker is a killed save's leftover (the writer's sweep removes it), and a
            marker seen once may go while the name stays listed (a forced replacement),
            so a listing must look at markers again rather than trust those seen before.
            False where a directory appears whole by rename (:class:`RenameCommit`): a
            listed name keeps its marker until the name leaves the listing.
    """

    stale_prefixes: ClassVar[tuple[str, ...]] = STALE_PREFIXES
    in_place: ClassVar[bool]

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def is_committed(self, name: str) -> bool:
        """Returns whether checkpoint directory ``name`` holds its marker (one request)."""
        return self.storage.exists(self.storage.join(name, COMMIT_FILE))

    def is_temporary(self, name: str) -> bool:
        """Returns whether ``name`` is a temporary directory of a save or a deletion."""
        return name.startswith(STALE_PREFIXES)

    def committed_names(self, pattern: str = STEP_PATTERN) -> list[str]:
        """Returns the names of committed checkpoints (a marker inside), sorted by name.

        Args:
            pattern: a regular expression the whole name must match.
        """
        regex = re.compile(pattern)
        names = self.storage.listdir(self.storage.root)
        return sorted(n for n in names if regex.fullmatch(n) and self.is_committed(n))

    def commit(
        self,
        name: str,
        arrays: Mapping[str, np.ndarray[Any, Any]],
        document: Document | Mapping[str, Any],
        *,
        force: bool = False,
        hooks: CommitHooks | None = None,
        fresh: bool = False,
        marked: bool | None = None,
        before: Callable[[], None] | None = None,
    ) -> None:
        """Makes the open writers' points durable, then writes one checkpoint and commits
        it atomically under ``name``.

        Args:
            name: the checkpoint directory's name, e.g. ``step-000000000100``.
            arrays: the arrays by flat name.
            document: state.json but its ``files``, which are added here: a
                :class:`~globalstep.checkpoint._files.document.Document`, or a mapping of its keys.
            force: replace a committed checkpoint of that name: atomically where rename
                is; elsewhere the old one stays committed until the new one is written
                whole, and only the copy of the new files over it leaves the step
                uncommitted (see ``MarkerCommit._replace``).
            hooks: called when the directory being written exists and before state.json
                is written (a distributed save: other ranks write their shards there).
            fresh: the caller, the directory's only writer, listed it just before and saw
                no entry named ``name``: where a save writes in place, there are no
                leftovers of a killed save to clear first (two to four requests fewer on
                an object store).
            marked: whether ``name`` is committed, where the caller (the directory's only
                writer) has just looked; None looks here.
            before: called once after the writers' points are durable and before
                anything of the checkpoint is written, or None.

        Raises:
            CheckpointExistsError: ``name`` is committed already and ``force`` is False.
            CheckpointError: an I/O error (full disk, file too large, ...); nothing
                visible has changed, and no earlier checkpoint is touched.
            BaseException: a writer's error making its points durable (a
                ``SummaryWriteError``), or ``before``'s: nothing is written.
        """
        # The curves up to this checkpoint reach the disk before any of it exists.
        _durability.sync_registered()
        if before is not None:
            before()
        storage = self.storage
        final = storage.join(name)
        if marked is None:
            marked = self.is_committed(name)
        if marked and not force:
            raise CheckpointExistsError(
                f"checkpoint {name} exists in {storage.root}; pass force=True to replace it",
                final,
            )
        with wrap_os_errors(f"saving {name}", final):
            storage.makedirs(storage.root)
            save = _Save(name, arrays, Document.of(document), hooks)
            self._write(save, marked=marked, fresh=fresh)
            storage.fsync_dir(storage.root)

    @abstractmethod
    def _write(self, save: _Save, *, marked: bool, fresh: bool) -> None:
        """Writes and publishes one checkpoint (the checks of :meth:`commit` done)."""

    @abstractmethod
    def remove(self, name: str) -> None:
        """Deletes committed checkpoint ``name`` so that no reader ever sees half of it,
        durably where the storage can (the parent directory is fsynced).

        Raises:
            CheckpointError: an I/O error; the checkpoint is whole, or not committed.
        """

    def is_leftover(self, name: str, pattern: re.Pattern[str]) -> bool:
        """Returns whether entry ``name`` of the directory is what a killed save or
        deletion left (a temporary directory; where saves write in place, also a
        checkpoint directory, ``pattern`` matching its name, without its marker)."""
        return self.is_temporary(name)

    def remove_stale(self, pattern: str = STEP_PATTERN) -> list[str]:
        """Removes temporary and half-deleted directories left by killed processes.

        Only a writer holding the directory's lock may call this.

        Args:
            pattern: the names of checkpoint directories, as a regular expression.

        Returns:
            The names removed.
        """
        storage = self.storage
        regex = re.compile(pattern)
        removed = []
        for name in storage.listdir(storage.root):
            if self.is_leftover(name, regex):
                with wrap_os_errors("removing a stale temporary directory", storage.join(name)):
                    storage.remove_tree(storage.join(name))
                removed.append(name)
        return removed

    def _temporary(self, prefix: str, name: str) -> str:
        """A new temporary directory's path for ``name`` (``prefix``: ``.tmp-``, ``.trash-``)."""
        return self.storage.join(f"{prefix}{name}-{secrets.token_hex(4)}")

    def _fill(self, staging: str, save: _Save) -> None:
        """Writes the files of one checkpoint into the existing directory ``staging``: the
        arrays, state.json and the marker last, then fsyncs the directory."""
        storage = self.storage
        hooks, document = save.hooks, save.document
        if hooks is not None:
            hooks.started(staging)
        files = {ARRAYS_FILE: write_arrays(storage, f"{staging}/{ARRAYS_FILE}", save.arrays)}
        if hooks is not None:
            hooks.finishing(staging, document)
        state_sum = write_document(
            storage, f"{staging}/{STATE_FILE}", document.replace(files=files)
        )
        marker = {"format": FORMAT_VERSION, STATE_FILE: state_sum}
        write_document(storage, f"{staging}/{COMMIT_FILE}", marker, sealed=True)
        storage.fsync_dir(staging)

    def _quiet_remove(self, path: str) -> None:
        """Removes leftovers after a failure; a failure here is left for the next sweep."""
        with contextlib.suppress(OSError):
            self.storage.remove_tree(path)


class RenameCommit(CommitProtocol):
    """The protocol where rename is atomic (local disks): written aside, renamed into place."""

    in_place = False

    def _write(self, save: _Save, *, marked: bool, fresh: bool) -> None:
        staging = self._temporary(".tmp-", save.name)
        self.storage.makedirs(staging)
        try:
            self._fill(staging, save)
            self._publish(staging, self.storage.join(save.name))
        except BaseException:
            self._quiet_remove(staging)
            raise

    def _publish(self, staging: str, final: str) -> None:
        """Renames ``staging`` to ``final``, exchanging it with a checkpoint it replaces."""
        storage = self.storage
        if not storage.exists(final):
            storage.rename(staging, final)
        elif not storage.exchange(staging, final):  # no renameat2 (not Linux): two renames
            trash = self._temporary(".trash-", final.rsplit("/", 1)[-1])
            storage.rename(final, trash)
            try:
                storage.rename(staging, final)
            except BaseException:
                storage.rename(trash, final)  # the replaced one goes back, not to the sweep
                raise
            self._quiet_remove(trash)
        else:
            # `staging` now holds the replaced checkpoint.
            self._quiet_remove(staging)

    def remove(self, name: str) -> None:
        """Renames checkpoint ``name`` aside (atomic), fsyncs the parent, then removes it.

        Raises:
            CheckpointError: an I/O error; the checkpoint is whole under its name, or
                renamed aside (a ``.trash-`` leftover that the next sweep removes).
        """
        storage = self.storage
        final = storage.join(name)
        with wrap_os_errors(f"deleting {name}", final):
            trash = self._temporary(".trash-", name)
            storage.rename(final, trash)
            storage.fsync_dir(storage.root)
            storage.remove_tree(trash)


class MarkerCommit(CommitProtocol):
    """The protocol where rename is not atomic (object stores): written in place, the
    marker last; the marker alone decides."""

    in_place = True

    def _write(self, save: _Save, *, marked: bool, fresh: bool) -> None:
        if marked:
            self._replace(save)
            return
        storage = self.storage
        final = storage.join(save.name)
        marker = storage.join(save.name, COMMIT_FILE)
        if not fresh:  # a killed save's files, if any, go first
            storage.remove_file(marker)
            storage.remove_tree(final)
        storage.makedirs(final)
        try:
            self._fill(final, save)
        except BaseException:
            # Written in place: a marker cut short by the failure must not stay visible.
            self._quiet_remove(marker)
            self._quiet_remove(final)
            raise

    def _replace(self, save: _Save) -> None:
        """Replaces a committed checkpoint (:meth:`commit` with ``force``).

        The new checkpoint is written whole beside the old one first (a failure or a kill
        until then leaves the old one committed and untouched); then the old marker goes,
        the new files are copied over the old ones (server-side on object stores) and the
        new marker is copied last. Between the marker's removal and the new marker neither
        version is committed: a kill there loses this step's checkpoint (the sweep removes
        what is left) and the previous step's is the newest. A reader that reads across
        the copy meets files whose checksums do not match the marker it read, and reads
        again (the manager retries a checkpoint replaced under it); no mix of the two
        ever restores.
        """
        storage = self.storage
        final = storage.join(save.name)
        marker = storage.join(save.name, COMMIT_FILE)
        staging = self._temporary(".tmp-", save.name)
        storage.makedirs(staging)
        unmarked = False
        try:
            self._fill(staging, save)
            storage.remove_file(marker)
            unmarked = True
            # A distributed save's shards (one folder level, ``sharded/``) go with the files.
            shards = [
                f"{folder}/{entry}"
                for folder in storage.listdir(staging)
                if storage.is_dir(f"{staging}/{folder}")
                for entry in storage.listdir(f"{staging}/{folder}")
            ]
            for file_name in (*shards, ARRAYS_FILE, STATE_FILE, COMMIT_FILE):
                storage.copy_file(f"{staging}/{file_name}", f"{final}/{file_name}")
            self._quiet_remove(staging)
        except BaseException:
            if unmarked:  # a marker cut short by the failure must not stay visible
                self._quiet_remove(marker)
            self._quiet_remove(staging)
            raise

    def remove(self, name: str) -> None:
        """Removes checkpoint ``name``'s marker first, then its files.

        Raises:
            CheckpointError: an I/O error; the checkpoint is whole, or not committed.
        """
        storage = self.storage
        final = storage.join(name)
        with wrap_os_errors(f"deleting {name}", final):
            storage.remove_file(storage.join(name, COMMIT_FILE))
            storage.remove_tree(final)

    def is_leftover(self, name: str, pattern: re.Pattern[str]) -> bool:
        """Returns whether ``name`` is a temporary directory, or a checkpoint directory
        without its marker (written in place by a save that was killed)."""
        return self.is_temporary(name) or (
            pattern.fullmatch(name) is not None and not self.is_committed(name)
        )


def protocol_for(storage: Storage) -> CommitProtocol:
    """Returns the commit protocol for ``storage``: :class:`RenameCommit` where its rename
    is atomic (``storage.atomic_rename``, a local directory), :class:`MarkerCommit`
    elsewhere.

    Example:
        >>> from globalstep.storage import LocalStorage
        >>> type(protocol_for(LocalStorage("/tmp/doc-commit"))).__name__
        'RenameCommit'
    """
    if storage.atomic_rename:
        return RenameCommit(storage)
    return MarkerCommit(storage)


# The calls of the format on a storage, by the protocol chosen for it.


def commit(
    storage: Storage,
    name: str,
    arrays: Mapping[str, Any],
    document: Document | Mapping[str, Any],
    **how: Any,
) -> None:
    """Writes one checkpoint and commits it atomically under ``name``, by the protocol of
    ``storage``: :meth:`globalstep.checkpoint._files.commit.CommitProtocol.commit` (the open
    summary writers' points made durable first), whose keyword arguments ``how`` are
    (``force``, ``hooks``, ``fresh``, ``marked``, ``before``).

    Raises:
        CheckpointExistsError: ``name`` is committed already and ``force`` is False.
        CheckpointError: an I/O error (full disk, file too large, ...); nothing visible
            has changed, and no earlier checkpoint is touched.
    """
    protocol_for(storage).commit(name, arrays, document, **how)


def committed_names(storage: Storage, pattern: str = STEP_PATTERN) -> list[str]:
    """Returns the names of committed checkpoints (a marker inside), sorted by name."""
    return protocol_for(storage).committed_names(pattern)


def remove_checkpoint(storage: Storage, name: str) -> None:
    """Deletes a committed checkpoint so that no reader ever sees half of it (see
    :meth:`globalstep.checkpoint._files.commit.CommitProtocol.remove`)."""
    protocol_for(storage).remove(name)


def remove_stale(storage: Storage, pattern: str = STEP_PATTERN) -> list[str]:
    """Removes temporary and half-deleted directories left by killed processes.

    Only a writer holding the directory's lock may call this. Returns the names removed.
    """
    return protocol_for(storage).remove_stale(pattern)
