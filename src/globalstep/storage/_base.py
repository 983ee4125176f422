"""The storage interface: the few file operations that checkpoints and summaries need
(:class:`Storage`, :class:`Writer`), whatever holds the bytes, and how its failures are
told apart (:func:`is_transient`) and reported (:func:`wrap_os_errors`).
"""

from __future__ import annotations

import contextlib
import errno
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import IO, Any, TypeVar

from globalstep._errors import CheckpointError

LOCK_FILE = ".lock"
_T = TypeVar("_T")


class Writer(ABC):
    """A file being written; :meth:`close` makes its bytes durable (fsync where possible)."""

    @abstractmethod
    def write(self, data: memoryview | bytes) -> None:
        """Writes all of ``data``."""

    def write_many(self, buffers: list[Any]) -> None:
        """Writes each of ``buffers`` (byte buffers: ``len`` is their size) in turn."""
        for buffer in buffers:
            self.write(memoryview(buffer))  # a NumPy array would add, not append

    @abstractmethod
    def close(self) -> None:
        """Flushes, fsyncs where the storage can, and closes."""

    @abstractmethod
    def abort(self) -> None:
        """Closes without the guarantee, after a failure."""


class Log(ABC):
    """An append-only file, written by one writer (``metrics.jsonl``, an event file).

    Attributes:
        last: the file's last byte when it was opened (``b""`` for a new or empty file):
            a crashed writer's half line shows as anything but ``b"\\n"``.
    """

    last: bytes = b""

    @abstractmethod
    def write(self, data: bytes) -> None:
        """Appends ``data`` (buffered)."""

    @abstractmethod
    def flush(self) -> None:
        """Hands what was written to the store, for readers to see."""

    @abstractmethod
    def sync(self) -> None:
        """Makes what was written durable (survives a crash of the machine)."""

    @abstractmethod
    def close(self) -> None:
        """Flushes, then closes."""


class WholeFileLog(Log):
    """A log on a store with no append (an object store): kept in memory and written whole
    at each flush that has new bytes; durable once the write returns. A store that only
    implements :meth:`Storage.read_bytes` and :meth:`Storage.write_bytes` gets this one."""

    def __init__(self, storage: Storage, path: str) -> None:
        self._storage, self._path = storage, path
        try:
            existing = storage.read_bytes(path)
        except FileNotFoundError:
            existing = b""
        self._data = bytearray(existing)
        self.last = existing[-1:]
        self._dirty = False

    def write(self, data: bytes) -> None:
        self._data += data
        self._dirty = True

    def flush(self) -> None:
        if self._dirty:
            self._storage.write_bytes(self._path, bytes(self._data))
            self._dirty = False

    def sync(self) -> None:
        self.flush()

    def close(self) -> None:
        self.flush()


class Storage(ABC):
    """The file operations of the commit protocol, rooted at one directory.

    Attributes:
        root: the directory (a path, or an fsspec path without its scheme).
        atomic_rename: whether :meth:`rename` is atomic; the commit protocol
            (``globalstep.checkpoint._files.commit.protocol_for``) is chosen by it, once.
        local: whether its files are this machine's own (a file descriptor can be memory
            mapped, advised, read with ``readv``); the one answer to "what kind of store is
            this?", asked instead of its class.
    """

    atomic_rename: bool = False
    local: bool = False

    @property
    def location(self) -> str:
        """Where the directory is, as a user names it: a local path, or the URL."""
        return self.root

    def __init__(self, root: str) -> None:
        self.root = root

    def join(self, *parts: str) -> str:
        """Returns the path of ``parts`` under the root."""
        return "/".join([self.root.rstrip("/"), *parts])

    @abstractmethod
    def makedirs(self, path: str) -> None:
        """Creates ``path`` and its parents."""

    @abstractmethod
    def listdir(self, path: str) -> list[str]:
        """Returns the names in ``path`` (empty when it does not exist)."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Returns True when ``path`` exists."""

    @abstractmethod
    def size(self, path: str) -> int:
        """Returns the size of the file at ``path`` in bytes."""

    def is_symlink(self, path: str) -> bool:
        """Returns True when ``path`` is a symbolic link (never on object stores)."""
        return False

    def file_id(self, path: str) -> list[int] | None:
        """Returns what changes when the file at ``path`` is replaced or rewritten (inode,
        size, mtime), or None where the storage cannot say or the file is missing."""
        return None

    def append_line(self, path: str, line: bytes) -> None:
        """Appends ``line`` to a small log file (created if missing; not fsynced)."""
        raise OSError(errno.EOPNOTSUPP, "appending is not supported here", path)

    @abstractmethod
    def is_dir(self, path: str) -> bool:
        """Returns True when ``path`` is a directory (following a link)."""

    def stamp(self) -> tuple[Any, int] | None:
        """Returns a token that changes whenever an entry of the root is added, removed or
        renamed, and when that last happened (ns since the epoch), or None where the
        storage has no such token (a listing then cannot be reused).

        File system clocks tick coarsely, so two changes within one tick can give the same
        token: a listing is only safe to reuse once the root has been quiet for a while.
        """
        return None

    @abstractmethod
    def open_writer(self, path: str) -> Writer:
        """Creates the file ``path`` for writing (local storage refuses an existing one)."""

    @abstractmethod
    def open_reader(self, path: str) -> IO[bytes]:
        """Opens ``path`` for reading, unbuffered where possible."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Renames ``src`` to ``dst``, which must not exist."""

    def exchange(self, src: str, dst: str) -> bool:
        """Swaps two directories atomically; returns False where the storage cannot."""
        return False

    @abstractmethod
    def remove_tree(self, path: str) -> None:
        """Removes ``path`` and everything in it; a missing path is not an error."""

    def remove_file(self, path: str) -> None:
        """Removes one file; a missing file is not an error."""
        self.remove_tree(path)

    def copy_file(self, src: str, dst: str) -> None:
        """Copies one file over ``dst`` (server-side on object stores)."""
        data = self.read_bytes(src)
        self.remove_file(dst)
        self.write_bytes(dst, data)

    def fsync_dir(self, path: str) -> None:  # noqa: B027 - a no-op where there is nothing to sync
        """Makes the entries of directory ``path`` durable, where the storage can."""

    def read_bytes(self, path: str) -> bytes:
        """Returns the whole file."""
        with self.open_reader(path) as f:
            return f.read()

    def replace_file(self, path: str, data: bytes) -> None:
        """Replaces a small file's content, atomically where rename is (a local directory
        overrides this).

        Where rename is not atomic the file is overwritten in place (an object store
        replaces an object whole), never removed first: a failure then leaves the old
        content or a damaged file that reads as corrupt, never a missing one.
        """
        self.write_bytes(path, data)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Creates ``path`` holding ``data`` unless it exists; returns False where it did
        (the lock of a store without ``flock``). This default checks, then writes: a store
        with an atomic exclusive create overrides it."""
        if self.exists(path):
            return False
        self.write_bytes(path, data)
        return True

    def open_log(self, path: str) -> Log:
        """Opens ``path`` to append to it (created if missing); see :class:`Log`. This
        default keeps the file in memory and writes it whole at each flush
        (:class:`WholeFileLog`); a store that can append overrides it."""
        return WholeFileLog(self, path)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Writes a new file durably."""
        writer = self.open_writer(path)
        try:
            writer.write(data)
        except BaseException:
            writer.abort()
            raise
        writer.close()


_EREMOTEIO = getattr(errno, "EREMOTEIO", errno.EIO)
TRANSIENT_ERRNOS = frozenset(
    {
        errno.EAGAIN,
        errno.EBUSY,  # s3fs: 503 SlowDown / ServiceUnavailable
        _EREMOTEIO,  # s3fs: 500 InternalError
        errno.ETIMEDOUT,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.ECONNREFUSED,
        errno.EPIPE,
        errno.ENETDOWN,
        errno.ENETUNREACH,
        errno.EHOSTUNREACH,
    }
)
"""The errnos of an OSError that :meth:`FsspecStorage.retry` takes for a passing failure."""


def is_transient(err: BaseException) -> bool:
    """Returns whether ``err`` is a passing failure of the network or the store, worth
    trying again: a ``TimeoutError`` or ``ConnectionError``, an ``OSError`` whose errno is
    in :data:`TRANSIENT_ERRNOS` (s3fs turns S3's 500 and 503 answers into ``EREMOTEIO`` and
    ``EBUSY``), or botocore's connection and timeout errors that s3fs lets through after
    its own retries.

    Example:
        >>> is_transient(TimeoutError()), is_transient(FileNotFoundError("x"))
        (True, False)
    """
    if isinstance(err, TimeoutError | ConnectionError):
        return True
    if isinstance(err, OSError):
        return err.errno in TRANSIENT_ERRNOS
    for cls in type(err).__mro__:
        if cls.__module__.startswith(("botocore.", "aiohttp.")) and cls.__name__ in (
            "HTTPClientError",
            "ConnectionError",
            "ClientConnectionError",
            "ServerTimeoutError",
        ):
            return True
    return False


def is_remote(directory: str) -> bool:
    """Returns whether ``directory`` is an fsspec URL served by :class:`FsspecStorage`
    (any ``scheme://`` but ``file://`` and ``local://``, which are local directories).

    Example:
        >>> is_remote("s3://bucket/run"), is_remote("/tmp/run"), is_remote("file:///tmp/run")
        (True, False, False)
    """
    return "://" in directory and not directory.startswith(("file://", "local://"))


@contextlib.contextmanager
def wrap_os_errors(action: str, path: str) -> Iterator[None]:
    """Turns an OSError into a CheckpointError that says what was being done, and where."""
    try:
        yield
    except CheckpointError:
        raise
    except OSError as err:
        raise CheckpointError(f"{action} failed at {path}: {err}", path) from err
