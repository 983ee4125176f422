"""Reading checkpoints: resolving a step, telling a pruned checkpoint from a damaged one, retrying.

A reader (the writer's own restore, or another process polling a live run) chooses a
committed step and reads it. Where the writer prunes the checkpoint under it, the read
moves on to the newest one still there, a bounded number of times; where the checkpoint is
still committed, a failure is read once more and then named as corruption.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import Any, TypeVar

from globalstep._clock import Clock, Progress
from globalstep._errors import (
    CheckpointError,
    CheckpointExistsError,
    CheckpointNotFoundError,
    ConfigError,
    CorruptCheckpointError,
    StepError,
)
from globalstep.checkpoint._directory.index import StepIndex, step_name, step_of
from globalstep.checkpoint._files.arrays import read_arrays
from globalstep.checkpoint._files.document import Document, load_state
from globalstep.checkpoint._files.fastio import read_ahead
from globalstep.checkpoint._files.lazy import CheckpointReader
from globalstep.checkpoint._ranks.leaves import RankLeaves, verify_rank_leaves
from globalstep.checkpoint._tree.build import RestoreReport, unflatten
from globalstep.checkpoint._tree.fit import fit_template
from globalstep.checkpoint._tree.flatten import array_nodes
from globalstep.checkpoint._tree.templates import template_sharded
from globalstep.storage import Storage

__all__ = ["READ_ATTEMPTS", "Reading", "VanishedError", "brief"]

_T = TypeVar("_T")
READ_ATTEMPTS = 20
"""How often a reader moves on to the newest checkpoint when the one it chose is pruned."""
_DAMAGE_ERRNOS = frozenset(
    {errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ELOOP}
)


class VanishedError(Exception):
    """The checkpoint being read was deleted (pruned) under the reader."""


def _damage(err: CheckpointError) -> bool:
    """Whether an I/O error reading a checkpoint means the checkpoint itself is damaged
    (a file missing, a directory or link where a file belongs, no permission), rather
    than a passing failure of the machine (an I/O error, too many open files)."""
    cause = err.__cause__
    return isinstance(cause, OSError) and cause.errno in _DAMAGE_ERRNOS


def brief(steps: list[int]) -> str:
    """A list of steps, shortened in the middle when long."""
    if len(steps) <= 12:
        return str(steps)
    return f"[{', '.join(map(str, steps[:5]))}, ... ({len(steps) - 10} more), " + (
        f"{', '.join(map(str, steps[-5:]))}]"
    )


class Reading:
    """Reads the checkpoints of one directory, through its step index.

    Args:
        storage: the directory's storage.
        index: its step index.
        directory: its name in messages.
        rebuild: whether sharded tensors are rebuilt as the ranks' own (a distributed
            manager), rather than gathered whole.
        ranks: this process's rank and the number of ranks restoring, asked at each
            restore (per-rank leaves); default one process, ``(0, 1)``.
    """

    def __init__(
        self,
        storage: Storage,
        index: StepIndex,
        directory: str,
        *,
        rebuild: bool = False,
        ranks: Callable[[], tuple[int, int]] | None = None,
    ) -> None:
        self.storage = storage
        self.index = index
        self.directory = directory
        self._rebuild = rebuild
        self._ranks = ranks or (lambda: (0, 1))

    def load(self, step: int) -> Document:
        """Reads and checks ``step``'s marker and state.json, and that it is ``step``'s.

        Raises:
            CorruptCheckpointError: damaged, or another step's.
        """
        name = step_name(step)
        state = load_state(self.storage, name)
        saved = state.step
        if saved != step or isinstance(saved, bool):
            raise CorruptCheckpointError(
                f"{self.storage.join(name)}: its state.json is of step {saved!r}, not "
                f"{step} (a copy or a rename of another checkpoint?)",
                self.storage.join(name),
            )
        return state

    def _still_committed(self, step: int) -> bool:
        self.index.forget(step)
        return self.index.committed(step)

    def checked(self, step: int, action: Callable[[int], _T]) -> _T:
        """Runs ``action(step)``, telling a checkpoint pruned under it from a damaged one.

        A failure of a checkpoint whose marker is gone raises VanishedError. One whose marker
        is still there is tried once more (a checkpoint replaced with ``force`` between two
        reads fails once); a second failure is corruption, named with the checkpoint.
        """
        for attempt in range(2):
            try:
                return action(step)
            except (CheckpointError, ConfigError, StepError) as err:
                if isinstance(err, CheckpointNotFoundError | CheckpointExistsError) or (
                    type(err) is CheckpointError and not _damage(err)
                ):
                    raise
                if not self._still_committed(step):
                    raise VanishedError(step) from err
                if attempt == 1:
                    name = step_name(step)
                    raise CorruptCheckpointError(
                        f"checkpoint {name} of {self.directory} is damaged: {err}",
                        err.path if isinstance(err, CheckpointError) and err.path else name,
                    ) from err
        raise AssertionError("unreachable")  # pragma: no cover

    def read(self, step: int | None, action: Callable[[int], _T]) -> tuple[int, _T]:
        """Runs ``action`` on ``step``, or on the newest checkpoint: when the writer prunes
        the one chosen, on the newest one still there (a bounded number of times)."""
        if step is not None:
            step = step_of(step)
        for _ in range(READ_ATTEMPTS):
            chosen = self.resolve(step)
            try:
                return chosen, self.checked(chosen, action)
            except VanishedError:
                if step is not None:
                    raise CheckpointNotFoundError(
                        f"checkpoint {step_name(step)} of {self.directory} was deleted while "
                        "being read (pruned by its writer?)",
                        self.storage.join(step_name(step)),
                    ) from None
        raise self._outrun()

    def newest_valid(self, action: Callable[[int], _T]) -> tuple[int, _T]:
        """Runs ``action`` on the newest checkpoint where it does not find corruption."""
        corrupt: dict[int, CorruptCheckpointError] = {}
        for _ in range(READ_ATTEMPTS):
            candidates = [s for s in self.index.steps() if s not in corrupt]
            if not candidates:
                if corrupt:
                    raise corrupt[max(corrupt)]
                raise CheckpointNotFoundError(
                    f"no committed checkpoint in {self.directory}", self.directory
                )
            for candidate in reversed(candidates):
                try:
                    return candidate, self.checked(candidate, action)
                except VanishedError:
                    break  # pruned under us: list again, newest first
                except CorruptCheckpointError as err:
                    corrupt[candidate] = err
        raise self._outrun()

    def _outrun(self) -> CheckpointError:
        return CheckpointError(
            f"every checkpoint of {self.directory} chosen in {READ_ATTEMPTS} tries was "
            "deleted while being read; is a writer pruning faster than it saves?",
            self.directory,
        )

    def resolve(self, step: int | None) -> int:
        """Returns ``step`` where it is committed, else the newest committed step.

        Raises:
            CheckpointNotFoundError: no committed checkpoint (or none for ``step``).
        """
        if step is None:
            latest = self.index.latest()
            if latest is None:
                raise CheckpointNotFoundError(
                    f"no committed checkpoint in {self.directory}", self.directory
                )
            return latest
        step = step_of(step)
        if not self.index.committed(step):
            raise CheckpointNotFoundError(
                f"no committed checkpoint for step {step} in {self.directory}; "
                f"committed steps: {brief(self.index.steps())}",
                self.storage.join(step_name(step)),
            )
        return step

    def reader(self, step: int) -> CheckpointReader:
        """Opens ``step``'s checkpoint lazily (arrays memory-mapped)."""
        return CheckpointReader(self.storage, step_name(step), step, self.load(step))

    def verify(self, step: int) -> None:
        """Checks every checksum of ``step``'s checkpoint, then decodes it as a restore
        does: the tree without a template (every leaf's value), every clock's state and
        every saved Progress, so that what a restore would refuse, verify refuses too.

        Raises:
            CorruptCheckpointError: a file is damaged (a checksum), or a value cannot be
                decoded (a state.json resealed with a garbage clock state, a list where a
                number was, ...).
        """
        name = step_name(step)
        state = self.load(step)
        read_arrays(self.storage, name, state, keep=False)
        verify_rank_leaves(self.storage, name, state)
        if state.sharded is not None:
            from globalstep.checkpoint._ranks.coordinated import verify_sharded

            verify_sharded(self.storage, name, state)
        # The tree's values decoded as a restore decodes them (the arrays, read and
        # checked above, are not read again).
        _check_values(state.tree, "")
        where = self.storage.join(name)
        for number, progress in enumerate(state.clocks or []):
            try:
                Progress.from_dict(progress)  # as a restore reads the saved clocks
            except ConfigError as err:
                message = f"{where}: state.json clocks[{number}]: {err}"
                raise CorruptCheckpointError(message, where) from err
        bad = _bad_clock_state(state.tree, "")
        if bad is not None:
            raise CorruptCheckpointError(f"{where}: state.json: {bad}", where)

    def restore(self, step: int, template: Any, partial: bool) -> tuple[Any, RestoreReport]:
        """Reads ``step``'s checkpoint into ``template`` (see ``CheckpointManager.restore``)."""
        name = step_name(step)
        # The disk reads the arrays ahead from the start: while state.json is read and
        # parsed, the tree walked and the template checked (issue 14: a cold restore of
        # 10,000 arrays 4% faster by median than when it started after state.json).
        with read_ahead(self.storage, name) as ahead:
            state = self.load(step)
            leaves = RankLeaves(self.storage, name, state, *self._ranks())
            nodes = array_nodes(state.tree)  # one walk, for the fit check and the read
            # This rank's own per-rank leaves in the tree (the same world size), or the
            # remap of another world size checked before anything is touched.
            structure = leaves.structure(state.tree, template)
            # Check the fit first, so that a misfit touches nothing in the template; the
            # same walk finds the template's arrays to fill in place and builds the tree.
            fit = (
                None
                if template is None
                else fit_template(
                    structure,
                    template,
                    partial=partial,
                    nodes=nodes if structure is state.tree else None,
                )
            )
            into = None if fit is None else fit.targets
            arrays: dict[str, Any] = read_arrays(
                self.storage, name, state, into=into, nodes=nodes, ahead=ahead
            )
        arrays.update(leaves.read(into))
        if state.sharded is not None:
            from globalstep.checkpoint._ranks.coordinated import load_sharded

            targets = template_sharded(structure, template)
            arrays.update(load_sharded(self.storage, name, state, targets, rebuild=self._rebuild))
        restored = None if fit is None else fit.restored(arrays)
        if restored is None:
            # Without a template, each per-rank leaf of another world size: every rank's.
            ranks = leaves.without_template() if template is None else None
            restored = unflatten(structure, arrays, template, partial=partial, ranks=ranks)
        leaves.remap(arrays)
        return restored


_CLOCK_STATE = frozenset(Clock().state_dict())


def _nodes(node: Any, path: str) -> Any:
    """Every (path, node) of a saved structure (JSON objects and lists), depth first."""
    yield path, node
    children: Any = ()
    if isinstance(node, dict):
        children = node.items()
    elif isinstance(node, list):
        children = enumerate(node)
    for key, child in children:
        if isinstance(child, dict | list):
            yield from _nodes(child, f"{path}/{key}" if path else str(key))


def _check_values(structure: Any, path: str) -> None:
    """Refuses a value node a restore would refuse (what ``build`` decodes: None, a
    bool, an int, a float or a str).

    Raises:
        CorruptCheckpointError: a bad value; the message names its path.
    """
    for where, node in _nodes(structure, path):
        if isinstance(node, dict) and node.keys() == {"value"}:
            value = node["value"]
            if value is not None and not isinstance(value, bool | int | float | str):
                where = "/".join(p for p in where.split("/") if p not in ("dict", "stateful"))
                raise CorruptCheckpointError(f"state.json: bad value at {where or '<root>'}")


def _bad_clock_state(structure: Any, path: str) -> str | None:
    """What a restore into a Clock would refuse of the first bad clock state of a saved
    structure (a stateful object whose state holds a Clock's keys, as plain values),
    naming its path; None where every one loads."""
    for where, node in _nodes(structure, path):
        inner = node.get("stateful") if isinstance(node, dict) else None
        entries = inner.get("dict") if isinstance(inner, dict) else None
        if not isinstance(entries, dict) or not entries.keys() >= _CLOCK_STATE:
            continue
        if not all(isinstance(e, dict) and e.keys() == {"value"} for e in entries.values()):
            continue
        try:
            Clock().load_state_dict({key: e["value"] for key, e in entries.items()})
        except (ConfigError, StepError) as err:
            where = "/".join(p for p in where.split("/") if p not in ("dict", "stateful"))
            return f"the clock state at {where or '<root>'}: {err}"
    return None


def verify_checkpoint(storage: Storage, name: str) -> Document:
    """Checks every checksum of checkpoint ``name``; returns its state.json.

    Raises:
        CorruptCheckpointError: a file is missing, truncated or fails its checksum.
    """
    state = load_state(storage, name)
    read_arrays(storage, name, state, keep=False)
    verify_rank_leaves(storage, name, state)  # each rank's file of per-rank leaves
    return state
