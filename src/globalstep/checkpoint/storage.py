"""The storage names as ``globalstep.checkpoint`` exported them before ``globalstep.storage``
took them in (checkpoints and summaries both stand on it): kept for code that imports them
from here.

Example:
    >>> from globalstep.checkpoint.storage import open_storage
    >>> type(open_storage("memory://doc-storage")).__name__
    'FsspecStorage'
"""

from __future__ import annotations

from globalstep.storage import (
    TRANSIENT_ERRNOS,
    DirectoryLock,
    FsspecStorage,
    LocalStorage,
    Storage,
    is_remote,
    is_transient,
    open_storage,
)

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
