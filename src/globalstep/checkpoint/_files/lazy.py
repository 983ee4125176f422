"""Lazy access to one checkpoint's arrays: memory-mapped, reading only what is asked for.

Example:
    >>> import numpy as np, tempfile
    >>> from globalstep.checkpoint import CheckpointManager
    >>> with CheckpointManager(tempfile.mkdtemp()) as manager:
    ...     manager.save(3, {"w": np.arange(4.0), "b": np.zeros(2)})
    ...     with manager.open() as reader:
    ...         print(reader.step, sorted(reader.keys()), reader["w"][1])
    3 ['b', 'w'] 1.0
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from globalstep._closing import Closing
from globalstep._errors import ConfigError, CorruptCheckpointError
from globalstep.checkpoint._files.arrays import check_entry, read_header
from globalstep.checkpoint._files.document import ARRAYS_FILE, Document
from globalstep.checkpoint._files.fastio import read_exactly
from globalstep.checkpoint._tree.flatten import array_nodes
from globalstep.storage import Storage, wrap_os_errors

__all__ = ["CheckpointReader"]


class CheckpointReader(Closing):
    """Opens one committed checkpoint for reading single arrays on demand.

    Local files are memory-mapped and each array is a read-only view of the mapping; on
    fsspec storage each array is read when asked for. The marker and state.json are
    checked on open; array bytes are not (their checksum covers the whole file), so use
    :meth:`CheckpointManager.verify` or a full restore where that matters. The arrays are
    the main file's: a distributed checkpoint's per-rank leaves (each rank's own file,
    see :mod:`globalstep.checkpoint._ranks.perrank`) are not among them; restore them instead.

    Attributes:
        step: the checkpoint's step.
        state: its checked state.json, a
            :class:`~globalstep.checkpoint._files.document.Document` (a mapping of its keys too).
    """

    def __init__(self, storage: Storage, name: str, step: int, state: Document) -> None:
        self.step = step
        self.state = state
        self._storage = storage
        self._path = storage.join(name, ARRAYS_FILE)
        self._nodes = array_nodes(state.tree)
        self._mmap: mmap.mmap | None = None
        with wrap_os_errors(f"opening {name}", self._path):
            try:
                f = storage.open_reader(self._path)
            except FileNotFoundError as err:
                raise CorruptCheckpointError(f"{self._path} is missing", self._path) from err
            with f:
                size = storage.size(self._path)
                prefix, entries = read_header(f, size, self._path)
                if storage.local and size > 0:
                    self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._data_start = len(prefix)
        self._entries = {e[0]: e for e in entries}
        if set(self._entries) != set(self._nodes):
            raise CorruptCheckpointError(
                f"{self._path}: its tensors differ from state.json", self._path
            )

    def keys(self) -> list[str]:
        """Returns the flat names of the arrays, e.g. ``model/layer1/weight``."""
        return list(self._nodes)

    def __getitem__(self, key: str) -> np.ndarray[Any, Any]:
        """Returns one array (a read-only memory map where the storage is local).

        Raises:
            ConfigError: no array of that name.
        """
        if key not in self._entries:
            raise ConfigError("key", f"must name an array of step {self.step}", key)
        _, code, begin, end, shape = self._entries[key]
        dtype, array_shape = check_entry(self._nodes[key], code, shape, self._path)
        count = (end - begin) // dtype.itemsize if dtype.itemsize else 0
        if self._mmap is not None:
            flat = np.frombuffer(self._mmap, dtype, count, self._data_start + begin)
        else:
            with (
                wrap_os_errors(f"reading {key!r}", self._path),
                self._storage.open_reader(self._path) as f,
            ):
                f.seek(self._data_start + begin)
                flat = np.empty(count, dtype)
                read_exactly(f, flat.view(np.uint8).data, self._path)
        return flat.reshape(array_shape)

    def close(self) -> None:
        """Unmaps the file; arrays handed out keep the mapping alive until released."""
        self._mmap = None
