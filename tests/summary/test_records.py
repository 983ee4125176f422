"""Tests for globalstep.summary._records, the TFRecord framing of event files."""

import io

import pytest

pytest.importorskip("google_crc32c")
record_writer = pytest.importorskip("tensorboard.summary.writer.record_writer")

from globalstep.summary._records import frame, iter_records  # noqa: E402


@pytest.mark.parametrize("payload", [b"", b"x", bytes(range(256)) * 40])
def test_frame_matches_tensorboards_record_writer(payload):
    """Our framing is byte for byte TensorBoard's own RecordWriter's."""
    buffer = io.BytesIO()
    record_writer.RecordWriter(buffer).write(payload)
    assert frame(payload) == buffer.getvalue()


def test_reading_stops_at_a_truncated_record():
    """A record cut short (a crash mid-write) ends the reading, earlier ones intact."""
    data = frame(b"one") + frame(b"two")
    assert list(iter_records(data[:-3])) == [b"one"]


def test_reading_stops_at_a_corrupt_record():
    """A flipped byte in a record's data ends the reading there."""
    data = bytearray(frame(b"one") + frame(b"two"))
    data[-6] ^= 0xFF
    assert list(iter_records(bytes(data))) == [b"one"]


def test_reading_stops_at_a_corrupt_length():
    """A flipped byte in a record's length (its header checksum fails) ends the reading."""
    data = bytearray(frame(b"one") + frame(b"two"))
    data[len(frame(b"one"))] ^= 0x01
    assert list(iter_records(bytes(data))) == [b"one"]
