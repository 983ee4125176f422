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
import secrets
import shutil
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import IO, Any

from globalstep.errors import CheckpointError, ConfigError, LockError

__all__ = ["DirectoryLock", "FsspecStorage", "LocalStorage", "Storage", "open_storage"]

LOCK_FILE = ".lock"


class Writer(ABC):
    """A file being written; :meth:`close` makes its bytes durable (fsync where possible)."""

    @abstractmethod
    def write(self, data: memoryview | bytes) -> None:
        """Writes all of ``data``."""

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


class _FsspecWriter(Writer):
    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def write(self, data: memoryview | bytes) -> None:
        self._handle.write(data)

    def close(self) -> None:
        self._handle.close()

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self._handle.close()


class FsspecStorage(Storage):
    """Any fsspec file system; rename is not atomic, so the commit marker decides."""

    def __init__(self, root: str) -> None:
        import fsspec

        fs, path = fsspec.core.url_to_fs(root)
        super().__init__(path)
        self.fs = fs
        self.url = root

    def makedirs(self, path: str) -> None:
        self.fs.makedirs(path, exist_ok=True)

    def listdir(self, path: str) -> list[str]:
        try:
            entries = self.fs.ls(path, detail=False)
        except FileNotFoundError:
            return []
        return [str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries]

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(path))

    def size(self, path: str) -> int:
        return int(self.fs.size(path))

    def is_dir(self, path: str) -> bool:
        return bool(self.fs.isdir(path))

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Creates ``path`` holding ``data`` unless it exists; returns False where it did.

        Atomic where the file system supports exclusive creation (mode ``"xb"``: local
        files, ``memory://``); elsewhere a check followed by a write, which two writers
        starting within the same moment can both pass.
        """
        try:
            handle = self.fs.open(path, "xb")
        except FileExistsError:
            return False
        except (ValueError, NotImplementedError, TypeError):
            if self.fs.exists(path):
                return False
            self.write_bytes(path, data)
            return True
        with handle:
            handle.write(data)
        return True

    def open_writer(self, path: str) -> Writer:
        return _FsspecWriter(self.fs.open(path, "wb"))

    def open_reader(self, path: str) -> IO[bytes]:
        handle: IO[bytes] = self.fs.open(path, "rb")
        return handle

    def rename(self, src: str, dst: str) -> None:
        self.fs.mv(src, dst, recursive=True)

    def remove_tree(self, path: str) -> None:
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)


def open_storage(directory: str | os.PathLike[str]) -> Storage:
    """Returns the storage for a local path or an fsspec URL (``memory://``, ``s3://``, ...).

    Raises:
        ConfigError: ``directory`` is not a path or URL string.
    """
    if not isinstance(directory, str | os.PathLike):
        raise ConfigError("directory", "must be a path or an fsspec URL", directory)
    text = os.fspath(directory)
    if not text:
        raise ConfigError("directory", "must be a non-empty path", directory)
    for scheme in ("file://", "local://"):
        if text.startswith(scheme):
            # fsspec's local file system is this one: the local storage's flock and
            # atomic rename serve it better than fsspec's copy of the file operations.
            return LocalStorage(os.path.abspath(text[len(scheme) :]))
    if "://" in text:
        return FsspecStorage(text)
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
    exclusively where the store can (``memory://``, and any store whose ``open(path,
    "xb")`` is atomic), so exactly one of two writers starting together gets it; on stores
    without exclusive creation two writers starting within the same moment can both pass
    the check, and only the lock file's content (read back after writing) tells the later
    one. A lock held by a dead process of this host is taken over. Each writer releases
    only a lock file that still names it.

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
