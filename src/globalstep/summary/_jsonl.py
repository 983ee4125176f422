"""The JSONL backend: one JSON object per line in ``<run dir>/metrics.jsonl``.

It needs nothing beyond the standard library. The lines are::

    {"step": 12, "wall_time": 1764441600.25, "tag": "loss", "value": 0.5}
    {"step": 12, "wall_time": 1764441600.25, "tag": "w", "histogram": {"min": ..., ...}}
    {"step": 12, "wall_time": 1764441600.25, "tag": "note", "text": "..."}
    {"restart": 111, "wall_time": 1764441700.5}

A ``restart`` line voids every point written before it at that step or above (the
crashed attempt's), like TensorBoard's session START event. Non-finite values are written
as ``NaN``, ``Infinity`` and ``-Infinity``, which Python's ``json`` reads back.

On an fsspec URL (``s3://bucket/run``) the file is an object, and object stores cannot
append: the whole file is kept in memory and uploaded again at each flush that has new
lines (with :class:`~globalstep.storage.FsspecStorage`'s retries), so a flush
costs the size of the file so far. That suits metric logs of a few MiB; for longer runs
raise ``flush_seconds``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from globalstep.summary._base import (
    HISTOGRAM,
    RESTART,
    SCALAR,
    SCALARS,
    Item,
    LogBackend,
    histogram_buckets,
    nonfinite_text,
)

__all__ = ["JSONL_NAME", "JsonlBackend"]

JSONL_NAME = "metrics.jsonl"


def _json(text: str) -> str:
    """``text`` as a JSON string (non-ASCII characters kept as they are)."""
    return json.dumps(text, ensure_ascii=False)


class JsonlBackend(LogBackend):
    """Appends items to ``<directory>/metrics.jsonl``, a local path or an fsspec URL, through
    the directory's storage (:meth:`globalstep.storage.Storage.open_log`)."""

    def __init__(self, directory: str, storage_options: Mapping[str, Any] | None = None) -> None:
        from globalstep.storage import open_storage

        self._tags: dict[str, str] = {}
        storage = open_storage(directory, storage_options)
        self.path = storage.join(JSONL_NAME)
        self._file = storage.open_log(self.path)
        if self._file.last not in (b"", b"\n"):
            self._file.write(b"\n")  # a crashed writer's half line: start ours on a fresh one

    def mark_restart(self, purge_step: int, wall_time: float) -> None:
        self._file.write(f'{{"restart": {purge_step}, "wall_time": {wall_time!r}}}\n'.encode())

    def _tag(self, tag: str) -> str:
        """A scalar line's text from the tag's JSON string to the value: ``"loss", "value": ``."""
        text = self._tags.get(tag)
        if text is None:
            text = self._tags[tag] = f'{_json(tag)}, "value": '
        return text

    def write(self, items: list[Item]) -> None:
        lines: list[str] = []
        append = lines.append
        tags = self._tags
        last_time, time_text = None, ""
        for kind, tag, step, wall_time, payload in items:
            if kind == SCALARS:
                head = f'{{"step": {step}, "wall_time": {wall_time!r}, "tag": '
                for tag, value in payload.items():
                    tag_text = tags.get(tag) or self._tag(tag)
                    number = repr(value) if value - value == 0.0 else nonfinite_text(value)
                    append(f"{head}{tag_text}{number}}}\n")
            elif kind == SCALAR:
                tag_text = tags.get(tag) or self._tag(tag)
                number = repr(payload) if payload - payload == 0.0 else nonfinite_text(payload)
                if wall_time is not last_time:  # the scalars of one call share their time
                    last_time, time_text = wall_time, repr(wall_time)
                append(f'{{"step": {step}, "wall_time": {time_text}, "tag": {tag_text}{number}}}\n')
            elif kind == RESTART:
                append(f'{{"restart": {step}, "wall_time": {wall_time!r}}}\n')
            else:
                head = f'{{"step": {step}, "wall_time": {wall_time!r}, "tag": {_json(tag)}, '
                body: Any = (
                    {"histogram": histogram_buckets(payload)}
                    if kind == HISTOGRAM
                    else {"text": payload}
                )
                append(head + json.dumps(body, ensure_ascii=False)[1:] + "\n")
        self._file.write("".join(lines).encode("utf-8"))
