"""SummaryWriter: step-keyed scalars, histograms and texts to TensorBoard and JSONL.

The step comes from the writer's :class:`~globalstep.clock.Clock` unless a call gives one
(see :mod:`globalstep.clock` for what a step is): write a value observed for an update after
``clock.tick()``, so that it carries the step after that update, as every logged value does
(the convention stated in :mod:`globalstep.clock`). A call on the training thread only
checks its arguments and appends a tuple to a queue; a background thread encodes and
writes the queue in batches, every ``flush_seconds`` or sooner when it fills. ``flush()``,
``close()`` and interpreter exit write everything queued. A write that fails in the
background (disk full) raises :class:`~globalstep.errors.SummaryWriteError` at the next
call or at ``close()``, once; the writer goes on and writes the later calls. Every value
and step is checked on the caller's thread before it is queued, so a bad call raises
:class:`~globalstep.errors.ConfigError` and leaves the writer as it was. A framework tensor
(torch, JAX, TensorFlow) of one real element is the exception: its value is read in the
background, so that logging a GPU loss never waits for the device. The first tensor a
:meth:`~SummaryWriter.scalars` call logs under a tag has its shape and dtype checked on the
caller's thread; later ones of the same type under that tag are checked when read (each
check reads the framework's metadata, about a microsecond inside a training loop). A
tensor that breaks a rule there (not one element, complex) is not written and raises
:class:`~globalstep.errors.ConfigError` at the next call; a guarded one that turns out NaN
or infinite is written and raises :class:`~globalstep.errors.NonFiniteError` at the next
call (``scalar(..., guard=True)`` reads the value at once instead).

Restarts: the first point a writer writes decides. Where the run's logs already reach that
point's step P (a run resumed from a checkpoint, whose crashed attempt logged past it), the
writer marks a restart at P, or at the clock's step + 1 if that is lower, so that TensorBoard
(both of its loaders) and :mod:`globalstep.summary.reader` drop the points at P and above
that the crashed attempt wrote, and keep everything before. So it does not matter whether
the writer is opened before or after the checkpoint is restored, nor whether the loop logs
before or after ``clock.tick()``. ``purge_step=P`` marks a restart at opening instead, as
``tf.summary`` and tensorboardX do, and :meth:`SummaryWriter.restart` marks one later (after
rolling back to an older checkpoint).

Checkpoints: a point accepted before a checkpoint commits is durable when the checkpoint
is. Every open writer registers :meth:`SummaryWriter.sync_points` with
:mod:`globalstep._durability`, and every save of a
:class:`~globalstep.checkpoint.CheckpointManager` (``save``, ``maybe_save``, async or not)
calls it before writing, whether ``globalstep.Run`` wired the two or the loop uses them
alone; a write that failed fails the save. Closing the writer drops it out.

Tags: any non-empty string of printable characters; ``/`` groups tags in TensorBoard
(``"train/loss"``) and non-ASCII characters are kept as UTF-8. Backslashes, control
characters (newlines, ...) and blank tags are refused.

Example:
    >>> import tempfile
    >>> from globalstep import Clock
    >>> from globalstep.summary.reader import read_run
    >>> clock = Clock()
    >>> with tempfile.TemporaryDirectory() as logdir:
    ...     with SummaryWriter(logdir, clock=clock, formats=("jsonl",)) as writer:
    ...         for _ in range(3):
    ...             clock.tick()
    ...             writer.scalars({"loss": 1.0 / clock.step, "lr": 0.1})
    ...     [p.step for p in read_run(logdir).scalars["loss"]]
    [1, 2, 3]
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import importlib.util
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from globalstep import _durability
from globalstep.clock import MAX_STEP, Clock
from globalstep.errors import (
    ConfigError,
    MissingDependencyError,
    NonFiniteError,
    StepOrderWarning,
    SummaryWriteError,
)
from globalstep.guards import DEFAULT_STALE_THRESHOLD, StaleStepDetector
from globalstep.summary._base import (
    HISTOGRAM,
    RESTART,
    SCALAR,
    SCALARS,
    TEXT,
    Backend,
    Closing,
    Item,
)
from globalstep.summary.finite import NonFiniteHandler, check_finite

__all__ = ["FORMATS", "StepOrderWarning", "SummaryWriter", "available_formats"]

FORMATS = ("tensorboard", "jsonl")
"""The output formats a writer knows."""

_BATCH_ITEMS = 20_000
_GROUP_TAGS = 16  # the most tags queued as one group (the queue's length bounds memory)
_wall_time = time.time
_MAX_QUEUED = 50 * _BATCH_ITEMS
_OPEN_WRITERS: dict[SummaryWriter, None] = {}  # in opening order, closed in that order
_COUNTER = iter(range(2**62))
_TOGETHER = 8  # the fewest tensors of one dtype read in one call
_TOGETHER_ON_CPU = False  # CPU tensors too (the tests set it, to run the path on CPU)


def _read_together(items: list[Item], limit: float) -> bool:
    """Reads the accelerator tensors queued in ``items`` with one ``torch.stack(...)`` and
    one ``tolist()`` per dtype that has at least ``_TOGETHER`` of them (``tolist`` gives
    each element the number its ``item()`` gives), and puts each number in its item in
    place of its tensor, as :meth:`SummaryWriter._read_tensors` would, where every number
    of the dtype is a float in [-limit, limit]. Anything else (a NaN, a number out of
    range or not a float, tensors that do not stack into one element each) is left as it
    is, for ``item()`` and the checks there. Returns whether every value of ``items`` is
    now a float (nothing left to read or check).

    Only tensors on an accelerator are read together: there each ``item()`` is a
    synchronisation and a copy to the host, where one ``stack`` and one ``tolist`` are
    one of each. On the CPU ``item()`` is a plain read and the stack costs more than it
    saves (measured: 280 us to stack 1,000 0-d tensors against 175 us for their
    ``item()`` calls; inside a torch loop with checkpoints every 100 updates the two were
    within noise).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    tensor_type = torch.Tensor
    on_cpu = _TOGETHER_ON_CPU
    # (value, where it goes: a group and its tag, or the items and an index) of every value
    # that is not a float yet
    pending: list[tuple[Any, Any, Any]] = []
    for index, item in enumerate(items):
        kind = item[0]
        if kind == SCALARS:
            group = item[4]
            pending += [(v, group, tag) for tag, v in group.items() if type(v) is not float]
        elif kind == SCALAR and type(item[4]) is not float:
            pending.append((item[4], items, index))
    by_dtype: dict[Any, list[tuple[Any, Any, Any]]] = {}
    for entry in pending:
        value = entry[0]
        if type(value) is tensor_type and (on_cpu or not value.is_cpu):
            by_dtype.setdefault(value.dtype, []).append(entry)
    placed = 0
    for entries in by_dtype.values():
        if len(entries) < _TOGETHER:
            continue
        try:
            with torch.no_grad():
                values = torch.stack([e[0] for e in entries]).reshape(-1).tolist()
        except Exception:  # each tensor's item() names what is wrong with it
            continue
        # One element each, every one a float in range (NaN fails the comparison too).
        if not (
            len(values) == len(entries)
            and type(values[0]) is float
            and np.abs(np.array(values)).max() <= limit
        ):
            continue
        for (_, holder, key), number in zip(entries, values, strict=True):
            if holder is items:  # a single scalar: its item, with the number
                kind, tag, step, wall_time, _ = items[key]
                items[key] = (kind, tag, step, wall_time, number)
            else:
                holder[key] = number  # a value, not a key: the group's dict keeps its order
        placed += len(entries)
    return placed == len(pending)


_FLOAT32_MAX = 3.4028234663852886e38  # TensorBoard stores a scalar as a float32


def available_formats() -> tuple[str, ...]:
    """Returns the formats this install can write: JSONL always, event files with the extra.

    For code that should log to TensorBoard where it can and still run on the core
    install: ``SummaryWriter(logdir, formats=available_formats())``.

    Example:
        >>> "jsonl" in available_formats()
        True
    """
    needed = ("tensorboard", "google_crc32c")
    if all(importlib.util.find_spec(name) is not None for name in needed):
        return FORMATS
    return ("jsonl",)


def _close_open_writers() -> None:
    # One writer's error must not keep the others from writing their queues.
    first: SummaryWriteError | None = None
    for writer in list(_OPEN_WRITERS):
        try:
            writer.close()
        except SummaryWriteError as err:
            first = first or err
    if first is not None:
        raise first


atexit.register(_close_open_writers)


def _check_tag(tag: Any) -> str:
    if not isinstance(tag, str):
        raise ConfigError("tag", "must be a str", tag)
    if not tag.strip():
        raise ConfigError("tag", "must not be empty or blank", tag)
    if "\\" in tag:
        raise ConfigError("tag", "must not contain a backslash", tag, hint="Use '/' to group tags.")
    if not tag.isprintable():
        raise ConfigError("tag", "must hold printable characters only (no newline)", tag)
    return tag


def _short(value: Any) -> Any:
    """The value for an error message: a huge int is cut (10**400 has 401 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        text = str(value)
        return f"{text[:12]}...({len(text.lstrip('-'))} digits)"
    return value


def _as_float(tag: str, value: Any) -> float:
    """Returns ``value`` as a float64: a Python or NumPy number, or an array or framework
    tensor of exactly one element, whatever its shape ((), (1,), (1, 1), ...)."""
    parameter = f"value of {tag!r}"
    if isinstance(value, str | bytes) or value is None:
        raise ConfigError(parameter, "must be a real number", value)
    if not isinstance(value, int | float):
        shape = getattr(value, "shape", None)
        if shape is not None:
            try:
                count = math.prod(int(n) for n in shape)
            except (TypeError, ValueError):
                count = -1
            if count != 1:
                raise ConfigError(
                    parameter,
                    "must be one number (an array or tensor of exactly one element)",
                    f"<{type(value).__name__} of shape {tuple(shape)}>",
                )
            item = getattr(value, "item", None)
            if callable(item):
                value = item()
            elif callable(getattr(value, "numpy", None)):  # a TensorFlow tensor
                value = value.numpy().item()
    try:
        number = float(value)
    except OverflowError as err:
        raise ConfigError(
            parameter, "must fit a float64 (|value| <= 1.8e308)", _short(value)
        ) from err
    except (TypeError, ValueError) as err:
        raise ConfigError(
            parameter,
            "must be a real number (a Python or NumPy number, a 0-d array, a one-element tensor)",
            value,
        ) from err
    return number


_TENSOR_TYPES: set[type] = set()  # framework tensor types seen (not NumPy's)
_REAL_DTYPES: set[Any] = set()  # their dtypes found real (not complex): one lookup next time


def _tensor_or_float(tag: str, value: Any) -> Any:
    """Returns a framework tensor of one real element as it is (its value is read off the
    training thread, so no device synchronisation happens here), anything else as a float.

    Only metadata is checked here: one element, a real dtype.
    """
    kind = type(value)
    if kind not in _TENSOR_TYPES:
        if (
            getattr(value, "shape", None) is None
            or isinstance(value, int | float)
            or kind.__module__.startswith("numpy")
            or not callable(getattr(value, "item", None))
        ):
            return _as_float(tag, value)
        _TENSOR_TYPES.add(kind)
    shape = value.shape
    if shape:  # a 0-d tensor (a loss) needs no count
        try:
            count = math.prod(int(n) for n in shape)
        except (TypeError, ValueError):
            count = -1
        if count != 1:
            return _as_float(tag, value)  # raises, naming the rule
    dtype = value.dtype
    try:
        if dtype in _REAL_DTYPES:
            return value
    except TypeError:  # an unhashable dtype: checked each time
        pass
    complex_dtype = getattr(dtype, "is_complex", None)
    if complex_dtype is None:
        complex_dtype = "complex" in str(dtype)
    if complex_dtype:
        return _as_float(tag, value)  # raises, naming the rule
    with contextlib.suppress(TypeError):
        _REAL_DTYPES.add(dtype)
    return value


def _check_step(step: Any, parameter: str = "step") -> int:
    if isinstance(step, bool) or not isinstance(step, int):
        index = getattr(step, "__index__", None)
        if index is None or isinstance(step, bool):
            raise ConfigError(parameter, "must be an int", step)
        try:
            step = index()
        except (TypeError, ValueError) as err:
            raise ConfigError(parameter, "must be an int", step) from err
    if step < 0:
        raise ConfigError(parameter, "must be >= 0", _short(step))
    if step > MAX_STEP:
        raise ConfigError(
            parameter, "must be <= 2**63-1 (TensorBoard stores steps as int64)", _short(step)
        )
    return int(step)


class SummaryWriter(Closing):
    """Writes step-keyed scalars, histograms and texts, off the training thread.

    Args:
        logdir: the run's directory, created if missing, or an fsspec URL.
        clock: the clock whose step each call uses when it gives none.
        formats: any of ``"tensorboard"`` (event files, needs the ``tensorboard`` extra)
            and ``"jsonl"`` (``metrics.jsonl``, core install).
        purge_step: marks a restart at opening: points at this step and above, written
            before, are dropped by TensorBoard and by the reader. Without it the first
            point written marks one where needed (see the module docstring).
        guard_tags: tags whose values must be finite; ``scalar(..., guard=True)`` guards
            any other.
        on_nonfinite: called with the :class:`~globalstep.errors.NonFiniteError` of a
            guarded non-finite value instead of raising it; the value is then written.
        flush_seconds: the longest time, in seconds, a value waits in memory.
        stale_threshold: writes at one unchanged step after which to warn that the step
            is not advancing. What counts is the first tag written at that step coming
            again (a loop that does not advance the step), so many distinct tags at one
            step (per-layer statistics) never warn.
        storage_options: keyword arguments for the fsspec file system when ``logdir`` is a
            URL such as ``s3://bucket/run`` (JSONL only there: ``formats=("jsonl",)``;
            each flush uploads the whole file, see ``globalstep.summary._jsonl``).

    Raises:
        ConfigError: a parameter breaks its rule, or ``logdir`` cannot be created (the
            message says why).
        MissingDependencyError: ``"tensorboard"`` is asked for and the extra is missing.

    Opening reads the run's existing logs to find the highest step already written in any
    format (the restart check): under a second per million points of JSONL, five seconds
    per million in event files. Calls are meant for one training thread. A writer never closed
    is closed, and flushed, at interpreter exit.
    """

    def __init__(
        self,
        logdir: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        formats: Sequence[str] = FORMATS,
        purge_step: int | None = None,
        guard_tags: Iterable[str] = ("loss",),
        on_nonfinite: NonFiniteHandler | None = None,
        flush_seconds: float = 2.0,
        stale_threshold: int = DEFAULT_STALE_THRESHOLD,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if clock is not None and not isinstance(clock, Clock):
            raise ConfigError("clock", "must be a globalstep Clock or None", clock)
        formats = self._check_formats(formats)
        if purge_step is not None:
            purge_step = _check_step(purge_step, "purge_step")
        if isinstance(guard_tags, str):
            raise ConfigError("guard_tags", "must be a collection of tags, not one str", guard_tags)
        guarded = frozenset(_check_tag(t) for t in guard_tags)
        if on_nonfinite is not None and not callable(on_nonfinite):
            raise ConfigError("on_nonfinite", "must be callable or None", on_nonfinite)
        if (
            isinstance(flush_seconds, bool)
            or not isinstance(flush_seconds, int | float)
            or not math.isfinite(flush_seconds)
            or flush_seconds <= 0
        ):
            raise ConfigError("flush_seconds", "must be a finite number > 0", flush_seconds)
        if not isinstance(logdir, str | os.PathLike):
            raise ConfigError("logdir", "must be a path", logdir)
        self.logdir = os.fspath(logdir)
        from globalstep.storage import is_remote

        self._remote = is_remote(self.logdir)
        if storage_options is not None and not self._remote:
            raise ConfigError(
                "storage_options", "applies to fsspec URL logdirs (s3://...) only", storage_options
            )
        if self._remote and formats != ("jsonl",):
            raise ConfigError(
                "formats",
                "must be ('jsonl',) for an fsspec URL logdir (event files are written to "
                "local directories only)",
                formats,
            )
        self._storage_options = storage_options
        try:
            if not self._remote:
                os.makedirs(self.logdir, exist_ok=True)
        except OSError as err:
            raise ConfigError(
                "logdir", "must be a directory that can be created", self.logdir, hint=str(err)
            ) from err
        if isinstance(stale_threshold, bool) or not isinstance(stale_threshold, int):
            raise ConfigError("stale_threshold", "must be an int >= 2", stale_threshold)
        if stale_threshold < 2:
            raise ConfigError("stale_threshold", "must be an int >= 2", stale_threshold)
        self._stale = StaleStepDetector(
            "SummaryWriter",
            threshold=stale_threshold,
            used="written to",
            effect="every point lands on that one step",
        )
        self._stale_step: int | None = None
        # The first tag written at _stale_step, or the group of scalars it is the first of.
        self._stale_tag: str | dict[str, Any] | None = None
        self._clock = clock
        self._clock_name = clock.name if clock is not None else None
        self._guarded = guarded
        self._on_nonfinite = on_nonfinite
        self._flush_seconds = float(flush_seconds)
        self._known_tags: set[str] = set()
        self._queue: collections.deque[Item] = collections.deque()
        self._io_lock = threading.Lock()
        self._wake = threading.Event()
        self._error: BaseException | None = None
        self._error_path: str | None = None
        self._error_lost = 0
        self._closed = False
        self._files_closed = False  # set under the I/O lock: no drain writes after it
        self._warned_order = False
        self._dir_synced = False
        self._float32 = "tensorboard" in formats
        # The largest magnitude a float value may have without further checks.
        self._limit = _FLOAT32_MAX if self._float32 else sys.float_info.max
        self._tensors = False  # whether a tensor (read in the background) was queued
        # whether a torch tensor on an accelerator was, when its tag was first checked
        self._on_device = False
        # Tags that enqueue_scalars() lets through on one check, with the type of value: a
        # float (in range), or the type of the tag's first tensor, whose shape and dtype
        # were checked on the caller's thread (later ones are checked when read).
        self._fast_tags: dict[str, type] = {}

        # The restart check: the highest step already logged, in any format. Without an
        # explicit purge_step, the first point written decides whether to mark a restart.
        existing = self._existing_max_step()
        self._pending_restart = existing if purge_step is None else None
        self._backends = self._open_backends(formats, purge_step)
        self.purge_step = purge_step
        """The step of the latest restart mark this writer wrote, or None."""
        self._last_step = purge_step - 1 if purge_step is not None else -1
        self._thread = threading.Thread(
            target=self._run, name=f"globalstep-summary-{self.logdir}", daemon=True
        )
        _OPEN_WRITERS[self] = None
        self._thread.start()
        # Every checkpoint save makes the points accepted so far durable before it
        # commits, whoever wired the two (see globalstep._durability).
        self._durable = _durability.register(self.sync_points)

    @staticmethod
    def _check_formats(formats: Any) -> tuple[str, ...]:
        if isinstance(formats, str) or not isinstance(formats, Sequence):
            raise ConfigError("formats", f"must be a sequence of names from {FORMATS}", formats)
        chosen = tuple(formats)
        if not chosen or len(set(chosen)) != len(chosen) or not set(chosen) <= set(FORMATS):
            raise ConfigError(
                "formats", f"must name each of {FORMATS} at most once, at least one", formats
            )
        return chosen

    def _open_backends(self, formats: tuple[str, ...], purge_step: int | None) -> list[Backend]:
        """Opens the files, marks the restart in each (if any) and flushes; on any failure
        closes what it opened."""
        backends: list[Backend] = []
        try:
            for name in formats:
                if name == "tensorboard":
                    from globalstep.summary._tensorboard import TensorBoardBackend

                    backends.append(TensorBoardBackend(self.logdir, next(_COUNTER)))
                else:
                    from globalstep.summary._jsonl import JsonlBackend

                    backends.append(JsonlBackend(self.logdir, self._storage_options))
            wall_time = time.time()
            for backend in backends:
                if purge_step is not None:
                    backend.mark_restart(purge_step, wall_time)
                backend.flush()
        except BaseException as err:
            for backend in backends:
                backend.close()
            if isinstance(err, OSError):
                raise ConfigError(
                    "logdir",
                    "must be a directory this process can write",
                    self.logdir,
                    hint=str(err),
                ) from err
            raise
        return backends

    def _existing_max_step(self) -> int | None:
        from globalstep.summary.reader import last_standing_step

        try:
            return last_standing_step(self.logdir, storage_options=self._storage_options)
        except MissingDependencyError:
            return None

    def __repr__(self) -> str:
        return f"SummaryWriter({self.logdir!r}, clock={self._clock_name!r})"

    def _close_after(self, error: BaseException | None) -> None:
        if error is None:
            self.close()
            return
        # The body's error is the one to see; a write error would only hide it.
        with contextlib.suppress(SummaryWriteError):
            self.close()

    # --- the training thread --------------------------------------------------------

    def _check_open(self) -> None:
        if self._error is not None:
            self._raise_error()
        if self._closed:
            raise ConfigError("writer", "must be open (close() was called)", self.logdir)

    def _raise_error(self) -> None:
        """Raises the background error, once: the writer then goes on with later calls."""
        with self._io_lock:
            error, path, lost = self._error, self._error_path, self._error_lost
            self._error, self._error_path, self._error_lost = None, None, 0
        if error is None:
            return
        if isinstance(error, NonFiniteError) and self._on_nonfinite is not None:
            self._on_nonfinite(error)
            return
        raise self._reported(error, path, lost) from error

    @staticmethod
    def _reported(error: BaseException, path: str | None, lost: int) -> BaseException:
        """The exception that reports a background error to a caller."""
        if isinstance(error, NonFiniteError):  # a guarded tensor, read in the background
            return NonFiniteError(error.tag, error.value, error.step)
        if isinstance(error, ConfigError):
            return ConfigError(
                error.parameter,
                error.rule,
                error.value,
                hint="That tensor was read after the call returned; the point was not written.",
            )
        lost_text = f"{lost} points were lost; " if lost else ""
        return SummaryWriteError(
            f"the summary writer could not write {path}: {error} ({lost_text}the writer goes "
            "on and writes later calls)",
            path,
        )

    def _resolve_step(self, step: Any) -> int:
        if step is None:
            if self._clock is None:
                raise ConfigError(
                    "step",
                    "must be given when the writer has no clock",
                    step,
                    hint="Pass step=..., or SummaryWriter(logdir, clock=clock).",
                )
            step = self._clock.step
        elif type(step) is not int or step < 0 or step > MAX_STEP:
            step = _check_step(step)
        if self._pending_restart is not None:
            self._first_point(step)
        if step < self._last_step:
            self._step_went_back(step)
        self._last_step = step
        return int(step)

    def _first_point(self, step: int) -> None:
        """Marks a restart before the first point if the logs already reach its step."""
        existing, self._pending_restart = self._pending_restart, None
        purge = step if self._clock is None else min(step, self._clock.step + 1)
        if existing is not None and existing >= purge:
            self._queue_restart(purge)

    def _queue_restart(self, purge_step: int) -> None:
        self._enqueue((RESTART, "", purge_step, time.time(), None))
        self.purge_step = purge_step
        self._last_step = purge_step - 1

    def restart(self, purge_step: int) -> None:
        """Marks a restart now: points at ``purge_step`` and above written before are void.

        For a run rolled back to an older checkpoint at step S in the same process:
        ``restart(S + 1)`` before logging the steps after S again. TensorBoard and the
        reader then show each step once, with the value written last.

        Raises:
            ConfigError: ``purge_step`` is not an int in [0, 2**63-1], or the writer is
                closed.
        """
        self._check_open()
        purge = _check_step(purge_step, "purge_step")
        self._pending_restart = None
        self._queue_restart(purge)

    def _step_went_back(self, step: int) -> None:
        if self._warned_order:
            return
        self._warned_order = True
        warnings.warn(
            f"SummaryWriter for {self.logdir!r} got step {step} after step {self._last_step}, "
            "without a restart mark, so TensorBoard will draw the curve folding back. After "
            "restoring a checkpoint, open a new SummaryWriter with the restored clock (it marks "
            "the restart itself) or pass purge_step=<first step to rewrite>.",
            StepOrderWarning,
            stacklevel=4,
        )

    def _repeats(self, step: int, tag: str) -> bool:
        """Whether a write counts toward the frozen-step warning (see ``stale_threshold``)."""
        if step != self._stale_step:
            self._stale_step, self._stale_tag = step, tag
            return True
        return tag == self._stale_first()

    def _stale_first(self) -> str | None:
        """The first tag written at ``_stale_step``."""
        first = self._stale_tag
        if type(first) is dict:
            first = self._stale_tag = next(iter(first))
        return first  # type: ignore[return-value]

    def _enqueue(self, item: Item) -> None:
        queue = self._queue
        queue.append(item)
        if len(queue) >= _BATCH_ITEMS:
            self._queue_grew()

    def _queue_grew(self) -> None:
        if len(self._queue) >= _MAX_QUEUED:
            # The disk is slower than the training loop: write here rather than grow.
            self._drain()
        else:
            self._wake.set()

    def scalar(self, tag: str, value: Any, step: int | None = None, *, guard: bool = False) -> None:
        """Queues one scalar.

        Args:
            tag: the series' name, e.g. ``"train/loss"``.
            value: a real number (a Python or NumPy number, or a one-element tensor).
            step: the step; defaults to the clock's; an int in [0, 2**63-1].
            guard: refuse a non-finite value even if ``tag`` is not in ``guard_tags``.

        Raises:
            ConfigError: a bad tag, value (one that does not fit a float64, or TensorBoard's
                float32 where event files are written) or step, or a closed writer; nothing
                is queued and the writer goes on.
            NonFiniteError: a guarded value is NaN or infinite (and no handler was given).
            SummaryWriteError: an earlier background write failed.
        """
        if self._error is not None or self._closed:
            self._check_open()
        try:
            known = tag in self._known_tags
        except TypeError:  # an unhashable tag: _check_tag names the rule
            known = False
        if not known:
            self._known_tags.add(_check_tag(tag))
        if type(value) is not float:
            value = _as_float(tag, value) if guard else _tensor_or_float(tag, value)
        if type(value) is float:
            if (value > _FLOAT32_MAX or value < -_FLOAT32_MAX) and self._float32:
                self._check_float32(tag, value)
        else:
            self._tensors = True
            if not known:  # a tag's first value: is it on an accelerator?
                self._on_device = self._on_device or getattr(value, "is_cpu", True) is False
        step = self._resolve_step(step)
        # _repeats() inlined (this is the hot path); observe() is called here, not in a
        # helper, so that its warning points at the caller's line.
        if step != self._stale_step:
            self._stale_step, self._stale_tag = step, tag
            self._stale.observe(step, self._clock_name)
        elif tag == self._stale_first():
            self._stale.observe(step, self._clock_name)
        if (guard or tag in self._guarded) and type(value) is float and value - value != 0.0:
            check_finite(tag, value, step, self._on_nonfinite)
        self._enqueue((SCALAR, tag, step, time.time(), value))

    @staticmethod
    def _check_float32(tag: str, value: float) -> None:
        if math.isfinite(value):
            raise ConfigError(
                f"value of {tag!r}",
                "must fit TensorBoard's float32 (|value| <= 3.4028235e38), or be inf or nan",
                value,
                hint="Scale it, or log it with formats=('jsonl',) only.",
            )

    def scalars(self, values: Mapping[str, Any], step: int | None = None) -> None:
        """Queues several scalars at one step and one wall time.

        Raises:
            ConfigError: ``values`` is not a mapping, or one of its tags or values is bad
                (then none of them is queued).
            NonFiniteError: a guarded value is NaN or infinite.
        """
        clock = self._clock
        if step is None and clock is not None and type(values) is dict and values:
            # The per-update path (enqueue_scalars checks that the writer is open); the
            # copy, because the caller may change the dict after the call.
            self.enqueue_scalars(values.copy(), clock._step)
            return
        if self._error is not None or self._closed:
            self._check_open()
        if type(values) is dict:
            values = values.copy()  # the caller may change it after the call
        elif isinstance(values, Mapping):
            values = dict(values)
        else:
            raise ConfigError("values", "must be a mapping from tag to number", values)
        if step is None and self._clock is not None:
            number = self._clock._step
        else:
            number = step if type(step) is int and 0 <= step <= MAX_STEP else _check_step(step)
        if values:
            self.enqueue_scalars(values, number)

    def enqueue_scalars(self, values: dict[str, Any], step: int) -> None:
        """:meth:`scalars` for a non-empty dict the writer may keep (it is not copied), at an
        int step in [0, 2**63-1]: the public fast path of a caller that owns the step.

        The per-update path (``Run.update`` hands its keywords here, unchecked): a dict of
        known tags whose values are floats that fit (finite, and in float32 where event
        files are written) or 0-d tensors of a real dtype is queued whole, as one item;
        anything else goes through the checks that name the rule it breaks.

        Raises:
            ConfigError: a bad tag or value (then none is queued), or a closed writer.
            NonFiniteError: a guarded value is NaN or infinite.
            SummaryWriteError: an earlier background write failed.
        """
        if self._error is not None or self._closed:
            self._check_open()
        limit: float = self._limit
        fast = self._fast_tags
        passed = False
        try:
            for tag, value in values.items():
                kind = fast[tag]
                if type(value) is not kind:
                    break
                if kind is float and not -limit <= value <= limit:  # type: ignore[operator]
                    # (a NaN or an infinite value fails this too)
                    break
            else:
                passed = True
        except KeyError:  # a tag not checked yet
            pass
        if not passed:
            values = self._checked(values, step)
        if step > self._last_step and self._pending_restart is None:
            # _resolve_step() and _repeats() of a step that moved on; the frozen-step
            # detector hears of the step's first write when the step is written to again.
            self._last_step = step
            self._stale_step = step
            self._stale_tag = values
        else:
            step = self._resolve_step(step)
            if step != self._stale_step:
                self._stale_step, self._stale_tag = step, values
            elif next(iter(values)) == self._stale_first():
                stale = self._stale
                if stale.last_step != step:
                    stale.observe(step, self._clock_name)
                # The warning names the line that called scalars() or Run.update().
                stale.observe(step, self._clock_name, stacklevel=4)
        queue = self._queue
        if len(values) <= _GROUP_TAGS:
            queue.append((SCALARS, "", step, _wall_time(), values))
        else:
            wall_time = _wall_time()
            for tag, value in values.items():
                queue.append((SCALAR, tag, step, wall_time, value))
        if len(queue) >= _BATCH_ITEMS:
            self._queue_grew()

    def _checked(self, values: dict[str, Any], step: int) -> dict[str, Any]:
        """Checks every tag and value; returns the values as queued (numbers as floats)."""
        known, fast = self._known_tags, self._fast_tags
        checked = {}
        for tag, value in values.items():
            try:
                new = tag not in known
            except TypeError:  # an unhashable tag: _check_tag names the rule
                new = True
            if new:
                known.add(_check_tag(tag))
            if type(value) is not float:
                value = _tensor_or_float(tag, value)
                if type(value) is not float:
                    self._tensors = True
                    self._on_device = self._on_device or getattr(value, "is_cpu", True) is False
                    checked[tag] = value
                    fast[tag] = type(value)
                    continue
            if value - value != 0.0:  # NaN or infinite
                if tag in self._guarded:
                    check_finite(tag, value, step, self._on_nonfinite)
            elif (value > _FLOAT32_MAX or value < -_FLOAT32_MAX) and self._float32:
                self._check_float32(tag, value)
            checked[tag] = value
            fast[tag] = float
        return checked

    def histogram(self, tag: str, values: Any, step: int | None = None) -> None:
        """Queues a histogram of ``values`` (any array-like of finite numbers; copied).

        Raises:
            ConfigError: a bad tag or step, or values that are not finite numbers.
        """
        import numpy as np

        self._check_open()
        _check_tag(tag)
        try:
            array = np.array(values, dtype=np.float64).ravel()
        except (TypeError, ValueError) as err:
            raise ConfigError(f"values of {tag!r}", "must be an array of numbers", values) from err
        if not np.isfinite(array).all():
            raise ConfigError(f"values of {tag!r}", "must all be finite", values)
        step = self._resolve_step(step)
        if self._repeats(step, tag):
            self._stale.observe(step, self._clock_name)
        self._enqueue((HISTOGRAM, tag, step, time.time(), array))

    def text(self, tag: str, text: str, step: int | None = None) -> None:
        """Queues a text (shown by TensorBoard's text plugin as Markdown).

        Raises:
            ConfigError: a bad tag or step, or ``text`` is not a str.
        """
        self._check_open()
        _check_tag(tag)
        if not isinstance(text, str):
            raise ConfigError("text", "must be a str", text)
        step = self._resolve_step(step)
        if self._repeats(step, tag):
            self._stale.observe(step, self._clock_name)
        self._enqueue((TEXT, tag, step, time.time(), text))

    def flush(self) -> None:
        """Writes everything queued so far, on this thread, and hands it to the OS.

        After it returns, the points survive the process being killed (SIGKILL).

        Raises:
            SummaryWriteError: the write failed, now or earlier in the background.
        """
        self._check_open()
        self._drain()
        self._check_open()

    def sync(self) -> None:
        """Flushes, then fsyncs the files (and, once, the directory): the points logged so
        far survive a power loss too. Checkpoint saves need no call: each makes every
        open writer's points durable before it commits (:meth:`sync_points`).

        Raises:
            SummaryWriteError: the write failed, now or earlier in the background.
        """
        self._check_open()
        self._drain(sync=True)
        self._check_open()

    def sync_points(self) -> None:
        """Writes and fsyncs every point queued so far; callable from any thread.

        For what must reach the disk only after the points logged before it: every open
        writer registers it with :mod:`globalstep._durability`, and every checkpoint save
        calls it before it writes anything (on the save's thread for an async save), so a
        checkpoint commits only once the points logged before it are on disk, with or
        without ``Run``.
        Like :meth:`sync` it raises an error not yet reported (a failed write, or a tensor
        refused when read: a guarded NaN loss, so no checkpoint of a diverged run is
        saved), but it leaves the error for the training thread's next call to raise too.
        On a closed writer it does nothing (closing wrote everything).

        Raises:
            SummaryWriteError: a write failed, now or earlier.
            NonFiniteError: a guarded tensor read in the background was NaN or infinite
                (not with an ``on_nonfinite`` handler, which the next call runs).
            ConfigError: a tensor read in the background broke a rule.
        """
        if self._closed:
            return
        self._drain(sync=True)
        with self._io_lock:
            error, path, lost = self._error, self._error_path, self._error_lost
        if error is None or (isinstance(error, NonFiniteError) and self._on_nonfinite):
            return
        raise self._reported(error, path, lost) from error

    def close(self) -> None:
        """Writes everything queued, stops the background thread and closes the files.

        Calling it again does nothing.

        Raises:
            SummaryWriteError: a write failed and no call has reported it yet.
        """
        if self._closed:
            return
        self._closed = True
        self._durable.cancel()
        _OPEN_WRITERS.pop(self, None)
        self._wake.set()
        self._thread.join()
        self._drain()
        with self._io_lock:  # a sync on a save's thread, under way, ends before this
            self._files_closed = True
            for backend in self._backends:
                try:
                    backend.close()
                except OSError as err:
                    self._record_error(err, backend.path)
        self._raise_error()

    # --- the background thread ------------------------------------------------------

    def _record_error(self, err: BaseException, path: str, lost: int = 0) -> None:
        """Keeps the first error not yet reported (called under the I/O lock)."""
        if self._error is None:
            self._error, self._error_path = err, path
        self._error_lost += lost

    def _drain(self, sync: bool = False) -> None:
        """Writes the queue; a failure loses the batch in hand, is recorded for the
        training thread, and does not stop later drains."""
        with self._io_lock:
            if self._files_closed:  # a save's sync that lost the race with close()
                return
            queue = self._queue
            popleft = queue.popleft
            backend: Backend | None = None
            items: list[Item] = []
            try:
                while queue:
                    items = [popleft() for _ in range(min(len(queue), _BATCH_ITEMS))]
                    if self._tensors:
                        self._read_tensors(items)
                    for backend in self._backends:
                        backend.write(items)
                    items = []
                for backend in self._backends:
                    if sync:
                        backend.sync()
                    else:
                        backend.flush()
                if sync and not self._dir_synced:
                    self._sync_directory()
            except Exception as err:
                lost = sum(len(item[4]) if item[0] == SCALARS else 1 for item in items)
                self._record_error(err, backend.path if backend else self.logdir, lost)

    def _read_tensors(self, items: list[Item]) -> None:
        """Reads the tensors queued as values, in place (a device synchronisation, off the
        training thread); applies the guards and the float32 rule that need the value. A
        value that breaks them is recorded, to be raised at the training thread's next
        call, and its point is not written.

        A group's dict gets each tensor's number in place of the tensor (its keys, which
        the training thread may still read, stay as they are).
        """
        limit = self._limit
        refused: list[int] = []
        if (self._on_device or _TOGETHER_ON_CPU) and _read_together(items, limit):
            return
        for index, item in enumerate(items):
            kind = item[0]
            if kind == SCALARS:
                group = item[4]
                for tag, payload in group.items():
                    if type(payload) is not float:
                        try:
                            value = payload.item()  # a one-element tensor's number
                        except Exception:  # _read_group names the rule broken
                            break
                        # (a NaN or an infinite value fails the range check too)
                        if type(value) is not float or not -limit <= value <= limit:
                            break
                        group[tag] = value  # a value, not a key: the dict keeps its order
                else:
                    continue
                items[index] = self._read_group(item)
            elif kind == SCALAR and type(item[4]) is not float:
                kind, tag, step, wall_time, payload = item
                value = self._read_value(tag, payload, step)
                if value is None:
                    refused.append(index)
                else:
                    items[index] = (kind, tag, step, wall_time, value)
        for index in reversed(refused):
            del items[index]

    def _read_group(self, item: Item) -> Item:
        """:meth:`_read_tensors` of a group with a value that is not a plain finite number
        (in range): the group as written, a new dict without the points refused."""
        kind, _, step, wall_time, group = item
        dropped = []
        for tag, payload in group.items():
            if type(payload) is not float:
                value = self._read_value(tag, payload, step)
                if value is None:
                    dropped.append(tag)
                else:
                    group[tag] = value
        if not dropped:
            return item
        return (kind, "", step, wall_time, {t: v for t, v in group.items() if t not in dropped})

    def _read_value(self, tag: str, payload: Any, step: int) -> float | None:
        """The number of a tensor, or None where it breaks a rule (recorded for the
        training thread)."""
        try:
            value = payload.item()  # a one-element tensor's number
        except Exception:  # _as_float below names the rule broken
            value = None
        try:
            if type(value) is not float:  # an int, bool or complex one, or no number
                value = _as_float(tag, payload)
            if (value > _FLOAT32_MAX or value < -_FLOAT32_MAX) and self._float32:
                self._check_float32(tag, value)
        except ConfigError as err:
            self._record_error(err, self.logdir, 1)
            return None
        if value - value != 0.0 and tag in self._guarded:
            error = NonFiniteError(tag, value, step)
            if self._error is None:
                self._error, self._error_path = error, self.logdir
        number: float = value
        return number

    def _sync_directory(self) -> None:
        """Makes the new files' names durable (once: later syncs only grow the files)."""
        if hasattr(os, "O_DIRECTORY") and not self._remote:
            fd = os.open(self.logdir, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._dir_synced = True

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self._flush_seconds)
            self._wake.clear()
            self._drain()
