"""What the writer hands its backends: buffered items and the backend interface."""

from __future__ import annotations

from typing import Any, Final, Protocol

from globalstep._closing import Closing
from globalstep.storage import Log

__all__ = [
    "HISTOGRAM",
    "KIND",
    "MASK_DELTA",
    "PAYLOAD",
    "RESTART",
    "SCALAR",
    "SCALARS",
    "STEP",
    "TAG",
    "TEXT",
    "WALL_TIME",
    "Backend",
    "Closing",
    "Item",
    "nonfinite_text",
]

SCALAR = 0
HISTOGRAM = 1
TEXT = 2
RESTART = 3
SCALARS = 4


def nonfinite_text(value: float) -> str:
    """The JSON spelling of NaN and the infinities that Python's ``json`` writes and reads
    back (``NaN``, ``Infinity``, ``-Infinity``); a finite number's is its ``repr``."""
    if value != value:
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


MASK_DELTA = 0xA282EAD8
"""TFRecord's checksum mask: a record's CRC-32C ``c`` is stored as
``rotate_right(c, 15) + MASK_DELTA`` (mod 2**32), in each encoder of event files."""

Item = tuple[int, str, int, float, Any]
"""One buffered write: (kind, tag, step, wall_time, payload).

The payload is a float for a scalar, a float64 NumPy array for a histogram and a str for a
text. ``(SCALARS, "", step, wall_time, {tag: float, ...})`` is several scalars at one step
and wall time (one ``SummaryWriter.scalars`` call), written in the dict's order; a backend
encodes their step and wall time once. A restart mark is ``(RESTART, "", purge_step,
wall_time, None)``: it goes through the queue so that it lands between the points written
before and after it. The caller's thread only builds this tuple; backends encode it.

An item is a plain tuple because the training thread builds one per update: a
``NamedTuple`` or a slotted class costs about 350 ns more to build (half again the cost
of ``SummaryWriter.enqueue_scalars``, measured on Python 3.11), a dict twice a tuple's.
Code reads its fields by unpacking into names, or by :data:`KIND` ... :data:`PAYLOAD`.
"""

KIND: Final = 0
"""The position of an item's kind (:data:`SCALAR`, :data:`SCALARS`, ...)."""
TAG: Final = 1
"""The position of an item's tag (``""`` for a group or a restart mark)."""
STEP: Final = 2
"""The position of an item's step (the purge step of a restart mark)."""
WALL_TIME: Final = 3
"""The position of an item's wall time, in seconds since the epoch."""
PAYLOAD: Final = 4
"""The position of an item's payload (a number, a group's dict, an array, a str, None)."""


class Backend(Protocol):
    """One output format; called from the writer's background thread, one call at a time."""

    path: str

    def mark_restart(self, purge_step: int, wall_time: float) -> None:
        """Records that points at ``purge_step`` and above, written before, are void."""

    def write(self, items: list[Item]) -> None:
        """Encodes and writes ``items`` in order (restart marks included)."""

    def flush(self) -> None:
        """Pushes written bytes to the operating system."""

    def sync(self) -> None:
        """Flushes, then asks the operating system to put the file on disk (fsync)."""

    def close(self) -> None:
        """Flushes and closes the file."""


def histogram_buckets(values: Any, bins: int = 30) -> dict[str, Any]:
    """Returns TensorBoard's histogram fields for a finite float64 array.

    ``bucket_limit`` holds each bucket's right edge and ``bucket`` its count, as in
    ``HistogramProto``.

    Example:
        >>> import numpy as np
        >>> h = histogram_buckets(np.array([0.0, 1.0, 1.0]), bins=2)
        >>> h["num"], h["bucket_limit"], h["bucket"]
        (3, [0.5, 1.0], [1.0, 2.0])
    """
    import numpy as np

    array = np.asarray(values, dtype=np.float64).ravel()
    if array.size == 0:
        return {
            "min": 0.0,
            "max": 0.0,
            "num": 0,
            "sum": 0.0,
            "sum_squares": 0.0,
            "bucket_limit": [],
            "bucket": [],
        }
    counts, edges = np.histogram(array, bins=bins)
    return {
        "min": float(array.min()),
        "max": float(array.max()),
        "num": int(array.size),
        "sum": float(array.sum()),
        "sum_squares": float(np.dot(array, array)),
        "bucket_limit": [float(e) for e in edges[1:]],
        "bucket": [float(c) for c in counts],
    }


class LogBackend:
    """A backend whose files are one storage log (:meth:`globalstep.storage.Storage.open_log`):
    its flush, sync and close are the log's."""

    _file: Log

    def flush(self) -> None:
        self._file.flush()

    def sync(self) -> None:
        self._file.sync()

    def close(self) -> None:
        self._file.close()
