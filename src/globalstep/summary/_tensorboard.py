"""The TensorBoard backend: event files in TensorBoard's own format.

Messages are TensorBoard's protobufs (``tensorboard.compat.proto``), framed as TFRecords
(:mod:`globalstep.summary._records`). Each tag's scalars reuse one ``Event``, so that
encoding a scalar costs well under a microsecond. A restart is TensorBoard's own mechanism:
an event at the purge step whose ``session_log`` status is ``START``, after which
TensorBoard drops the points at that step and above written before it. It is written twice,
because the server's Python loader ignores the first START of a run.
"""

from __future__ import annotations

import os
import re
import socket
import time
from typing import Any

from globalstep._optional import require
from globalstep.summary._base import HISTOGRAM, RESTART, SCALAR, Item, histogram_buckets

__all__ = ["TensorBoardBackend", "event_file_name", "require_tensorboard"]

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


class TensorBoardBackend:
    """Writes items as TensorBoard events into a new event file in ``directory``."""

    def __init__(self, directory: str, counter: int) -> None:
        require_tensorboard()
        from tensorboard.compat.proto import (
            event_pb2,
            summary_pb2,
            tensor_pb2,
            tensor_shape_pb2,
            types_pb2,
        )

        from globalstep.summary._records import frame

        self._frame = frame
        self._event_pb2 = event_pb2
        self._summary_pb2 = summary_pb2
        self._tensor_pb2 = tensor_pb2
        self._shape_pb2 = tensor_shape_pb2
        self._dt_string = types_pb2.DT_STRING
        self.path = os.path.join(directory, event_file_name(directory, counter))
        self._file = open(self.path, "ab")  # noqa: SIM115 - closed in close()
        # One reusable event per tag: setting three fields and serialising is ~0.5 µs.
        self._scalar_events: dict[str, tuple[Any, Any]] = {}
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
        frame = self._frame
        events = self._scalar_events
        chunks = []
        for kind, tag, step, wall_time, payload in items:
            if kind == SCALAR:
                event, value = events.get(tag) or self._scalar_event(tag)
                event.step = step
                event.wall_time = wall_time
                value.simple_value = payload
                chunks.append(frame(event.SerializeToString()))
            elif kind == RESTART:
                chunks.append(self._restart_record(step, wall_time))
            else:
                chunks.append(frame(self._other_event(kind, tag, step, wall_time, payload)))
        self._file.write(b"".join(chunks))

    def _scalar_event(self, tag: str) -> tuple[Any, Any]:
        event = self._event_pb2.Event()
        value = event.summary.value.add()
        value.tag = tag
        self._scalar_events[tag] = (event, value)
        return event, value

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

    def flush(self) -> None:
        self._file.flush()

    def sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()
