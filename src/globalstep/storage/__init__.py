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
import re
from collections.abc import Callable, Mapping
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
    "register_storage",
    "wrap_os_errors",
]


_OPENERS: dict[str, Callable[[str, Mapping[str, Any] | None], Storage]] = {}


def register_storage(
    scheme: str, opener: Callable[[str, Mapping[str, Any] | None], Storage]
) -> None:
    """Makes every ``<scheme>://...`` directory open as ``opener(url, storage_options)``: a
    store of your own (a :class:`Storage` subclass) for checkpoints and JSONL logs alike.

    Raises:
        ConfigError: ``scheme`` is not a URL scheme, is a local one (``file``, ``local``)
            or is registered already; ``opener`` is not callable.
    """
    if not isinstance(scheme, str) or not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme):
        raise ConfigError("scheme", "must be a URL scheme such as 'myblob'", scheme)
    if scheme in ("file", "local"):
        raise ConfigError("scheme", "must not be a local directory's scheme", scheme)
    if scheme in _OPENERS:
        raise ConfigError(
            "scheme",
            f"must be registered once; {_OPENERS[scheme]!r} opens it already",
            scheme,
        )
    if not callable(opener):
        raise ConfigError("opener", "must be callable as opener(url, storage_options)", opener)
    _OPENERS[scheme] = opener


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
    opener = _OPENERS.get(text.partition("://")[0]) if remote else None
    if opener is not None:
        return opener(text, storage_options)
    if remote:
        return FsspecStorage(text, storage_options)
    return LocalStorage(os.path.abspath(text))
