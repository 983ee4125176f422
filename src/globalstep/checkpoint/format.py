"""The on-disk format of one checkpoint, as one import: the names of its files and the calls
that write, read, verify and delete it, each kept where its one concept lives.

One directory per checkpoint, ``<dir>/step-<step, 12 digits>/``, holds

- ``arrays.safetensors``: every array, in the safetensors format
  (:mod:`globalstep.checkpoint.arrays`; how fast its bytes move is
  :mod:`globalstep.checkpoint.fastio`'s);
- ``state.json``: the format version, the tree's structure with every non-array leaf, every
  clock's Progress, metrics, the creation time and the size and checksum of the array file;
- ``COMMITTED``: written last; it holds the size and checksum of ``state.json``, and its own
  (both documents: :mod:`globalstep.checkpoint.document`).

How a directory becomes visible whole, or not at all, is the commit protocol's
(:mod:`globalstep.checkpoint.commit`): renamed into place where rename is atomic, the
marker alone deciding elsewhere. The functions here call the protocol chosen for the
storage they are given.

Example:
    >>> import numpy as np
    >>> from globalstep.storage import open_storage
    >>> storage = open_storage("memory://doc-format")
    >>> commit(storage, "step-000000000007", {"w": np.arange(3.0)}, {"tree": None})
    >>> committed_names(storage)
    ['step-000000000007']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from globalstep.checkpoint._rank_leaves import verify_rank_leaves

# Beside __all__, the pieces' names that earlier code imports from here (``x as x``: a
# re-export).
from globalstep.checkpoint.arrays import check_entry as check_entry
from globalstep.checkpoint.arrays import parse_header as parse_header
from globalstep.checkpoint.arrays import read_arrays
from globalstep.checkpoint.arrays import read_header as read_header
from globalstep.checkpoint.commit import STEP_PATTERN, protocol_for
from globalstep.checkpoint.document import (
    ARRAYS_FILE,
    COMMIT_FILE,
    FORMAT_VERSION,
    STATE_FILE,
    Document,
    load_state,
)
from globalstep.checkpoint.document import checksum_of as checksum_of
from globalstep.checkpoint.fastio import ReadAhead, read_ahead
from globalstep.checkpoint.fastio import read_exactly as read_exactly
from globalstep.storage import Storage

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


def commit(
    storage: Storage,
    name: str,
    arrays: Mapping[str, Any],
    document: Document | Mapping[str, Any],
    **how: Any,
) -> None:
    """Writes one checkpoint and commits it atomically under ``name``, by the protocol of
    ``storage``: :meth:`globalstep.checkpoint.commit.CommitProtocol.commit` (the open
    summary writers' points made durable first), whose keyword arguments ``how`` are
    (``force``, ``hooks``, ``fresh``, ``marked``, ``before``).

    Raises:
        CheckpointExistsError: ``name`` is committed already and ``force`` is False.
        CheckpointError: an I/O error (full disk, file too large, ...); nothing visible
            has changed, and no earlier checkpoint is touched.
    """
    protocol_for(storage).commit(name, arrays, document, **how)


def committed_names(storage: Storage, pattern: str = STEP_PATTERN) -> list[str]:
    """Returns the names of committed checkpoints (a marker inside), sorted by name."""
    return protocol_for(storage).committed_names(pattern)


def remove_checkpoint(storage: Storage, name: str) -> None:
    """Deletes a committed checkpoint so that no reader ever sees half of it (see
    :meth:`globalstep.checkpoint.commit.CommitProtocol.remove`)."""
    protocol_for(storage).remove(name)


def remove_stale(storage: Storage, pattern: str = STEP_PATTERN) -> list[str]:
    """Removes temporary and half-deleted directories left by killed processes.

    Only a writer holding the directory's lock may call this. Returns the names removed.
    """
    return protocol_for(storage).remove_stale(pattern)


def verify_checkpoint(storage: Storage, name: str) -> Document:
    """Checks every checksum of checkpoint ``name``; returns its state.json.

    Raises:
        CorruptCheckpointError: a file is missing, truncated or fails its checksum.
    """
    state = load_state(storage, name)
    read_arrays(storage, name, state, keep=False)
    verify_rank_leaves(storage, name, state)  # each rank's file of per-rank leaves
    return state
