"""TFRecord framing, the container format of TensorBoard event files.

Each record is ``uint64 length | uint32 masked crc32c(length) | data | uint32 masked
crc32c(data)``, little-endian. The checksums come from ``google-crc32c`` (Google's C
library), because TensorBoard's own writer computes them in pure Python at about 100x the
cost; the bytes are identical to ``tensorboard.summary.writer.record_writer.RecordWriter``'s
(a test compares them).

Example:
    >>> framed = frame(b"abc")
    >>> len(framed), list(iter_records(framed))
    (19, [b'abc'])
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import google_crc32c

from globalstep.summary._base import MASK_DELTA

__all__ = ["frame", "iter_records", "masked_crc32c", "record_header"]

_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_PACK_CRC = _CRC.pack
_crc32c = google_crc32c.value


def masked_crc32c(data: bytes) -> int:
    """Returns TFRecord's masked CRC32C of ``data``."""
    crc: int = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


_HEADERS: dict[int, bytes] = {}


def record_header(length: int) -> bytes:
    """Returns the 12 bytes that precede a record's ``length`` bytes of data."""
    header = _LENGTH.pack(length)
    return header + _CRC.pack(masked_crc32c(header))


def frame(data: bytes) -> bytes:
    """Returns ``data`` framed as one TFRecord."""
    length = len(data)
    # Scalar events have a handful of lengths: their headers are computed once each.
    header = _HEADERS.get(length)
    if header is None:
        header = record_header(length)
        if length < 1024:
            _HEADERS[length] = header
    # masked_crc32c, inlined: this runs once per event.
    crc: int = _crc32c(data)
    return header + data + _PACK_CRC((((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF)


def iter_records(buffer: bytes) -> Iterator[bytes]:
    """Yields the payload of each whole, intact record in ``buffer``.

    Reading stops at a truncated record (a crashed writer's last one) or at the first
    record whose checksum does not match, as TensorBoard's reader does.
    """
    offset, end = 0, len(buffer)
    while offset + 12 <= end:
        header = buffer[offset : offset + 8]
        (header_crc,) = _CRC.unpack_from(buffer, offset + 8)
        if header_crc != masked_crc32c(header):
            return
        (length,) = _LENGTH.unpack(header)
        start = offset + 12
        if start + length + 4 > end:
            return
        data = buffer[start : start + length]
        (data_crc,) = _CRC.unpack_from(buffer, start + length)
        if data_crc != masked_crc32c(data):
            return
        yield data
        offset = start + length + 4
