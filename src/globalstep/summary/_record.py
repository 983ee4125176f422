"""A tracker's record on disk (``<logdir>/<tool>.tracker.jsonl``): its path, and reading it.

The record is the tracker's own append-only log: the run it sends to, every point the
writer accepted (numbered in order), which of them are final (a commit or a clean close
made them so) and which were sent. :class:`~globalstep.summary._tracker.TrackerBackend`
writes it; this module reads it, for the backend that opens it again, for the writer's
restart check and for ``globalstep logs --send``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from globalstep._clock import MAX_STEP
from globalstep._errors import ConfigError

__all__ = [
    "RECORD_SUFFIX",
    "TRACKERS",
    "Loaded",
    "Ranges",
    "apply_entry",
    "load_record",
    "record_path",
    "recorded_max_step",
    "runs",
    "unsent_points",
]

TRACKERS = ("mlflow", "wandb")
"""The tracker formats a writer knows by name (others come with a client of their own)."""

RECORD_SUFFIX = ".tracker.jsonl"


def record_path(logdir: str, name: str) -> str:
    """The record of tracker ``name`` in ``logdir``."""
    return os.path.join(logdir, name + RECORD_SUFFIX)


class Ranges:
    """Numbers as sorted, merged inclusive ranges (the points sent)."""

    def __init__(self) -> None:
        self.ranges: list[list[int]] = []

    def add(self, first: int, last: int) -> None:
        self.ranges.append([first, last])
        self.ranges.sort()
        merged: list[list[int]] = []
        for lo, hi in self.ranges:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.ranges = merged

    def __contains__(self, number: int) -> bool:
        import bisect

        i = bisect.bisect_right(self.ranges, [number, MAX_STEP]) - 1
        return i >= 0 and self.ranges[i][0] <= number <= self.ranges[i][1]


def runs(numbers: list[int]) -> list[list[int]]:
    """``numbers`` as inclusive ranges of consecutive numbers, in order."""
    out: list[list[int]] = []
    for n in numbers:
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out


@dataclass
class Loaded:
    """What a record says: the run, the points that stand, which are final or sent."""

    run_id: str | None
    key: str | None
    points: dict[int, list[Any]]  # number -> [tag, step, value, wall_time, final]
    committed: int
    sent: Ranges
    count: int  # point lines read (the next point's number)
    torn: int  # the bytes of complete lines where the last was cut short (a crash), or 0


def load_record(path: str) -> Loaded:
    """Reads a record; a line cut short at the end (a crash) is ignored.

    Raises:
        ConfigError: a line before the last cannot be read (the record is damaged).
    """
    loaded = Loaded(None, None, {}, -1, Ranges(), 0, 0)
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return loaded
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        lines.pop()
        loaded.torn = data.rfind(b"\n") + 1 or -1
    for index, line in enumerate(lines):
        try:
            entry = json.loads(line)
        except ValueError as err:
            raise ConfigError(
                "logdir",
                f"must hold a readable tracker record; line {index + 1} of {path} is not JSON",
                path,
                hint="Move the file away to start a new tracker run.",
            ) from err
        apply_entry(loaded, entry)
    return loaded


def apply_entry(loaded: Loaded, entry: Any) -> None:
    if isinstance(entry, list):
        tag, step, value, wall_time = entry
        loaded.points[loaded.count] = [tag, step, value, wall_time, False]
        loaded.count += 1
    elif "restart" in entry:
        purge = entry["restart"]
        loaded.points = {n: p for n, p in loaded.points.items() if p[1] < purge}
        loaded.committed = min(loaded.committed, purge - 1)
    elif "committed" in entry:
        loaded.committed = max(loaded.committed, entry["committed"])
    elif "closed" in entry:  # a clean close: the points of that process are final
        for number, point in loaded.points.items():
            if number >= entry["closed"]:
                point[4] = True
    elif "sent" in entry:
        for first, last in entry["sent"]:
            loaded.sent.add(first, last)
    elif "dropped" in entry:  # dropped past the bound: never sent
        loaded.sent.add(entry["dropped"], entry["dropped"])
    elif "run" in entry:
        loaded.run_id = entry["run"]
    elif "key" in entry:
        loaded.key = entry["key"]


def unsent_points(path: str) -> int:
    """The points of a record that are final (a commit or a clean close made them so)
    and were not sent: what a writer opening the directory again sends."""
    loaded = load_record(path)
    return sum(
        1
        for number, point in loaded.points.items()
        if number not in loaded.sent and (point[4] or point[1] <= loaded.committed)
    )


def recorded_max_step(logdir: str) -> int | None:
    """The highest step that stands in any tracker record of ``logdir`` (a built-in
    tracker's or a client's of the user's own), or None (for the writer's restart check,
    when a tracker is the only format)."""
    try:
        names = sorted(os.listdir(logdir))
    except (FileNotFoundError, NotADirectoryError):
        return None
    steps: list[int] = []
    for name in names:
        path = os.path.join(logdir, name)
        if name.endswith(RECORD_SUFFIX) and os.path.isfile(path):
            steps.extend(p[1] for p in load_record(path).points.values())
    return max(steps) if steps else None
