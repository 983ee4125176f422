"""Retention: applies a KeepPolicy to a directory's checkpoints, and sweeps what killed saves left.

The writer deletes what its policy (its `policy` module) does not keep, only
after the new checkpoint is committed; an entry that cannot be deleted, or a leftover that
cannot be removed, is named once in a :class:`CheckpointWarning` and tried again at the
next save, never failing the save. Symbolic links are never followed or deleted.
"""

from __future__ import annotations

import warnings

from globalstep._errors import CheckpointError, CheckpointWarning
from globalstep.checkpoint._directory.index import StepIndex, step_name
from globalstep.checkpoint._directory.policy import (
    CheckpointInfo,
    KeepPolicy,
    retained,
    unkept_steps,
)
from globalstep.checkpoint._directory.reading import Reading
from globalstep.checkpoint._files.commit import CommitProtocol
from globalstep.checkpoint._files.document import Document
from globalstep.checkpoint._files.metadata import info_of

__all__ = ["Retention", "WarnOnce"]


class WarnOnce:
    """Gives each :class:`CheckpointWarning` once per key (a failing entry warns once)."""

    def __init__(self) -> None:
        self._warned: set[str] = set()

    def __call__(self, key: str, message: str) -> None:
        """Warns with ``message`` unless ``key`` warned before."""
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, CheckpointWarning, stacklevel=4)


class Retention:
    """The writer's retention of one directory: what it keeps, deletes and sweeps.

    Args:
        reading: how the directory's checkpoints are read (and its storage and index).
        policy: the policy applied after each save.
        warn_once: the manager's once-per-key warnings.
    """

    def __init__(
        self, reading: Reading, protocol: CommitProtocol, policy: KeepPolicy, warn_once: WarnOnce
    ) -> None:
        self.policy = policy
        self._protocol = protocol
        self._reading = reading
        self._storage = reading.storage
        self._index: StepIndex = reading.index
        self._warn_once = warn_once
        self._infos: dict[int, CheckpointInfo] = {}
        self._last_saved: int | None = None
        self._sweep_due = True

    def _scan(self, policy: KeepPolicy, *, relist: bool = True) -> list[CheckpointInfo]:
        """What retention knows of each committed checkpoint, oldest first.

        Metadata is read once per checkpoint, and only for a policy that looks at
        creation times or metrics; a checkpoint whose metadata cannot be read counts by
        its step alone.
        """
        committed = self._index.steps(relist=relist)
        known = set(committed)
        for step in [s for s in self._infos if s not in known]:
            del self._infos[step]
        out = []
        needs_metadata = policy.needs_metadata
        for step in committed:
            info = self._infos.get(step)
            if info is None:
                if needs_metadata:
                    try:
                        info = info_of(step, self._reading.load(step))
                    except CheckpointError:
                        info = CheckpointInfo(step, 0.0, {})
                    self._infos[step] = info
                else:
                    info = CheckpointInfo(step, 0.0, {})
            out.append(info)
        return out

    def apply(self, policy: KeepPolicy, *, dry_run: bool, relist: bool = True) -> list[int]:
        """Deletes what ``policy`` does not keep; returns the steps deleted (or doomed).

        An entry that cannot be deleted is named once in a :class:`CheckpointWarning`
        and tried again at the next save; it never fails the save.
        """
        doomed = unkept_steps(policy, self._index.steps(relist=relist), self._last_saved)
        if doomed is None:
            infos = self._scan(policy, relist=relist)
            keep = retained(policy, infos)
            doomed = [i.step for i in infos if i.step not in keep]
        if dry_run:
            return doomed
        deleted = []
        for step in doomed:
            name = step_name(step)
            if self._skip_entry(name):
                continue
            try:
                self.delete(step)
            except CheckpointError as err:
                self._index.forget(step)
                self._warn_once(
                    f"delete:{name}",
                    f"retention could not delete {name} ({err}); it is tried again at "
                    "the next save",
                )
                continue
            deleted.append(step)
        return deleted

    def delete(self, step: int) -> None:
        """Deletes ``step``'s committed checkpoint so that no reader ever sees half of it
        (the commit protocol's ``remove``, which fsyncs the parent), and forgets it.

        Raises:
            CheckpointError: it could not be deleted (it may still be committed).
        """
        self._protocol.remove(step_name(step))
        self._index.changed(removed=step)
        self._infos.pop(step, None)

    def path(self, step: int) -> str:
        """Returns the path of ``step``'s checkpoint directory."""
        return self._storage.join(step_name(step))

    def saved(self, step: int, document: Document) -> None:
        """Records the checkpoint just committed, then applies the policy and sweeps.

        Nothing here fails the save: the checkpoint is committed.
        """
        self._last_saved = step
        self._infos[step] = info_of(step, document)
        # The listing this save took (the writer alone changes the directory): no new one.
        self.apply(self.policy, dry_run=False, relist=False)
        if self._sweep_due or self._index.stale or self._protocol.in_place:
            self.sweep()

    def failed(self) -> None:
        """Notes a save that failed: its leftovers go at the next save's sweep."""
        self._sweep_due = True

    def sweep(self) -> None:
        """Removes temporary directories left by killed saves; never fails a save."""
        self._sweep_due = False
        storage = self._storage
        # The listing this save took and the writer's own changes since: markers already
        # looked up by retention are not asked for again.
        candidates = self._index.listed()
        names = list(self._index.stale)
        if self._protocol.in_place:  # written in place: a step without its marker is stale
            names += [step_name(s) for s in candidates if not self._index.committed(s)]
        left = []
        for name in names:
            if self._skip_entry(name):
                left.append(name)
                continue
            try:
                storage.remove_tree(storage.join(name))
            except OSError as err:
                left.append(name)
                self._sweep_due = True
                self._warn_once(
                    f"sweep:{name}",
                    f"the leftover {storage.join(name)} of an earlier save could not be "
                    f"removed ({err}); it is tried again at the next save",
                )
        if names:
            self._index.changed()
        self._index.stale = [n for n in left if self._protocol.is_temporary(n)]

    def _skip_entry(self, name: str) -> bool:
        """Whether retention or the sweep must leave ``name`` alone (a link: never ours)."""
        if self._storage.is_symlink(self._storage.join(name)):
            self._warn_once(
                f"link:{name}",
                f"{self._storage.join(name)} is a symbolic link the writer did not create; "
                "it is left alone (neither followed nor deleted). Remove it by hand.",
            )
            return True
        return False
