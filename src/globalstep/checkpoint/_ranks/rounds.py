"""The save round: one path for a save of one process and of every rank of a group.

As torch.distributed.checkpoint's ``no_dist``: a manager opened without ``distributed``
runs the same save as a distributed one, with a round whose steps do nothing. A
distributed round wraps :class:`~globalstep.checkpoint._ranks.coordinated.SaveRound`: every rank
writes its shards and its per-rank leaves, the writer rank commits once every rank wrote.
The round also takes the state apart (``flatten``): one process's per-rank leaves are
ordinary ones.
"""

from __future__ import annotations

from typing import Any

from globalstep._errors import ConfigError
from globalstep._group import active
from globalstep.checkpoint._files.commit import CommitHooks
from globalstep.checkpoint._tree.flatten import Flattened, flatten
from globalstep.storage import Storage

__all__ = ["DistributedRound", "Rounds", "SoloRound"]


def _keys(keys: list[str]) -> str:
    return ", ".join(keys[:3]) + (f", ... ({len(keys) - 3} more)" if len(keys) > 3 else "")


class SoloRound:
    """The round of a save by one process: nothing to wait for, no shards."""

    hooks: CommitHooks | None = None
    """What :func:`~globalstep.checkpoint._files.commit.commit` calls back: nothing here."""

    def flatten(self, state: Any, *, copy: bool) -> Flattened:
        """Takes ``state`` apart (per-rank leaves as ordinary ones), refusing sharded
        tensors: their shards are written by every rank.

        Raises:
            ConfigError: ``state`` holds a sharded tensor, or cannot be saved.
        """
        flat = flatten(state, copy=copy)
        sharded = flat.sharded
        if sharded:
            raise ConfigError(
                "state",
                "holds sharded tensors (DTensor, FSDP2's fully_shard); every rank writes its "
                "shards, so open the CheckpointManager with distributed=True on every rank",
                _keys(list(sharded)),
            )
        return flat

    def participate(self) -> None:
        """Nothing: the only rank is the writer."""

    def committed(self) -> None:
        """Nothing: no other rank waits for the commit."""

    def abort(self, error: BaseException) -> None:
        """Nothing: no other rank waits for the outcome."""


class DistributedRound:
    """The round of a save by every rank of a group (see ``checkpoint.distributed``)."""

    def __init__(self, round_: Any) -> None:
        self.hooks: CommitHooks | None = round_
        self._round = round_

    def flatten(self, state: Any, *, copy: bool) -> Flattened:
        """Takes ``state`` apart, its per-rank leaves on their own; takes the chunks this
        rank writes, (on the writer) what each tensor is, and this rank's per-rank leaves."""
        from globalstep.checkpoint._ranks.coordinated import prepare

        flat = flatten(state, copy=copy, per_rank=True)
        prepare(
            self._round,
            flat.sharded,
            copy=copy,
            rank_tree=flat.per_rank,
            rank_arrays=flat.rank_arrays,
        )
        return flat

    def participate(self) -> None:
        """A rank other than the writer: writes its shards and waits for the commit."""
        self._round.participate()

    def committed(self) -> None:
        """The writer committed: tells every rank."""
        self._round.committed()

    def abort(self, error: BaseException) -> None:
        """The save failed on this rank: tells every rank."""
        self._round.abort(error)


Round = SoloRound | DistributedRound


class Rounds:
    """Begins each save's round: solo, or distributed over an initialised group.

    Args:
        distributed: the manager's ``distributed`` option.
        storage: the directory's storage.
        read_only: a read-only manager saves nothing, so takes part in no round.

    Attributes:
        distributed: whether saves are distributed over a group.
        participant: whether this rank writes its shards only (not the writer rank).
    """

    def __init__(self, distributed: Any, storage: Storage, *, read_only: bool) -> None:
        self._coordinator: Any = None
        self._options: Any = None
        if distributed is not False:
            from globalstep.checkpoint._ranks import coordinated as _distributed

            self._options = options = _distributed.options_from(distributed)
            if options is not None and not read_only:
                self._coordinator = _distributed.Coordinator(options, storage)
        self.distributed = self._coordinator is not None
        self.participant = self.distributed and not self._coordinator.is_writer

    def rank_and_world(self) -> tuple[int, int]:
        """This process's rank and the group's size, for restoring per-rank leaves: the
        group's (a distributed manager, a read-only one too, once the group exists), else
        ``(0, 1)``."""
        if self._coordinator is not None:
            return self._coordinator.rank, self._coordinator.world
        if self._options is not None:
            group = active(self._options.group)
            if group.connected:
                return group.rank, group.world_size
        return 0, 1

    def begin(self, step: int) -> Round:
        """Starts the round of the save of ``step`` (every rank saves in the same order)."""
        if self._coordinator is None:
            return _SOLO
        return DistributedRound(self._coordinator.begin(step))


_SOLO = SoloRound()
