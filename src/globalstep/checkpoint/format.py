"""The on-disk format of one checkpoint, and the protocol that commits it.

One directory per checkpoint, ``<dir>/step-<step, 12 digits>/``, holds

- ``arrays.safetensors``: every array, in the safetensors format, written by streaming each
  array's own buffer (no concatenated copy), small ones 64 to a vectored write; the
  checksum (XXH3-64) is computed over the same buffers while they are written; the
  kernel is asked to start writing each 8 MiB back at once, so the disk works while
  later arrays are hashed and the fsync waits only for the tail;
- ``state.json``: the format version, the tree's structure with every non-array leaf, every
  clock's Progress, metrics, the creation time and the size and checksum of the array file;
- ``COMMITTED``: written last; it holds the size and checksum of ``state.json``, and its own.

Restoring reads each array straight into the array returned (or the template's), hashing
it as it arrives; a run of small arrays arrives with one call. On a local disk a background
thread reads the file ahead from the start of the restore, so the disk works while
state.json and the header are parsed and the tree is walked; every array the restore
returns new is allocated before the first read, and a second thread faults in its pages
meanwhile (a fresh page's first touch costs more than the disk takes to fill it).

Saving writes into ``<dir>/.tmp-<name>-<random>/``, fsyncs each file, writes the marker,
fsyncs the directory, renames it to its final name and fsyncs the parent. Readers only see
names that match and hold a marker; where rename is not atomic (fsspec object stores) the
files are written in place and the marker, written last, alone decides.

Example:
    >>> import numpy as np
    >>> from globalstep.storage import open_storage
    >>> storage = open_storage("memory://doc-format")
    >>> commit(storage, "step-000000000007", {"w": np.arange(3.0)}, {"tree": None})
    >>> committed_names(storage)
    ['step-000000000007']
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import re
import secrets
import struct
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import numpy as np
import xxhash

from globalstep.checkpoint.tree import (
    CODE_ITEMSIZE,
    array_nodes,
    decode_dtype,
    is_shape,
    safetensors_code,
)
from globalstep.errors import CheckpointExistsError, CorruptCheckpointError
from globalstep.storage import LocalStorage, Storage, wrap_os_errors

__all__ = [
    "ARRAYS_FILE",
    "COMMIT_FILE",
    "FORMAT_VERSION",
    "STATE_FILE",
    "ReadAhead",
    "commit",
    "committed_names",
    "load_state",
    "read_ahead",
    "read_arrays",
    "remove_checkpoint",
    "remove_stale",
    "verify_checkpoint",
]

FORMAT_VERSION = 1
ARRAYS_FILE = "arrays.safetensors"
STATE_FILE = "state.json"
COMMIT_FILE = "COMMITTED"
CHUNK_BYTES = 16 << 20
"""Bytes per write/read call and per conversion of a non-contiguous array."""
_GATHER_BYTES = 1 << 20
"""Arrays (chunks) smaller than this are written and read in batches."""
_GATHER_COUNT = 64
"""At most this many buffers per vectored write or read: measured on ext4, 8-64 small
buffers per writev ran at plain-write speed and 512 three to five times slower."""
_BATCH_BYTES = 4 << 20
"""At most about this many bytes per vectored write or read."""
_AHEAD_BYTES = 128 << 20
"""How far ahead of the arrays being filled a restore's background reader starts a read."""
_AHEAD_MIN_BYTES = 4 << 20
"""Smaller files are read without a background reader (a thread costs more than it saves)."""
_AHEAD_CALL = 64 << 20
"""Bytes per read of the background reader. Large: between two reads the thread waits for
the GIL, up to the switch interval (5 ms), while the restore runs Python code; with 1 MiB
per read a cold restore of 10,000 small arrays ran at 0.84x a raw read, with 16 MiB at
1.05x (16 and 64 MiB were within the noise of each other; issue 14)."""
_AHEAD_SCRATCH = 1 << 20
"""The background reader's buffer: each read fills it over and over (it stays in cache)."""
_MAX_HEADER = 100 << 20
_MADV_POPULATE_WRITE = 23  # Linux 5.14+
_PREFAULT_CALL = 4 << 20
"""Bytes one madvise call faults in: the thread checks for a stop between calls."""
_PREFAULT_MIN_BYTES = 16 << 20
"""Below this, new buffers are faulted in by the copy itself: a thread costs more."""
_STALE_PREFIXES = (".tmp-", ".trash-")


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
    """Yields the array's little-endian C-order bytes, at most about CHUNK_BYTES at a time."""
    if array.nbytes == 0:
        return
    little = array.dtype.newbyteorder("<")
    if array.flags.c_contiguous and _dtype_info(array.dtype)[2]:
        flat = array.reshape(-1).view(np.uint8).data
        for start in range(0, len(flat), CHUNK_BYTES):
            yield flat[start : start + CHUNK_BYTES]
        return
    if array.ndim == 0:
        yield np.ascontiguousarray(array, dtype=little).reshape(-1).view(np.uint8).data
        return
    row_bytes = max(1, array.nbytes // max(1, array.shape[0]))
    if row_bytes > CHUNK_BYTES and array.ndim > 1:
        # One row is more than a chunk: convert it a part at a time, not whole.
        for row in array:
            yield from _chunks(row)
        return
    rows = max(1, CHUNK_BYTES // row_bytes)
    for start in range(0, array.shape[0], rows):
        part = np.ascontiguousarray(array[start : start + rows], dtype=little)
        yield part.reshape(-1).view(np.uint8).data


def checksum_of(data: bytes | memoryview) -> str:
    """Returns the checksum this format uses (XXH3-64, as 16 hex digits) of ``data``.

    Example:
        >>> checksum_of(b"")
        '2d06800538d394c2'
    """
    return str(xxhash.xxh3_64_hexdigest(data))


class _Checksum:
    """A running XXH3-64 over the buffers being written or read, in the same pass.

    XXH3 hashes about 30 GB/s on the development machines, against 4 GB/s for zlib's
    CRC-32, so verifying a restore costs little beside copying from the page cache.
    """

    def __init__(self, data: bytes) -> None:
        self._hash = xxhash.xxh3_64(data)

    def feed(self, view: Any) -> None:
        """Adds ``view``'s bytes."""
        self._hash.update(view)

    def value(self) -> str:
        """Returns the checksum of everything fed, as :func:`checksum_of` spells it."""
        return str(self._hash.hexdigest())


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
    small ones go out with one vectored write each (at most ``_GATHER_COUNT`` buffers and
    about ``_BATCH_BYTES``), also straight from their own memory: no staging copy, whose
    memcpy cost as much as the write itself on a fast file system. Each buffer is hashed
    just before it is handed to the kernel.

    Returns:
        ``{"size": bytes, "xxh3_64": checksum}`` of the file, for state.json.
    """
    prefix, order = _header(arrays)
    writer = storage.open_writer(path)
    checksum = _Checksum(prefix)
    feed = checksum.feed
    batch: list[Any] = []
    batch_bytes = 0
    size = len(prefix)
    try:
        writer.write(prefix)
        for key in order:
            array = arrays[key]
            n = array.nbytes
            size += n
            if n < _GATHER_BYTES and array.flags.c_contiguous and _dtype_info(array.dtype)[2]:
                # The common small array skips the generator: per-array cost adds up.
                chunks: Any = (array.reshape(-1).view(np.uint8),) if n else ()
            else:
                chunks = _chunks(array)
            for chunk in chunks:
                feed(chunk)
                n = len(chunk)
                if n < _GATHER_BYTES:
                    batch.append(chunk)
                    batch_bytes += n
                    if len(batch) >= _GATHER_COUNT or batch_bytes >= _BATCH_BYTES:
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


def _write_json(storage: Storage, path: str, document: Any, *, sealed: bool = False) -> Any:
    # Compact: with ``indent`` json falls back to its pure-Python encoder, which costs
    # about 90 us per array of a large state (``globalstep ckpt show`` prints it readably).
    data = json.dumps(document, separators=(",", ":"), allow_nan=False).encode()
    if sealed:
        # The marker carries its own checksum, so that damage to it is named as such.
        data += f"\nxxh3_64 {checksum_of(data)}\n".encode()
    storage.write_bytes(path, data)
    return {"size": len(data), "xxh3_64": checksum_of(data)}


def committed_names(storage: Storage, pattern: str = r"step-\d{12,}") -> list[str]:
    """Returns the names of committed checkpoints (a marker inside), sorted by name."""
    regex = re.compile(pattern)
    names = [
        n
        for n in storage.listdir(storage.root)
        if regex.fullmatch(n) and storage.exists(storage.join(n, COMMIT_FILE))
    ]
    return sorted(names)


class CommitHooks(Protocol):
    """What a distributed save does inside :func:`commit` (see ``checkpoint.distributed``)."""

    def started(self, staging: str) -> None:
        """Called once the temporary directory exists, before any file is written."""

    def finishing(self, staging: str, document: dict[str, Any]) -> None:
        """Called after the arrays are written, before state.json and the marker; may add
        to ``document``; raising leaves nothing committed."""


def commit(
    storage: Storage,
    name: str,
    arrays: Mapping[str, np.ndarray[Any, Any]],
    document: dict[str, Any],
    *,
    force: bool = False,
    hooks: CommitHooks | None = None,
    fresh: bool = False,
    marked: bool | None = None,
) -> None:
    """Writes one checkpoint and commits it atomically under ``name``.

    Args:
        storage: where the checkpoint directory lives.
        name: the checkpoint directory's name, e.g. ``step-000000000100``.
        arrays: the arrays by flat name.
        document: the rest of state.json; ``files`` and ``format`` are added here.
        force: replace a committed checkpoint of that name: atomically where rename is;
            elsewhere the old one stays committed until the new one is written whole, and
            only the copy of the new files over it leaves the step uncommitted (see
            ``_replace_in_place``).
        hooks: called when the temporary directory exists and before state.json is
            written (a distributed save: other ranks write their shards there).
        fresh: the caller, the directory's only writer, listed it just before and saw no
            entry named ``name``: where rename is not atomic, there are no leftovers of a
            killed save to clear before writing in place (two to four requests fewer on
            an object store).
        marked: whether ``name`` is committed, where the caller (the directory's only
            writer) has just looked; None looks here.

    Raises:
        CheckpointExistsError: ``name`` is committed already and ``force`` is False.
        CheckpointError: an I/O error (full disk, file too large, ...); nothing visible
            has changed, and no earlier checkpoint is touched.
    """
    final = storage.join(name)
    marker = storage.join(name, COMMIT_FILE)
    if marked is None:
        marked = storage.exists(marker)
    if marked and not force:
        raise CheckpointExistsError(
            f"checkpoint {name} exists in {storage.root}; pass force=True to replace it",
            final,
        )
    with wrap_os_errors(f"saving {name}", final):
        storage.makedirs(storage.root)
        # Where rename is not atomic a new name is written in place; a replaced one aside.
        replacing = not storage.atomic_rename and marked
        if storage.atomic_rename or replacing:
            staging = storage.join(f".tmp-{name}-{secrets.token_hex(4)}")
        else:
            staging = final
            if not fresh:  # a killed save's files, if any, go first
                storage.remove_file(marker)
                storage.remove_tree(final)
        storage.makedirs(staging)
        progress = {"unmarked": not replacing}
        try:
            if hooks is not None:
                hooks.started(staging)
            _write_files(storage, staging, arrays, document, hooks)
            if storage.atomic_rename:
                _publish(storage, staging, final)
            elif replacing:
                _replace_in_place(storage, staging, final, progress)
        except BaseException:
            if progress["unmarked"] and not storage.atomic_rename:
                # Written in place: a marker cut short by the failure must not stay visible.
                _quiet_remove(storage, marker)
            _quiet_remove(storage, staging)
            raise
        storage.fsync_dir(storage.root)


def _replace_in_place(
    storage: Storage, staging: str, final: str, progress: dict[str, bool]
) -> None:
    """Replaces a committed checkpoint where rename is not atomic (object stores).

    The new checkpoint is written whole beside the old one first (a failure or a kill until
    then leaves the old one committed and untouched); then the old marker goes, the new
    files are copied over the old ones (server-side on object stores) and the new marker
    is copied last. Between the marker's removal and the new marker neither version is
    committed: a kill there loses this step's checkpoint (the sweep removes what is left)
    and the previous step's is the newest. A reader that reads across the copy meets
    files whose checksums do not match the marker it read, and reads again (the manager
    retries a checkpoint replaced under it); no mix of the two ever restores.
    """
    storage.remove_file(f"{final}/{COMMIT_FILE}")
    progress["unmarked"] = True
    # A distributed save's shards (one folder level, ``sharded/``) go with the files.
    shards = [
        f"{folder}/{entry}"
        for folder in storage.listdir(staging)
        if storage.is_dir(f"{staging}/{folder}")
        for entry in storage.listdir(f"{staging}/{folder}")
    ]
    for file_name in (*shards, ARRAYS_FILE, STATE_FILE, COMMIT_FILE):
        storage.copy_file(f"{staging}/{file_name}", f"{final}/{file_name}")
    _quiet_remove(storage, staging)


def _write_files(
    storage: Storage,
    staging: str,
    arrays: Mapping[str, np.ndarray[Any, Any]],
    document: dict[str, Any],
    hooks: CommitHooks | None = None,
) -> None:
    files = {ARRAYS_FILE: write_arrays(storage, f"{staging}/{ARRAYS_FILE}", arrays)}
    if hooks is not None:
        hooks.finishing(staging, document)
    full = {"format": FORMAT_VERSION, **document, "files": files}
    state_sum = _write_json(storage, f"{staging}/{STATE_FILE}", full)
    marker = {"format": FORMAT_VERSION, STATE_FILE: state_sum}
    _write_json(storage, f"{staging}/{COMMIT_FILE}", marker, sealed=True)
    storage.fsync_dir(staging)


def _publish(storage: Storage, staging: str, final: str) -> None:
    if not storage.exists(final):
        storage.rename(staging, final)
    elif not storage.exchange(staging, final):  # no renameat2 (not Linux): two renames
        trash = storage.join(f".trash-{final.rsplit('/', 1)[-1]}-{secrets.token_hex(4)}")
        storage.rename(final, trash)
        try:
            storage.rename(staging, final)
        except BaseException:
            storage.rename(trash, final)  # the replaced checkpoint goes back, not to the sweep
            raise
        _quiet_remove(storage, trash)
    else:
        # `staging` now holds the replaced checkpoint.
        _quiet_remove(storage, staging)


def _quiet_remove(storage: Storage, path: str) -> None:
    """Removes leftovers after a failure; a failure here is left for the next save's sweep."""
    with contextlib.suppress(OSError):
        storage.remove_tree(path)


def remove_checkpoint(storage: Storage, name: str) -> None:
    """Deletes a committed checkpoint so that no reader ever sees half of it."""
    final = storage.join(name)
    with wrap_os_errors(f"deleting {name}", final):
        if storage.atomic_rename:
            trash = storage.join(f".trash-{name}-{secrets.token_hex(4)}")
            storage.rename(final, trash)
            storage.fsync_dir(storage.root)
            storage.remove_tree(trash)
        else:
            storage.remove_file(storage.join(name, COMMIT_FILE))
            storage.remove_tree(final)


def remove_stale(storage: Storage, pattern: str = r"step-\d{12,}") -> list[str]:
    """Removes temporary and half-deleted directories left by killed processes.

    Only a writer holding the directory's lock may call this. Returns the names removed.
    """
    regex = re.compile(pattern)
    removed = []
    for name in storage.listdir(storage.root):
        stale = name.startswith(_STALE_PREFIXES) or (
            not storage.atomic_rename
            and regex.fullmatch(name)
            and not storage.exists(storage.join(name, COMMIT_FILE))
        )
        if stale:
            with wrap_os_errors("removing a stale temporary directory", storage.join(name)):
                storage.remove_tree(storage.join(name))
            removed.append(name)
    return removed


def _json_file(storage: Storage, path: str, expected: Any = None, *, sealed: bool = False) -> Any:
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError as err:
        raise CorruptCheckpointError(f"{path} is missing", path) from err
    if sealed:
        body, separator, tail = data.rstrip(b"\n").rpartition(b"\nxxh3_64 ")
        if not separator or tail != checksum_of(body).encode():
            raise CorruptCheckpointError(f"{path} fails its own checksum", path)
        data = body
    if expected is not None and (
        len(data) != expected.get("size") or checksum_of(data) != expected.get("xxh3_64")
    ):
        raise CorruptCheckpointError(
            f"{path} fails its checksum (expected size {expected.get('size')} and "
            f"XXH3-64 {expected.get('xxh3_64')}, got {len(data)} and {checksum_of(data)})",
            path,
        )
    try:
        document = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise CorruptCheckpointError(f"{path} is not valid JSON: {err}", path) from err
    if not isinstance(document, dict) or document.get("format") != FORMAT_VERSION:
        raise CorruptCheckpointError(
            f"{path} is not a globalstep checkpoint file of format {FORMAT_VERSION}", path
        )
    return document


def load_state(storage: Storage, name: str) -> dict[str, Any]:
    """Reads and checks the marker and state.json of checkpoint ``name``.

    Raises:
        CorruptCheckpointError: a file is missing, fails its checksum, or is not valid.
    """
    with wrap_os_errors(f"reading {name}", storage.join(name)):
        marker = _json_file(storage, storage.join(name, COMMIT_FILE), sealed=True)
        expected = marker.get(STATE_FILE)
        if not isinstance(expected, dict):
            raise CorruptCheckpointError(
                f"{storage.join(name, COMMIT_FILE)} lacks the checksum of {STATE_FILE}",
                storage.join(name, COMMIT_FILE),
            )
        state = _json_file(storage, storage.join(name, STATE_FILE), expected)
    path = storage.join(name, STATE_FILE)
    files = state.get("files")
    if not isinstance(files, dict) or not isinstance(files.get(ARRAYS_FILE), dict):
        raise CorruptCheckpointError(f"{path} lacks the checksum of {ARRAYS_FILE}", path)
    if "tree" not in state:
        raise CorruptCheckpointError(f"{path} lacks the state tree", path)
    return dict(state)


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


def read_exactly(f: Any, view: memoryview, path: str) -> None:
    while view:
        n = f.readinto(view[:CHUNK_BYTES])
        if not n:
            raise CorruptCheckpointError(f"{path} is truncated", path)
        view = view[n:]


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


class ReadAhead:
    """Reads a local checkpoint's array file ahead of a restore, in a background thread.

    A cold restore parses state.json and the safetensors header, walks the tree and checks
    the template before its first array arrives; without help the disk idles meanwhile,
    and the kernel's sequential read-ahead only starts with the first read. This thread
    reads the file in order into the page cache, where the restore's own reads then find
    it, and starts no read more than ``_AHEAD_BYTES`` ahead of the restore's position
    (:meth:`advance`). It copies what it reads into one small buffer, over and over: that
    copy touches every page, so that the first touch of a page, which costs a fault in
    the hypervisor on a virtual machine, is paid here and not in the restore's copy. Not
    done instead: ``posix_fadvise(WILLNEED)`` (slower than the kernel's own read-ahead)
    and ``sendfile`` to the null device (no copy, but the restore's copy then met the
    first touches: 3-4x slower in one restore of five; issue 14).

    The thread only warms the page cache: what the restore returns is what its own reads
    read and hashed. A failure in the thread (a missing or short file) ends it quietly:
    the restore's own reads meet the same failure and report it.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._position = 0
        self._stopped = False
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="globalstep-read-ahead", daemon=True)
        self._thread.start()

    def advance(self, position: int) -> None:
        """Tells the thread the restore has read up to byte ``position``."""
        with self._wake:
            self._position = position
            self._wake.notify()

    def close(self) -> None:
        """Stops the thread and waits for it (for at most one read of ``_AHEAD_CALL`` bytes)."""
        with self._wake:
            self._stopped = True
            self._wake.notify()
        self._thread.join()

    def _run(self) -> None:
        try:
            fd = os.open(self._path, os.O_RDONLY)
        except OSError:
            return  # the restore's own open reports it
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            scratch = bytearray(min(_AHEAD_CALL, _AHEAD_SCRATCH))
            # One call reads _AHEAD_CALL bytes, every piece into the same small buffer.
            buffers = [scratch] * max(1, _AHEAD_CALL // len(scratch))
            offset = 0
            while True:
                with self._wake:
                    while not self._stopped and offset >= self._position + _AHEAD_BYTES:
                        self._wake.wait()
                    if self._stopped:
                        return
                n = os.preadv(fd, buffers, offset)
                if not n:
                    return  # end of file
                offset += n
        except OSError:
            return  # the restore's own reads meet and report the same failure
        finally:
            os.close(fd)


@contextlib.contextmanager
def read_ahead(storage: Storage, name: str) -> Iterator[ReadAhead | None]:
    """Reads checkpoint ``name``'s array file ahead while the caller prepares its restore
    (a :class:`ReadAhead`, given to :func:`read_arrays`); None where the storage is not
    local or the file is small enough not to need it."""
    ahead = None
    if isinstance(storage, LocalStorage) and hasattr(os, "posix_fadvise"):
        path = storage.join(name, ARRAYS_FILE)
        with contextlib.suppress(OSError):  # missing: read_arrays reports it
            if os.stat(path).st_size > _AHEAD_MIN_BYTES:
                ahead = ReadAhead(path)
    try:
        yield ahead
    finally:
        if ahead is not None:
            ahead.close()


class _Stream:
    """Reads the data section in order, hashing each buffer as it arrives.

    Runs of small arrays arrive in one vectored read (``readv``) straight into their own
    buffers. The position reached is passed on to the file's :class:`ReadAhead`, if any;
    beyond that, reading ahead is the kernel's (the file is advised SEQUENTIAL).
    """

    def __init__(
        self,
        f: Any,
        path: str,
        checksum: _Checksum,
        start: int,
        local: bool,
        ahead: ReadAhead | None,
    ) -> None:
        self._f = f
        self._path = path
        self._checksum = checksum
        self._fd: int | None = f.fileno() if local else None
        self._position = start
        self._ahead = ahead

    def read(self, view: memoryview) -> None:
        """Fills ``view`` (any length) from the stream."""
        for start in range(0, len(view), CHUNK_BYTES):
            chunk = view[start : start + CHUNK_BYTES]
            read_exactly(self._f, chunk, self._path)
            self._checksum.feed(chunk)
            self._advance(len(chunk))

    def read_many(self, buffers: list[Any], sizes: list[int], total: int) -> None:
        """Fills each of ``buffers`` in turn from the stream: byte buffers or C-contiguous
        arrays, none empty, of ``sizes`` bytes (``total`` in all, at most about
        ``CHUNK_BYTES``). An array
        goes to ``readv`` and the hash as it is: a byte view of each costs a microsecond,
        which 10,000 arrays of an optimizer state make visible."""
        if self._fd is None:
            for buffer in buffers:
                read_exactly(self._f, _byte_view(buffer), self._path)
        else:
            _readv_exactly(self._fd, buffers, sizes, self._path)
        feed = self._checksum.feed
        for buffer in buffers:
            feed(buffer)
        self._advance(total)

    def _advance(self, n: int) -> None:
        self._position += n
        if self._ahead is not None:
            self._ahead.advance(self._position)


def _readv_exactly(fd: int, buffers: list[Any], sizes: list[int], path: str) -> None:
    """Fills ``buffers`` (of ``sizes`` bytes) with vectored reads of at most
    ``_GATHER_COUNT`` buffers each."""
    for start in range(0, len(buffers), _GATHER_COUNT):
        batch = buffers[start : start + _GATHER_COUNT]
        n = os.readv(fd, batch)
        if n != sum(sizes[start : start + _GATHER_COUNT]):
            _resume_readv(fd, [_byte_view(b) for b in batch], n, path)


def _resume_readv(fd: int, views: list[memoryview], n: int, path: str) -> None:
    """Fills the rest of ``views`` after a read that filled only their first ``n`` bytes."""
    while True:
        while views and n >= len(views[0]):  # drop what was filled
            n -= len(views.pop(0))
        if not views:
            return
        views[0] = views[0][n:]  # resume mid-buffer
        n = os.readv(fd, views)
        if not n:
            raise CorruptCheckpointError(f"{path} is truncated", path)


def _byte_view(buffer: Any) -> memoryview:
    """``buffer``'s bytes as a flat byte memoryview (an array of any dtype, or bytes)."""
    if isinstance(buffer, np.ndarray):
        return buffer.reshape(-1).view(np.uint8).data
    return memoryview(buffer).cast("B")


def read_arrays(
    storage: Storage,
    name: str,
    state: Mapping[str, Any],
    into: Mapping[str, np.ndarray[Any, Any]] | None = None,
    *,
    keep: bool = True,
    nodes: Mapping[str, Any] | None = None,
    ahead: ReadAhead | None = None,
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
        nodes: ``array_nodes(state["tree"])``, where the caller has it already.
        ahead: the file's background reader, where the caller started one earlier
            (:func:`read_ahead`); without one, a local file gets its own here.

    Raises:
        CorruptCheckpointError: the file is truncated, fails its checksum, or does not
            match state.json; the message names the file.
    """
    if ahead is None:
        with read_ahead(storage, name) as own:
            if own is not None:
                return read_arrays(storage, name, state, into, keep=keep, nodes=nodes, ahead=own)
    path = storage.join(name, ARRAYS_FILE)
    expected = state["files"][ARRAYS_FILE]
    if nodes is None:
        nodes = array_nodes(state["tree"])
    into = into or {}
    local = isinstance(storage, LocalStorage) and hasattr(os, "posix_fadvise")
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
            if local:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            prefix, entries = read_header(f, size, path)
            if {e[0] for e in entries} != set(nodes):
                raise CorruptCheckpointError(f"{path}: its tensors differ from state.json", path)
            checksum = _Checksum(prefix)
            stream = _Stream(f, path, checksum, len(prefix), local, ahead)
            if keep:
                arrays = _read_all(stream, entries, nodes, into, path)
            else:
                for key, code, _, _, shape in entries:
                    check_entry(nodes[key], code, shape, path)
                arrays = {}
                scratch = memoryview(bytearray(min(CHUNK_BYTES, size)))
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
    stream: _Stream,
    entries: list[tuple[str, str, int, int, Any]],
    nodes: Mapping[str, Any],
    into: Mapping[str, np.ndarray[Any, Any]],
    path: str,
) -> dict[str, np.ndarray[Any, Any]]:
    """Reads every array in file order: a large one straight into its own buffer, a
    ``CHUNK_BYTES`` piece per read, a run of small ones with one call (into one buffer
    they then view, or into the template's).

    Every buffer is allocated first, and a :class:`_Prefault` thread faults in the new
    ones' pages while the disk reads and this thread copies behind it."""
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
        if end - begin < _GATHER_BYTES:
            run.append((key, dtype, array_shape, end - begin, target))
            run_bytes += end - begin
            if run_bytes >= _BATCH_BYTES or len(run) >= _GATHER_COUNT:
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
        for offset in range(0, end - begin, CHUNK_BYTES):
            chunk = view[offset : offset + CHUNK_BYTES]
            pieces.append(([chunk], [len(chunk)], len(chunk)))
    if run:
        pieces.append(_plan_run(run, run_bytes, arrays, fresh))
    with _prefault(fresh):
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


@contextlib.contextmanager
def _prefault(buffers: list[np.ndarray[Any, Any]]) -> Iterator[None]:
    """Faults in the pages of new ``buffers`` in a background thread, in order, while the
    caller fills them (see :class:`_Prefault`); nothing where they are small or the
    system cannot."""
    large = [b for b in buffers if b.nbytes >= _GATHER_BYTES]  # a run's, or a large array's
    if _PREFAULT is None or sum(b.nbytes for b in large) < _PREFAULT_MIN_BYTES:
        yield
        return
    worker = _Prefault(large)
    try:
        yield
    finally:
        worker.close()


class _Prefault:
    """Faults in the pages of a restore's new buffers ahead of the copy that fills them.

    The first touch of a fresh page costs a page fault: on a virtual machine, 1-2 us a
    page, more than the disk takes to deliver its 4 KiB (issue 14: 333 MiB of fresh
    arrays cost 160-310 ms to touch, the disk read them in 150-200 ms). A restore that
    meets each fault in its own copy pays both one after the other. This thread asks the
    kernel to fault them in (``madvise(MADV_POPULATE_WRITE)``, which writes nothing, so
    it never races the copy: a page the copy reached first is skipped), on the other CPU
    while the disk reads. It stops at the first refusal (a kernel before 5.14), leaving
    the faults to the copy as before.
    """

    def __init__(self, buffers: list[np.ndarray[Any, Any]]) -> None:
        self._buffers = buffers
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="globalstep-prefault", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stops the thread and waits for it (for at most one call of ``_PREFAULT_CALL``)."""
        self._stopped = True
        self._thread.join()

    def _run(self) -> None:
        madvise = _PREFAULT
        assert madvise is not None
        page = os.sysconf("SC_PAGE_SIZE")
        for buffer in self._buffers:
            address = buffer.__array_interface__["data"][0]
            end = address + buffer.nbytes
            address -= address % page  # madvise takes whole pages
            while address < end:
                if self._stopped:
                    return
                n = min(_PREFAULT_CALL, end - address)
                if madvise(address, n, _MADV_POPULATE_WRITE) != 0:
                    return
                address += n


def _madvise() -> Any:
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise  # releases the GIL while it runs
    except (OSError, AttributeError):  # pragma: no cover - not a POSIX libc
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_PREFAULT: Any = _madvise() if sys.platform.startswith("linux") else None
"""libc's madvise, where MADV_POPULATE_WRITE may exist (Linux); None elsewhere."""


def verify_checkpoint(storage: Storage, name: str) -> dict[str, Any]:
    """Checks every checksum of checkpoint ``name``; returns its state.json.

    Raises:
        CorruptCheckpointError: a file is missing, truncated or fails its checksum.
    """
    state = load_state(storage, name)
    read_arrays(storage, name, state, keep=False)
    return state
