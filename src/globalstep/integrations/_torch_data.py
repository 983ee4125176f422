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

import torch
from torch.utils.data import Sampler

from globalstep._errors import ConfigError
from globalstep.integrations._order import ResumableOrder, _count

__all__ = ["ResumableSampler", "skip_ahead"]

T = TypeVar("T")


def _drawn_by_loader() -> bool:
    """Whether the code that iterates the sampler (the caller of ``__iter__``) is torch's
    DataLoader machinery (its ``BatchSampler``, or its iterator where batching is off),
    rather than the user's own (``list(sampler)``, a loop that calls :meth:`advance`). The
    index sampler is always iterated in the main process, whatever ``num_workers``."""
    caller = sys._getframe(2)  # 0: here, 1: ResumableSampler.__iter__
    return str(caller.f_globals.get("__name__", "")).startswith("torch.utils.data")


class ResumableSampler(ResumableOrder, Sampler[int]):  # type: ignore[misc]  # torch is untyped
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

    def __init__(
        self,
        data: Any,
        *,
        seed: int = 0,
        shuffle: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__(data, seed=seed, shuffle=shuffle, rank=rank, world_size=world_size)
        # The pass of batches() whose draw of the sampler comes next (one object a pass).
        self._counting: object | None = None
        # A DataLoader drew the sampler outside batches() since the last count.
        self._uncounted = False

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
        return super().__iter__()

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

    def advance(self, samples: int) -> None:
        """Records that the training loop consumed ``samples`` more samples of this
        rank's share of the epoch.

        Raises:
            ConfigError: ``samples`` is negative or passes the end of the epoch.
        """
        super().advance(samples)
        self._uncounted = False

    def end_epoch(self) -> None:
        """Moves to the start of the next epoch."""
        super().end_epoch()
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
        return super().state_dict()

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
        super().load_state_dict(state)
        self._uncounted = False

    def load_state_from_ranks(
        self, states: Sequence[Mapping[str, Any]], *, rank: int, world_size: int, step: int
    ) -> None:
        """Restores a checkpoint saved on another number of ranks (see
        :meth:`ResumableOrder.load_state_from_ranks`).

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
        super().load_state_from_ranks(states, rank=rank, world_size=world_size, step=step)
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
