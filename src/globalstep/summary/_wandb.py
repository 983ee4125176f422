"""The Weights & Biases client of the tracker format (a ``TrackerClient``): one W&B run per
run directory.

The generic tracker backend (``summary/_tracker.py``) hands this client the points a
committed checkpoint covers, from its sender thread; this module turns them into W&B
history rows and makes sure W&B's own log holds them before it says they were sent.

Conventions kept as W&B users expect them: ``wandb.init`` reads ``WANDB_PROJECT``,
``WANDB_ENTITY``, ``WANDB_MODE`` (``offline``, ``disabled``, ...) and the rest of its
environment itself; ``WANDB_DIR`` chooses where its files go (else the run directory, a
local one, so that a run's files stay together; else W&B's default, the working
directory). A run already started by the user (``wandb.run``) is used as it is, and left
open at close.

The step axis: W&B keeps one monotone ``_step`` per run and silently drops a point logged
below it (wandb#4482), and an offline resume starts ``_step`` at 0 again. So the rows are
logged without ``step=``, each carrying the global step as the metric
:data:`STEP_METRIC`, and every tag is defined with ``define_metric(tag,
step_metric=STEP_METRIC)``: the charts' x axis is the global step, a row is never dropped,
and a resumed run continues on the same axis. A row keeps the point's wall time as
``_timestamp``.

When a point is sent: ``run.log`` only queues a row for W&B's service process, which
writes its transaction log (the ``run-<id>.wandb`` file that ``wandb sync`` uploads)
every ``x_transaction_log_flush_interval`` seconds, and a SIGKILL of the training process
loses what it had not written. :meth:`WandbClient.send` therefore returns only once the
rows are in that file (read back with :func:`read_records`), within ``confirm_seconds``;
else it raises, and the generic backend retries (rows already handed to W&B are not
logged twice). The client starts its runs with a flush interval of
``flush_seconds`` (1 s) unless ``WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL`` says otherwise.
A resumed client reads the run's earlier ``.wandb`` files and does not log again a point
at a step its tag already holds there (a point confirmed just before a crash, whose
"sent" record did not reach the disk). A point at or below a step this client already
sent its tag at is refused (``TrackerRefusedError``: the generic part drops it and counts
it in its warning), since W&B would show two values at that step.
"""

from __future__ import annotations

import glob
import json
import os
import re
import struct
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from globalstep._errors import ConfigError, TrackerRefusedError
from globalstep._optional import require, require_installed
from globalstep.summary._client import TrackerClient

__all__ = [
    "STEP_METRIC",
    "WandbClient",
    "WandbLog",
    "prepare",
    "read_records",
    "wandb_files",
]

STEP_METRIC: Final = "global_step"
"""The history key that carries the global step, every tag's x axis in W&B."""

_IDENT: Final = b":W&B\xe1\xbe\x00"  # ":W&B", magic 0xBEE1 (little-endian), version 0
_BLOCK: Final = 32768
_HEADER: Final = 7  # CRC-32 (4 bytes), length (2), chunk type (1)
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


@dataclass(frozen=True)
class WandbLog:
    """What :func:`read_records` found in a ``.wandb`` file.

    Attributes:
        records: the ``wandb_internal_pb2.Record`` messages, in file order.
        end: the offset just past the last complete record (where to read on from).
        damaged: a chunk before the end failed its checksum or framing; reading stopped
            there (a torn tail, what a killed writer leaves, is not damage).
    """

    records: list[Any]
    end: int
    damaged: bool


def _chunks(data: bytes, base: int) -> Iterator[tuple[int, int, bytes] | None]:
    """Yields (type, end offset in the file, payload) for each framed chunk of ``data``,
    the file's bytes from offset ``base``; ``None`` for a chunk whose checksum or type is
    wrong (the caller stops there)."""
    pos = 0
    while pos + _HEADER <= len(data):
        room = _BLOCK - (base + pos) % _BLOCK
        if room < _HEADER:  # the block's tail is padding: chunks never straddle blocks
            pos += room
            continue
        crc, length, kind = struct.unpack_from("<IHB", data, pos)
        end = pos + _HEADER + length
        if end > len(data):
            return  # a torn tail: the writer died mid-chunk (or is writing it)
        payload = data[pos + _HEADER : end]
        if kind == 0 and length == 0 and crc == 0:
            pos = end  # zero padding of a preallocated block
            continue
        if (
            kind not in (_FULL, _FIRST, _MIDDLE, _LAST)
            or zlib.crc32(payload, zlib.crc32(bytes([kind]))) != crc
        ):
            yield None
            return
        yield kind, base + end, payload
        pos = end


def read_records(path: str, offset: int = 0) -> WandbLog:
    """Reads the complete ``Record`` messages of a W&B transaction log from ``offset``.

    The file is W&B's LevelDB-style log: a 7-byte header (``:W&B``, magic ``0xBEE1``,
    version 0), then 32 KiB blocks of chunks, each with a CRC-32 of its type byte and
    payload, its length and its type (full, or first/middle/last of a record split
    across blocks); a record is a serialized ``wandb_internal_pb2.Record``.

    Args:
        path: the ``run-<id>.wandb`` file.
        offset: where to start: 0, or a previous call's ``end`` (the file grows; only
            the bytes from there are read).

    Returns:
        The records found, the offset to read on from, and whether damage stopped it.

    Raises:
        ValueError: the file does not start with W&B's header.
    """
    pb = require("wandb.proto.wandb_internal_pb2", "wandb", "the wandb summary format")
    with open(path, "rb") as file:
        if offset < len(_IDENT):
            header = file.read(len(_IDENT))
            if len(header) < len(_IDENT):
                return WandbLog([], 0, False)
            if header != _IDENT:
                raise ValueError(
                    f"{path!r} is not a W&B transaction log: it starts with {header!r}, "
                    f"not {_IDENT!r}"
                )
            offset = len(_IDENT)
        file.seek(offset)
        data = file.read()
    records: list[Any] = []
    end, parts = offset, []
    for chunk in _chunks(data, offset):
        if chunk is None:
            return WandbLog(records, end, True)
        kind, chunk_end, payload = chunk
        if kind in (_FULL, _FIRST):
            parts = [payload]
        else:
            parts.append(payload)
        if kind in (_FULL, _LAST):
            record = pb.Record()
            record.ParseFromString(b"".join(parts))
            records.append(record)
            end, parts = chunk_end, []
    return WandbLog(records, end, False)


def wandb_files(directory: str, run_id: str) -> list[str]:
    """The transaction logs of W&B run ``run_id`` under ``directory`` (its ``wandb/``),
    one per process that ran it, oldest first.

    W&B names each process's directory ``[offline-]run-<YYYYmmdd_HHMMSS>-<id>``, with
    ``-1``, ``-2``, ... added when that name exists already (two starts in one second).
    """
    pattern = re.compile(r"(?:offline-)?run-(\d{8}_\d{6})-" + re.escape(run_id) + r"(?:-(\d+))?")
    found = []
    for path in glob.glob(
        os.path.join(glob.escape(directory), "wandb", "*", f"run-{run_id}.wandb")
    ):
        match = pattern.fullmatch(os.path.basename(os.path.dirname(path)))
        if match is not None:
            found.append(((match[1], int(match[2] or 0)), path))
    return [path for _, path in sorted(found)]


def history_rows(records: list[Any]) -> Iterator[dict[str, Any]]:
    """The history rows among ``records``, each as {key: value} (values JSON-decoded)."""
    for record in records:
        if record.WhichOneof("record_type") == "history":
            yield {
                "/".join(item.nested_key) or item.key: json.loads(item.value_json)
                for item in record.history.item
            }


def _rows_on_the_axis(records: list[Any]) -> int:
    """How many of ``records`` are history rows with :data:`STEP_METRIC` (the rows this
    client logs): :func:`history_rows` counted without decoding a value."""
    count = 0
    for record in records:
        if record.WhichOneof("record_type") == "history":
            keys = ("/".join(item.nested_key) or item.key for item in record.history.item)
            count += STEP_METRIC in keys
    return count


_PURPOSE = "the wandb summary format"
_HERE: Any = object()  # WandbClient's default: wandb.run where the client is built


def prepare() -> Callable[[], TrackerClient]:
    """On the thread that opens the writer: checks wandb is installed and notes the
    user's ``wandb.run``, without importing wandb (a user who started a run imported it);
    returns what builds the client on the sender thread.

    Raises:
        MissingDependencyError: wandb is not installed.
    """
    require_installed("wandb", "wandb", _PURPOSE)
    wandb = sys.modules.get("wandb")
    return partial(WandbClient, active=getattr(wandb, "run", None))


class WandbClient:
    """The tracker client for W&B: ``open``, ``send``, ``set_params``, ``close``.

    Args:
        active: the user's W&B run to log to, or None; by default ``wandb.run`` where the
            client is built (see :func:`prepare`).
        confirm_seconds: how long :meth:`send` waits for W&B's transaction log to hold
            the rows it logged before it raises (the backend then retries).
        flush_seconds: the transaction log's flush interval for runs this client starts
            (W&B's default is 15 s); ``WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL`` wins.

    Raises:
        ConfigError: ``confirm_seconds`` or ``flush_seconds`` is not > 0.
        MissingDependencyError: wandb is not installed (``pip install
            'globalstep[wandb]'``).
    """

    name = "wandb"

    def __init__(
        self, *, active: Any = _HERE, confirm_seconds: float = 60.0, flush_seconds: float = 1.0
    ) -> None:
        for parameter, value in (
            ("confirm_seconds", confirm_seconds),
            ("flush_seconds", flush_seconds),
        ):
            if not value > 0:
                raise ConfigError(parameter, "must be > 0", value)
        self._confirm_seconds = float(confirm_seconds)
        self._flush_seconds = float(flush_seconds)
        self._wandb = require("wandb", "wandb", _PURPOSE)
        # the user's run, noted where the writer opens
        self._active: Any = self._wandb.run if active is _HERE else active
        self._run: Any = None
        self._owned = False
        self._file: str | None = None
        self._offset = 0
        self._handed = 0  # rows this process logged
        self._confirmed = 0  # of them, rows seen in the transaction log
        self._held: dict[str, int] = {}  # tag -> newest step in the run's earlier files
        self._last: dict[str, int] = {}  # tag -> newest step this client handed to W&B
        self._unconfirmed: list[tuple[str, int, float, float]] = []  # a timed-out send's

    def open(self, run_id: str | None, *, logdir: str, key: str) -> str:
        """Continues W&B run ``run_id``, or starts (or continues) the run whose id is
        ``key``, the training run's key; returns the run's id.

        ``key`` as the W&B run id (``wandb.init(id=key, resume="allow")``) means that a
        process killed after W&B made its run and before the id reached the record is
        continued by the next one, not doubled. The ``wandb.run`` active when the client
        was built (where the writer opens) is used instead, as it is, and not finished
        at :meth:`close`.

        Raises:
            TrackerRefusedError: that run has another id than ``run_id``, or W&B refuses
                its settings (a ``UsageError``, an ``AuthenticationError``, a settings
                validation error): for good, the backend gives up (its points stay in
                its record).
        """
        wandb, active = self._wandb, self._active
        if active is not None:
            if run_id is not None and active.id != run_id:
                raise TrackerRefusedError(
                    f"the active wandb.run is W&B run {active.id!r}, but this log "
                    f"directory continues W&B run {run_id!r}: finish the active run "
                    "(wandb.finish()) before the writer opens, or log to a new directory"
                )
            run, self._owned = active, False
        else:
            directory = os.environ.get("WANDB_DIR") or (logdir if "://" not in logdir else None)
            if directory is not None:
                # Absolute: W&B's service, started once a process, resolves a relative
                # directory against its own working directory, not this thread's.
                directory = os.path.abspath(directory)
                os.makedirs(directory, exist_ok=True)
            settings: dict[str, Any] = {}
            if "WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL" not in os.environ:
                settings["x_transaction_log_flush_interval"] = self._flush_seconds
            try:
                run = wandb.init(
                    id=run_id or key,
                    resume="allow",
                    dir=directory,
                    settings=wandb.Settings(**settings),
                )
            except (wandb.errors.UsageError, wandb.errors.AuthenticationError, ValueError) as err:
                # ValueError: W&B's settings validation (pydantic), e.g. a WANDB_MODE typo
                raise TrackerRefusedError(f"wandb.init refused to start the run: {err}") from err
            self._owned = True
        self._run = run
        run.define_metric(STEP_METRIC, hidden=True)
        self._file = _transaction_log(run)
        if self._file is not None:
            self._offset = 0
            self._read_earlier(os.path.dirname(os.path.dirname(os.path.dirname(self._file))))
        return str(run.id)

    def _read_earlier(self, directory: str) -> None:
        """Notes each tag's newest step in the run's earlier transaction logs (a damaged
        one up to its damage, as far as ``wandb sync`` would upload it)."""
        for path in wandb_files(directory, str(self._run.id)):
            if os.path.abspath(path) == os.path.abspath(str(self._file)):
                continue
            for row in history_rows(read_records(path).records):
                step = row.get(STEP_METRIC)
                if isinstance(step, int):
                    for tag in row:
                        if not tag.startswith("_") and tag != STEP_METRIC:
                            self._held[tag] = max(self._held.get(tag, step), step)

    def send(self, points: list[tuple[str, int, float, float]]) -> None:
        """Logs ``(tag, step, value, wall_time)`` points as history rows, then waits
        until W&B's transaction log holds every row logged so far.

        Consecutive points at one step go in one row. A point at a step the run's earlier
        files hold for its tag is not logged again (an earlier process sent it and was
        killed before its record said so).

        Raises:
            RuntimeError: called before :meth:`open`.
            TrackerRefusedError: a point at or below a step this client sent its tag at
                already, or tagged :data:`STEP_METRIC` (nothing of the batch is logged;
                the backend halves it to drop only those).
            TimeoutError: the rows are not in the transaction log after
                ``confirm_seconds`` (a retry does not log them twice).
        """
        if self._run is None:
            raise RuntimeError("WandbClient.send was called before open()")
        handed = set(self._unconfirmed)  # a timed-out send's points: logged already
        fresh = [point for point in points if point not in handed]
        self._refuse(fresh)
        for row in self._rows(fresh):
            self._run.log(row)
            self._handed += 1
        self._unconfirmed.extend(fresh)
        self._confirm()
        self._unconfirmed = []

    def _refuse(self, points: list[tuple[str, int, float, float]]) -> None:
        """Raises TrackerRefusedError if a point cannot go on the global-step axis."""
        last = dict(self._last)
        refused = []
        for point in points:
            tag, step = point[0], point[1]
            if tag == STEP_METRIC or step <= last.get(tag, -1):
                refused.append(point)
            elif step > self._held.get(tag, -1):
                last[tag] = step
        if refused:
            tag, step = refused[0][0], refused[0][1]
            why = (
                f"{STEP_METRIC!r} is the axis itself"
                if tag == STEP_METRIC
                else f"{tag!r} was sent up to step {last[tag]} already"
            )
            raise TrackerRefusedError(
                f"wandb: {len(refused)} points cannot go on W&B's global-step axis, "
                f"e.g. {tag!r} at step {step}: {why}"
            )

    def _rows(self, points: list[tuple[str, int, float, float]]) -> Iterator[dict[str, Any]]:
        """Groups consecutive points at one step into rows, skipping those W&B holds."""
        row: dict[str, Any] = {}
        for tag, step, value, wall_time in points:
            if step <= self._held.get(tag, -1):
                continue  # sent by a process killed before its record said so
            if row and (row[STEP_METRIC] != step or tag in row):
                yield row
                row = {}
            if not row:
                row = {STEP_METRIC: step, "_timestamp": wall_time}
            if tag not in self._last:
                self._run.define_metric(tag, step_metric=STEP_METRIC)
            row[tag] = value
            self._last[tag] = step
        if row:
            yield row

    def _confirm(self) -> None:
        """Waits until the transaction log holds the rows handed so far."""
        if self._file is None:
            self._confirmed = self._handed  # mode "disabled": W&B keeps nothing
            return
        deadline = time.monotonic() + self._confirm_seconds
        pause = 0.01
        while True:
            if os.path.exists(self._file):
                log = read_records(self._file, self._offset)
                self._offset = log.end
                self._confirmed += _rows_on_the_axis(log.records)
            if self._confirmed >= self._handed:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"wandb: {self._handed - self._confirmed} rows logged to W&B run "
                    f"{self._run.id!r} are not in its transaction log {self._file!r} after "
                    f"{self._confirm_seconds} s (`confirm_seconds`)"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.25)

    def set_params(self, params: Mapping[str, Any]) -> None:
        """Sets ``params`` (the run's configuration) as the W&B run's config."""
        if self._run is None:
            raise RuntimeError("WandbClient.set_params was called before open()")
        self._run.config.update(dict(params), allow_val_change=True)

    def close(self) -> None:
        """Finishes the W&B run if this client started it (not the user's)."""
        run, self._run = self._run, None
        if run is not None and self._owned:
            run.finish()


def _transaction_log(run: Any) -> str | None:
    """The run's ``.wandb`` file, or None where W&B keeps none (mode ``disabled``)."""
    settings = run.settings
    if getattr(settings, "mode", None) == "disabled" or getattr(
        settings, "x_skip_transaction_log", False
    ):
        return None
    path = getattr(settings, "sync_file", None)
    return str(path) if path else None
