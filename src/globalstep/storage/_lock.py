"""One writer per directory: an ``flock`` locally, an exclusively created lock file on
fsspec stores.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import socket
import time
from typing import Any

from globalstep._errors import CheckpointError, LockError
from globalstep.storage._base import LOCK_FILE, Storage


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
            if self._storage.local:
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
