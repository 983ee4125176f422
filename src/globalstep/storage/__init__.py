"""Where bytes live, for checkpoints and summaries alike: local directories or fsspec file
systems.

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

import os
from collections.abc import Mapping
from typing import Any

from globalstep._errors import ConfigError
from globalstep.storage._base import (
    LOCK_FILE,
    TRANSIENT_ERRNOS,
    Log,
    Storage,
    WholeFileLog,
    Writer,
    is_remote,
    is_transient,
    wrap_os_errors,
)
from globalstep.storage._local import LocalStorage
from globalstep.storage._lock import DirectoryLock
from globalstep.storage._remote import FsspecStorage

__all__ = [
    "LOCK_FILE",
    "TRANSIENT_ERRNOS",
    "DirectoryLock",
    "FsspecStorage",
    "LocalStorage",
    "Log",
    "Storage",
    "WholeFileLog",
    "Writer",
    "is_remote",
    "is_transient",
    "open_storage",
    "wrap_os_errors",
]


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
