"""The data position: a resumable sampler for map-style datasets, and a skip-ahead fallback.

The data position is state of its own, never derived from the step: an update that a
``GradScaler`` skips has consumed its batches without advancing the step, and accumulated
micro-batches consume several batches per step. :class:`ResumableSampler` orders an epoch
as a pure function of ``(seed, epoch)`` and counts the samples the training loop has
consumed in it, so a checkpoint holds ``(epoch, position)`` and a resumed run starts the
epoch's order at ``position`` directly, without replaying batches, whatever the
DataLoader's ``num_workers`` (its workers prefetch ahead of the loop; only what the loop
took counts).

Iterable datasets have no index to start from; :func:`skip_ahead` is the fallback: it
draws and drops the batches a resumed run has already consumed, with a progress line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TextIO, TypeVar, cast

import numpy as np
import torch
from torch.utils.data import Sampler

from globalstep.errors import ConfigError

__all__ = ["ResumableSampler", "skip_ahead"]

T = TypeVar("T")


def _count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ConfigError(name, f"must be an int >= {minimum}", value)
    return int(value)


class ResumableSampler(Sampler[int]):  # type: ignore[misc]  # torch is untyped here
    """A sampler whose order is a pure function of ``(seed, epoch)``, resumable mid-epoch.

    Pass it as the DataLoader's ``sampler`` and iterate the loader through
    :meth:`batches`, which counts the samples of each batch the loop takes and moves to
    the next epoch when the loader is exhausted. Put the sampler in the checkpoint tree:
    its state is ``{"seed", "epoch", "position"}``.

    Args:
        data: the dataset (anything with ``len()``) or its length.
        seed: the seed of every epoch's order.
        shuffle: False keeps the dataset's order (the position still resumes).

    Raises:
        ConfigError: a negative length or seed.

    Example:
        >>> s = ResumableSampler(6, seed=1)
        >>> first = list(s)
        >>> s.advance(4)
        >>> list(s) == first[4:]
        True
        >>> s.state_dict()
        {'seed': 1, 'epoch': 0, 'position': 4}
    """

    def __init__(self, data: Any, *, seed: int = 0, shuffle: bool = True) -> None:
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
        self._epoch = 0
        self._position = 0
        self._order_epoch: int | None = None
        self._order: np.ndarray[Any, np.dtype[np.int64]] = np.arange(0, dtype=np.int64)

    def __repr__(self) -> str:
        return (
            f"ResumableSampler(n={self._n}, seed={self._seed}, epoch={self._epoch}, "
            f"position={self._position})"
        )

    @property
    def epoch(self) -> int:
        """The epoch in progress (0 first)."""
        return self._epoch

    @property
    def position(self) -> int:
        """Samples of this epoch the training loop has consumed."""
        return self._position

    def order(self, epoch: int | None = None) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Returns the indices of ``epoch`` (default: the one in progress), in order.

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

    def __iter__(self) -> Iterator[int]:
        """Yields the rest of the epoch in progress, from :attr:`position` on."""
        return iter(self.order()[self._position :].tolist())

    def __len__(self) -> int:
        """Samples left in the epoch in progress."""
        return self._n - self._position

    def advance(self, samples: int) -> None:
        """Records that the training loop consumed ``samples`` more samples of this epoch.

        Raises:
            ConfigError: ``samples`` is negative or passes the end of the epoch.
        """
        samples = _count("samples", samples, 0)
        if self._position + samples > self._n:
            raise ConfigError(
                "samples",
                f"must not pass the epoch's end ({self._n - self._position} samples left)",
                samples,
            )
        self._position += samples

    def end_epoch(self) -> None:
        """Moves to the start of the next epoch."""
        self._epoch += 1
        self._position = 0

    def batches(self, loader: Iterable[T]) -> Iterator[T]:
        """Iterates ``loader`` for the rest of this epoch, counting what the loop takes.

        Each batch advances :attr:`position` by its number of samples as it is handed to
        the loop, so a checkpoint saved after an update holds the samples that update used;
        when the loader is exhausted the epoch ends. A loader without its own
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
        left = self._n - self._position
        if getattr(loader, "generator", None) is None:
            state = torch.get_rng_state()
            iterator = iter(loader)
            torch.set_rng_state(state)
        else:
            iterator = iter(loader)
        for batch in iterator:
            size = min(batch_size, left)
            left -= size
            self._position += size
            yield batch
        if drop_last:
            self._position = self._n
        self.end_epoch()

    def state_dict(self) -> dict[str, int]:
        """Returns ``{"seed", "epoch", "position"}``."""
        return {"seed": self._seed, "epoch": self._epoch, "position": self._position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output: the next iteration starts at the position.

        Raises:
            ConfigError: a field is missing or out of range, or the seed differs (the saved
                position would index another order).
        """
        if not isinstance(state, Mapping):
            raise ConfigError(
                "state", "must be a mapping from ResumableSampler.state_dict()", state
            )
        seed = _count("state['seed']", state.get("seed"), 0)
        epoch = _count("state['epoch']", state.get("epoch"), 0)
        position = _count("state['position']", state.get("position"), 0)
        if seed != self._seed:
            raise ConfigError(
                "state['seed']",
                f"must equal this sampler's seed {self._seed}",
                seed,
                hint="Build the sampler with the seed of the run you resume.",
            )
        if position > self._n:
            raise ConfigError("state['position']", f"must be <= len(dataset)={self._n}", position)
        self._epoch, self._position = epoch, position


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
