"""The process group's interface, apart from its implementations: :class:`ProcessGroup`,
:class:`KeyValueStore`, the writer rank's check and the reduce operations.

Each engine's module (``_group/__init__``'s torch.distributed and single process,
``_group/_jax``) builds on this one; :mod:`globalstep._group` re-exports every name, the
door the rest of globalstep goes through.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Protocol

from globalstep._errors import ConfigError

__all__ = ["REDUCE_OPS", "KeyValueStore", "ProcessGroup", "check_writer_rank"]

REDUCE_OPS = ("max", "min", "sum")
"""The operations :meth:`ProcessGroup.all_reduce_floats` knows."""


class KeyValueStore(Protocol):
    """The key-value store every rank of a group reaches: torch.distributed's ``Store``
    as it is (``TCPStore``, ``HashStore``, ``PrefixStore``), or a coordination service's
    keys behind these six calls. Values are read back as bytes."""

    def set(self, key: str, value: str | bytes) -> None:
        """Sets ``key``."""

    def get(self, key: str) -> bytes:
        """Returns ``key``'s value (waiting for it to be set, up to the store's timeout)."""

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        """Sets ``desired`` where the value is ``expected`` (``""``: the key is missing);
        returns the value in force after the call."""

    def check(self, keys: list[str]) -> bool:
        """Returns whether every key exists, without waiting."""

    def add(self, key: str, amount: int) -> int:
        """Adds ``amount`` to the integer under ``key`` (0 where missing); returns it."""

    def delete_key(self, key: str) -> bool:
        """Deletes ``key``; returns whether it existed."""


def check_writer_rank(value: Any, world_size: int | None = None, name: str = "writer_rank") -> int:
    """Returns ``value``, the rank that writes (summaries, progress, commits), checked: an
    int >= 0, and below ``world_size`` where it is known. The one check of the writer rank.

    Args:
        value: the writer rank given.
        world_size: the group's size, or None where no group is known yet.
        name: the parameter as the caller's API spells it (``writer_rank``; a Run's
            ``Ranks(writer=...)``).

    Raises:
        ConfigError: ``value`` is not an int >= 0, or not below ``world_size``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(name, "must be an int >= 0", value)
    if world_size is not None and value >= world_size:
        raise ConfigError(
            name,
            f"must be a rank below the world size, {world_size}",
            value,
            hint=f"The writer must be a rank of the group (0..{world_size - 1}).",
        )
    return value


class ProcessGroup(ABC):
    """The ranks of a run, as globalstep uses them; see the module's docstring.

    Every rank of the group calls a collective at the same point of its program, with as
    many values; a group that is not ``connected`` reaches this process alone (its
    collectives return its own values). Subclasses give ``rank``, ``world_size``, the
    collectives and ``store``; the writer rank, the store's key scopes and the restart tag
    are here, once.

    Args:
        scopes: the counts of :meth:`scope`, shared by every group object of one store
            (None: this object's own).
    """

    connected = True
    """Whether the collectives and the store reach the other ranks."""

    store_name = "the process group's store"
    store_host = "rank 0"
    """What the store is, and which rank hosts it, as an error that lost it says."""

    def __init__(self, scopes: dict[str, int] | None = None) -> None:
        self._scopes: dict[str, int] = {} if scopes is None else scopes

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's rank in the group, in ``[0, world_size)``."""

    @property
    @abstractmethod
    def world_size(self) -> int:
        """The number of ranks in the group, >= 1."""

    @abstractmethod
    def all_gather_ints(self, values: Sequence[int]) -> list[list[int]]:
        """Every rank's int64 ``values`` (as many on each), indexed by rank."""

    @abstractmethod
    def all_gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        """Every rank's float64 ``values`` (as many on each), indexed by rank, bit for bit."""

    @abstractmethod
    def all_reduce_floats(self, values: Sequence[float], op: str) -> list[float]:
        """The element-wise ``op`` (one of :data:`REDUCE_OPS`) of every rank's float64
        ``values``, the same on every rank."""

    @abstractmethod
    def broadcast_int(self, value: int, src: int) -> int:
        """Rank ``src``'s int64 ``value``, on every rank."""

    @abstractmethod
    def barrier(self) -> None:
        """Returns once every rank called it."""

    @abstractmethod
    def store(self) -> KeyValueStore:
        """The key-value store every rank of the group reaches."""

    def lost(self, ranks: Sequence[int]) -> list[int]:
        """The ranks of ``ranks`` known to have died (their process is gone, or gave no
        sign of life for the engine's liveness interval), without waiting: what a rank
        waiting for another's key asks, so that a dead peer is noticed in seconds, not
        at the wait's timeout. Empty where the engine cannot tell (then the timeout
        alone ends the wait)."""
        del ranks
        return []

    def keep_alive(self) -> None:
        """Starts this process's sign of life, where the engine's :meth:`lost` reads one
        (idempotent; nothing by default): a distributed CheckpointManager calls it when it
        opens, so that its peers can tell this rank died inside a save."""
        return None

    @property
    def restart_tag(self) -> str:
        """The part of every key that tells this start of the ranks from a restart's, where
        the store outlives the ranks (empty where it does not)."""
        return ""

    def scope(self, root: str) -> str:
        """A key prefix under ``root`` for one agreement between the ranks: the restart
        tag, then how many scopes this process opened under ``root`` (every rank opens its
        agreements in the same order, so the same on every rank, and never a name an
        earlier agreement, whose keys the store still holds, used)."""
        where = f"{root}{self.restart_tag}"
        self._scopes[where] = opened = self._scopes.get(where, 0) + 1
        return f"{where}/{opened}"

    def is_writer(self, writer_rank: int = 0, name: str = "writer_rank") -> bool:
        """Returns whether this process is rank ``writer_rank`` (checked against the
        group's size: :func:`check_writer_rank`)."""
        return self.rank == check_writer_rank(writer_rank, self.world_size, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, world_size={self.world_size})"
