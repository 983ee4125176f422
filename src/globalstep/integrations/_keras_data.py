"""A Keras ``PyDataset`` whose batch order is a function of (seed, epoch), resumable.

Part of :mod:`globalstep.integrations.keras` (which exports :class:`ResumableDataset`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import keras
import numpy as np

from globalstep._errors import ConfigError
from globalstep.integrations._resumable import batches_per_epoch, check_same_settings, count

__all__ = ["ResumableDataset"]


class ResumableDataset(keras.utils.PyDataset):  # type: ignore[misc]
    """Batches of arrays in an order that is a function of (seed, epoch), resumable.

    Batch ``j`` of the run is batch ``j % steps_per_epoch`` of epoch
    ``j // steps_per_epoch``, whose order is a permutation drawn from ``(seed, epoch)``.
    The position (the batches training has consumed, counted by a
    :class:`GlobalStepCallback` given ``data=``) is state of its own, saved with
    ``state_dict()``.

    Plain ``model.fit(data, epochs=n)`` (and ``evaluate``, ``predict``) sees a finite
    ``PyDataset`` of ``steps_per_epoch`` batches: each epoch Keras runs is the data's next
    epoch (the position's epoch first, with a callback), its batches in the data's order,
    so ``n`` epochs end after ``n * steps_per_epoch`` updates, on the batches :func:`fit`
    gives. Keras' ``shuffle`` of the batch order is not applied (the data is shuffled by
    ``(seed, epoch)``, which a checkpoint restores; Python's random state is not). It
    starts epochs at their first batch only: where the position is inside an epoch (a run
    restored mid-epoch), or for ``steps_per_epoch`` other than the data's, the callback
    refuses plain ``fit()``; with ``workers > 1`` or ``use_multiprocessing`` (whose
    workers read ahead across Keras' epochs) the data refuses it.
    :func:`fit` continues inside an epoch: during its ``model.fit`` calls the data is one
    stream of the run's batches from the position.

    Args:
        x: an array, or a list/tuple/dict of arrays, of the same length.
        y: targets, likewise, or None.
        batch_size: rows per batch, >= 1.
        seed: the shuffling seed.
        shuffle: reorder each epoch; False keeps the rows' order.
        drop_remainder: drop the last, smaller batch of each epoch.

    Raises:
        ConfigError: an argument breaks its rule.
    """

    __module__ = "globalstep.integrations.keras"  # its public home, as reprs and pickles name it

    def __init__(
        self,
        x: Any,
        y: Any = None,
        *,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        drop_remainder: bool = False,
    ) -> None:
        super().__init__()
        self.batch_size = count("batch_size", batch_size, 1)
        self.seed = count("seed", seed, 0)
        self.x, self.y = x, y
        lengths = {len(a) for a in keras.tree.flatten((x, y)) if a is not None}
        if len(lengths) != 1:
            raise ConfigError("x", "must hold arrays of one length (y's too)", sorted(lengths))
        self.rows = lengths.pop()
        self.shuffle = shuffle
        self.drop_remainder = drop_remainder
        self.steps_per_epoch = batches_per_epoch(self.rows, batch_size, drop_remainder)
        self.position = 0  # batches consumed by training
        self._start = 0  # the position at which the running fit() began
        self._streaming = False  # inside globalstep's fit(): one stream from _start
        # Under plain model.fit(): the epoch Keras is running, the next one, and the
        # batches served since Keras began the epoch (under a lock: TensorFlow's tf.data
        # calls __getitem__ from threads of its own, one after another).
        self._epoch = 0
        self._next_epoch = 0
        self._served = 0
        self._lock = threading.Lock()
        self._order: tuple[int, np.ndarray] | None = None

    @property
    def num_batches(self) -> int | None:
        """The batches of one epoch; None (endless, one stream) inside :func:`fit`.

        Raises:
            ConfigError: under plain ``model.fit``, Keras would read the data with workers
                (asked here, the first thing Keras reads: before it starts their pool).
        """
        if self._streaming:
            return None
        self._refuse_workers()
        return self.steps_per_epoch

    def _refuse_workers(self) -> None:
        if self.workers > 1 or (self.workers > 0 and self.use_multiprocessing):
            raise ConfigError(
                "workers",
                "must be 1 without use_multiprocessing for plain model.fit() on a "
                "ResumableDataset (Keras' workers read batches ahead across its epochs, "
                "before the data knows which epoch is next)",
                (self.workers, self.use_multiprocessing),
                hint="Use globalstep.integrations.keras.fit(model, data, epochs=...), "
                "which reads the data as one stream, or workers=1.",
            )

    def __len__(self) -> int:
        """The batches of one epoch, ``steps_per_epoch``."""
        return self.steps_per_epoch

    def on_epoch_begin(self) -> None:
        """Keras starts an epoch: under plain ``model.fit`` it is the data's next one.

        Raises:
            ConfigError: under plain ``model.fit``, Keras reads the data with workers.
        """
        if not self._streaming:
            self._refuse_workers()
            with self._lock:
                self._epoch = self._next_epoch
                self._served = 0

    def on_epoch_end(self) -> None:
        """Keras ends an epoch (or the pass its model building makes over one batch, or
        a reset): the data's next epoch follows only once this one served all its
        batches."""
        if not self._streaming:
            with self._lock:
                if self._served >= self.steps_per_epoch and self._next_epoch == self._epoch:
                    self._next_epoch = self._epoch + 1
                self._served = 0

    def order(self, epoch: int) -> np.ndarray:
        """The row order of ``epoch``."""
        cached = self._order  # read once: Keras may call from a prefetching thread
        if cached is None or cached[0] != epoch:
            rows = np.arange(self.rows)
            if self.shuffle:
                rows = np.random.default_rng([self.seed, epoch]).permutation(self.rows)
            cached = (epoch, rows)
            self._order = cached
        return cached[1]

    def batch(self, index: int) -> Any:
        """Batch ``index`` of the whole run (epoch ``index // steps_per_epoch``)."""
        epoch, k = divmod(index, self.steps_per_epoch)
        rows = self.order(epoch)[k * self.batch_size : (k + 1) * self.batch_size]
        x = keras.tree.map_structure(lambda a: a[rows], self.x)
        if self.y is None:
            return (x,)
        return x, keras.tree.map_structure(lambda a: a[rows], self.y)

    @contextlib.contextmanager
    def streaming(self) -> Iterator[None]:
        """The data as :func:`fit` reads it: one endless stream of the run's batches from
        the position (``num_batches`` None), index 0 being batch ``position``."""
        self._streaming = True
        try:
            yield
        finally:
            self._streaming = False
            self._next_epoch = self.position // self.steps_per_epoch

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]  # worker processes get a copy without it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"ResumableDataset(rows={self.rows}, batch_size={self.batch_size}, "
            f"seed={self.seed}, position={self.position})"
        )

    def __getitem__(self, index: int) -> Any:
        if self._streaming:
            return self.batch(self._start + index)
        with self._lock:
            epoch, served = self._epoch, self._served
            self._served = served + 1
        # One reader (workers are refused): the k-th batch asked for in the epoch is its
        # k-th, whatever index Keras' shuffle gave it.
        return self.batch(epoch * self.steps_per_epoch + served)

    def begin(self, steps: int | None = None) -> None:
        """Marks the start of a fit() call at the current position (the callback does).

        Args:
            steps: the batches per epoch the ``fit()`` call runs, where known.

        Raises:
            ConfigError: under plain ``model.fit``, the position is inside an epoch, or
                ``steps`` is not the data's ``steps_per_epoch``.
        """
        self._start = self.position
        if self._streaming:
            return
        epoch, batch = divmod(self.position, self.steps_per_epoch)
        if batch:
            raise ConfigError(
                "data",
                f"is at batch {batch} of epoch {epoch} ({self.position} batches consumed), "
                "where plain model.fit() would start the epoch again from its first batch",
                self,
                hint="Continue with globalstep.integrations.keras.fit(model, data, "
                "epochs=...), which runs the rest of the epoch first.",
            )
        if steps is not None and steps != self.steps_per_epoch:
            raise ConfigError(
                "steps_per_epoch",
                f"must be left out of model.fit() on a ResumableDataset, whose epochs are "
                f"its {self.steps_per_epoch} batches",
                steps,
                hint="Use globalstep.integrations.keras.fit(model, data, epochs=...) to "
                "run part of an epoch.",
            )
        self._next_epoch = epoch

    def state_dict(self) -> dict[str, Any]:
        """The position and what decides the order."""
        return {
            "position": self.position,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "rows": self.rows,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores the position; the order's settings must be the saved ones.

        Raises:
            ConfigError: the seed, batch size, rows or shuffle differ from the saved ones.
        """
        check_same_settings(self, state, ("seed", "batch_size", "rows", "shuffle"))
        self.position = int(state["position"])
        self._start = self.position
        self._next_epoch = self.position // self.steps_per_epoch
