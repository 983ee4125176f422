"""The JSONL backend: one JSON object per line in ``<run dir>/metrics.jsonl``.

It needs nothing beyond the standard library. The lines are::

    {"step": 12, "wall_time": 1764441600.25, "tag": "loss", "value": 0.5}
    {"step": 12, "wall_time": 1764441600.25, "tag": "w", "histogram": {"min": ..., ...}}
    {"step": 12, "wall_time": 1764441600.25, "tag": "note", "text": "..."}
    {"restart": 111, "wall_time": 1764441700.5}

A ``restart`` line voids every point written before it at that step or above (the
crashed attempt's), like TensorBoard's session START event. Non-finite values are written
as ``NaN``, ``Infinity`` and ``-Infinity``, which Python's ``json`` reads back.
"""

from __future__ import annotations

import json
import os
from typing import Any

from globalstep.summary._base import HISTOGRAM, RESTART, SCALAR, Item, histogram_buckets

__all__ = ["JSONL_NAME", "JsonlBackend"]

JSONL_NAME = "metrics.jsonl"


def _nonfinite(value: float) -> str:
    """The JSON spelling Python's ``json`` reads back for NaN and the infinities."""
    if value != value:
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


class JsonlBackend:
    """Appends items to ``<directory>/metrics.jsonl``."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, JSONL_NAME)
        self._file = open(self.path, "a+b")  # noqa: SIM115 - closed in close()
        self._tags: dict[str, str] = {}
        # A crashed writer may have left half a line: start ours on a fresh one.
        if self._file.tell() > 0:
            self._file.seek(-1, os.SEEK_END)
            if self._file.read(1) != b"\n":
                self._file.write(b"\n")

    def mark_restart(self, purge_step: int, wall_time: float) -> None:
        self._file.write(f'{{"restart": {purge_step}, "wall_time": {wall_time!r}}}\n'.encode())

    def _tag(self, tag: str) -> str:
        text = self._tags.get(tag)
        if text is None:
            text = self._tags[tag] = json.dumps(tag, ensure_ascii=False)
        return text

    def write(self, items: list[Item]) -> None:
        lines = []
        tags = self._tags
        last_time, time_text = None, ""
        for kind, tag, step, wall_time, payload in items:
            tag_text = tags.get(tag) or self._tag(tag)
            if kind == SCALAR:
                number = repr(payload) if payload - payload == 0.0 else _nonfinite(payload)
                if wall_time is not last_time:  # the scalars of one call share their time
                    last_time, time_text = wall_time, repr(wall_time)
                lines.append(
                    f'{{"step": {step}, "wall_time": {time_text}, "tag": {tag_text}, '
                    f'"value": {number}}}\n'
                )
            elif kind == RESTART:
                lines.append(f'{{"restart": {step}, "wall_time": {wall_time!r}}}\n')
            else:
                head = f'{{"step": {step}, "wall_time": {wall_time!r}, "tag": {tag_text}, '
                body: Any = (
                    {"histogram": histogram_buckets(payload)}
                    if kind == HISTOGRAM
                    else {"text": payload}
                )
                lines.append(head + json.dumps(body, ensure_ascii=False)[1:] + "\n")
        self._file.write("".join(lines).encode("utf-8"))

    def flush(self) -> None:
        self._file.flush()

    def sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()
