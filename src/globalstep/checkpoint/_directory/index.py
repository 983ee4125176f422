"""The step index: a checkpoint directory's step directories, listed only when it changed.

A reader polling a directory of 10,000 checkpoints pays one ``stat`` per call; the writer
records its own changes instead of listing again. The index is only ever a hint: every
read checks the disk again.
"""

from __future__ import annotations

import bisect
import threading
import time
from typing import Any

from globalstep._clock import Clock, check_step
from globalstep.checkpoint._files.commit import CommitProtocol
from globalstep.checkpoint._files.document import COMMIT_FILE
from globalstep.storage import wrap_os_errors

__all__ = ["StepIndex", "step_name", "step_of"]


def step_name(step: int) -> str:
    """Returns the directory name of ``step``'s checkpoint.

    Example:
        >>> step_name(1200)
        'step-000000001200'
    """
    return f"step-{step:012d}"


def step_of(step: Any) -> int:
    """Returns ``step`` (an int, a NumPy integer, anything :func:`operator.index` takes but
    a bool), or a Clock's step, checked to be a step, as an int.

    Raises:
        InvalidStepError: ``step`` is not an int in [0, 2**63-1] or a Clock (a ConfigError).
    """
    if isinstance(step, Clock):
        return step.step
    return check_step(step, rules=_STEP_RULES)


_STEP_RULES = ("must be an int in [0, 2**63-1] or a Clock",) * 3


_EMPTY_LISTINGS = 3
"""How often an empty listing is taken again before it is believed: a directory listed
while a writer renames in it (tmpfs on Linux 6.x) can come back without entries that were
there all along."""
_QUIET_NS = 100_000_000
"""How long a directory must be unchanged before a listing of it is trusted (0.1 s)."""


class StepIndex:
    """The step directories of one checkpoint directory, listed only when it changed.

    A listing is reused while the directory's stamp (its mtime, inode and size) is
    unchanged and the listing was taken after the directory had been quiet for 0.1 s (file
    system clocks tick coarsely, so a change in the same tick could keep the stamp). A
    reader polling 10,000 checkpoints then pays one ``stat`` per call. The writer, which
    alone changes the directory, records its own changes and lists again only when the
    stamp moves otherwise, or once the directory is quiet. Where rename is atomic, a name
    once seen with its marker stays committed until it leaves the listing. Every read
    checks the disk again, so the index is only ever a hint.
    """

    def __init__(self, protocol: CommitProtocol, *, writer: bool) -> None:
        self._protocol = protocol
        self._storage = protocol.storage
        self._writer = writer
        self._guard = threading.RLock()
        self._stamp: Any = None
        self._racy = True
        self._steps: list[int] = []
        self._committed: set[int] = set()
        self.stale: list[str] = []
        """Names of the last listing left by killed or failed saves (``.tmp-*``, ``.trash-*``)."""

    def candidates(self) -> list[int]:
        """Returns the steps of every entry named like a checkpoint, sorted."""
        with self._guard:
            stamp = self._storage.stamp()
            quiet = stamp is not None and time.time_ns() - stamp[1] >= _QUIET_NS
            reuse = (
                stamp is not None
                and stamp[0] == self._stamp
                and (not self._racy or (self._writer and not quiet))
            )
            if not reuse:
                steps = []
                stale = []
                with wrap_os_errors("listing the checkpoints", self._storage.root):
                    names = self._storage.listdir(self._storage.root)
                for name in names:
                    # Cheaper than a regex over 10,000 names: step- and at least 12 digits.
                    digits = name[5:]
                    if name.startswith("step-") and digits.isdigit() and digits.isascii():
                        if step_name(int(digits)) == name:
                            steps.append(int(digits))
                    elif self._protocol.is_temporary(name):
                        stale.append(name)
                steps.sort()
                self._steps = steps
                self.stale = stale
                if self._protocol.in_place:  # markers come and go in place: look again
                    self._committed.clear()
                else:
                    self._committed.intersection_update(steps)
                self._stamp = None if stamp is None else stamp[0]
                self._racy = not quiet
            return self._steps

    def listed(self) -> list[int]:
        """Returns the steps of the last listing, with the writer's own changes since
        (the writer alone adds or removes entries)."""
        with self._guard:
            return self._steps

    def committed(self, step: int) -> bool:
        """Returns whether ``step``'s directory holds its marker."""
        with self._guard:
            if step in self._committed:
                return True
        found = self._protocol.is_committed(step_name(step))
        if found:
            with self._guard:
                self._committed.add(step)
        return found

    def steps(self, *, relist: bool = True) -> list[int]:
        """Returns the committed steps, oldest first; ``relist=False`` (the writer, right
        after its own commit) starts from the last listing and its own changes since."""
        for _ in range(_EMPTY_LISTINGS):
            known = self._committed
            listing = self.candidates() if relist else self.listed()
            steps = [s for s in listing if s in known or self.committed(s)]
            if steps or not relist:
                return steps
            self._stamp = None
        return []

    def latest(self) -> int | None:
        """Returns the newest committed step, checking markers from the newest down."""
        for _ in range(_EMPTY_LISTINGS):
            for step in reversed(self.candidates()):
                if self.committed(step):
                    return step
            self._stamp = None
        return None

    def forget(self, step: int) -> None:
        """Drops what is known of ``step``: the next look checks the disk again."""
        with self._guard:
            self._committed.discard(step)
            self._stamp = None

    def changed(self, added: int | None = None, removed: int | None = None) -> None:
        """Records the writer's own change, so that it needs no new listing."""
        with self._guard:
            # New lists, never changed in place: another thread may be iterating the old.
            if removed is not None:
                self._committed.discard(removed)
                if removed in self._steps:
                    self._steps = [s for s in self._steps if s != removed]
            if added is not None:
                self._committed.add(added)
                if added not in self._steps:
                    steps = list(self._steps)
                    bisect.insort(steps, added)
                    self._steps = steps
            if self._stamp is not None and self._writer:
                stamp = self._storage.stamp()
                self._stamp = None if stamp is None else stamp[0]
                self._racy = True
            else:
                self._stamp = None

    def incomplete(self) -> dict[int, str]:
        """Returns the entries named like checkpoints that are not committed, and why."""
        out = {}
        for step in self.candidates():
            if self.committed(step):
                continue
            path = self._storage.join(step_name(step))
            if self._storage.is_dir(path):
                out[step] = f"no {COMMIT_FILE} marker: not committed, readers ignore it"
            elif self._storage.is_symlink(path) or self._storage.exists(path):
                out[step] = "not a directory"
            # else: pruned since the listing, so not there any more
        return out
