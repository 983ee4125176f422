"""Kernel-level tuning of a checkpoint's array I/O: how many bytes go to each system call,
vectored reads (``readv``) straight into the arrays' own buffers, a background thread that
reads the array file ahead (:class:`ReadAhead`), and one that faults in fresh buffers'
pages (``madvise(MADV_POPULATE_WRITE)``) while the disk reads.

None of this changes a byte of what is written or returned; it decides how fast. The layout
of the file and the order of the reads are :mod:`globalstep.checkpoint._files.arrays`'s. The
sizes below were measured (issue 14); :mod:`~globalstep.checkpoint._files.arrays` reads them from
this module at each call, so that a test can shrink them.

Example:
    >>> import io
    >>> view = memoryview(bytearray(3))
    >>> read_exactly(io.BytesIO(b"abcd"), view, "x")
    >>> bytes(view)
    b'abc'
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from globalstep._errors import CorruptCheckpointError
from globalstep.checkpoint._files.document import ARRAYS_FILE, Checksum
from globalstep.storage import Storage

__all__ = [
    "BATCH_BYTES",
    "CHUNK_BYTES",
    "GATHER_BYTES",
    "GATHER_COUNT",
    "ReadAhead",
    "Stream",
    "advise_sequential",
    "prefault",
    "read_ahead",
    "read_exactly",
]

CHUNK_BYTES = 16 << 20
"""Bytes per write/read call and per conversion of a non-contiguous array."""


GATHER_BYTES = 1 << 20
"""Arrays (chunks) smaller than this are written and read in batches."""


GATHER_COUNT = 64
"""At most this many buffers per vectored write or read: measured on ext4, 8-64 small
buffers per writev ran at plain-write speed and 512 three to five times slower."""


BATCH_BYTES = 4 << 20
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


_MADV_POPULATE_WRITE = 23  # Linux 5.14+


_PREFAULT_CALL = 4 << 20
"""Bytes one madvise call faults in: the thread checks for a stop between calls."""


_PREFAULT_MIN_BYTES = 16 << 20
"""Below this, new buffers are faulted in by the copy itself: a thread costs more."""


def read_exactly(f: Any, view: memoryview, path: str) -> None:
    while view:
        n = f.readinto(view[:CHUNK_BYTES])
        if not n:
            raise CorruptCheckpointError(f"{path} is truncated", path)
        view = view[n:]


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
    (a :class:`ReadAhead`, given to ``arrays.read_arrays``); None where the storage is not
    local or the file is small enough not to need it."""
    ahead = None
    if _is_local(storage):
        path = storage.join(name, ARRAYS_FILE)
        with contextlib.suppress(OSError):  # missing: read_arrays reports it
            if os.stat(path).st_size > _AHEAD_MIN_BYTES:
                ahead = ReadAhead(path)
    try:
        yield ahead
    finally:
        if ahead is not None:
            ahead.close()


def _is_local(storage: Storage) -> bool:
    """Whether ``storage``'s files are local ones this module can tune (advise, readv)."""
    return storage.local and hasattr(os, "posix_fadvise")


def advise_sequential(storage: Storage, f: Any) -> int | None:
    """Advises the kernel that ``f``, a file opened from ``storage``, is read in order, and
    returns its file descriptor (for :class:`Stream`'s vectored reads); None, advising
    nothing, where the storage is not local or the system cannot advise."""
    if not _is_local(storage):
        return None
    fd: int = f.fileno()
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    return fd


class Stream:
    """Reads the data section in order, hashing each buffer as it arrives.

    Runs of small arrays arrive in one vectored read (``readv``) straight into their own
    buffers. The position reached is passed on to the file's :class:`ReadAhead`, if any;
    beyond that, reading ahead is the kernel's (the file is advised SEQUENTIAL).

    Args:
        f: the file, positioned at ``start``.
        path: its path, for errors.
        checksum: fed every buffer read, in order.
        start: the offset of the data section.
        fd: ``f``'s file descriptor where vectored reads may go to it (from
            :func:`advise_sequential`); None reads through ``f``.
        ahead: the file's background reader, or None.
    """

    def __init__(
        self,
        f: Any,
        path: str,
        checksum: Checksum,
        start: int,
        fd: int | None,
        ahead: ReadAhead | None,
    ) -> None:
        self._f = f
        self._path = path
        self._checksum = checksum
        self._fd = fd
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
    ``GATHER_COUNT`` buffers each."""
    for start in range(0, len(buffers), GATHER_COUNT):
        batch = buffers[start : start + GATHER_COUNT]
        n = os.readv(fd, batch)
        if n != sum(sizes[start : start + GATHER_COUNT]):
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


@contextlib.contextmanager
def prefault(buffers: list[np.ndarray[Any, Any]]) -> Iterator[None]:
    """Faults in the pages of new ``buffers`` in a background thread, in order, while the
    caller fills them (see :class:`_Prefault`); nothing where they are small or the
    system cannot."""
    large = [b for b in buffers if b.nbytes >= GATHER_BYTES]  # a run's, or a large array's
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
