"""A shuffled ``tf.data`` pipeline that resumes at the batch it reached, mid-epoch.

Exported by :mod:`globalstep.integrations.tensorflow` as :class:`ResumableTFDataset`.

Why not TensorFlow's own iterator checkpoints: ``tf.train.Checkpoint(iterator=...)``
saves an opaque serialized ``Variant`` (the shuffle buffer's elements, the kernels' internal
state), bound to the TensorFlow version and to the exact pipeline graph, and restoring it
means handing those bytes to the dataset kernels' C++ deserialisers. The position here is
one integer instead: the order of epoch ``e`` is a pure function of ``(seed, e)``
(``tf.random.experimental.stateless_shuffle``), so the batches after a restore are
computed, not restored, and a checkpoint holds only numbers (no code runs on load, as
everywhere in globalstep). The design is the one :class:`~globalstep.integrations.torch.
ResumableSampler` and :class:`~globalstep.integrations.keras.ResumableDataset` follow.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from globalstep._errors import ConfigError
from globalstep.integrations._resumable import batches_per_epoch, check_same_settings, count

__all__ = ["ResumableTFDataset"]

_SETTINGS = ("seed", "batch_size", "rows", "shuffle", "drop_remainder")


class ResumableTFDataset:
    """Batches of in-memory data, shuffled per epoch by ``(seed, epoch)``, resumable.

    ``iter(data)`` is a ``tf.data`` pipeline over the rest of the current epoch: batch ``k``
    of epoch ``e`` holds rows ``order(e)[k * batch_size : (k + 1) * batch_size]``, gathered
    with ``tf.gather``, then ``transform`` (your ``map``/``prefetch``). Each batch handed to
    the loop advances :attr:`position`, the state :meth:`state_dict` saves; after
    :meth:`load_state_dict` the next batch is the one an uninterrupted run would get next,
    bit for bit. The loop a TensorFlow user writes keeps its shape::

        for epoch in range(data.epoch, EPOCHS):
            for x, y in data:          # the rest of this epoch
                train_step(x, y)

    Args:
        x: an array or tensor, or a tuple/list/dict of them, of one length (file names are
            fine: ``transform`` can read them).
        y: targets, likewise, or None.
        batch_size: rows per batch, >= 1.
        seed: the shuffling seed, an int >= 0.
        shuffle: reorder each epoch; False keeps the rows' order.
        drop_remainder: drop the last, smaller batch of each epoch.
        transform: ``dataset -> dataset`` applied to the batches (``.map(...)``,
            ``.prefetch(...)``); it must be deterministic (a random augmentation seeded
            statelessly), or the batches after a resume differ.

    Raises:
        ConfigError: an argument breaks its rule.
    """

    def __init__(
        self,
        x: Any,
        y: Any = None,
        *,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        drop_remainder: bool = False,
        transform: Callable[[tf.data.Dataset], tf.data.Dataset] | None = None,
    ) -> None:
        self.batch_size = count("batch_size", batch_size, 1)
        self.seed = count("seed", seed, 0)
        if not isinstance(shuffle, bool):
            raise ConfigError("shuffle", "must be a bool", shuffle)
        if not isinstance(drop_remainder, bool):
            raise ConfigError("drop_remainder", "must be a bool", drop_remainder)
        if transform is not None and not callable(transform):
            raise ConfigError(
                "transform", "must be a callable dataset -> dataset, or None", transform
            )
        self.shuffle, self.drop_remainder, self.transform = shuffle, drop_remainder, transform
        structure = x if y is None else (x, y)
        self._data = tf.nest.map_structure(tf.convert_to_tensor, structure)
        lengths = {int(t.shape[0]) for t in tf.nest.flatten(self._data) if t.shape.rank}
        if len(lengths) != 1 or any(t.shape.rank == 0 for t in tf.nest.flatten(self._data)):
            raise ConfigError("x", "must hold arrays of one length (y's too)", sorted(lengths))
        self.rows = lengths.pop()
        self.steps_per_epoch = batches_per_epoch(self.rows, self.batch_size, drop_remainder)
        self.position = 0  # batches handed to the loop
        self._fingerprint: int | None = None

    def __repr__(self) -> str:
        return (
            f"ResumableTFDataset(rows={self.rows}, batch_size={self.batch_size}, "
            f"seed={self.seed}, position={self.position})"
        )

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self.position // self.steps_per_epoch

    def __len__(self) -> int:
        """Batches per epoch."""
        return self.steps_per_epoch

    def _order(self, epoch: Any) -> tf.Tensor:
        rows = tf.range(self.rows, dtype=tf.int64)
        if not self.shuffle:
            return rows
        seed = tf.stack([tf.constant(self.seed, tf.int64), tf.cast(epoch, tf.int64)])
        return tf.random.experimental.stateless_shuffle(rows, seed=seed)

    def order(self, epoch: int) -> np.ndarray[Any, Any]:
        """The row order of ``epoch`` (a function of the seed and the epoch alone)."""
        return np.asarray(self._order(count("epoch", epoch, 0)).numpy())

    def _batches(self, indices: Any) -> tf.data.Dataset:
        data = self._data
        dataset = tf.data.Dataset.from_tensor_slices(indices).batch(
            self.batch_size, drop_remainder=self.drop_remainder
        )
        return dataset.map(lambda rows: tf.nest.map_structure(lambda t: tf.gather(t, rows), data))

    def dataset(self, epochs: int | None = None) -> tf.data.Dataset:
        """The batches from :attr:`position` to the end of epoch ``epochs - 1``, as one
        ``tf.data.Dataset`` (``epochs=None``: endless); :attr:`position` is not advanced
        by it (count the batches yourself, or iterate the object).

        Raises:
            ConfigError: ``epochs`` is not None or an int >= 1.
        """
        if epochs is not None:
            count("epochs", epochs, 1)
        first, k = divmod(self.position, self.steps_per_epoch)
        start = k * self.batch_size
        dataset = self._batches(self._order(first)[start:])
        end = epochs if epochs is not None else np.iinfo(np.int64).max
        if first + 1 < end:
            rest = tf.data.Dataset.range(first + 1, end).flat_map(
                lambda e: self._batches(self._order(e))
            )
            dataset = dataset.concatenate(rest)
        if epochs is not None and first >= epochs:
            dataset = dataset.take(0)
        return dataset if self.transform is None else self.transform(dataset)

    def __iter__(self) -> Iterator[Any]:
        """The rest of the current epoch's batches; each one handed out advances the
        position (save after the update that used it)."""
        epoch = self.epoch
        for batch in self.dataset(epoch + 1):
            self.position += 1
            yield batch

    def _order_fingerprint(self) -> int:
        """A CRC32 of epoch 0's order, computed once: a TensorFlow that shuffles otherwise
        is caught at restore instead of resuming on other batches."""
        if self._fingerprint is None:
            order = np.ascontiguousarray(self.order(0), dtype="<i8")
            self._fingerprint = zlib.crc32(order.tobytes())
        return self._fingerprint

    def state_dict(self) -> dict[str, Any]:
        """The position and what decides the order."""
        state: dict[str, Any] = {name: getattr(self, name) for name in _SETTINGS}
        state["position"] = self.position
        state["order_crc32"] = self._order_fingerprint()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores the position; the order's settings must be the saved ones.

        Raises:
            ConfigError: the seed, batch size, rows, shuffle or drop_remainder differ from
                the saved ones, or this TensorFlow orders the rows otherwise than the one
                that saved.
        """
        check_same_settings(self, state, _SETTINGS)
        if int(state["order_crc32"]) != self._order_fingerprint():
            raise ConfigError(
                "state['order_crc32']",
                "must match the order this TensorFlow computes for the seed (stateless_shuffle "
                f"gives other rows here than in the run that saved, TF {tf.__version__} now)",
                state["order_crc32"],
                hint="Resume with the TensorFlow version that wrote the checkpoint.",
            )
        self.position = count("state['position']", int(state["position"]), 0)
