"""An epoch's order of sample indices, split over the ranks and resumable mid-epoch,
with no framework: what :class:`~globalstep.integrations.torch.ResumableSampler` is made
of, and what a JAX or TensorFlow loop that indexes its own arrays draws its batches from.

The order of epoch ``e`` is a pure function of ``(seed, e)`` (NumPy's PCG64), so a
checkpoint holds only ``(epoch, position)``; on several ranks rank ``r`` of ``W`` draws
every ``W``-th index of that one order, the position is the ranks' global one, and a
restore on another world size splits the rest of the interrupted epoch over the new ranks
(each index drawn once across the attempts). The rank and world size default to the
process group's (:mod:`globalstep.distributed`: torch.distributed, jax.distributed or a
TensorFlow multi-worker strategy).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from globalstep._errors import ConfigError

__all__ = ["ResumableOrder"]


def _count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ConfigError(name, f"must be an int >= {minimum}", value)
    return int(value)


def _ranks(rank: Any, world_size: Any) -> tuple[int, int]:
    """This sampler's ``(rank, world_size)``: as given, the missing ones from
    :mod:`globalstep.distributed` (the process group, else torchrun's variables, else 0 of 1).
    """
    from globalstep import distributed

    world = distributed.world_size() if world_size is None else _count("world_size", world_size, 1)
    rank = distributed.rank() if rank is None else _count("rank", rank, 0)
    if rank >= world:
        raise ConfigError(
            "rank",
            f"must be < world_size={world}",
            rank,
            hint="Pass both rank= and world_size= (torch's DistributedSampler's rank and "
            "num_replicas), or neither to take them from the process group.",
        )
    return rank, world


def _saved_position(
    state: Any, name: str, seed: int, n: int
) -> tuple[int, int, int, int | None, int | None]:
    """Checks one saved state; returns ``(epoch, start, position, rank, world_size)``.

    ``rank`` and ``world_size`` are None for a one-process state (``{"seed", "epoch",
    "position"}``), whose position starts the rest of the epoch (``start == position``).
    """
    if not isinstance(state, Mapping):
        raise ConfigError(name, "must be a mapping from ResumableSampler.state_dict()", state)
    saved_seed = _count(f"{name}['seed']", state.get("seed"), 0)
    epoch = _count(f"{name}['epoch']", state.get("epoch"), 0)
    position = _count(f"{name}['position']", state.get("position"), 0)
    if saved_seed != seed:
        raise ConfigError(
            f"{name}['seed']",
            f"must equal this sampler's seed {seed}",
            saved_seed,
            hint="Build the sampler with the seed of the run you resume.",
        )
    if position > n:
        raise ConfigError(f"{name}['position']", f"must be <= len(dataset)={n}", position)
    if "world_size" not in state:
        return epoch, position, position, None, None
    world = _count(f"{name}['world_size']", state.get("world_size"), 1)
    rank = _count(f"{name}['rank']", state.get("rank"), 0)
    start = _count(f"{name}['start']", state.get("start"), 0)
    if rank >= world:
        raise ConfigError(f"{name}['rank']", f"must be < {name}['world_size']={world}", rank)
    if start > position:
        raise ConfigError(f"{name}['start']", f"must be <= {name}['position']={position}", start)
    return epoch, start, position, rank, world


def _merged_position(states: Sequence[Any], seed: int, n: int) -> tuple[int, int]:
    """The ``(epoch, position)`` that every old rank's state leaves: the samples before
    ``position`` in the epoch's order were drawn (by some rank), none after it.

    Raises:
        ConfigError: ``states`` is empty or not indexed by the old rank, a state is
            malformed, or the ranks were not in lockstep (what they drew is no prefix of
            the order, so no split of the rest draws each sample once).
    """
    if isinstance(states, str | bytes) or not isinstance(states, Sequence) or not states:
        raise ConfigError("states", "must be a non-empty list of state_dict()s, one a rank", states)
    size = len(states)
    saved = []
    for index, state in enumerate(states):
        name = f"states[{index}]"
        epoch, start, position, rank, world = _saved_position(state, name, seed, n)
        if (rank, world) == (None, None) and size == 1:
            rank, world = 0, 1
        if (rank, world) != (index, size):
            raise ConfigError(
                name,
                f"must be the state of rank {index} of {size} (states are indexed by rank)",
                f"rank {rank} of {world}" if world else "a one-process state",
            )
        saved.append((epoch, start, position, index))
    last = max(epoch for epoch, _, _, _ in saved)
    drawn = np.zeros(n, dtype=bool)
    for epoch, start, position, rank in saved:
        if epoch == last:
            drawn[:start] = True
            drawn[start + rank : position : size] = True
            continue
        if epoch != last - 1:
            raise ConfigError(
                f"states[{rank}]['epoch']",
                f"must be {last} or {last - 1}, as another rank is at epoch {last}; the ranks "
                "were not in lockstep",
                epoch,
            )
        if len(range(start + rank, position, size)) != len(range(start + rank, n, size)):
            raise ConfigError(
                f"states[{rank}]['position']",
                f"must end rank {rank}'s share of epoch {epoch}, since another rank is at epoch "
                f"{last}; the ranks were not in lockstep",
                position,
            )
    position = n if drawn.all() else int(drawn.argmin())
    if drawn[position:].any():
        raise ConfigError(
            "states",
            f"must leave a prefix of epoch {last}'s order drawn; sample {position} of the order "
            f"was not drawn but {int(drawn[position:].argmax()) + position} was",
            [dict(state) for state in states],
            hint="Every rank must take the same number of batches between two saves.",
        )
    return last, position


class ResumableOrder:
    """The indices of a dataset, in an order that is a pure function of ``(seed, epoch)``,
    resumable mid-epoch, on one process or split over the ranks of a data-parallel run.

    A loop that indexes its own arrays (JAX, NumPy, TensorFlow) draws the rest of each
    epoch through :meth:`batches_of`, which counts every batch of indices as it is handed
    out; put the object in the checkpoint tree: its state is ``{"seed", "epoch",
    "position"}``, and on several ranks also ``{"start", "rank", "world_size"}`` (each
    rank's own: a distributed :class:`~globalstep.checkpoint.CheckpointManager` saves it
    per rank). Restored on another world size, :meth:`load_state_from_ranks` splits the
    rest of the interrupted epoch over the new ranks, so every index of that epoch is drawn
    exactly once across the attempts.

    On several ranks, rank ``r`` of ``W`` draws every ``W``-th index of the epoch's one
    order from ``r`` on (as torch's ``DistributedSampler`` does, without its padding: each
    index is drawn once, and with an uneven rest the last ranks draw one fewer).
    :attr:`position` is the *global* position: the indices of the epoch that all ranks
    together drew, equal on every rank while they take the same number of batches.

    Args:
        data: the dataset (anything with ``len()``) or its length.
        seed: the seed of every epoch's order.
        shuffle: False keeps the dataset's order (the position still resumes).
        rank: this process's rank; default: the process group's, else the launcher's
            ``RANK``, else 0.
        world_size: the number of ranks sharing the epoch; default: the process group's,
            else the launcher's ``WORLD_SIZE``, else 1.

    Raises:
        ConfigError: a negative length or seed, a world size below 1, a rank outside it.

    Example:
        >>> order = ResumableOrder(5, seed=0, shuffle=False)
        >>> [batch.tolist() for batch in order.batches_of(2)]
        [[0, 1], [2, 3], [4]]
        >>> order.state_dict()
        {'seed': 0, 'epoch': 1, 'position': 0}
        >>> halves = [ResumableOrder(6, seed=1, rank=r, world_size=2) for r in (0, 1)]
        >>> whole = ResumableOrder(6, seed=1).order()
        >>> [list(h) for h in halves] == [whole[0::2].tolist(), whole[1::2].tolist()]
        True
    """

    globalstep_per_rank = True
    """Each rank's own state goes into a distributed checkpoint (see the class text)."""

    def __init__(
        self,
        data: Any,
        *,
        seed: int = 0,
        shuffle: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        n = data if isinstance(data, int | np.integer) and not isinstance(data, bool) else None
        if n is None:
            try:
                n = len(data)
            except TypeError:
                raise ConfigError(
                    "data",
                    "must be a map-style dataset (with len()) or its length",
                    type(data).__name__,
                    hint="For an iterable dataset use skip_ahead().",
                ) from None
        self._n = _count("data", n, 0)
        self._seed = _count("seed", seed, 0)
        if not isinstance(shuffle, bool):
            raise ConfigError("shuffle", "must be a bool", shuffle)
        self._shuffle = shuffle
        self._rank, self._world = _ranks(rank, world_size)
        self._epoch = 0
        self._start = 0  # where this split of the epoch began, in the epoch's order
        self._taken = 0  # samples of this split this rank has drawn
        self._order_epoch: int | None = None
        self._order: np.ndarray[Any, np.dtype[np.int64]] = np.arange(0, dtype=np.int64)

    def __repr__(self) -> str:
        ranks = f", rank={self._rank}, world_size={self._world}" if self._world > 1 else ""
        return (
            f"{type(self).__name__}(n={self._n}, seed={self._seed}, epoch={self._epoch}, "
            f"position={self.position}{ranks})"
        )

    @property
    def epoch(self) -> int:
        """The epoch in progress (0 first)."""
        return self._epoch

    @property
    def position(self) -> int:
        """Samples of this epoch the training loop has consumed, on all ranks together
        (each rank having drawn as many as this one, or its whole share)."""
        return min(self._start + self._world * self._taken, self._n)

    @property
    def rank(self) -> int:
        """This sampler's rank among :attr:`world_size`."""
        return self._rank

    @property
    def world_size(self) -> int:
        """The number of ranks that share each epoch."""
        return self._world

    def order(self, epoch: int | None = None) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Returns the indices of ``epoch`` (default: the one in progress), in order: the
        whole epoch's, the same on every rank.

        Example:
            >>> s = ResumableOrder(5, seed=3)
            >>> bool((s.order(2) == ResumableOrder(5, seed=3).order(2)).all())
            True
        """
        epoch = self._epoch if epoch is None else _count("epoch", epoch, 0)
        if epoch != self._order_epoch:
            if self._shuffle:
                rng = np.random.Generator(
                    np.random.PCG64(np.random.SeedSequence([self._seed, epoch]))
                )
                self._order = rng.permutation(self._n).astype(np.int64)
            else:
                self._order = np.arange(self._n, dtype=np.int64)
            self._order_epoch = epoch
        return self._order

    def _next(self) -> int:
        """The index, in the epoch's order, of this rank's next sample."""
        return self._start + self._rank + self._world * self._taken

    def _rest(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """This rank's rest of the epoch in progress, from :attr:`position` on."""
        return self.order()[self._next() :: self._world]

    def __iter__(self) -> Iterator[int]:
        """Yields this rank's rest of the epoch in progress (reading it counts nothing)."""
        return iter(self._rest().tolist())

    def __len__(self) -> int:
        """Samples left to this rank in the epoch in progress."""
        return len(range(self._next(), self._n, self._world))

    def advance(self, samples: int) -> None:
        """Records that the training loop consumed ``samples`` more samples of this
        rank's share of the epoch.

        Raises:
            ConfigError: ``samples`` is negative or passes the end of the epoch.
        """
        samples = _count("samples", samples, 0)
        if samples > len(self):
            raise ConfigError(
                "samples",
                f"must not pass the epoch's end ({len(self)} samples left)",
                samples,
            )
        self._taken += samples

    def end_epoch(self) -> None:
        """Moves to the start of the next epoch."""
        self._epoch += 1
        self._start = self._taken = 0

    def batches_of(
        self, batch_size: int, *, drop_remainder: bool = False
    ) -> Iterator[np.ndarray[Any, np.dtype[np.int64]]]:
        """Yields this rank's rest of the epoch in progress as arrays of ``batch_size``
        indices (the last one smaller unless ``drop_remainder``), each counted as it is
        handed to the loop (save after the update that used it); then the epoch ends.

        Raises:
            ConfigError: ``batch_size`` is not an int >= 1.
        """
        batch_size = _count("batch_size", batch_size, 1)
        if not isinstance(drop_remainder, bool):
            raise ConfigError("drop_remainder", "must be a bool", drop_remainder)
        return self._batches_of(batch_size, drop_remainder)

    def _batches_of(
        self, batch_size: int, drop_remainder: bool
    ) -> Iterator[np.ndarray[Any, np.dtype[np.int64]]]:
        rest = self._rest()
        for first in range(0, len(rest), batch_size):
            batch = rest[first : first + batch_size]
            if drop_remainder and len(batch) < batch_size:
                break
            self._taken += len(batch)
            yield batch
        self.end_epoch()

    def state_dict(self) -> dict[str, int]:
        """Returns ``{"seed", "epoch", "position"}``, and on several ranks also
        ``{"start", "rank", "world_size"}``."""
        state = {"seed": self._seed, "epoch": self._epoch, "position": self.position}
        if self._world > 1:
            state.update(start=self._start, rank=self._rank, world_size=self._world)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output: the next iteration starts at the position.

        A one-process state (``{"seed", "epoch", "position"}``) gives the global position,
        from which the ranks split the rest of the epoch. A state saved on several ranks
        restores only on the same rank of the same world size; across world sizes,
        :meth:`load_state_from_ranks` takes every rank's state.

        Raises:
            ConfigError: a field is missing or out of range, the seed differs (the saved
                position would index another order), or the state is another rank's.
        """
        epoch, start, position, rank, world = _saved_position(state, "state", self._seed, self._n)
        if world is not None and (rank, world) != (self._rank, self._world):
            raise ConfigError(
                "state",
                f"must be saved by this sampler's rank {self._rank} of {self._world}",
                f"rank {rank} of {world}",
                hint="A checkpoint of another world size restores through a distributed "
                "CheckpointManager, which hands every rank's state to load_state_from_ranks().",
            )
        self._epoch, self._start = epoch, start
        self._taken = len(range(start + self._rank, position, self._world))

    def load_state_from_ranks(
        self, states: Sequence[Mapping[str, Any]], *, rank: int, world_size: int, step: int
    ) -> None:
        """Restores a checkpoint saved on another number of ranks: the rest of the
        interrupted epoch, from the global position on, is split over the new ranks.

        The samples the old ranks drew together must be the first ones of the epoch's order
        (they are when each rank took the same number of batches, or its whole share, since
        the split began); the rest is then drawn once, rank ``rank`` taking every
        ``world_size``-th. A distributed CheckpointManager calls this on every rank when the
        world size changed; ``step`` is unused (the order depends on the seed and epoch).

        Args:
            states: each old rank's :meth:`state_dict`, indexed by the old rank.
            rank: this process's new rank; must be this sampler's.
            world_size: the new number of ranks; must be this sampler's.
            step: the checkpoint's step.

        Raises:
            ConfigError: the rank or world size is not this sampler's, a state is malformed
                or another seed's, or the old ranks were not in lockstep.

        Example:
            >>> olds = [ResumableOrder(10, rank=r, world_size=4) for r in range(4)]
            >>> for old in olds:
            ...     old.advance(1)
            >>> new = ResumableOrder(10, rank=1, world_size=2)
            >>> new.load_state_from_ranks([o.state_dict() for o in olds], rank=1, world_size=2,
            ...                           step=7)
            >>> new.position, list(new) == new.order()[5::2].tolist()
            (4, True)
        """
        del step  # the order is a function of (seed, epoch) alone
        for name, value, mine in (
            ("rank", rank, self._rank),
            ("world_size", world_size, self._world),
        ):
            if value != mine:
                raise ConfigError(
                    name,
                    f"must equal this sampler's {name} {mine}",
                    value,
                    hint="Build the sampler with the process group's rank and world size.",
                )
        self._epoch, self._start = _merged_position(states, self._seed, self._n)
        self._taken = 0
