"""Reading step-keyed logs back: JSONL and TensorBoard event files, restarts applied.

A run is a directory holding ``metrics.jsonl`` or event files (``*tfevents*``); a log
directory may hold many runs, one per sub-directory, as in TensorBoard. Restart marks are
applied in file order: a JSONL ``restart`` line or a TensorBoard session START event at
step P voids every point written before it at step P or above, so a resumed run shows
each step once, with the latest attempt's value. Where a run has both formats the JSONL
file is read (it holds the same points); event files need the ``tensorboard`` extra.

Example:
    >>> import tempfile
    >>> from globalstep import SummaryWriter
    >>> with tempfile.TemporaryDirectory() as logdir:
    ...     with SummaryWriter(logdir, formats=("jsonl",)) as writer:
    ...         writer.scalar("loss", 0.5, step=1)
    ...     run = read_run(logdir)
    >>> run.scalars["loss"]
    [Point(step=1, wall_time=..., value=0.5)]
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from globalstep._errors import ConfigError, MissingDependencyError
from globalstep.summary._jsonl import JSONL_NAME

__all__ = [
    "Point",
    "RunLog",
    "find_runs",
    "last_standing_step",
    "last_wall_time",
    "read_logs",
    "read_run",
]

# The writer's own lines start with one of these; they are all the restart check reads.
_STEP_OR_RESTART = re.compile(rb'^\{"(step|restart)": (\d+)', re.MULTILINE)


def _is_remote(directory: str) -> bool:
    """Whether ``directory`` is an fsspec URL (see the checkpoint storage's)."""
    from globalstep.storage import is_remote as remote

    return remote(directory)


@dataclass(frozen=True)
class Point:
    """One logged value: its step, wall time (seconds since the epoch) and payload."""

    step: int
    wall_time: float
    value: Any

    def __repr__(self) -> str:
        return f"Point(step={self.step}, wall_time=..., value={self.value!r})"


@dataclass
class RunLog:
    """Everything one run logged, restarts applied, each series in write order.

    Attributes:
        name: the run's directory relative to the log directory (``"."`` for itself).
        source: ``"jsonl"`` or ``"tensorboard"``: which files were read.
        scalars: tag to points whose value is a float.
        histograms: tag to points whose value is a dict of TensorBoard histogram fields.
        texts: tag to points whose value is a str.
        restarts: the purge step of each restart mark, in order.
        skipped_lines: JSONL lines that could not be read (a crashed writer's last one).
    """

    name: str
    source: str
    scalars: dict[str, list[Point]] = field(default_factory=dict)
    histograms: dict[str, list[Point]] = field(default_factory=dict)
    texts: dict[str, list[Point]] = field(default_factory=dict)
    restarts: list[int] = field(default_factory=list)
    skipped_lines: int = 0

    def _series(self) -> list[dict[str, list[Point]]]:
        return [self.scalars, self.histograms, self.texts]

    def add_scalar(self, tag: str, point: Point) -> None:
        """Appends ``point`` (its value a float) to the scalar series ``tag``."""
        self.scalars.setdefault(tag, []).append(point)

    def add_histogram(self, tag: str, point: Point) -> None:
        """Appends ``point`` (its value a dict of histogram fields) to the series ``tag``."""
        self.histograms.setdefault(tag, []).append(point)

    def add_text(self, tag: str, point: Point) -> None:
        """Appends ``point`` (its value a str) to the text series ``tag``."""
        self.texts.setdefault(tag, []).append(point)

    def purge(self, purge_step: int) -> None:
        """Applies a restart mark: drops every point at ``purge_step`` and above from every
        series, and appends ``purge_step`` to :attr:`restarts`."""
        self.restarts.append(purge_step)
        for series in self._series():
            for tag, points in series.items():
                if any(p.step >= purge_step for p in points):
                    series[tag] = [p for p in points if p.step < purge_step]

    @property
    def max_step(self) -> int | None:
        """The highest step that stands after restarts, or None for an empty run."""
        steps = [p.step for series in self._series() for ps in series.values() for p in ps]
        return max(steps) if steps else None


def _is_event_file(name: str) -> bool:
    return "tfevents" in name


def find_runs(logdir: str | os.PathLike[str]) -> list[str]:
    """Returns the run directories under ``logdir`` (itself included), sorted.

    Raises:
        ConfigError: ``logdir`` is not a directory.
    """
    root = os.fspath(logdir)
    if not os.path.isdir(root):
        raise ConfigError("logdir", "must be an existing directory", root)
    runs = []
    for directory, _dirs, files in os.walk(root):
        if JSONL_NAME in files or any(_is_event_file(f) for f in files):
            runs.append(directory)
    return sorted(runs)


def _read_jsonl(path: str, run: RunLog) -> None:
    with open(path, "rb") as file:
        _read_jsonl_lines(file, run)


def _read_jsonl_lines(lines: Iterable[bytes], run: RunLog) -> None:
    # Bytes, decoded line by line: a crashed writer's last line may end inside a UTF-8
    # character, and is then one skipped line (UnicodeDecodeError is a ValueError).
    for line in lines:
        try:
            record = json.loads(line)
            _add_record(run, record)
        except (KeyError, TypeError, ValueError):
            run.skipped_lines += line.strip() != b""


def _remote_jsonl(url: str, storage_options: Mapping[str, Any] | None) -> bytes | None:
    """Returns the bytes of ``<url>/metrics.jsonl``, or None where there is none."""
    from globalstep.storage import open_storage

    storage = open_storage(url, storage_options)
    try:
        return storage.read_bytes(storage.join(JSONL_NAME))
    except FileNotFoundError:
        return None


def _add_record(run: RunLog, record: dict[str, Any]) -> None:
    if "restart" in record:
        run.purge(int(record["restart"]))
        return
    step, wall_time, tag = int(record["step"]), float(record["wall_time"]), str(record["tag"])
    if "value" in record:
        run.add_scalar(tag, Point(step, wall_time, float(record["value"])))
    elif "histogram" in record:
        run.add_histogram(tag, Point(step, wall_time, dict(record["histogram"])))
    elif "text" in record:
        run.add_text(tag, Point(step, wall_time, str(record["text"])))
    else:
        raise KeyError("value")


def _read_event_file(path: str, run: RunLog) -> None:
    from globalstep.summary._tensorboard import require_tensorboard

    require_tensorboard()
    from tensorboard.compat.proto import event_pb2

    from globalstep.summary._records import iter_records

    with open(path, "rb") as file:
        buffer = file.read()
    start = event_pb2.SessionLog.START
    previous = b""
    for data in iter_records(buffer):
        event = event_pb2.Event.FromString(data)
        if event.HasField("session_log") and event.session_log.status == start:
            if data != previous:  # our writer writes each mark twice (see _tensorboard)
                run.purge(event.step)
            previous = data
            continue
        previous = b""
        for value in event.summary.value:
            _add_value(run, value, event.step, event.wall_time)


def _add_value(run: RunLog, value: Any, step: int, wall_time: float) -> None:
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        run.add_scalar(value.tag, Point(step, wall_time, float(value.simple_value)))
    elif kind == "histo":
        h = value.histo
        fields = {
            "min": h.min,
            "max": h.max,
            "num": int(h.num),
            "sum": h.sum,
            "sum_squares": h.sum_squares,
            "bucket_limit": list(h.bucket_limit),
            "bucket": list(h.bucket),
        }
        run.add_histogram(value.tag, Point(step, wall_time, fields))
    elif kind == "tensor":
        plugin = value.metadata.plugin_data.plugin_name
        tensor = value.tensor
        if plugin == "text" and tensor.string_val:
            text = tensor.string_val[0].decode("utf-8", "replace")
            run.add_text(value.tag, Point(step, wall_time, text))
        elif plugin == "scalars":
            number = (list(tensor.float_val) + list(tensor.double_val) or [None])[0]
            if number is not None:
                run.add_scalar(value.tag, Point(step, wall_time, float(number)))


def read_run(
    directory: str | os.PathLike[str],
    name: str = ".",
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> RunLog:
    """Reads one run directory, preferring its JSONL file to its event files.

    Args:
        directory: a local directory, or an fsspec URL (``s3://bucket/run``) holding
            ``metrics.jsonl`` (event files are read from local directories only).
        name: the run's name in the result.
        storage_options: keyword arguments for the fsspec file system of a URL.

    Raises:
        ConfigError: ``directory`` is not a directory, or a URL without ``metrics.jsonl``.
        MissingDependencyError: only event files are there and the ``tensorboard`` extra is
            not installed.
    """
    path = os.fspath(directory)
    if _is_remote(path):
        data = _remote_jsonl(path, storage_options)
        if data is None:
            raise ConfigError("directory", f"must hold {JSONL_NAME} (a URL)", path)
        run = RunLog(name=name, source="jsonl")
        _read_jsonl_lines(io.BytesIO(data), run)
        return run
    if not os.path.isdir(path):
        raise ConfigError("directory", "must be an existing directory", path)
    jsonl = os.path.join(path, JSONL_NAME)
    if os.path.isfile(jsonl):
        run = RunLog(name=name, source="jsonl")
        _read_jsonl(jsonl, run)
        return run
    run = RunLog(name=name, source="tensorboard")
    for file_name in sorted(f for f in os.listdir(path) if _is_event_file(f)):
        _read_event_file(os.path.join(path, file_name), run)
    return run


def last_standing_step(
    directory: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None
) -> int | None:
    """Returns the highest step that stands after restarts in any of the run's formats.

    The JSONL file and the event files are each read (a crash between writing one and the
    other can leave either a batch ahead), and the higher of their last steps is returned;
    None for a run with no point. For JSONL only the step of each line is read (about ten
    times faster than :func:`read_run`), as the writer needs when it opens.

    Raises:
        ConfigError: ``directory`` is not a directory.
        MissingDependencyError: only event files are there and the ``tensorboard`` extra is
            not installed (with a JSONL file beside them, the event files are skipped).

    On an fsspec URL only ``metrics.jsonl`` is read (``storage_options`` as for
    :func:`read_run`); a URL without it has no point.
    """
    path = os.fspath(directory)
    if _is_remote(path):
        data = _remote_jsonl(path, storage_options)
        return None if data is None else _jsonl_bytes_last_step(data)
    if not os.path.isdir(path):
        raise ConfigError("directory", "must be an existing directory", path)
    jsonl = os.path.join(path, JSONL_NAME)
    steps: list[int] = []
    has_jsonl = os.path.isfile(jsonl)
    if has_jsonl:
        last = _jsonl_last_step(jsonl)
        if last is not None:
            steps.append(last)
    event_files = sorted(f for f in os.listdir(path) if _is_event_file(f))
    if event_files:
        run = RunLog(name=".", source="tensorboard")
        try:
            for file_name in event_files:
                _read_event_file(os.path.join(path, file_name), run)
        except MissingDependencyError:
            if not has_jsonl:
                raise
        else:
            if run.max_step is not None:
                steps.append(run.max_step)
    return max(steps) if steps else None


def last_wall_time(directory: str | os.PathLike[str]) -> float | None:
    """Returns the wall time (seconds since the epoch) of the newest line of the run's
    ``metrics.jsonl``, reading only its tail; without one, the newest event file's
    modification time; None where there is neither (or on an fsspec URL).

    What a crashed attempt logged last, for the ledger's redone time (see
    :mod:`globalstep.checkpoint._ledger`): lines are appended in time order, so the
    newest is the last whole one.
    """
    path = os.fspath(directory)
    if _is_remote(path) or not os.path.isdir(path):
        return None
    jsonl = os.path.join(path, JSONL_NAME)
    if os.path.isfile(jsonl):
        with open(jsonl, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - (64 << 10)))
            tail = file.read()
        for line in reversed(tail.split(b"\n")):
            try:
                wall = json.loads(line).get("wall_time")
            except (ValueError, AttributeError):
                continue
            if isinstance(wall, int | float):
                return float(wall)
    times = [os.path.getmtime(os.path.join(path, f)) for f in os.listdir(path) if _is_event_file(f)]
    return max(times) if times else None


def _jsonl_last_step(jsonl: str) -> int | None:
    with open(jsonl, "rb") as file:
        return _jsonl_bytes_last_step(file.read())


def _jsonl_bytes_last_step(data: bytes) -> int | None:
    # Walk the segments between restart marks from the last one back: a mark at P voids
    # the earlier points at P and above, so each earlier segment counts only below a cap.
    segments: list[list[int]] = [[]]
    marks: list[int] = []
    for kind, number in _STEP_OR_RESTART.findall(data):
        if kind == b"restart":
            marks.append(int(number))
            segments.append([])
        else:
            segments[-1].append(int(number))
    best: int | None = None
    cap: int | None = None
    for index in range(len(segments) - 1, -1, -1):
        standing = [s for s in segments[index] if cap is None or s < cap]
        if standing and (best is None or max(standing) > best):
            best = max(standing)
        if index:
            mark = marks[index - 1]
            cap = mark if cap is None else min(cap, mark)
    return best


def read_logs(logdir: str | os.PathLike[str]) -> list[RunLog]:
    """Reads every run under ``logdir``; see :func:`read_run`."""
    root = os.fspath(logdir)
    return [read_run(d, os.path.relpath(d, root)) for d in find_runs(root)]
