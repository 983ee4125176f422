"""The data position: a resumable sampler for map-style datasets, and a skip-ahead fallback.

The data position is state of its own, never derived from the step: an update that a
``GradScaler`` skips has consumed its batches without advancing the step, and accumulated
micro-batches consume several batches per step. :class:`ResumableSampler` orders an epoch
as a pure function of ``(seed, epoch)`` and counts the samples the training loop has
consumed in it, so a checkpoint holds ``(epoch, position)`` and a resumed run starts the
epoch's order at ``position`` directly, without replaying batches, whatever the
DataLoader's ``num_workers`` (its workers prefetch ahead of the loop; only what the loop
took counts). On several ranks each rank draws its share of that one order and the position
is the ranks' global one; restored on another world size, the rest of the interrupted epoch
is split over the new ranks, each sample drawn once across the attempts.

Iterable datasets have no index to start from; :func:`skip_ahead` is the fallback: it
draws and drops the batches a resumed run has already consumed, with a progress line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TextIO, TypeVar, cast

import numpy as np
import torch
from torch.utils.data import Sampler

from globalstep._errors import ConfigError

__all__ = ["ResumableSampler", "skip_ahead"]

T = TypeVar("T")


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


def _drawn_by_loader() -> bool:
    """Whether the code that iterates the sampler (the caller of ``__iter__``) is torch's
    DataLoader machinery (its ``BatchSampler``, or its iterator where batching is off),
    rather than the user's own (``list(sampler)``, a loop that calls :meth:`advance`). The
    index sampler is always iterated in the main process, whatever ``num_workers``."""
    caller = sys._getframe(2)  # 0: here, 1: ResumableSampler.__iter__
    return str(caller.f_globals.get("__name__", "")).startswith("torch.utils.data")


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


class ResumableSampler(Sampler[int]):  # type: ignore[misc]  # torch is untyped here
    """A sampler whose order is a pure function of ``(seed, epoch)``, resumable mid-epoch,
    on one process or split over the ranks of a data-parallel run.

    Pass it as the DataLoader's ``sampler`` and iterate the loader through
    :meth:`batches`, which counts the samples of each batch the loop takes and moves to
    the next epoch when the loader is exhausted. Put the sampler in the checkpoint tree:
    its state is ``{"seed", "epoch", "position"}``.

    A DataLoader iterated directly (``for batch in loader``) counts nothing: the position
    and the epoch would stay where they were, a checkpoint would hold them, and a resume
    would train on those batches again. So, once a DataLoader has drawn the sampler outside
    :meth:`batches`, :meth:`state_dict` (a checkpoint's save) and the DataLoader's next
    pass raise a ``ConfigError`` naming ``sampler.batches(loader)``, until :meth:`advance`,
    :meth:`end_epoch`, a restore or a pass through :meth:`batches` counts again (a loop
    that counts for itself calls ``advance(len(batch))`` per batch and ``end_epoch()`` at
    each epoch's end). Iterating the sampler itself (``list(sampler)``) is no DataLoader's
    draw: it only reads the order.

    On several ranks, rank ``r`` of ``W`` draws every ``W``-th sample of the epoch's one
    order from ``r`` on (as torch's ``DistributedSampler`` does, without its padding: each
    sample is drawn once, and with an uneven rest the last ranks draw one sample fewer).
    :attr:`position` is then the *global* position: the samples of the epoch that all ranks
    together drew, equal on every rank while they take the same number of batches (a DDP
    loop). The state adds ``"start"`` (where this split of the epoch began), ``"rank"`` and
    ``"world_size"``; a distributed :class:`~globalstep.checkpoint.CheckpointManager`
    saves it per rank (``globalstep_per_rank``). Restored on another world size,
    :meth:`load_state_from_ranks` splits the rest of the interrupted epoch over the new
    ranks, so every sample of that epoch is drawn exactly once across the attempts.

    Args:
        data: the dataset (anything with ``len()``) or its length.
        seed: the seed of every epoch's order.
        shuffle: False keeps the dataset's order (the position still resumes).
        rank: this process's rank (torch's ``rank``); default: the process group's, else
            torchrun's ``RANK``, else 0.
        world_size: the number of ranks sharing the epoch (torch's ``num_replicas``);
            default: the process group's, else torchrun's ``WORLD_SIZE``, else 1.

    Raises:
        ConfigError: a negative length or seed, a world size below 1, a rank outside it.

    Example:
        >>> s = ResumableSampler(6, seed=1)
        >>> first = list(s)
        >>> s.advance(4)
        >>> list(s) == first[4:]
        True
        >>> s.state_dict()
        {'seed': 1, 'epoch': 0, 'position': 4}
        >>> halves = [ResumableSampler(6, seed=1, rank=r, world_size=2) for r in (0, 1)]
        >>> [list(h) for h in halves] == [first[0::2], first[1::2]]
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
        # The pass of batches() whose draw of the sampler comes next (one object a pass).
        self._counting: object | None = None
        # A DataLoader drew the sampler outside batches() since the last count.
        self._uncounted = False

    def __repr__(self) -> str:
        ranks = f", rank={self._rank}, world_size={self._world}" if self._world > 1 else ""
        return (
            f"ResumableSampler(n={self._n}, seed={self._seed}, epoch={self._epoch}, "
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
            >>> s = ResumableSampler(5, seed=3)
            >>> bool((s.order(2) == ResumableSampler(5, seed=3).order(2)).all())
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

    def __iter__(self) -> Iterator[int]:
        """Yields this rank's rest of the epoch in progress, from :attr:`position` on.

        Raises:
            ConfigError: a DataLoader draws the sampler outside :meth:`batches` a second
                time with nothing counted since its last draw (see the class text).
        """
        if self._counting is not None:  # batches() draws: it counts what the loop takes
            self._counting = None
            self._uncounted = False
        elif _drawn_by_loader():
            if self._uncounted:
                raise self._uncounted_error(
                    "is drawn by a DataLoader iterated directly again, with nothing counted "
                    "since its last pass: iterated so, the sampler never ends its epoch, so "
                    f"every pass would repeat epoch {self._epoch}'s order from position "
                    f"{self.position} on, and a checkpoint would hold that position"
                )
            self._uncounted = True
        return iter(self.order()[self._next() :: self._world].tolist())

    def _uncounted_error(self, rule: str) -> ConfigError:
        return ConfigError(
            "sampler",
            rule,
            self,
            hint="Iterate the loader through the sampler: `for batch in "
            "sampler.batches(loader):`, which counts each batch the loop takes and ends the "
            "epoch when the loader is exhausted (or count yourself: "
            "sampler.advance(len(batch)) for each batch, sampler.end_epoch() at each "
            "epoch's end).",
        )

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
        self._uncounted = False

    def end_epoch(self) -> None:
        """Moves to the start of the next epoch."""
        self._epoch += 1
        self._start = self._taken = 0
        self._uncounted = False

    def batches(self, loader: Iterable[T]) -> Iterator[T]:
        """Iterates ``loader`` for the rest of this epoch, counting what the loop takes.

        Each batch advances :attr:`position` by its number of samples (of every rank) as it
        is handed to the loop, so a checkpoint saved after an update holds the samples that
        update used; when the loader is exhausted the epoch ends. A loader without its own
        ``generator`` draws its workers' base seed from torch's global generator when an
        iterator is created; that draw is undone here, so the global RNG (dropout) does not
        depend on where in an epoch a run resumed.

        Args:
            loader: a ``torch.utils.data.DataLoader`` built with ``sampler=self`` and a
                ``batch_size``.

        Raises:
            ConfigError: the loader does not use this sampler or has no batch size.

        Example:
            >>> from torch.utils.data import DataLoader
            >>> data = list(range(5))
            >>> s = ResumableSampler(data, shuffle=False)
            >>> [b.tolist() for b in s.batches(DataLoader(data, batch_size=2, sampler=s))]
            [[0, 1], [2, 3], [4]]
            >>> s.state_dict()
            {'seed': 0, 'epoch': 1, 'position': 0}
        """
        if getattr(loader, "sampler", None) is not self:
            raise ConfigError(
                "loader",
                "must be a DataLoader built with sampler=<this ResumableSampler>",
                type(loader).__name__,
            )
        batch_size = getattr(loader, "batch_size", None)
        if not isinstance(batch_size, int):
            raise ConfigError(
                "loader.batch_size",
                "must be an int (the sampler counts samples per batch)",
                batch_size,
            )
        drop_last = bool(getattr(loader, "drop_last", False))
        return cast("Iterator[T]", self._batches(loader, batch_size, drop_last))

    def _batches(self, loader: Iterable[T], batch_size: int, drop_last: bool) -> Iterator[T]:
        left = len(self)
        # The loader's next draw of the sampler is this pass's (it comes at iter() with
        # workers, at the first batch without).
        counting = self._counting = object()
        try:
            if getattr(loader, "generator", None) is None:
                state = torch.get_rng_state()
                iterator = iter(loader)
                torch.set_rng_state(state)
            else:
                iterator = iter(loader)
            for batch in iterator:
                size = min(batch_size, left)
                left -= size
                self._taken += size
                yield batch
        finally:
            if self._counting is counting:  # never drawn (the loader failed first)
                self._counting = None
        if drop_last:  # the partial batch dropped counts as drawn
            self._taken = len(range(self._start + self._rank, self._n, self._world))
        self.end_epoch()

    def state_dict(self) -> dict[str, int]:
        """Returns ``{"seed", "epoch", "position"}``, and on several ranks also
        ``{"start", "rank", "world_size"}``.

        Raises:
            ConfigError: a DataLoader drew the sampler outside :meth:`batches` and nothing
                counted since (see the class text): the state would not be the loop's.
        """
        if self._uncounted:
            raise self._uncounted_error(
                "was drawn by a DataLoader iterated directly (`for batch in loader`), which "
                f"counts nothing: its state would still say epoch {self._epoch}, position "
                f"{self.position}, whatever the loop took since, and a run resumed from it "
                "would train on those batches again"
            )
        state = {"seed": self._seed, "epoch": self._epoch, "position": self.position}
        if self._world > 1:
            state.update(start=self._start, rank=self._rank, world_size=self._world)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output: the next iteration starts at the position.

        A one-process state (``{"seed", "epoch", "position"}``, as every checkpoint before
        ranks) gives the global position, from which the ranks split the rest of the epoch.
        A state saved on several ranks restores only on the same rank of the same world
        size; across world sizes, :meth:`load_state_from_ranks` takes every rank's state.

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
        self._uncounted = False

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
            >>> olds = [ResumableSampler(10, rank=r, world_size=4) for r in range(4)]
            >>> for old in olds:
            ...     old.advance(1)
            >>> new = ResumableSampler(10, rank=1, world_size=2)
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
        self._uncounted = False


def skip_ahead(
    batches: Iterable[T],
    count: int,
    *,
    stream: TextIO | None = None,
    every_seconds: float = 2.0,
) -> Iterator[T]:
    """Drops the first ``count`` batches of an iterable dataset's loader; the fallback for
    resuming where no index can start an epoch mid-way.

    The iterable must give the same batches in the same order on every run (seed its
    shuffling with the epoch); keep the number of batches consumed in the epoch in the
    checkpoint (an int in the state tree) and pass it here. Progress is printed to
    ``stream`` (default stderr) every ``every_seconds`` and at the end.

    Args:
        batches: the loader (or any iterable of batches).
        count: batches to draw and drop.
        stream: where the progress lines go.
        every_seconds: seconds between progress lines.

    Returns:
        An iterator over the batches after the first ``count``.

    Raises:
        ConfigError: ``count`` is negative, or the iterable ends before ``count`` batches.

    Example:
        >>> import io
        >>> out = io.StringIO()
        >>> list(skip_ahead(iter(range(5)), 3, stream=out))
        [3, 4]
        >>> out.getvalue()
        'skipping ahead: 3/3 batches\\n'
    """
    count = _count("count", count, 0)
    if not isinstance(every_seconds, int | float) or every_seconds <= 0:
        raise ConfigError("every_seconds", "must be > 0", every_seconds)
    out = sys.stderr if stream is None else stream
    iterator = iter(batches)
    last = time.monotonic()
    for done in range(count):
        try:
            next(iterator)
        except StopIteration:
            raise ConfigError(
                "count",
                f"must not pass the end of the data ({done} batches)",
                count,
                hint="Was the epoch's position saved with another dataset or batch size?",
            ) from None
        now = time.monotonic()
        if now - last >= every_seconds:
            print(f"skipping ahead: {done + 1}/{count} batches", file=out, flush=True)
            last = now
    if count:
        print(f"skipping ahead: {count}/{count} batches", file=out, flush=True)
    return iterator
