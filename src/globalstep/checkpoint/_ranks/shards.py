"""The sharded section of a checkpoint: the chunk files every rank writes
(``sharded/rank-NNNNN.bin``, each chunk with its own XXH3-64 checksum, described in
``state.json``), and reading them back, verified: into a template's DTensors through
torch.distributed.checkpoint's load planner (any world size), or whole.

Who writes which chunk, and when the writer commits, is
:mod:`globalstep.checkpoint._ranks.coordinated`'s. Nothing here unpickles: the metadata is JSON
inside ``state.json`` and the chunks are raw bytes.

Example:
    >>> CHUNK_FILE.fullmatch("rank-00003.bin") is not None, SHARDED_DIR
    (True, 'sharded')
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from globalstep._errors import CorruptCheckpointError
from globalstep._group import TorchGroup, active
from globalstep.checkpoint._files.document import Document
from globalstep.storage import Storage, wrap_os_errors

__all__ = [
    "CHUNK_FILE",
    "SHARDED_DIR",
    "Chunk",
    "load_sharded",
    "verify_sharded",
    "write_chunks",
]

SHARDED_DIR = "sharded"
"""The folder of a checkpoint that holds the ranks' chunk files."""


CHUNK_FILE = re.compile(r"rank-\d{5,}\.bin")


@dataclass
class Chunk:
    key: str
    offsets: list[int]
    sizes: list[int]
    data: Any  # a contiguous CPU tensor, or a C-contiguous NumPy array (a jax.Array's)


def _chunk_bytes(data: Any) -> memoryview:
    if isinstance(data, np.ndarray):  # a jax.Array's shard, on the host
        return data.reshape(-1).view(np.uint8).data
    import torch

    flat = data.reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


def write_chunks(storage: Storage, staging: str, rank: int, chunks: list[Chunk]) -> dict[str, Any]:
    """Writes this rank's chunks into ``staging/sharded/``; returns their index."""
    name = f"rank-{rank:05d}.bin"
    folder = f"{staging}/{SHARDED_DIR}"
    path = f"{folder}/{name}"
    entries = []
    with wrap_os_errors(f"writing rank {rank}'s shards", path):
        storage.makedirs(folder)
        writer = storage.open_writer(path)
        offset = 0
        try:
            for chunk in chunks:
                view = _chunk_bytes(chunk.data)
                writer.write(view)
                entries.append(
                    {
                        "key": chunk.key,
                        "offsets": chunk.offsets,
                        "sizes": chunk.sizes,
                        "file": name,
                        "offset": offset,
                        "length": len(view),
                        "xxh3_64": _digest(view),
                    }
                )
                offset += len(view)
        except BaseException:
            writer.abort()
            raise
        writer.close()
    return {"ok": True, "chunks": entries}


_PIECE = 1 << 28
"""The bytes of a chunk hashed in one call (256 MiB): see :func:`_digest`."""


def _digest(view: memoryview) -> str:
    """The XXH3-64 of ``view``, hashed a piece at a time: xxhash holds the interpreter for
    the whole of one call, and this rank's heartbeat thread (see
    :mod:`globalstep._group._heartbeat`) must get in between (a chunk of several GB hashes
    for seconds, while the writer waits for this rank). The same digest as one call."""
    if len(view) <= _PIECE:
        return str(xxhash.xxh3_64_hexdigest(view))
    running = xxhash.xxh3_64()
    for start in range(0, len(view), _PIECE):
        running.update(view[start : start + _PIECE])
    return str(running.hexdigest())


def _tensors(state: Document, where: str) -> dict[str, Any]:
    section = state.sharded
    tensors = section.get("tensors") if isinstance(section, dict) else None
    if not isinstance(tensors, dict):
        raise CorruptCheckpointError(f"{where}: malformed sharded section", where)
    return tensors


def _check_chunk(chunk: Any, shape: list[int], itemsize: int, where: str) -> None:
    ok = (
        isinstance(chunk, dict)
        and isinstance(chunk.get("file"), str)
        and CHUNK_FILE.fullmatch(chunk["file"]) is not None
        and all(
            type(chunk.get(k)) is list and all(type(v) is int and v >= 0 for v in chunk[k])
            for k in ("offsets", "sizes")
        )
        and len(chunk["offsets"]) == len(shape) == len(chunk["sizes"])
        and all(o + s <= d for o, s, d in zip(chunk["offsets"], chunk["sizes"], shape, strict=True))
        and type(chunk.get("offset")) is int
        and chunk["offset"] >= 0
        and chunk.get("length") == math.prod(chunk["sizes"]) * itemsize
        and isinstance(chunk.get("xxh3_64"), str)
    )
    if not ok:
        raise CorruptCheckpointError(f"{where}: malformed chunk {chunk!r}", where)


def _numpy_dtype(name: Any) -> Any:
    from globalstep.checkpoint._ranks._jax_shards import numpy_dtype

    return numpy_dtype(name)


def _dtype(name: Any, where: str) -> Any:
    import torch

    dtype = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise CorruptCheckpointError(f"{where}: unknown torch dtype {name!r}", where)
    return dtype


def _described(state: Document, where: str) -> dict[str, tuple[Any, list[int], list[Any]]]:
    """Checked key -> (dtype, shape, chunks) of a checkpoint's sharded section."""
    out = {}
    for key, (dtype, shape, chunks, _) in _described_full(state, where).items():
        out[key] = (dtype, shape, chunks)
    return out


def _described_full(state: Document, where: str) -> dict[str, tuple[Any, ...]]:
    """Checked key -> (dtype, shape, chunks, the saved tensor's entry) of a checkpoint's
    sharded section."""
    out = {}
    for key, tensor in _tensors(state, where).items():
        if not isinstance(tensor, dict):
            raise CorruptCheckpointError(f"{where}: malformed sharded tensor {key!r}", where)
        if tensor.get("array") == "jax":
            dtype = _numpy_dtype(tensor.get("dtype"))
            if dtype is None:
                raise CorruptCheckpointError(
                    f"{where}: unknown dtype {tensor.get('dtype')!r} of {key!r}", where
                )
        else:
            dtype = _dtype(tensor.get("dtype"), where)
        shape = tensor.get("shape")
        chunks = tensor.get("chunks")
        if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
            raise CorruptCheckpointError(f"{where}: bad shape of {key!r}", where)
        if not isinstance(chunks, list):
            raise CorruptCheckpointError(f"{where}: bad chunks of {key!r}", where)
        itemsize = dtype.itemsize
        for chunk in chunks:
            _check_chunk(chunk, shape, itemsize, where)
        if sum(math.prod(c["sizes"]) for c in chunks) != math.prod(shape):
            raise CorruptCheckpointError(f"{where}: the chunks of {key!r} do not cover it", where)
        out[key] = (dtype, shape, chunks, tensor)
    return out


def _placements(saved: Any) -> list[Any] | None:
    """The DTensor placements a saved tensor had, where they can be rebuilt (else None)."""
    from torch.distributed.tensor import Replicate, Shard

    if not isinstance(saved, list) or not saved:
        return None
    out: list[Any] = []
    for text in saved:
        if text == "R":
            out.append(Replicate())
        elif isinstance(text, str) and re.fullmatch(r"S\d{1,3}", text):
            out.append(Shard(int(text[1:])))
        else:
            return None
    return out


def _rebuilt(entry: dict[str, Any], dtype: Any, shape: list[int], meshes: list[Any]) -> Any:
    """An empty DTensor laid out as the saved one was, on a mesh of the running group (that
    of a template DTensor of the same rank count, else the whole group), or None."""
    group = active()
    if not isinstance(group, TorchGroup):
        return None  # a DTensor's mesh is torch.distributed's
    placements = _placements(entry.get("placements"))
    if placements is None:
        return None
    mesh = next((m for m in meshes if m.ndim == len(placements)), None)
    if mesh is None:
        if len(placements) != 1:
            return None
        from torch.distributed.device_mesh import init_device_mesh

        device_type = entry.get("device_type")
        if device_type not in ("cpu", "cuda", "xpu", "hpu", "mps", "npu"):
            return None
        mesh = init_device_mesh(device_type, (group.world_size,))
        meshes.append(mesh)
    import torch.distributed.tensor as dtensor

    if any(getattr(p, "dim", 0) >= len(shape) for p in placements):
        return None
    return dtensor.empty(shape, dtype=dtype, device_mesh=mesh, placements=placements)


class _ChunkReader:
    """Reads and verifies chunks of one checkpoint, each file opened once."""

    def __init__(self, storage: Storage, name: str) -> None:
        self.storage = storage
        self.folder = storage.join(name, SHARDED_DIR)
        self._files: dict[str, Any] = {}

    def read(self, chunk: dict[str, Any], dtype: Any) -> Any:
        """A chunk's data, verified: a CPU tensor, or a NumPy array (``dtype`` a NumPy
        dtype: a jax.Array's chunk)."""
        buffer = self.read_bytes(chunk)
        if isinstance(dtype, np.dtype):
            return np.frombuffer(buffer, dtype=dtype).reshape(chunk["sizes"])
        import torch

        if not buffer:
            return torch.empty(chunk["sizes"], dtype=dtype)
        return torch.frombuffer(buffer, dtype=torch.uint8).view(dtype).reshape(chunk["sizes"])

    def read_bytes(self, chunk: dict[str, Any]) -> bytearray:
        """A chunk's bytes, verified against its checksum."""
        path = f"{self.folder}/{chunk['file']}"
        handle: Any = self._files.get(path)
        if handle is None:
            try:
                handle = self._files[path] = self.storage.open_reader(path)
            except FileNotFoundError as err:
                raise CorruptCheckpointError(f"{path} is missing", path) from err
        buffer = bytearray(chunk["length"])
        handle.seek(chunk["offset"])
        view = memoryview(buffer)
        while view:
            n = handle.readinto(view)
            if not n:
                raise CorruptCheckpointError(f"{path} is truncated", path)
            view = view[n:]
        digest = xxhash.xxh3_64_hexdigest(buffer)
        if digest != chunk["xxh3_64"]:
            raise CorruptCheckpointError(
                f"{path} fails its checksum at offset {chunk['offset']} (XXH3-64 {digest}, "
                f"state.json says {chunk['xxh3_64']})",
                path,
            )
        return buffer

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()


def _storage_reader(described: dict[str, Any], reader: _ChunkReader) -> Any:
    """A DCP StorageReader over the checkpoint's chunks, with metadata from state.json."""
    import torch
    from torch.distributed.checkpoint import StorageReader
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    entries: dict[Any, tuple[dict[str, Any], Any]] = {}
    state_dict_metadata: dict[str, Any] = {}
    for key, (dtype, shape, chunks) in described.items():
        state_dict_metadata[key] = TensorStorageMetadata(
            TensorProperties(dtype=dtype),
            torch.Size(shape),
            [
                ChunkStorageMetadata(torch.Size(c["offsets"]), torch.Size(c["sizes"]))
                for c in chunks
            ],
        )
        for chunk in chunks:
            entries[MetadataIndex(key, torch.Size(chunk["offsets"]))] = (chunk, dtype)
    metadata = Metadata(state_dict_metadata=state_dict_metadata)

    class _Reader(StorageReader):  # type: ignore[misc]
        def reset(self, checkpoint_id: Any = None) -> None:
            del checkpoint_id

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            return metadata

        def set_up_storage_reader(
            self, metadata: Any, is_coordinator: bool, *args: Any, **kwargs: Any
        ) -> None:
            del metadata, is_coordinator

        def prepare_local_plan(self, plan: Any) -> Any:
            return plan

        def prepare_global_plan(self, plans: Any) -> Any:
            return plans

        def read_data(self, plan: Any, planner: Any) -> Any:
            cache: dict[Any, Any] = {}
            for item in plan.items:
                index = MetadataIndex(item.storage_index.fqn, item.storage_index.offset)
                chunk, dtype = entries[index]
                source = cache.get(index)
                if source is None:
                    source = cache[index] = reader.read(chunk, dtype)
                part = source
                for dim, (start, length) in enumerate(
                    zip(item.storage_offsets, item.lengths, strict=True)
                ):
                    part = part.narrow(dim, start, length)
                target = planner.resolve_tensor(item).detach()
                target.copy_(part)
                planner.commit_tensor(item, target)
            future: Any = torch.futures.Future()
            future.set_result(None)
            return future

        @classmethod
        def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
            del checkpoint_id
            return True

    return _Reader()


def load_sharded(
    storage: Storage,
    name: str,
    state: Document,
    targets: dict[str, Any],
    *,
    rebuild: bool = False,
) -> dict[str, Any]:
    """Reads a checkpoint's sharded tensors: into the template's DTensors where given
    (through DCP's load planner: any world size), else whole.

    Args:
        storage: where the checkpoint lives.
        name: its directory name.
        state: its checked state.json.
        targets: flat name -> the template's DTensor for it, or None where the template
            holds something else there (then it is read whole).
        rebuild: where the template has no DTensor for a sharded tensor (an optimizer's
            state, which a fresh optimizer lacks), make one laid out as saved on the
            running group's mesh (that of the template's DTensors) instead of reading it
            whole.

    Returns:
        Flat name -> the filled DTensor, or a whole CPU tensor.

    Raises:
        CorruptCheckpointError: a chunk is missing, truncated or fails its checksum.
    """

    where = storage.join(name, "state.json")
    full = _described_full(state, where)
    described = {key: value[:3] for key, value in full.items()}
    reader = _ChunkReader(storage, name)
    out: dict[str, Any] = {}
    try:
        for key, (dtype, shape, chunks) in list(described.items()):
            if isinstance(dtype, np.dtype):  # a jax.Array's
                del described[key]
                out[key] = _load_jax(reader, name, dtype, shape, chunks, targets.get(key))
        into = {
            key: target
            for key, target in targets.items()
            if key in described
            and target is not None
            and target.dtype == described[key][0]
            and list(target.shape) == described[key][1]
        }
        if rebuild:
            meshes = [t.device_mesh for t in into.values()]
            for key, (dtype, shape, _, entry) in full.items():
                if key not in targets:
                    made = _rebuilt(entry, dtype, shape, meshes)
                    if made is not None:
                        into[key] = made
        if into:
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint import DefaultLoadPlanner

            with (
                wrap_os_errors(f"reading {name}'s shards", reader.folder),
                warnings.catch_warnings(),
            ):
                # no_dist: each rank reads its own part; DCP warns that it assumes so.
                warnings.simplefilter("ignore", UserWarning)
                dcp.load(
                    dict(into),
                    storage_reader=_storage_reader({k: described[k] for k in into}, reader),
                    planner=DefaultLoadPlanner(flatten_state_dict=False),
                    no_dist=True,
                )
            out.update(into)
        for key, (dtype, shape, chunks) in described.items():
            if key not in out:
                out[key] = _read_whole(reader, name, dtype, shape, chunks)
    finally:
        reader.close()
    return out


def _load_jax(
    reader: _ChunkReader,
    name: str,
    dtype: np.dtype[Any],
    shape: list[int],
    chunks: list[Any],
    target: Any,
) -> Any:
    """A sharded jax.Array: laid out as ``target`` where it fits, else whole (NumPy)."""
    from globalstep.checkpoint._ranks._jax_shards import load

    if target is not None and (np.dtype(target.dtype) != dtype or list(target.shape) != shape):
        target = None  # the build reports the mismatch
    cache: dict[tuple[str, int], np.ndarray[Any, Any]] = {}

    def read(chunk: dict[str, Any]) -> np.ndarray[Any, Any]:
        at = (chunk["file"], chunk["offset"])
        if at not in cache:
            cache[at] = reader.read(chunk, dtype)
        return cache[at]

    with wrap_os_errors(f"reading {name}'s shards", reader.folder):
        return load(read, dtype, shape, chunks, target)


def _read_whole(
    reader: _ChunkReader, name: str, dtype: Any, shape: list[int], chunks: list[Any]
) -> Any:
    """A sharded tensor of checkpoint ``name`` read whole, as one CPU tensor."""
    import torch

    whole = torch.empty(shape, dtype=dtype)
    for chunk in chunks:
        part = whole
        for dim, (start, length) in enumerate(zip(chunk["offsets"], chunk["sizes"], strict=True)):
            part = part.narrow(dim, start, length)
        with wrap_os_errors(f"reading {name}'s shards", reader.folder):
            part.copy_(reader.read(chunk, dtype))
    return whole


def verify_sharded(storage: Storage, name: str, state: Document) -> None:
    """Checks every chunk's checksum of a checkpoint's sharded section.

    Raises:
        CorruptCheckpointError: a chunk is missing, truncated or fails its checksum.
    """
    where = storage.join(name, "state.json")
    reader = _ChunkReader(storage, name)
    try:
        for dtype, _, chunks in _described(state, where).values():
            for chunk in chunks:
                with wrap_os_errors(f"reading {name}'s shards", reader.folder):
                    reader.read(chunk, dtype)
    finally:
        reader.close()
