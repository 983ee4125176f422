"""Where checkpoint bytes live: local directories or fsspec file systems.

A :class:`Storage` is the handful of file operations the commit protocol needs (write with
fsync, rename, directory fsync, listing, removal), for a local directory (:class:`LocalStorage`,
whose rename is atomic) or any fsspec URL such as ``memory://runs/a`` (:class:`FsspecStorage`,
where rename is not atomic and the commit marker alone decides). :class:`DirectoryLock` keeps
one writer per directory.

Example:
    >>> storage = open_storage("memory://doc-storage")
    >>> storage.write_bytes(storage.join("x.txt"), b"hi")
    >>> storage.read_bytes(storage.join("x.txt"))
    b'hi'
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import random
import secrets
import shutil
import socket
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any, TypeVar

from globalstep.errors import CheckpointError, ConfigError, LockError, MissingDependencyError

__all__ = [
    "TRANSIENT_ERRNOS",
    "DirectoryLock",
    "FsspecStorage",
    "LocalStorage",
    "Storage",
    "is_remote",
    "is_transient",
    "open_storage",
]

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


class Storage(ABC):
    """The file operations of the commit protocol, rooted at one directory."""

    atomic_rename: bool = False

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
        """Replaces a small file's content, atomically where rename is.

        Where rename is not atomic the file is overwritten in place (an object store
        replaces an object whole), never removed first: a failure then leaves the old
        content or a damaged file that reads as corrupt, never a missing one.
        """
        if not self.atomic_rename:
            self.write_bytes(path, data)
            return
        staging = f"{path}.tmp-{os.getpid()}"
        self.remove_file(staging)
        self.write_bytes(staging, data)
        os.replace(staging, path)
        self.fsync_dir(os.path.dirname(path))

    def write_bytes(self, path: str, data: bytes) -> None:
        """Writes a new file durably."""
        writer = self.open_writer(path)
        try:
            writer.write(data)
        except BaseException:
            writer.abort()
            raise
        writer.close()


class _FdWriter(Writer):
    """Writes with plain system calls and asks the kernel to start writing each piece back
    at once (``sync_file_range``), so the disk works while later pieces are still being
    copied: the final fsync then waits only for the tail, not for the whole file."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._written = 0
        self._flushed = 0

    def write(self, data: memoryview | bytes) -> None:
        view = memoryview(data).cast("B")
        while view:
            written = os.write(self._fd, view[: 1 << 30])
            view = view[written:]
            self._written += written
        self._start_writeback()

    def write_many(self, buffers: list[Any]) -> None:
        """One vectored write (``writev``) for all of ``buffers``: a state of many small
        arrays goes out straight from their own memory, with no staging copy. Keep the list
        short (at most 64 buffers was measured at plain-write speed on ext4; 512 ran three
        to five times slower)."""
        done = os.writev(self._fd, buffers)
        self._written += done
        for buffer in buffers:  # a short write: the rest goes out through write()
            if done >= len(buffer):
                done -= len(buffer)
                continue
            self.write(memoryview(buffer)[done:])
            done = 0
        self._start_writeback()

    def _start_writeback(self) -> None:
        if self._written - self._flushed >= _WRITEBACK_BYTES and _SYNC_FILE_RANGE is not None:
            # Only starts the I/O (no wait); durability still comes from close()'s fsync.
            _SYNC_FILE_RANGE(
                self._fd, self._flushed, self._written - self._flushed, _SYNC_FILE_RANGE_WRITE
            )
            self._flushed = self._written

    def close(self) -> None:
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


def _sync_file_range() -> Any:
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return function


_WRITEBACK_BYTES = 8 << 20
_SYNC_FILE_RANGE_WRITE = 2
_SYNC_FILE_RANGE = _sync_file_range()


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.renameat2
    except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms
        return None


class LocalStorage(Storage):
    """A local directory; rename is atomic, files and directories are fsynced."""

    atomic_rename = True

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def listdir(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except FileNotFoundError:
            return []

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def is_symlink(self, path: str) -> bool:
        return os.path.islink(path)

    def file_id(self, path: str) -> list[int] | None:
        try:
            st = os.lstat(path)
        except OSError:
            return None
        return [st.st_ino, st.st_size, st.st_mtime_ns]

    def append_line(self, path: str, line: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def stamp(self) -> tuple[Any, int] | None:
        try:
            st = os.stat(self.root)
        except OSError:
            return None
        token = (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_nlink)
        return token, max(st.st_mtime_ns, st.st_ctime_ns)

    def open_writer(self, path: str) -> Writer:
        return _FdWriter(path)

    def open_reader(self, path: str) -> IO[bytes]:
        return open(path, "rb", buffering=0)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def exchange(self, src: str, dst: str) -> bool:
        renameat2 = _renameat2()
        if renameat2 is None:  # pragma: no cover - non-glibc platforms
            return False
        result = renameat2(
            _AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_EXCHANGE
        )
        if result != 0:
            code = ctypes.get_errno()
            if code in (errno.ENOSYS, errno.EINVAL):  # pragma: no cover - old kernels
                return False
            raise OSError(code, os.strerror(code), dst)
        return True

    def remove_tree(self, path: str) -> None:
        # A link is removed itself, never followed out of the run directory.
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class _SpooledUpload(Writer):
    """Stages a file (in memory up to ``_SPOOL_BYTES``, in a local temporary file beyond)
    and uploads it whole at :meth:`close`, so that an upload that fails transiently is
    sent again from its start; the object never exists half-written."""

    def __init__(self, storage: FsspecStorage, path: str) -> None:
        self._storage = storage
        self._path = path
        self._memory = bytearray()
        self._disk: IO[bytes] | None = None

    def write(self, data: memoryview | bytes) -> None:
        if self._disk is None and len(self._memory) + len(data) <= _SPOOL_BYTES:
            self._memory += data
            return
        if self._disk is None:
            self._disk = tempfile.NamedTemporaryFile(prefix="globalstep-upload-")  # noqa: SIM115
            self._disk.write(self._memory)
            self._memory = bytearray()
        self._disk.write(data)

    def close(self) -> None:
        fs, path = self._storage.fs, self._path
        try:
            if self._disk is None:
                data = self._memory  # no copy: botocore sends a bytearray as it is
                self._storage.retry(f"writing {path}", lambda: fs.pipe_file(path, data))
            else:
                self._disk.flush()
                name = self._disk.name
                self._storage.retry(f"writing {path}", lambda: fs.put_file(name, path))
        finally:
            self.abort()
        self._storage.invalidate(path)

    def abort(self) -> None:
        self._memory = bytearray()
        if self._disk is not None:
            disk, self._disk = self._disk, None
            with contextlib.suppress(OSError):
                disk.close()


_SPOOL_BYTES = 64 << 20
"""The largest file an fsspec upload stages in memory; larger ones go to a temporary file."""

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


class FsspecStorage(Storage):
    """Any fsspec file system (``s3://``, ``gs://``, ``memory://``, ...).

    Rename is not atomic there, so the commit marker alone decides what is committed (see
    :func:`~globalstep.checkpoint.format.commit`).

    Consistency: fsspec file systems cache listings (s3fs's ``dircache``), and instances
    are shared within a process, so another process's change may not show. Every
    listing, existence check, size and read here drops the cached entries of its path
    first and asks the store; S3 itself has been strongly consistent for reads and
    listings after writes since December 2020.

    Retries: each operation that can be repeated whole (a listing, a check, reading a
    whole file, removing, and uploading a whole file, which :meth:`open_writer` stages
    for that purpose) is tried up to ``attempts`` times when it fails with a transient
    error (:func:`is_transient`: timeouts, dropped connections, S3's 500 and 503), with
    exponential backoff: ``backoff_seconds`` after the first failure, doubling each time
    up to 10 s, each wait drawn uniformly between half and all of it. Other errors (no
    permission, missing object) are raised at once. These retries come on top of
    botocore's and s3fs's own, which repeat single requests. A streamed read
    (:meth:`open_reader`) is retried only by those.

    Args:
        root: the URL, e.g. ``s3://bucket/runs/a``.
        storage_options: keyword arguments for the fsspec file system, e.g. for s3fs
            ``{"endpoint_url": "http://127.0.0.1:9000", "key": ..., "secret": ...}``
            (s3fs also reads ``AWS_ENDPOINT_URL`` and the usual AWS variables).
        attempts: how often a transient failure is tried in all (>= 1).
        backoff_seconds: the wait after the first failure, in seconds (>= 0).

    Raises:
        ConfigError: ``attempts`` or ``backoff_seconds`` is out of range.
        MissingDependencyError: an ``s3://`` URL without s3fs installed (the ``s3`` extra).

    Example:
        >>> storage = FsspecStorage("memory://doc-fsspec", attempts=3)
        >>> calls = []
        >>> def flaky():
        ...     calls.append(1)
        ...     if len(calls) < 3:
        ...         raise TimeoutError("the store did not answer")
        ...     return "done"
        >>> storage.backoff_seconds = 0.001
        >>> storage.retry("an example", flaky), len(calls), storage.retried
        ('done', 3, 2)
    """

    def __init__(
        self,
        root: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        attempts: int = 5,
        backoff_seconds: float = 0.2,
    ) -> None:
        import fsspec

        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigError("attempts", "must be an int >= 1", attempts)
        if (
            isinstance(backoff_seconds, bool)
            or not isinstance(backoff_seconds, int | float)
            or not backoff_seconds >= 0
        ):
            raise ConfigError("backoff_seconds", "must be a number >= 0", backoff_seconds)
        try:
            fs, path = fsspec.core.url_to_fs(root, **dict(storage_options or {}))
        except ImportError as err:
            if root.startswith(("s3://", "s3a://")):
                raise MissingDependencyError("s3fs", "s3", f"the S3 directory {root}") from err
            raise
        super().__init__(path)
        self.fs = fs
        self.url = root
        self.attempts = attempts
        self.backoff_seconds = float(backoff_seconds)
        self.retried = 0
        """How many transient failures were tried again (for tests and diagnostics)."""

    def retry(self, action: str, operation: Callable[[], _T]) -> _T:
        """Runs ``operation``, trying again after a transient failure (see the class
        docstring); the last failure is raised as an ``OSError`` that names ``action``."""
        delay = self.backoff_seconds
        for attempt in range(1, self.attempts + 1):
            try:
                return operation()
            except Exception as err:
                if not is_transient(err):
                    raise
                if attempt == self.attempts:
                    if isinstance(err, OSError):
                        raise
                    raise OSError(
                        errno.EIO, f"{action} failed {attempt} times, the last with {err!r}"
                    ) from err
            self.retried += 1
            time.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, _MAX_BACKOFF_SECONDS)
        raise AssertionError("unreachable")  # pragma: no cover

    def invalidate(self, path: str) -> None:
        """Drops what the file system has cached of ``path`` and its parents."""
        self.fs.invalidate_cache(path)

    def _fresh(self, action: str, path: str, operation: Callable[[], _T]) -> _T:
        def run() -> _T:
            self.invalidate(path)
            return operation()

        return self.retry(f"{action} {path}", run)

    def makedirs(self, path: str) -> None:
        self.retry(f"creating {path}", lambda: self.fs.makedirs(path, exist_ok=True))

    def listdir(self, path: str) -> list[str]:
        def run() -> list[str]:
            try:
                entries = self.fs.ls(path, detail=False)
            except FileNotFoundError:
                return []
            return [str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries]

        return self._fresh("listing", path, run)

    def exists(self, path: str) -> bool:
        return self._fresh("looking for", path, lambda: bool(self.fs.exists(path)))

    def size(self, path: str) -> int:
        return self._fresh("sizing", path, lambda: int(self.fs.size(path)))

    def is_dir(self, path: str) -> bool:
        return self._fresh("looking at", path, lambda: bool(self.fs.isdir(path)))

    def read_bytes(self, path: str) -> bytes:
        return self._fresh("reading", path, lambda: bytes(self.fs.cat_file(path)))

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Creates ``path`` holding ``data`` unless it exists; returns False where it did.

        Atomic where the file system supports exclusive creation (mode ``"xb"``): local
        files, ``memory://``, and S3 through s3fs, which sends a conditional PutObject
        (``If-None-Match: *``) that the store refuses when the object exists. A store that
        ignores that header (and a file system without ``"xb"``) gets a check followed by
        a write, which two writers starting within the same moment can both pass. A
        retried attempt that finds the object holding ``data`` (its own earlier attempt
        succeeded unseen) counts as created.
        """

        def run() -> bool:
            self.invalidate(path)
            try:
                with self.fs.open(path, "xb") as handle:
                    handle.write(data)
            except FileExistsError:
                return False
            except (ValueError, NotImplementedError, TypeError):
                if self.fs.exists(path):
                    return False
                with self.fs.open(path, "wb") as handle:
                    handle.write(data)
            return True

        before = self.retried
        if self.retry(f"creating {path}", run):
            return True
        if self.retried > before:
            with contextlib.suppress(FileNotFoundError):
                return self.read_bytes(path) == data
        return False

    def open_writer(self, path: str) -> Writer:
        return _SpooledUpload(self, path)

    def open_reader(self, path: str) -> IO[bytes]:
        handle: IO[bytes] = self._fresh("opening", path, lambda: self.fs.open(path, "rb"))
        return handle

    def copy_file(self, src: str, dst: str) -> None:
        self.retry(f"copying {src} to {dst}", lambda: self.fs.copy(src, dst))
        self.invalidate(dst)

    def rename(self, src: str, dst: str) -> None:
        self.retry(f"moving {src}", lambda: self.fs.mv(src, dst, recursive=True))
        self.invalidate(src)
        self.invalidate(dst)

    def remove_tree(self, path: str) -> None:
        def run() -> None:
            self.invalidate(path)
            # Missing, or removed by an earlier attempt whose answer was lost: done.
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(path, recursive=True)
            self.invalidate(path)

        self.retry(f"removing {path}", run)

    def remove_file(self, path: str) -> None:
        def run() -> None:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(path)
            self.invalidate(path)

        self.retry(f"removing {path}", run)


_MAX_BACKOFF_SECONDS = 10.0


def is_remote(directory: str) -> bool:
    """Returns whether ``directory`` is an fsspec URL served by :class:`FsspecStorage`
    (any ``scheme://`` but ``file://`` and ``local://``, which are local directories).

    Example:
        >>> is_remote("s3://bucket/run"), is_remote("/tmp/run"), is_remote("file:///tmp/run")
        (True, False, False)
    """
    return "://" in directory and not directory.startswith(("file://", "local://"))


def open_storage(
    directory: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> Storage:
    """Returns the storage for a local path or an fsspec URL (``memory://``, ``s3://``, ...).

    Args:
        directory: a local path or an fsspec URL.
        storage_options: keyword arguments for the fsspec file system of a URL (for s3fs:
            ``endpoint_url``, ``key``, ``secret``, ``client_kwargs``, ...).

    Raises:
        ConfigError: ``directory`` is not a path or URL string, or ``storage_options`` is
            not a mapping or is given for a local directory.
    """
    if not isinstance(directory, str | os.PathLike):
        raise ConfigError("directory", "must be a path or an fsspec URL", directory)
    text = os.fspath(directory)
    if not text:
        raise ConfigError("directory", "must be a non-empty path", directory)
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise ConfigError("storage_options", "must be a mapping or None", storage_options)
    remote = is_remote(text)
    if storage_options and not remote:
        raise ConfigError(
            "storage_options",
            "applies to fsspec URLs (s3://...) only",
            storage_options,
            hint=f"{text!r} is a local directory; drop storage_options",
        )
    for scheme in ("file://", "local://"):
        if text.startswith(scheme):
            # fsspec's local file system is this one: the local storage's flock and
            # atomic rename serve it better than fsspec's copy of the file operations.
            return LocalStorage(os.path.abspath(text[len(scheme) :]))
    if remote:
        return FsspecStorage(text, storage_options)
    return LocalStorage(os.path.abspath(text))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - someone else's live process
        return True
    return True


def _describe(holder: Any) -> str:
    if isinstance(holder, dict):
        return f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}"
    return repr(holder)


class DirectoryLock:
    """One writer per checkpoint directory; the lock file names its holder.

    Locally (paths, ``file://`` and ``local://`` URLs) an ``flock`` on ``<dir>/.lock`` is
    held while the writer lives, so the kernel frees it when the holder dies (a stale lock
    is then taken over). On fsspec storage the lock file alone decides: it is created
    exclusively (:meth:`FsspecStorage.create_exclusive`), so exactly one of any number of
    writers starting together gets it where the store honours exclusive creation: local
    files, ``memory://``, and S3 (AWS since August 2024, MinIO, moto's server), where s3fs
    sends a conditional PutObject with ``If-None-Match: *``. On a store that ignores that
    header two writers starting within the same moment can both pass the check; the lock
    file's content, read back after writing, then tells every writer that wrote before
    the other's write landed, but not one whose read came first. A lock held by a dead
    process of this host is taken over by removing it and creating it again; that
    take-over is not atomic (two writers taking over the same stale lock at the same
    moment can both succeed). A lock left on an object store by a process of another
    host, or by a killed container, is not stale to this host: remove ``<dir>/.lock`` by
    hand once that writer is gone. Each writer releases only a lock file that still
    names it.

    Attributes:
        took_over: the holder of a stale lock this lock replaced, or None.
    """

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._path = storage.join(LOCK_FILE)
        self._fd: int | None = None
        self._held_remote: bytes | None = None
        self.took_over: str | None = None

    def _me(self) -> bytes:
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "token": secrets.token_hex(8),
        }
        return json.dumps(holder).encode()

    def _read_holder(self, data: bytes) -> Any:
        try:
            return json.loads(data.decode())
        except (UnicodeDecodeError, ValueError):
            return data.decode(errors="replace")

    def _locked(self, holder: Any) -> LockError:
        return LockError(
            f"{self._storage.root} is locked by another writer ({_describe(holder)}); "
            "one writer per directory, or open it with read_only=True",
            self._path,
            holder,
        )

    def acquire(self) -> None:
        """Takes the lock.

        Raises:
            LockError: another live writer holds it; the message names the holder.
            CheckpointError: the lock cannot be written (a full disk, a file where the
                directory should be, no permission); the message says what to change.
        """
        root = self._storage.root
        try:
            self._storage.makedirs(root)
            if isinstance(self._storage, LocalStorage):
                self._acquire_local()
            else:
                self._acquire_remote()
        except CheckpointError:
            raise
        except OSError as err:
            raise CheckpointError(_lock_failure(root, err), self._path) from err

    def _acquire_local(self) -> None:
        import fcntl

        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._read_holder(os.pread(fd, 4096, 0))
            os.close(fd)
            raise self._locked(holder) from None
        try:
            previous = os.pread(fd, 4096, 0)
            os.ftruncate(fd, 0)
            os.pwrite(fd, self._me(), 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)  # frees the flock: a lock that names nobody is not held
            raise
        if previous.strip():
            self.took_over = _describe(self._read_holder(previous))
        self._fd = fd

    def _acquire_remote(self) -> None:
        storage = self._storage
        assert isinstance(storage, FsspecStorage)
        me = self._me()
        for _ in range(3):
            if storage.create_exclusive(self._path, me):
                # On stores without exclusive creation another writer may have written
                # after us: the file's content decides.
                if storage.read_bytes(self._path) != me:
                    raise self._locked(self._read_holder(storage.read_bytes(self._path)))
                self._held_remote = me
                return
            try:
                data = storage.read_bytes(self._path)
            except FileNotFoundError:
                continue  # released between our attempt and the read: try again
            holder = self._read_holder(data)
            stale = (
                isinstance(holder, dict)
                and holder.get("host") == socket.gethostname()
                and isinstance(holder.get("pid"), int)
                and not _pid_alive(holder["pid"])
            )
            if not stale:
                raise self._locked(holder)
            with contextlib.suppress(FileNotFoundError):
                if storage.read_bytes(self._path) == data:  # nobody took it over meanwhile
                    storage.remove_file(self._path)
            self.took_over = _describe(holder)
        raise self._locked(self._read_holder(storage.read_bytes(self._path)))

    def release(self) -> None:
        """Frees the lock; releasing twice, or a lock never taken, is harmless.

        A lock file that no longer names this writer (taken over as stale) is left alone.
        """
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)
        elif self._held_remote is not None:
            mine, self._held_remote = self._held_remote, None
            try:
                current = self._storage.read_bytes(self._path)
            except FileNotFoundError:
                return
            except OSError:
                current = mine  # unreadable: as before this check, the holder removes it
            if current == mine:
                self._storage.remove_file(self._path)


def _lock_failure(root: str, err: OSError) -> str:
    """Says why taking the lock of ``root`` failed, and what to change."""
    if err.errno == errno.ENOSPC:
        return (
            f"no space left on the device of {root} to take the writer's lock; free space "
            "there (old checkpoints: `globalstep ckpt prune --keep N`) and start again"
        )
    if err.errno in (errno.ENOTDIR, errno.EEXIST):
        return f"{root} is not a directory ({err.strerror}); give a checkpoint directory"
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (
            f"cannot write the writer's lock in {root} ({err.strerror}); give a directory "
            "you can write, or open it with read_only=True"
        )
    return f"taking the writer's lock in {root} failed: {err}"


@contextlib.contextmanager
def wrap_os_errors(action: str, path: str) -> Iterator[None]:
    """Turns an OSError into a CheckpointError that says what was being done, and where."""
    try:
        yield
    except CheckpointError:
        raise
    except OSError as err:
        raise CheckpointError(f"{action} failed at {path}: {err}", path) from err
