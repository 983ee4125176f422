"""Any fsspec file system as storage (``s3://``, ``gs://``, ``memory://``): retried
operations and staged uploads; rename is not atomic there.
"""

from __future__ import annotations

import contextlib
import errno
import random
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import IO, Any, TypeVar

from globalstep._errors import ConfigError, MissingDependencyError
from globalstep.storage._base import Storage, Writer, is_transient


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


_T = TypeVar("_T")

_SPOOL_BYTES = 64 << 20
"""The largest file an fsspec upload stages in memory; larger ones go to a temporary file."""


class FsspecStorage(Storage):
    """Any fsspec file system (``s3://``, ``gs://``, ``memory://``, ...).

    Rename is not atomic there (:attr:`atomic_rename` is False), so checkpoints are
    committed by their marker alone (``globalstep.checkpoint._files.commit.MarkerCommit``).

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

    @property
    def location(self) -> str:
        return self.url

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
