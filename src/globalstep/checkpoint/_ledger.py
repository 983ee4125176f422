"""The ledger: what every attempt of a run and every save cost, one fsynced JSON line each.

A :class:`Ledger` appends records to ``ledger.jsonl``: in a :class:`~globalstep.run.Run`'s
directory, or in the checkpoint directory of a
:class:`~globalstep.checkpoint.CheckpointManager` used without a Run (local directories
only; a manager on an object store keeps one only where ``ledger=`` names a local file).
Each record is one JSON object on one line, written with one ``write`` and fsynced before
the call returns (no pickle); a crash can leave at most the last line torn, which readers
skip (and say so) and the next writer cuts off before it appends. Only the process that
holds the checkpoint directory's lock writes (the writer rank; other ranks keep no
ledger), so one file never has two writers.

Every record holds ``kind``, ``time`` (seconds since the epoch) and ``v`` (the format, 1),
and is open to further keys: readers ignore those they do not know. The kinds:

- ``attempt``: a process opened the ledger (the manager was made): ``pid``, ``host``.
- ``restore``: ``step``, ``tier`` (``"durable"``; a fast tier writes ``"fast"``),
  ``seconds`` (reading, checking and filling the state), ``fell_back_from`` (what was newer
  but could not be used: a tier, ``"fast"``, or ``"durable step 40"`` where
  ``skip_corrupt`` passed over a corrupt checkpoint; None).
- ``resume``: written by a Run after its restore: ``step``, ``logged_to`` (the highest step
  standing in the logs, the crashed attempt's last point), ``steps_redone`` (the
  difference: the updates the crashed attempt logged past the checkpoint, which this one
  does again), ``last_logged_time`` (the wall time of the last point in the logs).
- ``save``: ``step``, ``tier``, ``bytes`` (the committed checkpoint's files),
  ``stall_seconds`` (the training thread inside ``save()``, waiting for an earlier async
  save included), ``background_seconds`` (the save thread's part of an async save; 0 for
  a synchronous one), ``gbps`` (bytes / (stall + background) / 1e9).
- ``floor``: the raw floor of one storage: ``tier``, ``directory``, ``bytes``,
  ``seconds``, ``gbps``: a plain ``write`` of that many bytes to a new file there and its
  ``fsync``, once per run and tier, in a thread of its own after the first save (never on
  the training thread), of the first save's size but at most :data:`FLOOR_MAX_BYTES`.
- ``end``: the process closed the manager: ``error`` (None, or what ended the run).

Any other kind (``audit``, say) belongs to the attempt it follows: its keys are merged into
that attempt by :func:`read_ledger`.

Goodput (:attr:`LedgerSummary.goodput`): the share of the wall time of all attempts that
went into steps kept. An attempt lasts from its ``attempt`` record to its ``end`` record,
or, for one that crashed, to the latest of its own last record and the last point it
logged (the next attempt's ``resume.last_logged_time``). Lost from that time: every
restore's ``seconds``, the redone steps' time (for each resume with steps redone: from when
the training thread went on after the save it resumed from, ``time - background_seconds``
of that save's record, to the crashed attempt's last logged point), and every kept save's
``stall_seconds`` (a save past the step resumed from is lost: its stall is inside the
redone time). ``share = (wall - restores - redone - stalls) / wall``. The gaps between
attempts (a scheduler's restart) are outside the wall time and shown apart.

Example:
    >>> import numpy as np, os, tempfile
    >>> from globalstep.checkpoint import CheckpointManager
    >>> directory = tempfile.mkdtemp()
    >>> with CheckpointManager(directory) as manager:
    ...     manager.save(10, {"w": np.zeros(4)})
    >>> summary = read_ledger(os.path.join(directory, LEDGER_FILE))
    >>> [(s["step"], s["tier"], s["bytes"] > 0) for s in summary.saves]
    [(10, 'durable', True)]
    >>> len(summary.attempts), summary.attempts[0]["clean"]
    (1, True)
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from globalstep._errors import (
    CheckpointNotFoundError,
    CheckpointWarning,
    ConfigError,
    CorruptCheckpointError,
)
from globalstep.storage import Storage, is_remote

__all__ = [
    "FLOOR_MAX_BYTES",
    "LEDGER_FILE",
    "Ledger",
    "LedgerSummary",
    "checkpoint_bytes",
    "open_ledger",
    "read_ledger",
    "timed",
]

LEDGER_FILE = "ledger.jsonl"
"""The ledger's file name, in the run's directory (or the checkpoint directory)."""

FLOOR_MAX_BYTES = 256 << 20
"""The most bytes the raw floor writes (256 MiB): a larger save's floor is measured on
this many bytes, its speed the same per byte."""

FORMAT = 1
_FLOOR_PREFIX = ".floor-"
_BLOCK = 4 << 20


def _host() -> str:
    try:
        return socket.gethostname()
    except OSError:  # pragma: no cover - no host name
        return "?"


def checkpoint_bytes(storage: Storage, name: str) -> int:
    """The size of every file below checkpoint directory ``name`` of ``storage``."""
    total = 0
    pending = [storage.join(name)]
    while pending:
        path = pending.pop()
        if storage.local:
            with os.scandir(path) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    else:
                        total += entry.stat(follow_symlinks=False).st_size
            continue
        for child in storage.listdir(path):
            full = f"{path.rstrip('/')}/{child}"
            if storage.is_dir(full):
                pending.append(full)
            else:
                total += storage.size(full)
    return total


def timed(
    commit: Callable[[], None],
    started: float,
    background: bool,
    record: Callable[..., None],
) -> Callable[[], None]:
    """``commit`` (a save's work, for the saver to run), timed for the ledger: once it
    returns, ``record(stall_seconds, background_seconds)`` is called.

    Args:
        commit: the save's work.
        started: when ``save()`` was called (``time.perf_counter()``).
        background: whether the work runs on a save thread (an async save): the training
            thread's stall then ends now, when the work is handed over.
        record: the manager's ledger call.
    """
    handed_over = time.perf_counter()

    def work() -> None:
        begun = time.perf_counter()
        commit()
        ended = time.perf_counter()
        try:  # the checkpoint is committed: nothing here may fail the save
            if background:
                record(handed_over - started, ended - begun)
            else:
                record(ended - started, 0.0)
        except Exception as err:  # a size that cannot be read (an object store's error)
            warnings.warn(
                f"the ledger could not record this save ({err}); the checkpoint is committed",
                CheckpointWarning,
                stacklevel=2,
            )

    return work


def _rate(nbytes: int, seconds: float) -> float | None:
    return round(nbytes / seconds / 1e9, 6) if seconds > 0 else None


class Ledger:
    """Appends the records of one process to a run's ``ledger.jsonl`` (see the module).

    Open it with :func:`open_ledger`; the CheckpointManager does, and calls it. Safe to
    call from the training thread and a save thread at once. A failure to write warns once
    (:class:`~globalstep.checkpoint.CheckpointWarning`) and turns the ledger off: it never
    fails a save.

    Attributes:
        path: the file.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._closed = False  # by close() (not by a failed write: then nothing more)
        self._floors: set[str] = set()
        self._floor_threads: list[threading.Thread] = []
        self._completed: list[dict[str, Any]] = []
        self.last_restore: dict[str, Any] | None = None
        """The newest ``restore`` record this process wrote, or None."""
        self.error: str | None = None
        """What ended the run, for the ``end`` record, where its owner knows (a Run
        closed by an exception)."""
        dropped = self._open()
        extra = {"dropped_torn_bytes": dropped} if dropped else {}
        self.append("attempt", pid=os.getpid(), host=_host(), **extra)

    def _open(self) -> int:
        """Opens the file for appending; cuts off a torn last line; returns its length."""
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, exist_ok=True)
        created = not os.path.exists(self.path)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        dropped = 0
        try:
            size = os.fstat(fd).st_size
            if size:
                data = os.pread(fd, size, 0)
                cut = data.rfind(b"\n") + 1
                dropped = size - cut
                if dropped:
                    os.ftruncate(fd, cut)
                for line in data[:cut].splitlines():
                    if b'"floor"' in line:
                        with contextlib.suppress(ValueError, TypeError, KeyError):
                            record = json.loads(line)
                            self._floors.add(f"{record['tier']}\0{record['directory']}")
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        if created:
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return dropped

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Appends one record of ``kind`` with ``fields`` (JSON-ready), fsynced; returns it."""
        record = {"kind": kind, "time": time.time(), "v": FORMAT, **fields}
        with self._lock:
            fd = self._fd
            if fd is None:
                return record
            try:
                text = json.dumps(record, separators=(", ", ": "), allow_nan=False)
            except (TypeError, ValueError) as err:  # a field that JSON cannot hold
                warnings.warn(
                    f"the ledger {self.path} skipped a {kind!r} record ({err})",
                    CheckpointWarning,
                    stacklevel=2,
                )
                return record
            try:
                os.write(fd, (text + "\n").encode())
                os.fsync(fd)
            except OSError as err:
                self._fd = None
                with contextlib.suppress(OSError):
                    os.close(fd)
                warnings.warn(
                    f"the ledger {self.path} could not be written ({err}); it records "
                    "nothing more in this process (the checkpoints are not affected)",
                    CheckpointWarning,
                    stacklevel=3,
                )
        return record

    def saved(
        self,
        step: int,
        tier: str,
        nbytes: int,
        stall_seconds: float,
        background_seconds: float,
        storage: Storage | None = None,
        **extra: Any,
    ) -> None:
        """Records a committed save; the first of a tier (and storage) in the run also
        starts the raw floor's measurement on ``storage``, in a thread of its own."""
        record = self.append(
            "save",
            step=step,
            tier=tier,
            bytes=nbytes,
            stall_seconds=round(stall_seconds, 6),
            background_seconds=round(background_seconds, 6),
            gbps=_rate(nbytes, stall_seconds + background_seconds),
            **extra,
        )
        with self._lock:
            self._completed.append(record)
        if storage is not None:
            key = f"{tier}\0{storage.location}"
            if key not in self._floors and self._fd is not None:
                self._floors.add(key)
                thread = threading.Thread(
                    target=self._floor,
                    args=(storage, tier, min(max(nbytes, 1), FLOOR_MAX_BYTES)),
                    name="globalstep-ledger-floor",
                    daemon=True,
                )
                self._floor_threads.append(thread)
                thread.start()

    def restored(self, step: int, tier: str, seconds: float, fell_back_from: str | None) -> None:
        """Records a restore."""
        self.last_restore = self.append(
            "restore",
            step=step,
            tier=tier,
            seconds=round(seconds, 6),
            fell_back_from=fell_back_from,
        )

    def take_saves(self) -> list[dict[str, Any]]:
        """Returns the ``save`` records written since the last call, oldest first."""
        with self._lock:
            taken, self._completed = self._completed, []
        return taken

    def _floor(self, storage: Storage, tier: str, nbytes: int) -> None:
        """Writes ``nbytes`` to a new file beside the checkpoints, fsyncs it, records the time."""
        with contextlib.suppress(OSError):  # a killed process's floor file
            for name in storage.listdir(storage.root):
                if name.startswith(_FLOOR_PREFIX):
                    storage.remove_file(storage.join(name))
        path = storage.join(f"{_FLOOR_PREFIX}{secrets.token_hex(4)}.tmp")
        block = os.urandom(min(nbytes, _BLOCK))
        try:
            started = time.perf_counter()
            if storage.local:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    left = nbytes
                    while left:
                        left -= os.write(fd, block[: min(left, len(block))])
                    os.fsync(fd)
                finally:
                    os.close(fd)
            else:
                writer = storage.open_writer(path)
                left = nbytes
                while left:
                    piece = block[: min(left, len(block))]
                    writer.write(piece)
                    left -= len(piece)
                writer.close()
            seconds = time.perf_counter() - started
        except OSError:
            return  # no floor: the saves' own figures stand alone
        finally:
            with contextlib.suppress(OSError):
                storage.remove_file(path)
        self.append(
            "floor",
            tier=tier,
            directory=storage.location,
            bytes=nbytes,
            seconds=round(seconds, 6),
            gbps=_rate(nbytes, seconds),
        )

    def close(self) -> None:
        """Waits for a floor being measured (at most :data:`FLOOR_MAX_BYTES` written once),
        writes the ``end`` record and closes the file."""
        for thread in self._floor_threads:
            thread.join()
        self.append("end", error=self.error)
        with self._lock:
            fd, self._fd = self._fd, None
            self._closed = fd is not None
        if fd is not None:
            os.close(fd)

    def append_late(self, kind: str, **fields: Any) -> None:
        """:meth:`append`, also once closed (the file is opened again for the one record):
        for what a run learns last, e.g. its resume audit, told when its writer closed."""
        with self._lock:
            late = self._closed
            if late:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            self.append(kind, **fields)
        finally:
            if late:
                with self._lock:
                    fd, self._fd = self._fd, None
                if fd is not None:
                    os.close(fd)


def open_ledger(ledger: Any, storage: Storage) -> Ledger | None:
    """Opens the ledger a CheckpointManager's ``ledger`` argument names.

    Args:
        ledger: True (``ledger.jsonl`` in the checkpoint directory, where it is local;
            none on an object store), False (none), or a local path.
        storage: the checkpoint directory's storage.

    Raises:
        ConfigError: ``ledger`` is not a bool or a local path.
    """
    if ledger is True:
        if not storage.local:
            return None
        path = storage.join(LEDGER_FILE)
    elif ledger is False or ledger is None:
        return None
    elif not isinstance(ledger, str | os.PathLike) or is_remote(os.fspath(ledger)):
        raise ConfigError(
            "ledger",
            "must be True, False or a local file path (a ledger is appended and fsynced, "
            "which object stores cannot do)",
            ledger,
        )
    else:
        path = os.fspath(ledger)
    try:
        return Ledger(path)
    except OSError as err:
        warnings.warn(
            f"the ledger {path} cannot be opened ({err}); this process keeps none "
            "(the checkpoints are not affected)",
            CheckpointWarning,
            stacklevel=3,
        )
        return None


# ----------------------------------------------------------------------------- reading


@dataclass
class LedgerSummary:
    """A ledger read back (:func:`read_ledger`).

    Attributes:
        path: the file read.
        attempts: one dict per attempt, oldest first: ``started``, ``ended`` (None: it did
            not close, a crash), ``clean``, ``error``, ``wall_seconds``, ``resumed_from``
            (None: a fresh start), ``tier``, ``fell_back_from``, ``restore_seconds``,
            ``restores`` (rollbacks' included), ``steps_redone``, ``redone_seconds``,
            ``saves``, ``stall_seconds``, and the keys of records of other kinds.
        saves: one dict per ``save`` record with ``attempt`` (its number, from 1),
            ``floor_gbps`` (the raw floor measured on its tier's storage, or None) and
            ``lost`` (past the step the next attempt resumed from).
        floors: the ``floor`` records.
        torn_last_line: the bytes of a torn last line that were skipped (0: none).
        goodput: ``share``, ``wall_seconds``, ``restore_seconds``, ``redone_seconds``,
            ``stall_seconds``, ``kept_seconds``, ``gap_seconds`` (between attempts).
    """

    path: str
    attempts: list[dict[str, Any]] = field(default_factory=list)
    saves: list[dict[str, Any]] = field(default_factory=list)
    floors: list[dict[str, Any]] = field(default_factory=list)
    torn_last_line: int = 0
    goodput: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON-ready data (``globalstep ckpt ledger --json``)."""
        return {
            "attempts": self.attempts,
            "saves": self.saves,
            "floors": self.floors,
            "goodput": self.goodput,
            "torn_last_line_bytes": self.torn_last_line,
        }

    def goodput_line(self) -> str:
        """One line: the share of wall time that went into steps kept, and what was lost."""
        g = self.goodput
        if not g.get("wall_seconds"):
            return "goodput: no attempt long enough to measure"
        attempts = len(self.attempts)
        return (
            f"goodput: {100 * g['share']:.1f}% of {g['wall_seconds']:.2f} s went into steps "
            f"kept ({attempts} attempt{'s' if attempts != 1 else ''}; lost: restores "
            f"{g['restore_seconds']:.3f} s, redone steps {g['redone_seconds']:.3f} s, save "
            f"stalls {g['stall_seconds']:.3f} s)"
        )


_KNOWN = {"kind", "time", "v"}


def _records(path: str) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """The records of ``path`` with their line numbers, and the torn last line's bytes."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"no ledger at {path}", path) from None
    lines = data.split(b"\n")
    torn = 0
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:  # no newline at the end: the last line was cut short by a crash
        torn = len(lines.pop())
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
                raise ValueError("not an object with a kind")
            if not isinstance(record.get("time"), int | float):
                raise ValueError("no time")
        except ValueError as err:
            raise CorruptCheckpointError(
                f"{path} line {number} is not a ledger record ({err}); only a torn last "
                "line is skipped: the file was changed by hand or damaged",
                path,
            ) from None
        records.append((number, record))
    return records, torn


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def read_ledger(path: str | os.PathLike[str]) -> LedgerSummary:
    """Reads a ledger and sums it up (see the module for the goodput's definition).

    Raises:
        CheckpointNotFoundError: there is no file at ``path``.
        CorruptCheckpointError: a line other than the last is not a record; the message
            names its line number.
    """
    text = os.fspath(path)
    records, torn = _records(text)
    summary = LedgerSummary(path=text, torn_last_line=torn)
    attempts: list[dict[str, Any]] = []
    last_seen: list[float] = []
    saved_before: list[int] = []  # per attempt: saves seen so far (a restore after one: a rollback)
    for _, record in records:
        kind, when = record["kind"], float(record["time"])
        if kind == "attempt" or not attempts:
            attempts.append(_new_attempt(record if kind == "attempt" else {"time": when}))
            last_seen.append(when)
            saved_before.append(0)
            if kind == "attempt":
                continue
        attempt = attempts[-1]
        last_seen[-1] = max(last_seen[-1], when)
        number = len(attempts)
        if kind == "save":
            saved_before[-1] += 1
            save = {k: v for k, v in record.items() if k not in _KNOWN}
            save.update(time=when, attempt=number, floor_gbps=None, lost=False)
            summary.saves.append(save)
        elif kind == "restore":
            attempt["restores"] += 1
            attempt["_restore_total"] += _number(record.get("seconds"))
            if attempt["restores"] == 1 and not saved_before[-1]:
                attempt["resumed_from"] = record.get("step")
                attempt["tier"] = record.get("tier")
                attempt["fell_back_from"] = record.get("fell_back_from")
                attempt["restore_seconds"] = record.get("seconds")
        elif kind == "resume":
            attempt["steps_redone"] = record.get("steps_redone")
            attempt["_last_logged_time"] = record.get("last_logged_time")
            if attempt["resumed_from"] is None:
                attempt["resumed_from"] = record.get("step")
        elif kind == "floor":
            summary.floors.append({k: v for k, v in record.items() if k not in _KNOWN})
        elif kind == "end":
            attempt["ended"] = when
            attempt["error"] = record.get("error")
            attempt["clean"] = record.get("error") is None
        else:  # another kind (an audit, say): its keys belong to the attempt
            attempt.update({k: v for k, v in record.items() if k not in _KNOWN})
    _finish(summary, attempts, last_seen)
    return summary


def _new_attempt(record: Mapping[str, Any]) -> dict[str, Any]:
    extra = {k: v for k, v in record.items() if k not in _KNOWN}
    return {
        "started": float(record["time"]),
        "ended": None,
        "clean": False,
        "error": None,
        "wall_seconds": None,
        "resumed_from": None,
        "tier": None,
        "fell_back_from": None,
        "restore_seconds": None,
        "restores": 0,
        "steps_redone": None,
        "redone_seconds": None,
        "saves": 0,
        "stall_seconds": 0.0,
        "_restore_total": 0.0,
        "_last_logged_time": None,
        **extra,
    }


def _finish(summary: LedgerSummary, attempts: list[dict[str, Any]], last_seen: list[float]) -> None:
    """Works out each attempt's end, redone time and lost saves, and the goodput."""
    floors = {f.get("tier"): f.get("gbps") for f in summary.floors}
    for save in summary.saves:
        save["floor_gbps"] = floors.get(save.get("tier"))
    for index, attempt in enumerate(attempts):
        later = attempts[index + 1] if index + 1 < len(attempts) else None
        end = attempt["ended"]
        if end is None:
            logged = later["_last_logged_time"] if later is not None else None
            end = max(last_seen[index], _number(logged))
        attempt["wall_seconds"] = round(max(0.0, end - attempt["started"]), 6)
        attempt["_end"] = end
        if later is not None and later["resumed_from"] is not None:
            kept_step = later["resumed_from"]
            for save in summary.saves:
                if save["attempt"] == index + 1 and _number(save.get("step")) > kept_step:
                    save["lost"] = True
            later["redone_seconds"] = _redone(summary, later, index + 1)
    for save in summary.saves:
        attempt = attempts[save["attempt"] - 1]
        attempt["saves"] += 1
        if not save["lost"]:
            attempt["stall_seconds"] += _number(save.get("stall_seconds"))
    wall = restores = redone = stalls = gaps = 0.0
    for index, attempt in enumerate(attempts):
        wall += attempt["wall_seconds"]
        restores += attempt.pop("_restore_total")
        redone += attempt["redone_seconds"] or 0.0
        stalls += attempt["stall_seconds"]
        attempt["stall_seconds"] = round(attempt["stall_seconds"], 6)
        if index:
            gaps += max(0.0, attempt["started"] - attempts[index - 1]["_end"])
    for attempt in attempts:
        attempt.pop("_end")
        attempt.pop("_last_logged_time")
    kept = max(0.0, wall - restores - redone - stalls)
    summary.attempts = attempts
    summary.goodput = {
        "share": round(kept / wall, 6) if wall > 0 else None,
        "wall_seconds": round(wall, 6),
        "kept_seconds": round(kept, 6),
        "restore_seconds": round(restores, 6),
        "redone_seconds": round(redone, 6),
        "stall_seconds": round(stalls, 6),
        "gap_seconds": round(gaps, 6),
    }


def _redone(summary: LedgerSummary, attempt: dict[str, Any], crashed: int) -> float | None:
    """The crashed attempt's time on the steps ``attempt`` does again: from when the
    training thread went on after the save it resumes from to the crashed attempt's last
    logged point (None where either is unknown)."""
    logged, redone = attempt["_last_logged_time"], attempt["steps_redone"]
    if redone is None:
        return None
    if logged is None or redone == 0:  # nothing logged past the checkpoint: none redone
        return 0.0
    saves = [
        s
        for s in summary.saves
        if s["attempt"] <= crashed
        and s.get("step") == attempt["resumed_from"]
        and s.get("tier") == (attempt["tier"] or s.get("tier"))
    ]
    if not saves:
        return None
    kept = saves[-1]
    went_on = _number(kept["time"]) - _number(kept.get("background_seconds"))
    return round(max(0.0, _number(logged) - went_on), 6)
