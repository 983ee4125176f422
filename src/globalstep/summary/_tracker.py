"""The tracker formats' generic part: points sent to a tracker once no crash can take them back.

A tracker (MLflow, Weights & Biases) cannot delete a point. A run killed after it logged
step 120 and resumed from its checkpoint of step 100 logs steps 101..120 again, so a
tracker that was sent the first attempt's points shows two values at those steps. A tracker
format therefore holds each point as *pending* and hands it to the tracker's client only
once a checkpoint that covers it has committed (its step at or below the newest committed
checkpoint's: a resumed run never logs such a step again), plus every point at a clean
close. The tracker lags the run by up to one checkpoint interval, and by the sender's
latency (see the README's "Experiment trackers" section for the trade-off, BENCHMARKS.md
for the lag measured).

The pieces:

- :class:`Tracker`: a format with its options, ``formats=("jsonl", Tracker("mlflow",
  max_pending=10_000))``; the names ``"mlflow"`` and ``"wandb"`` are ``Tracker(name)``,
  any other tool is ``Tracker(name, client=...)`` with a client of the user's own.
- :class:`TrackerClient`: the protocol of one tool's client (``open``, ``send``,
  ``close``), called from the sender thread only; ``summary/_mlflow.py`` and
  ``summary/_wandb.py`` are two (see docs/add-a-tracker.md for a third).
- :class:`TrackerBackend`: the writer's :class:`~globalstep.summary._base.Backend` for a
  tracker. Its ``write`` (the writer's drain thread) appends each scalar to the *record*
  and to the pending points; :func:`globalstep._durability.committed` (the save's thread,
  after each commit) makes the points at and below the step sendable and adds the point
  ``globalstep/checkpoint`` (the committed step, at that step); a sender thread of its own
  opens the tracker run and sends, retrying with exponential backoff. The training thread
  never waits for the tracker.

The record, ``<logdir>/<tracker>.tracker.jsonl``, is the durable state of the tracker run:
its key (``{"key": hex}``, written first), its id (``{"run": id}``), every point accepted
(``[tag, step, value, wall_time]``, fsynced with the writer's other files before each
commit), the restarts (``{"restart": P}``), the
commits heard (``{"committed": S}``), the points dropped (``{"dropped": N}``), the clean
closes (``{"closed": N}``: the points from number N on, that process's, are final) and the
points sent (``{"sent": [[first, last], ...]}``, by their number among the point lines). A
process that opens the directory again continues the same tracker run and sends what an
earlier one accepted, that a commit or a close made final, and did not send (a crash
between a commit and the send). A point sent again after a crash between the send and its
``sent`` line is the same (tag, step, value, timestamp): MLflow's SQL store keeps one row.

Bounds: at most ``max_pending`` points wait in memory (and one batch in flight); past it
the oldest pending point is dropped to make room (the other formats still hold it). A
failing tracker is retried with backoff from ``retry_seconds`` doubling to
``max_retry_seconds``; a client that raises
:class:`~globalstep._errors.TrackerRefusedError` refuses points for good (a batch is halved
until the refused points are found, and those are dropped). ``close()`` waits at most
``close_seconds`` for the sender; the points still unsent stay in the record. One
:class:`~globalstep._errors.TrackerWarning` at close counts what was dropped, refused and
left unsent.

Which commits count: every checkpoint committed in the process (as every save syncs every
open writer, see :mod:`globalstep._durability`): a checkpoint cannot tell which curves
depend on it. On several ranks the writer rank's manager commits, and only the writer rank
opens a writer under ``Run``.

Limits: only scalars go to a tracker (histograms and texts stay in TensorBoard and JSONL).
A restart below points sent already (a rollback to an older checkpoint, a restore of an old
step) cannot take them back: the warning at close says so.
"""

from __future__ import annotations

import collections
import importlib
import json
import math
import os
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from globalstep import _durability
from globalstep._clock import MAX_STEP
from globalstep._errors import ConfigError, TrackerRefusedError, TrackerWarning
from globalstep.summary._base import RESTART, SCALAR, SCALARS, Item, nonfinite_text
from globalstep.summary._client import Point as Point
from globalstep.summary._client import TrackerClient as TrackerClient
from globalstep.summary._client import check_builder, check_name, checked_client
from globalstep.summary._record import RECORD_SUFFIX as RECORD_SUFFIX
from globalstep.summary._record import TRACKERS as TRACKERS
from globalstep.summary._record import load_record, record_path, runs, unsent_points
from globalstep.summary._record import recorded_max_step as recorded_max_step

__all__ = [
    "CHECKPOINT_TAG",
    "TRACKERS",
    "Point",
    "Tracker",
    "TrackerBackend",
    "TrackerClient",
    "record_path",
    "recorded_max_step",
    "title",
]


_CLIENTS = {  # each module's prepare(): the training thread's part of building a client
    "mlflow": "globalstep.summary._mlflow",
    "wandb": "globalstep.summary._wandb",
}

SEND_COMMAND = "globalstep logs {logdir} --send"
"""The command that sends what a directory's tracker records hold unsent."""

CHECKPOINT_TAG = "globalstep/checkpoint"
"""The series of committed checkpoints' steps (value = step) each tracker run shows."""


_Entry = tuple[int, str, int, float, float]  # (number in the record, tag, step, value, wall)


_TITLES = {"mlflow": "MLflow", "wandb": "W&B"}


def title(name: str) -> str:
    """A tracker's name as its users spell it (``"MLflow"``, ``"W&B"``, a client's own)."""
    return _TITLES.get(name, name)


def send_command(logdir: str) -> str:
    """The command line that sends what ``logdir``'s tracker records hold unsent."""
    return SEND_COMMAND.format(logdir=shlex.quote(logdir))


class _BuildFailedError(Exception):
    """Building the client failed on the sender thread (the tracker is given up)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(repr(error))
        self.error = error


def _positive(name: str, value: Any, kind: type | tuple[type, ...]) -> None:
    """Refuses ``value`` unless it is a finite number > 0 of type ``kind``."""
    what = "an int" if kind is int else "a finite number"
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ConfigError(name, f"must be {what} > 0", value)
    number = float(value)  # type: ignore[arg-type]  # an int or float, checked above
    if not math.isfinite(number) or number <= 0:
        raise ConfigError(name, f"must be {what} > 0", value)


@dataclass(frozen=True)
class Tracker:
    """A tracker format and its options, for ``SummaryWriter(formats=...)``.

    Args:
        name: ``"mlflow"`` or ``"wandb"``, or the name of a tracker whose ``client`` is
            your own (letters, digits, ``_`` and ``-``; its record is
            ``<logdir>/<name>.tracker.jsonl``).
        max_pending: the most points held in memory (waiting for a commit or for the
            tracker), besides the batch being sent; past it the oldest are dropped, and
            counted.
        batch_points: the most points one ``send`` carries.
        retry_seconds: the first wait after a failure; it doubles after each one.
        max_retry_seconds: the longest wait between two attempts.
        close_seconds: the longest ``close()`` waits for the sender to send the rest.
        client: builds the client (a :class:`TrackerClient`: a class, or a function
            returning one), instead of MLflow's or W&B's; called with no arguments on
            the sender thread when a writer opens. Required for a name of your own.

    Raises:
        ConfigError: an option breaks its rule.

    Example:
        >>> Tracker("mlflow", max_pending=1000).max_pending
        1000
        >>> class Printer:
        ...     def open(self, run_id, *, logdir, key): return run_id or key
        ...     def send(self, points): print(points)
        ...     def close(self): pass
        >>> Tracker("printer", client=Printer).name
        'printer'
    """

    name: str
    max_pending: int = 100_000
    batch_points: int = 1000
    retry_seconds: float = 0.5
    max_retry_seconds: float = 30.0
    close_seconds: float = 10.0
    client: Callable[[], TrackerClient] | None = None

    def __post_init__(self) -> None:
        check_name(self.name, self.client)
        _positive("max_pending", self.max_pending, int)
        _positive("batch_points", self.batch_points, int)
        _positive("retry_seconds", self.retry_seconds, (int, float))
        _positive("max_retry_seconds", self.max_retry_seconds, (int, float))
        _positive("close_seconds", self.close_seconds, (int, float))
        check_builder(self.client)
        if self.max_retry_seconds < self.retry_seconds:
            raise ConfigError(
                "max_retry_seconds",
                f"must be >= retry_seconds={self.retry_seconds}",
                self.max_retry_seconds,
            )

    def builder(self) -> Callable[[], TrackerClient]:
        """On the thread that opens the writer: what builds this tracker's client on the
        sender thread (see :class:`TrackerClient`; the tool is not imported here).

        Raises:
            MissingDependencyError: the tool is not installed.
        """
        if self.client is not None:
            build = self.client
            return lambda: checked_client(build())
        prepare: Callable[[], Callable[[], TrackerClient]]
        prepare = importlib.import_module(_CLIENTS[self.name]).prepare
        return prepare()

    def build(self) -> TrackerClient:
        """Builds this tracker's client here (importing the tool)."""
        return self.builder()()


def has_unsent(logdir: str, formats: Any) -> bool:
    """Whether a tracker format among ``formats`` (names or :class:`Tracker`) has a record
    in ``logdir`` holding points to send (a ``Run`` that is complete opens its writer for
    them)."""
    for chosen in formats:
        name = chosen.name if isinstance(chosen, Tracker) else chosen
        path = record_path(logdir, name) if isinstance(chosen, Tracker) or name in TRACKERS else ""
        if path and os.path.exists(path) and unsent_points(path):
            return True
    return False


def send_unsent(logdir: str, tracker: Tracker) -> TrackerBackend:
    """Sends what the record of ``tracker`` in ``logdir`` holds unsent, waiting at most
    ``tracker.close_seconds``; returns the closed backend (``sent``, ``unsent``,
    ``run_id``). No warning: the caller reports.

    Raises:
        ConfigError: the record cannot be read or written.
        MissingDependencyError: the tool is not installed.
    """
    backend = TrackerBackend(logdir, tracker)
    backend.close()
    return backend


_TAGS: dict[str, str] = {}  # a tag's line head, made once (the drain writes one per point)


def _head(tag: str) -> str:
    """The start of a point's line in the record, up to its step: ``["loss", ``."""
    text = _TAGS.get(tag)
    if text is None:
        text = _TAGS.setdefault(tag, f"[{json.dumps(tag, ensure_ascii=False)}, ")
    return text


def _line(tag: str, step: int, value: float, wall_time: float) -> str:
    """A point's line in the record."""
    number = repr(value) if value - value == 0.0 else nonfinite_text(value)
    return f"{_TAGS.get(tag) or _head(tag)}{step}, {number}, {wall_time!r}]\n"


class TrackerBackend:
    """A tracker format: the record, the pending points and the sender thread.

    Args:
        logdir: the writer's local directory.
        tracker: the format and its options.
        client: the tool's client (built on the sender thread by ``tracker.builder()``'s
            result if None).

    Raises:
        ConfigError: the record cannot be read or written.
        MissingDependencyError: the tool is not installed.
    """

    def __init__(self, logdir: str, tracker: Tracker, client: TrackerClient | None = None) -> None:
        self._options = tracker
        self._build = tracker.builder() if client is None else None
        self._client: TrackerClient | None = client
        self._logdir = logdir
        self.path = record_path(logdir, tracker.name)
        loaded = load_record(self.path)
        self._run_id = loaded.run_id
        self._committed = loaded.committed
        self._count = loaded.count
        self._waiting: collections.deque[_Entry] = collections.deque()
        self._ready: collections.deque[_Entry] = collections.deque()
        for number, (tag, step, value, wall_time, final) in loaded.points.items():
            if number not in loaded.sent:
                entry = (number, tag, step, value, wall_time)
                (self._ready if final or step <= self._committed else self._waiting).append(entry)
        self._first = loaded.count  # this process's first point number
        self._in_flight = self._unsent = self.sent = 0
        self._purged_since = MAX_STEP + 1
        self._opened: str | None = None
        self._connected = False  # whether the client opened (or continued) the run
        self._params: Mapping[str, Any] | None = None
        self._params_failures = 0
        self._lock = threading.Condition()
        self._closing = False
        self._deadline = math.inf
        self._file_closed = False
        self._batch_limit = tracker.batch_points
        self._last_error: BaseException | None = None
        self._dropped = self._refused = 0
        self._max_sent = -1  # the highest step sent by this process
        self._voided_sent: list[int] = []  # purge steps that voided points sent already
        self._params_lost: BaseException | None = None
        self._open_refused: BaseException | None = None
        self._file = open(self.path, "ab")  # noqa: SIM115 - closed in close()
        if loaded.torn:  # a crash cut the last line short: it goes
            self._file.truncate(max(loaded.torn, 0))
        key = loaded.key
        if key is None:  # a new training run: its key is durable before any send
            key = uuid.uuid4().hex
            self._file.write(json.dumps({"key": key}).encode() + b"\n")
            self._file.flush()
            os.fsync(self._file.fileno())
        self._key: str = key
        self._listening = _durability.listen(self.committed)
        self._thread = threading.Thread(
            target=self._send_loop, name=f"globalstep-{tracker.name}-{logdir}", daemon=True
        )
        self._thread.start()

    # --- the writer's drain thread ---------------------------------------------------

    def mark_restart(self, purge_step: int, wall_time: float) -> None:
        with self._lock:
            self._restart(purge_step)

    def _restart(self, purge: int) -> None:
        """Drops the pending points at ``purge`` and above; the next commit decides anew."""
        self._waiting = collections.deque(e for e in self._waiting if e[2] < purge)
        self._ready = collections.deque(e for e in self._ready if e[2] < purge)
        self._committed = min(self._committed, purge - 1)
        if self._max_sent >= purge:
            self._voided_sent.append(purge)
        self._purged_since = min(self._purged_since, purge)
        self._write(f'{{"restart": {purge}}}\n')

    def write(self, items: list[Item]) -> None:
        with self._lock:
            self._write_points(items)
            self._lock.notify()

    def _write_points(self, items: list[Item]) -> None:
        """Records the points of ``items`` and holds them pending (see :meth:`_take`, which
        takes them one at a time where the bound drops some): their record lines are
        written together, a group's wall time spelled once."""
        heads, head = _TAGS, _head
        lines: list[str] = []
        append = lines.append
        number, committed = self._count, self._committed
        waiting, ready = self._waiting, self._ready
        room = self._options.max_pending - len(waiting) - len(ready)
        for kind, tag, step, wall_time, payload in items:
            if kind == SCALARS:
                points = payload.items()
            elif kind == SCALAR:
                points = ((tag, payload),)
            else:
                if kind == RESTART:
                    self._count = number
                    self._write("".join(lines))
                    lines.clear()
                    self._restart(step)
                    committed, waiting, ready = self._committed, self._waiting, self._ready
                    room = self._options.max_pending - len(waiting) - len(ready)
                continue
            middle, tail = f"{step}, ", f", {wall_time!r}]\n"  # spelled once per item
            push = (ready if step <= committed else waiting).append
            for name, value in points:
                if room <= 0:  # past the bound: the oldest pending point makes room
                    self._count = number
                    self._write("".join(lines))
                    lines.clear()
                    self._take(name, step, value, wall_time)
                    number = self._count
                    continue
                room -= 1
                if type(value) is not float:
                    value = float(value)
                number_text = repr(value) if value - value == 0.0 else nonfinite_text(value)
                append(f"{heads.get(name) or head(name)}{middle}{number_text}{tail}")
                push((number, name, step, value, wall_time))
                number += 1
        self._count = number
        self._write("".join(lines))

    def _take(self, tag: str, step: int, value: float, wall_time: float) -> None:
        """Records one point and holds it pending; past the bound the oldest pending point
        makes room (the newest points are the ones worth showing)."""
        # (the batch in flight, at most batch_points more, is not counted: new points
        # must find room while a slow send is under way)
        if len(self._waiting) + len(self._ready) >= self._options.max_pending:
            oldest = self._ready or self._waiting
            self._dropped += 1
            self._write(f'{{"dropped": {oldest.popleft()[0]}}}\n')
        entry = (self._count, tag, step, float(value), wall_time)
        self._count += 1
        self._write(_line(tag, step, float(value), wall_time))
        (self._ready if step <= self._committed else self._waiting).append(entry)

    def _write(self, line: str) -> None:
        if not self._file_closed:
            self._file.write(line.encode("utf-8"))

    def flush(self) -> None:
        with self._lock:
            if not self._file_closed:
                self._file.flush()

    def sync(self) -> None:
        with self._lock:
            if not self._file_closed:
                self._file.flush()
                os.fsync(self._file.fileno())

    # --- the save's thread, the training thread ---------------------------------------

    def committed(self, step: int) -> None:
        """A checkpoint of ``step`` committed: the points at and below it are final."""
        with self._lock:
            if self._closing:
                return
            self._committed = max(self._committed, step)
            self._write(f'{{"committed": {step}}}\n')
            still: collections.deque[_Entry] = collections.deque()
            for entry in self._waiting:
                (self._ready if entry[2] <= self._committed else still).append(entry)
            self._waiting = still
            self._take(CHECKPOINT_TAG, step, float(step), time.time())
            self._file.flush()
            self._lock.notify()

    def set_params(self, params: Mapping[str, Any]) -> None:
        """Hands the run's configuration to the sender (the latest one given wins)."""
        with self._lock:
            self._params, self._params_failures = dict(params), 0
            self._lock.notify()

    # --- the sender thread --------------------------------------------------------------

    def _idle(self) -> bool:
        return self._connected and self._params is None and not self._ready

    def _wait_for_work(self, retry_at: float) -> bool:
        """Waits (holding the lock) until a task is due and its retry time has come;
        returns False once the sender must stop (closing: all sent, or out of time)."""
        while True:
            now = time.monotonic()
            if self._open_refused is not None or (
                self._closing and (now >= self._deadline or self._idle())
            ):
                return False
            if now >= retry_at and not self._idle():
                return True
            timeout = min(retry_at - now if retry_at > now else math.inf, self._deadline - now)
            self._lock.wait(None if timeout == math.inf else timeout)

    def _send_loop(self) -> None:
        delay, retry_at = 0.0, 0.0
        while True:
            with self._lock:
                if not self._wait_for_work(retry_at):
                    break
                task, batch = self._next_task()
            try:
                self._do(task, batch)
            except Exception as err:
                delay = self._failed(task, batch, err, delay)
                retry_at = time.monotonic() + delay
            else:
                delay = 0.0
                self._done(task, batch)
        if self._connected and self._client is not None:
            try:
                self._client.close()
            except Exception as err:
                self._last_error = err

    def _next_task(self) -> tuple[str, list[_Entry]]:
        if not self._connected:
            return "open", []
        if self._params is not None:
            return "params", []
        size = min(self._batch_limit, len(self._ready))
        batch = [self._ready.popleft() for _ in range(size)]
        self._in_flight = len(batch)
        self._purged_since = MAX_STEP + 1  # the lowest restart while this batch is out
        return "send", batch

    def _do(self, task: str, batch: list[_Entry]) -> None:
        if self._client is None:  # built here, off the training thread (see TrackerClient)
            assert self._build is not None
            try:
                self._client = self._build()
            except Exception as err:
                raise _BuildFailedError(err) from err
        if task == "open":
            self._opened = self._client.open(self._run_id, logdir=self._logdir, key=self._key)
        elif task == "params":  # an optional method: a client without it takes none
            set_params = getattr(self._client, "set_params", None)
            if set_params is not None:
                set_params(self._params or {})
        else:
            self._client.send([(e[1], e[2], e[3], e[4]) for e in batch])

    def _done(self, task: str, batch: list[_Entry]) -> None:
        with self._lock:
            if task == "open":
                self._connected = True
                if self._opened == self._run_id:  # the recorded run, continued
                    return
                self._run_id = self._opened
                self._write(json.dumps({"run": self._run_id}) + "\n")
                if not self._file_closed:
                    self._file.flush()
                    os.fsync(self._file.fileno())
            elif task == "params":
                self._params = None
            else:
                self._in_flight = 0
                self.sent += len(batch)
                self._batch_limit = self._options.batch_points
                self._max_sent = max([self._max_sent, *(e[2] for e in batch)])
                if self._max_sent >= self._purged_since:  # a restart voided some in flight
                    self._voided_sent.append(self._purged_since)
                self._write(json.dumps({"sent": runs([e[0] for e in batch])}) + "\n")
                if not self._file_closed:
                    self._file.flush()

    def _failed(self, task: str, batch: list[_Entry], err: Exception, delay: float) -> float:
        """Puts a failed batch back (or drops refused points); returns the next wait."""
        with self._lock:
            self._last_error = err
            if task == "send":
                self._in_flight = 0
                if isinstance(err, TrackerRefusedError) and len(batch) == 1:
                    self._refused += 1
                    self._write(json.dumps({"sent": runs([batch[0][0]])}) + "\n")
                    return 0.0
                if isinstance(err, TrackerRefusedError):  # find the refused ones: halve
                    self._batch_limit = max(1, len(batch) // 2)
                # back at the front, but for the points a restart voided while it was out
                self._ready.extendleft(e for e in reversed(batch) if e[2] < self._purged_since)
                if isinstance(err, TrackerRefusedError):
                    return 0.0
            elif task == "open" and isinstance(err, _BuildFailedError):  # give up
                self._open_refused = self._last_error = err.error
                return 0.0
            elif task == "open" and isinstance(err, TrackerRefusedError):  # give up
                self._open_refused = err
                return 0.0
            elif task == "params":
                self._params_failures += 1
                if isinstance(err, TrackerRefusedError) or self._params_failures >= 3:
                    self._params, self._params_lost = None, err
                    return 0.0
        options = self._options
        return min(options.max_retry_seconds, max(options.retry_seconds, 2 * delay))

    # --- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Makes every point final, gives the sender ``close_seconds`` to send them, then
        closes the record (what is unsent stays there for the next writer)."""
        self._listening.cancel()
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._deadline = time.monotonic() + self._options.close_seconds
            # This process's points are final; an earlier attempt's that no commit made
            # final stay pending (a later resume's restart voids them).
            self._ready.extend(e for e in self._waiting if e[0] >= self._first)
            self._waiting = collections.deque(e for e in self._waiting if e[0] < self._first)
            self._write(f'{{"closed": {self._first}}}\n')
            self._lock.notify()
        self._thread.join(self._options.close_seconds + 1.0)
        with self._lock:
            self._unsent = len(self._ready) + self._in_flight
            self._unsent += sum(1 for e in self._waiting if e[0] >= self._first)
            self._file_closed = True
            self._file.close()

    @property
    def unsent(self) -> int:
        """The points a closed backend left unsent (in the record, for the next writer)."""
        return self._unsent

    @property
    def last_error(self) -> BaseException | None:
        """The tracker's last error (a failed send, open or build), or None."""
        return self._last_error

    @property
    def run_id(self) -> str | None:
        """The tracker run's id, once known."""
        return self._run_id

    def report(self) -> None:
        """Gives the one :class:`~globalstep._errors.TrackerWarning` of a closed backend
        that could not send everything (nothing where it did)."""
        name, options = self._options.name, self._options
        parts = []
        if self._dropped:
            parts.append(
                f"dropped {self._dropped} points past its buffer, the oldest first (max_pending="
                f"{options.max_pending} points waiting for a commit or for {name})"
            )
        if self._refused:
            parts.append(f"{self._refused} points were refused by {name}")
        if self._unsent:
            again = (  # `logs --send` cannot build a client of the user's own
                f"run `{send_command(self._logdir)}` once the server is reachable (or open a "
                f"writer with the {name} format on this directory again)"
                if name in TRACKERS
                else f"open a writer with Tracker({name!r}, client=...) on this directory "
                "again once the server is reachable (rerun the Run)"
            )
            parts.append(
                f"{self._unsent} points were not sent to {title(name)} (close_seconds="
                f"{options.close_seconds} passed; they are kept in {self.path}); {again}"
            )
        if self._open_refused is not None:
            parts.append(f"the {name} run could not be opened ({self._open_refused!r})")
        if self._params_lost is not None:
            parts.append(f"the run's parameters could not be set ({self._params_lost!r})")
        if self._voided_sent:
            parts.append(
                f"a restart at step {min(self._voided_sent)} voided points {name} was "
                f"sent already (up to step {self._max_sent}); {name} cannot delete them"
            )
        if not parts:
            return
        last = f"; last error: {self._last_error!r}" if self._last_error is not None else ""
        import warnings

        warnings.warn(
            f"the {name} tracker of {self._logdir}: " + "; ".join(parts) + last + ". "
            "TensorBoard and JSONL files hold every point; raise Tracker(max_pending=..., "
            "close_seconds=...) or check the tracker's server",
            TrackerWarning,
            stacklevel=2,
        )
