"""Sharded ``jax.Array``s of several processes (``jax.distributed``) in a distributed
checkpoint: the chunks each process writes, and reading them back.

The format is the DTensor chunks' (:mod:`globalstep.checkpoint._ranks.shards`): each
process writes the shards it addresses whose ``replica_id`` is 0 (a replicated mesh axis
is written once) into ``sharded/rank-NNNNN.bin``, each chunk with its offsets, sizes and
XXH3-64 checksum in ``state.json``; the array's entry there says ``"array": "jax"`` and
its NumPy dtype name. Restoring into a template's array builds a new global array with
the template's sharding (``jax.make_array_from_callback``): each process reads only the
parts its own shards cover, from whichever chunks overlap them, so a checkpoint saved on
N processes restores on M, with any mesh and partition spec. Without a template the array
is read whole, as a NumPy array. Orbax's format is neither written nor read.

Example:
    >>> region([slice(0, 2), slice(None)], [4, 3])
    ([0, 0], [2, 3])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["ARRAY", "assemble", "chunks", "describe", "is_jax", "numpy_dtype", "region"]

ARRAY = "jax"
"""The ``"array"`` of a sharded tensor's entry in ``state.json`` for a ``jax.Array``."""


def is_jax(value: Any) -> bool:
    """Whether ``value`` is a ``jax.Array`` (told by its type's module: JAX not imported)."""
    return type(value).__module__.split(".")[0] in ("jax", "jaxlib")


def region(index: Sequence[Any], shape: Sequence[int]) -> tuple[list[int], list[int]]:
    """The offsets and sizes of the part of an array of ``shape`` that ``index`` (a
    shard's tuple of slices, with unit steps) selects."""
    offsets, sizes = [], []
    for part, dim in zip(index, shape, strict=True):
        start, stop, _ = part.indices(dim)
        offsets.append(start)
        sizes.append(max(0, stop - start))
    return offsets, sizes


def chunks(value: Any, *, copy: bool) -> list[tuple[list[int], list[int], np.ndarray[Any, Any]]]:
    """The chunks of ``value`` this process writes, its shards of replica 0 on the host:
    (offsets, sizes, data) each."""
    out = []
    for shard in value.addressable_shards:
        if shard.replica_id != 0:
            continue
        offsets, sizes = region(shard.index, value.shape)
        data = np.array(shard.data, copy=True) if copy else np.asarray(shard.data)
        out.append((offsets, sizes, np.ascontiguousarray(data)))
    return out


def describe(value: Any) -> dict[str, Any]:
    """A sharded ``jax.Array``'s entry: its dtype and global shape."""
    return {"dtype": str(value.dtype), "shape": [int(d) for d in value.shape], "array": ARRAY}


def numpy_dtype(name: Any) -> np.dtype[Any] | None:
    """The NumPy dtype named ``name`` (``bfloat16`` and the other ``ml_dtypes`` too), or
    None where no dtype has that name."""
    if not isinstance(name, str) or not name.isidentifier():
        return None
    try:
        return np.dtype(name)
    except TypeError:
        pass
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - installed with JAX
        return None
    found = getattr(ml_dtypes, name, None)
    return np.dtype(found) if isinstance(found, type) else None


def assemble(
    read: Callable[[dict[str, Any]], np.ndarray[Any, Any]],
    dtype: np.dtype[Any],
    chunks_saved: list[dict[str, Any]],
    offsets: Sequence[int],
    sizes: Sequence[int],
) -> np.ndarray[Any, Any]:
    """The part (``offsets``, ``sizes``) of a saved array, from the saved chunks that
    overlap it (``read(chunk)``: a chunk's data, verified)."""
    out = np.empty(tuple(sizes), dtype)
    if not out.size:
        return out
    for chunk in chunks_saved:
        lows = [max(o, c) for o, c in zip(offsets, chunk["offsets"], strict=True)]
        highs = [
            min(o + s, c + n)
            for o, s, c, n in zip(offsets, sizes, chunk["offsets"], chunk["sizes"], strict=True)
        ]
        if any(low >= high for low, high in zip(lows, highs, strict=True)):
            continue
        source = read(chunk)
        into = tuple(
            slice(low - o, high - o) for low, high, o in zip(lows, highs, offsets, strict=True)
        )
        take = tuple(
            slice(low - c, high - c)
            for low, high, c in zip(lows, highs, chunk["offsets"], strict=True)
        )
        out[into] = source[take]
    return out


def load(
    read: Callable[[dict[str, Any]], np.ndarray[Any, Any]],
    dtype: np.dtype[Any],
    shape: list[int],
    chunks_saved: list[dict[str, Any]],
    target: Any,
) -> Any:
    """A saved array: laid out as ``target`` (a ``jax.Array``: a new global array with its
    sharding, each process reading the parts its shards cover), else whole (NumPy)."""
    if target is None or not is_jax(target):
        return assemble(read, dtype, chunks_saved, [0] * len(shape), shape)
    import jax

    def part(index: Any) -> np.ndarray[Any, Any]:
        offsets, sizes = region(index, shape)
        return assemble(read, dtype, chunks_saved, offsets, sizes)

    return jax.make_array_from_callback(tuple(shape), target.sharding, part)
