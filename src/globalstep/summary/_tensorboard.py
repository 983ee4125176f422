"""The TensorBoard backend: event files in TensorBoard's own format.

Messages are TensorBoard's protobufs (``tensorboard.compat.proto``), framed as TFRecords
(:mod:`globalstep.summary._records`). A scalar's ``Event`` is encoded by hand
(:func:`scalar_event`): its bytes are the ones ``Event.SerializeToString()`` gives, a
test compares them, at a third of the cost; a long run of ``scalars()`` groups with the
same tags is encoded as NumPy tables (:mod:`globalstep.summary._event_batch`), at a third
again; the rest goes through the protobuf classes.
A restart is TensorBoard's own mechanism:
an event at the purge step whose ``session_log`` status is ``START``, after which
TensorBoard drops the points at that step and above written before it. It is written twice,
because the server's Python loader ignores the first START of a run.
"""

from __future__ import annotations

import math
import os
import re
import socket
import struct
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from globalstep._optional import require
from globalstep.storage import open_storage
from globalstep.summary._base import (
    HISTOGRAM,
    KIND,
    MASK_DELTA,
    PAYLOAD,
    RESTART,
    SCALAR,
    SCALARS,
    Item,
    LogBackend,
    histogram_buckets,
)
from globalstep.summary._event_batch import MIN_GROUPS, encode_groups

__all__ = ["TensorBoardBackend", "event_file_name", "require_tensorboard", "scalar_event"]

_FILE_VERSION = "brain.Event:2"
_EVENT_FILE = re.compile(r"events\.out\.tfevents\.(\d+)\.")


def require_tensorboard() -> None:
    """Raises MissingDependencyError naming the extra when TensorBoard's pieces are absent."""
    require("google_crc32c", "tensorboard", "TensorBoard event files")
    require("tensorboard.compat.proto.event_pb2", "tensorboard", "TensorBoard event files")


def event_file_name(directory: str, counter: int) -> str:
    """Returns a new event file's name, sorting after every event file in ``directory``.

    TensorBoard reads a run's event files in name order, so a restarted run's file must
    sort last even when it starts within the same second as the crashed one.
    """
    stamp = int(time.time())
    for name in os.listdir(directory):
        match = _EVENT_FILE.match(name)
        if match:
            stamp = max(stamp, int(match.group(1)) + 1)
    host = socket.gethostname().replace(".", "_") or "host"
    return f"events.out.tfevents.{stamp:010d}.{host}.{os.getpid()}.{counter}.globalstep"


_DOUBLE = struct.Struct("<d").pack
_FLOAT = struct.Struct("<f").pack
_PACK_CRC = struct.Struct("<I").pack


def _varint(n: int) -> bytes:
    """Protobuf's base-128 varint of an int in [0, 2**64)."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _float32(value: float) -> bytes:
    """``simple_value``'s 4 bytes: a finite value past float32's range becomes an
    infinity, as protobuf stores it (``struct`` would raise)."""
    try:
        return _FLOAT(value)
    except OverflowError:
        return _FLOAT(math.copysign(math.inf, value))


def _tag_part(tag: str) -> bytes:
    """The bytes of a scalar event from its ``summary`` field to the float's key: they
    depend only on the tag (field 5 ``summary``, its field 1 ``value``, whose field 1 is
    ``tag`` and field 2 the float ``simple_value``, 4 bytes)."""
    name = tag.encode("utf-8")
    value = b"\n" + _varint(len(name)) + name + b"\x15"
    summary = b"\n" + _varint(len(value) + 4) + value
    return b"*" + _varint(len(summary) + 4) + summary


_TIME_AND_STEP_KEY = struct.Struct("<BdB").pack  # b"\t" + wall_time + b"\x10" (step's key)
_LOW_SEVEN = [bytes((n | 0x80,)) for n in range(128)]  # a varint's first byte, more to come
_HIGH_VARINTS: dict[int, bytes] = {}  # _varint(step >> 7) of recent steps


def _head(step: int, wall_time: float) -> bytes:
    """The bytes of fields 1 (``wall_time``) and 2 (``step``); proto3 leaves out a field
    that holds its default: a ``wall_time`` whose bits are all zero, a ``step`` of 0."""
    if step > 0x7F and wall_time:  # both fields there (a zero time, +0.0 or -0.0: below)
        # The step's varint: its low seven bits, then those above, which change every
        # 128 steps (kept, so that a run of steps costs no loop).
        high = _HIGH_VARINTS.get(step >> 7)
        if high is None:
            if len(_HIGH_VARINTS) >= 1024:
                _HIGH_VARINTS.clear()
            high = _HIGH_VARINTS[step >> 7] = _varint(step >> 7)
        return _TIME_AND_STEP_KEY(9, wall_time, 16) + _LOW_SEVEN[step & 0x7F] + high
    head = _DOUBLE(wall_time)
    head = b"" if head == b"\x00" * 8 else b"\t" + head
    return head + b"\x10" + _varint(step) if step else head


def scalar_event(tag: str, step: int, wall_time: float, value: float) -> bytes:
    """Returns the serialised ``Event`` of one scalar, byte for byte what
    ``Event(step=..., wall_time=..., summary=Summary(value=[Summary.Value(tag=...,
    simple_value=...)])).SerializeToString()`` returns.

    Example:
        >>> scalar_event("loss", 1, 1.5, 2.0)
        b'\\t\\x00\\x00\\x00\\x00\\x00\\x00\\xf8?\\x10\\x01*\\r\\n\\x0b\\n\\x04loss\\x15\\x00\\x00\\x00@'
    """
    return _head(step, wall_time) + _tag_part(tag) + _float32(value)


class TensorBoardBackend(LogBackend):
    """Writes items as TensorBoard events into a new event file in ``directory``."""

    def __init__(self, directory: str, counter: int) -> None:
        require_tensorboard()
        import google_crc32c
        from tensorboard.compat.proto import (
            event_pb2,
            summary_pb2,
            tensor_pb2,
            tensor_shape_pb2,
            types_pb2,
        )

        from globalstep.summary._records import frame, record_header

        self._frame = frame
        self._record_header = record_header
        self._crc32c = google_crc32c.value
        self._event_pb2 = event_pb2
        self._summary_pb2 = summary_pb2
        self._tensor_pb2 = tensor_pb2
        self._shape_pb2 = tensor_shape_pb2
        self._dt_string = types_pb2.DT_STRING
        storage = open_storage(directory)  # a local directory (the registry's rule)
        self.path = storage.join(event_file_name(directory, counter))
        self._file = storage.open_log(self.path)
        # Per length of a scalar's head (step and wall time), per tag: _template().
        self._templates: dict[int, dict[str, tuple[bytes, bytes]]] = {}
        first = event_pb2.Event(wall_time=time.time(), file_version=_FILE_VERSION)
        self._file.write(frame(first.SerializeToString()))
        self._file.flush()

    def mark_restart(self, purge_step: int, wall_time: float) -> None:
        self._file.write(self._restart_record(purge_step, wall_time))

    def _restart_record(self, purge_step: int, wall_time: float) -> bytes:
        """Two identical START events: TensorBoard's server with its Python loader
        (``--load_fast=false``) takes the first START of a run for the session's beginning
        and purges nothing at it; every reader purges at the second, and a repeated purge
        changes nothing."""
        event = self._event_pb2.Event(
            step=purge_step,
            wall_time=wall_time,
            session_log=self._event_pb2.SessionLog(status=self._event_pb2.SessionLog.START),
        )
        data: bytes = self._frame(event.SerializeToString())
        return data + data

    def write(self, items: list[Item]) -> None:
        chunks: list[bytes | memoryview] = []
        append = chunks.append
        if len(items) < MIN_GROUPS:
            for item in items:
                if item[KIND] == SCALARS:
                    self._encode_group(item, append)
                else:
                    self._encode_other(item, append)
        else:
            # A long batch: runs of groups with one tuple of tags go to encode_groups.
            run: list[Item] = []
            run_tags: tuple[str, ...] = ()
            for item in items:
                if item[KIND] == SCALARS:
                    tags = tuple(item[PAYLOAD])
                    if tags != run_tags:
                        if run:
                            self._encode_run(run, run_tags, append)
                        run, run_tags = [], tags
                    run.append(item)
                    continue
                if run:
                    self._encode_run(run, run_tags, append)
                    run, run_tags = [], ()
                self._encode_other(item, append)
            if run:
                self._encode_run(run, run_tags, append)
        self._file.write(b"".join(chunks))

    def _encode_other(self, item: Item, append: Callable[[bytes | memoryview], object]) -> None:
        """Appends the record(s) of an item that is not a group of scalars."""
        kind, tag, step, wall_time, payload = item
        if kind == SCALAR:
            self._encode_points(_head(step, wall_time), ((tag, payload),), append)
        elif kind == RESTART:
            append(self._restart_record(step, wall_time))
        else:
            append(self._frame(self._other_event(kind, tag, step, wall_time, payload)))

    def _encode_run(
        self, run: list[Item], tags: tuple[str, ...], append: Callable[[bytes | memoryview], object]
    ) -> None:
        """Appends the records of groups whose tags are ``tags``, in that order."""
        if len(run) < MIN_GROUPS:
            for item in run:
                self._encode_group(item, append)
        else:
            encode_groups(
                run, tags, self._template, append, partial(self._encode_group, append=append)
            )

    def _encode_group(self, item: Item, append: Callable[[bytes | memoryview], object]) -> None:
        """Appends the records of one group, one point at a time."""
        _, _, step, wall_time, values = item
        # The group's scalars share their step and wall time: the head is made once.
        self._encode_points(_head(step, wall_time), values.items(), append)

    def _encode_points(
        self,
        head: bytes,
        points: Iterable[tuple[str, float]],
        append: Callable[[bytes | memoryview], object],
    ) -> None:
        """Appends a record for each (tag, value) of ``points``, all with ``head``."""
        templates = self._templates.get(len(head)) or self._new_templates(len(head))
        crc32c = self._crc32c
        for tag, value in points:
            header, part = templates.get(tag) or self._template(len(head), tag)
            try:
                data = head + part + _FLOAT(value)
            except OverflowError:
                data = head + part + _float32(value)
            # frame(data), inlined: this runs once per point.
            crc = crc32c(data)
            append(
                header + data + _PACK_CRC((((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF)
            )

    def _new_templates(self, head_length: int) -> dict[str, tuple[bytes, bytes]]:
        templates: dict[str, tuple[bytes, bytes]] = {}
        self._templates[head_length] = templates
        return templates

    def _template(self, head_length: int, tag: str) -> tuple[bytes, bytes]:
        """A scalar record's bytes that depend on its tag and its head's length alone:
        the record's header (its data's length, checksummed) and :func:`_tag_part`."""
        templates = self._templates.get(head_length) or self._new_templates(head_length)
        template = templates.get(tag)
        if template is None:
            part = _tag_part(tag)
            template = templates[tag] = self._record_header(head_length + len(part) + 4), part
        return template

    def _other_event(self, kind: int, tag: str, step: int, wall_time: float, payload: Any) -> bytes:
        summary_pb2 = self._summary_pb2
        if kind == HISTOGRAM:
            histo = summary_pb2.HistogramProto(**histogram_buckets(payload))
            value = summary_pb2.Summary.Value(tag=tag, histo=histo)
        else:
            tensor = self._tensor_pb2.TensorProto(
                dtype=self._dt_string,
                string_val=[payload.encode("utf-8")],
                tensor_shape=self._shape_pb2.TensorShapeProto(),
            )
            metadata = summary_pb2.SummaryMetadata(
                plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text")
            )
            value = summary_pb2.Summary.Value(tag=tag, metadata=metadata, tensor=tensor)
        event = self._event_pb2.Event(
            step=step, wall_time=wall_time, summary=summary_pb2.Summary(value=[value])
        )
        data: bytes = event.SerializeToString()
        return data
