"""The array file of one checkpoint, ``arrays.safetensors``: its safetensors header and
layout, writing it from the arrays' own buffers and reading it back into theirs, each
verified by its checksum.

The arrays are laid out by decreasing alignment, then by name, so that every array starts
aligned to its dtype. Writing streams each array's own buffer (no concatenated copy), small
ones 64 to a vectored write; the checksum (XXH3-64) is computed over the same buffers while
they are written; the kernel is asked to start writing each 8 MiB back at once, so the
disk works while later arrays are hashed and the fsync waits only for the tail.

Restoring reads each array straight into the array returned (or the template's), hashing
it as it arrives; a run of small arrays arrives with one call. On a local disk a
background thread reads the file ahead from the start of the restore, and a second one
faults in the pages of every new buffer meanwhile: that tuning is
:mod:`globalstep.checkpoint._files.fastio`'s, and so are the sizes of each call.

Example:
    >>> import json
    >>> import numpy as np
    >>> prefix, order = _header({"b": np.zeros(2, np.int8), "a": np.zeros(1)})
    >>> order, json.loads(prefix[8:])["b"]
    (['a', 'b'], {'dtype': 'I8', 'shape': [2], 'data_offsets': [8, 10]})
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from globalstep._errors import CorruptCheckpointError
from globalstep.checkpoint._files import fastio
from globalstep.checkpoint._files.document import ARRAYS_FILE, Checksum, Document
from globalstep.checkpoint._files.fastio import (
    Stream,
    advise_sequential,
    prefault,
    read_ahead,
    read_exactly,
)
from globalstep.checkpoint._tree.flatten import array_nodes
from globalstep.checkpoint._tree.leaves import (
    CODE_ITEMSIZE,
    decode_dtype,
    is_shape,
    safetensors_code,
)
from globalstep.storage import Storage, wrap_os_errors

__all__ = [
    "check_entry",
    "parse_header",
    "read_arrays",
    "read_header",
    "write_arrays",
]

_MAX_HEADER = 100 << 20


def _dtype_info(dtype: np.dtype[Any]) -> tuple[str, bool, bool]:
    """(safetensors code, stored as raw bytes, buffer already in stored byte order).

    Remembered per dtype: a state holds many arrays of a few dtypes, and these checks
    cost microseconds each.
    """
    info = _DTYPE_INFO.get(dtype)
    if info is None:
        little = dtype.newbyteorder("<")
        code = safetensors_code(little)
        info = (code, code == "U8" and little != np.uint8, dtype == little and not dtype.fields)
        _DTYPE_INFO[dtype] = info
    return info


_DTYPE_INFO: dict[np.dtype[Any], tuple[str, bool, bool]] = {}


def _chunks(array: np.ndarray[Any, Any]) -> Iterator[memoryview]:
    """Yields the array's little-endian C-order bytes, at most about ``CHUNK_BYTES`` at a
    time."""
    if array.nbytes == 0:
        return
    chunk_bytes = fastio.CHUNK_BYTES
    little = array.dtype.newbyteorder("<")
    if array.flags.c_contiguous and _dtype_info(array.dtype)[2]:
        flat = array.reshape(-1).view(np.uint8).data
        for start in range(0, len(flat), chunk_bytes):
            yield flat[start : start + chunk_bytes]
        return
    if array.ndim == 0:
        yield np.ascontiguousarray(array, dtype=little).reshape(-1).view(np.uint8).data
        return
    row_bytes = max(1, array.nbytes // max(1, array.shape[0]))
    if row_bytes > chunk_bytes and array.ndim > 1:
        # One row is more than a chunk: convert it a part at a time, not whole.
        for row in array:
            yield from _chunks(row)
        return
    rows = max(1, chunk_bytes // row_bytes)
    for start in range(0, array.shape[0], rows):
        part = np.ascontiguousarray(array[start : start + rows], dtype=little)
        yield part.reshape(-1).view(np.uint8).data


def _header(arrays: Mapping[str, np.ndarray[Any, Any]]) -> tuple[bytes, list[str]]:
    """The safetensors header (length prefix and padding included) and the keys in file
    order: by decreasing alignment, then by name.

    The JSON is joined from one piece per array, byte for byte what ``json.dumps`` of the
    header dict with compact separators gives: per-array dicts and lists cost
    microseconds each, which 10,000 arrays of an optimizer state make visible.
    """
    by_alignment: dict[int, list[str]] = {}
    for key, array in arrays.items():
        alignment = array.dtype.alignment
        group = by_alignment.get(alignment)
        if group is None:
            group = by_alignment[alignment] = []
        group.append(key)
    order = [k for a in sorted(by_alignment, reverse=True) for k in sorted(by_alignment[a])]
    parts = ['{"__metadata__":{"format":"globalstep","version":"1"}']
    offset = 0
    for key in order:
        array = arrays[key]
        nbytes = array.nbytes
        code, raw, _ = _dtype_info(array.dtype)
        dims = array.shape
        shape: Any = nbytes if raw else dims[0] if len(dims) == 1 else ",".join(map(str, dims))
        end = offset + nbytes
        parts.append(
            f',{_json_string(key)}:{{"dtype":"{code}","shape":[{shape}],'
            f'"data_offsets":[{offset},{end}]}}'
        )
        offset = end
    parts.append("}")
    text = "".join(parts).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, order


_json_string: Any = json.encoder.encode_basestring_ascii  # what json.dumps uses for str


def write_arrays(storage: Storage, path: str, arrays: Mapping[str, np.ndarray[Any, Any]]) -> Any:
    """Writes ``arrays`` as one safetensors file, streaming from their buffers.

    Large arrays go out a chunk per system call, straight from their buffers; runs of
    small ones go out with one vectored write each (at most ``fastio.GATHER_COUNT`` buffers
    and about ``fastio.BATCH_BYTES``), also straight from their own memory: no staging copy, whose
    memcpy cost as much as the write itself on a fast file system. Each buffer is hashed
    just before it is handed to the kernel.

    Returns:
        ``{"size": bytes, "xxh3_64": checksum}`` of the file, for state.json.
    """
    prefix, order = _header(arrays)
    writer = storage.open_writer(path)
    checksum = Checksum(prefix)
    feed = checksum.feed
    batch: list[Any] = []
    batch_bytes = 0
    size = len(prefix)
    gather_bytes, gather_count = fastio.GATHER_BYTES, fastio.GATHER_COUNT
    most_bytes = fastio.BATCH_BYTES
    try:
        writer.write(prefix)
        for key in order:
            array = arrays[key]
            n = array.nbytes
            size += n
            if n < gather_bytes and array.flags.c_contiguous and _dtype_info(array.dtype)[2]:
                # The common small array skips the generator: per-array cost adds up.
                chunks: Any = (array.reshape(-1).view(np.uint8),) if n else ()
            else:
                chunks = _chunks(array)
            for chunk in chunks:
                feed(chunk)
                n = len(chunk)
                if n < gather_bytes:
                    batch.append(chunk)
                    batch_bytes += n
                    if len(batch) >= gather_count or batch_bytes >= most_bytes:
                        writer.write_many(batch)
                        batch, batch_bytes = [], 0
                    continue
                if batch:
                    writer.write_many(batch)
                    batch, batch_bytes = [], 0
                writer.write(chunk)
        if batch:
            writer.write_many(batch)
        digest = checksum.value()
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return {"size": size, "xxh3_64": digest}


def parse_header(data: bytes, file_size: int, path: str) -> list[tuple[str, str, int, int, Any]]:
    """Returns (key, code, begin, end, shape) per tensor, ordered by offset."""
    try:
        header = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise CorruptCheckpointError(f"{path}: the safetensors header is not JSON", path) from err
    if not isinstance(header, dict):
        raise CorruptCheckpointError(f"{path}: the safetensors header is not an object", path)
    entries = []
    position = 0
    in_order = True  # each tensor starts where the one before ended: sorted and contiguous
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            code, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            ok = (
                code in CODE_ITEMSIZE
                and is_shape(shape)
                and type(begin) is int
                and type(end) is int
                and 0 <= begin <= end
                and end - begin == math.prod(shape) * CODE_ITEMSIZE[code]
            )
        except (KeyError, TypeError, ValueError) as err:
            raise CorruptCheckpointError(f"{path}: bad header entry {key!r}", path) from err
        if not ok:
            raise CorruptCheckpointError(f"{path}: bad header entry {key!r}", path)
        entries.append((key, code, begin, end, shape))
        in_order = in_order and begin == position
        position = end
    if not in_order:  # not as this module writes it: sort, then check again
        entries.sort(key=lambda e: e[2])
        position = 0
        for entry in entries:
            if entry[2] != position:
                raise CorruptCheckpointError(f"{path}: tensor data is not contiguous", path)
            position = entry[3]
    if position != file_size:
        raise CorruptCheckpointError(
            f"{path}: the header describes {position} data bytes, the file holds {file_size}",
            path,
        )
    return entries


def read_header(f: Any, size: int, path: str) -> tuple[bytes, list[tuple[str, str, int, int, Any]]]:
    """Reads and checks a safetensors header from the start of ``f``.

    Returns:
        The header's raw bytes (length prefix included) and its entries, ordered by offset.

    Raises:
        CorruptCheckpointError: the header is truncated, too long or malformed.
    """
    head = bytearray(8)
    read_exactly(f, memoryview(head), path)
    (length,) = struct.unpack("<Q", head)
    if length > min(_MAX_HEADER, size - 8):
        raise CorruptCheckpointError(f"{path}: bad safetensors header length {length}", path)
    header = bytearray(length)
    read_exactly(f, memoryview(header), path)
    return bytes(head + header), parse_header(bytes(header), size - 8 - length, path)


def _decoded_dtype(descr: Any) -> np.dtype[Any]:
    """decode_dtype, remembered per description (a state holds many arrays of few dtypes)."""
    key = descr if isinstance(descr, str) else json.dumps(descr, sort_keys=True)
    dtype = _DTYPES.get(key)
    if dtype is None:
        dtype = _DTYPES[key] = decode_dtype(descr)
    return dtype


def _code(dtype: np.dtype[Any]) -> str:
    code = _CODES.get(dtype)
    if code is None:
        code = _CODES[dtype] = safetensors_code(dtype)
    return code


_DTYPES: dict[str, np.dtype[Any]] = {}


_CODES: dict[np.dtype[Any], str] = {}


_ENTRY_DTYPES: dict[str, tuple[np.dtype[Any], str, bool]] = {}
"""(dtype, safetensors code, stored as raw bytes) per state.json dtype description."""


def check_entry(
    node: Any, code: str, shape: Any, path: str
) -> tuple[np.dtype[Any], tuple[int, ...]]:
    descr = node.get("dtype")
    known = _ENTRY_DTYPES.get(descr) if type(descr) is str else None
    if known is None:
        dtype = _decoded_dtype(descr)
        expected_code = _code(dtype)
        known = (dtype, expected_code, expected_code == "U8" and dtype != np.uint8)
        if type(descr) is str:
            _ENTRY_DTYPES[descr] = known
    dtype, expected_code, raw = known
    saved_shape = node.get("shape")
    if not is_shape(saved_shape):
        raise CorruptCheckpointError(f"{path}: bad shape for {node.get('array')!r}", path)
    if code != expected_code or shape != (
        [math.prod(saved_shape) * dtype.itemsize] if raw else saved_shape
    ):
        raise CorruptCheckpointError(
            f"{path}: tensor {node.get('array')!r} does not match state.json", path
        )
    return dtype, tuple(saved_shape)


def read_arrays(
    storage: Storage,
    name: str,
    state: Document,
    into: Mapping[str, np.ndarray[Any, Any]] | None = None,
    *,
    keep: bool = True,
    nodes: Mapping[str, Any] | None = None,
    ahead: fastio.ReadAhead | None = None,
    file: str = ARRAYS_FILE,
) -> dict[str, np.ndarray[Any, Any]]:
    """Reads every array of a checkpoint, verifying the file's checksum as it goes.

    Each array is read straight into the buffer that is returned (the template's, or one
    allocated once), with no second copy; the checksum is fed each buffer as it arrives.

    Args:
        storage: where the checkpoint lives.
        name: its directory name.
        state: its checked state.json (from :func:`load_state`).
        into: arrays to fill in place where dtype and shape match and they are writable
            and C-contiguous (their bytes are overwritten before the checksum is known).
        keep: False only verifies, through one small buffer, and returns no array.
        nodes: ``array_nodes(state.tree)``, where the caller has it already.
        ahead: the file's background reader, where the caller started one earlier
            (:func:`~globalstep.checkpoint._files.fastio.read_ahead`); without one, a local
            file gets its own here.
        file: the array file (a rank's per-rank leaves); ``state.files[file]`` checks it.

    Raises:
        CorruptCheckpointError: the file is truncated, fails its checksum, or does not
            match state.json; the message names the file.
    """
    if ahead is None and file == ARRAYS_FILE:
        with read_ahead(storage, name) as own:
            if own is not None:
                return read_arrays(storage, name, state, into, keep=keep, nodes=nodes, ahead=own)
    path = storage.join(name, file)
    expected = state.files[file]
    if nodes is None:
        nodes = array_nodes(state.tree)
    into = into or {}
    with wrap_os_errors(f"reading {name}", path):
        try:
            f = storage.open_reader(path)
        except FileNotFoundError as err:
            raise CorruptCheckpointError(f"{path} is missing", path) from err
        with f:
            size = storage.size(path)
            if size != expected.get("size"):
                raise CorruptCheckpointError(
                    f"{path} is {size} bytes, state.json says {expected.get('size')} "
                    "(truncated or replaced)",
                    path,
                )
            fd = advise_sequential(storage, f)
            prefix, entries = read_header(f, size, path)
            if {e[0] for e in entries} != set(nodes):
                raise CorruptCheckpointError(f"{path}: its tensors differ from state.json", path)
            checksum = Checksum(prefix)
            stream = Stream(f, path, checksum, len(prefix), fd, ahead)
            if keep:
                arrays = _read_all(stream, entries, nodes, into, path)
            else:
                for key, code, _, _, shape in entries:
                    check_entry(nodes[key], code, shape, path)
                arrays = {}
                scratch = memoryview(bytearray(min(fastio.CHUNK_BYTES, size)))
                remaining = size - len(prefix)
                while remaining:
                    stream.read(scratch[: min(remaining, len(scratch))])
                    remaining -= min(remaining, len(scratch))
            digest = checksum.value()
    if digest != expected.get("xxh3_64"):
        raise CorruptCheckpointError(
            f"{path} fails its checksum (XXH3-64 {digest}, state.json says "
            f"{expected.get('xxh3_64')})",
            path,
        )
    return arrays


def _read_all(
    stream: Stream,
    entries: list[tuple[str, str, int, int, Any]],
    nodes: Mapping[str, Any],
    into: Mapping[str, np.ndarray[Any, Any]],
    path: str,
) -> dict[str, np.ndarray[Any, Any]]:
    """Reads every array in file order: a large one straight into its own buffer, a
    ``fastio.CHUNK_BYTES`` piece per read, a run of small ones with one call (into one
    buffer they then view, or into the template's).

    Every buffer is allocated first, and a thread faults in the new ones' pages while
    the disk reads and this thread copies behind it (:func:`~.fastio.prefault`)."""
    chunk_bytes, gather_bytes = fastio.CHUNK_BYTES, fastio.GATHER_BYTES
    gather_count, most_bytes = fastio.GATHER_COUNT, fastio.BATCH_BYTES
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    pieces: list[tuple[list[Any], list[int], int]] = []
    """Per read, in file order: (buffers, their sizes, the bytes in all)."""
    fresh: list[np.ndarray[Any, Any]] = []
    run: list[tuple[str, np.dtype[Any], tuple[int, ...], int, np.ndarray[Any, Any] | None]] = []
    run_bytes = 0
    for key, code, begin, end, shape in entries:
        dtype, array_shape = check_entry(nodes[key], code, shape, path)
        target = into.get(key)
        if target is not None:
            flags = target.flags
            if not (
                target.dtype == dtype
                and target.shape == array_shape
                and flags.writeable
                and flags.c_contiguous
            ):
                target = None
        if end - begin < gather_bytes:
            run.append((key, dtype, array_shape, end - begin, target))
            run_bytes += end - begin
            if run_bytes >= most_bytes or len(run) >= gather_count:
                pieces.append(_plan_run(run, run_bytes, arrays, fresh))
                run, run_bytes = [], 0
            continue
        if run:
            pieces.append(_plan_run(run, run_bytes, arrays, fresh))
            run, run_bytes = [], 0
        if target is None:
            target = np.empty(array_shape, dtype)
            fresh.append(target)
        arrays[key] = target
        view = target.reshape(-1).view(np.uint8).data
        for offset in range(0, end - begin, chunk_bytes):
            chunk = view[offset : offset + chunk_bytes]
            pieces.append(([chunk], [len(chunk)], len(chunk)))
    if run:
        pieces.append(_plan_run(run, run_bytes, arrays, fresh))
    with prefault(fresh):
        for buffers, sizes, nbytes in pieces:
            if nbytes:
                stream.read_many(buffers, sizes, nbytes)
    return arrays


def _plan_run(
    run: list[tuple[str, np.dtype[Any], tuple[int, ...], int, np.ndarray[Any, Any] | None]],
    run_bytes: int,
    arrays: dict[str, np.ndarray[Any, Any]],
    fresh: list[np.ndarray[Any, Any]],
) -> tuple[list[Any], list[int], int]:
    """Allocates a run of consecutive small arrays: those without a template share one new
    buffer, read with one call; otherwise each is read into its own with one vectored read."""
    if all(target is None for *_, target in run):
        # One read and one hash for the run; each array is a view of its part of the buffer
        # (file offsets keep every array aligned to its dtype within it).
        buffer = np.empty(run_bytes, np.uint8)
        fresh.append(buffer)
        offset = 0
        for key, dtype, shape, nbytes, _ in run:
            arrays[key] = np.ndarray(shape, dtype, buffer, offset)
            offset += nbytes
        return [buffer], [run_bytes], run_bytes
    buffers = []
    sizes = []
    for key, dtype, shape, nbytes, target in run:
        if target is None:
            target = np.empty(shape, dtype)
            fresh.append(target)
        arrays[key] = target
        if nbytes:
            buffers.append(target)  # C-contiguous (new, or checked by _read_all)
            sizes.append(nbytes)
    return buffers, sizes, run_bytes
