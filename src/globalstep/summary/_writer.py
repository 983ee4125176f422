"""SummaryWriter: step-keyed scalars, histograms and texts to TensorBoard and JSONL.

The step comes from the writer's :class:`~globalstep._clock.Clock` unless a call gives one
(see :mod:`globalstep._clock` for what a step is): write a value observed for an update after
``clock.tick()``, so that it carries the step after that update, as every logged value does
(the convention stated in :mod:`globalstep._clock`). A call on the training thread only
checks its arguments and appends a tuple to a queue; a background thread encodes and
writes the queue in batches, every ``flush_seconds`` or sooner when it fills. ``flush()``,
``close()`` and interpreter exit write everything queued. A write that fails in the
background (disk full) raises :class:`~globalstep._errors.SummaryWriteError` at the next
call or at ``close()``, once; the writer goes on and writes the later calls. Every value
and step is checked on the caller's thread before it is queued, so a bad call raises
:class:`~globalstep._errors.ConfigError` and leaves the writer as it was. A framework tensor
(torch, JAX, TensorFlow) of one real element is the exception: its value is read in the
background, so that logging a GPU loss never waits for the device. The first tensor a
:meth:`~SummaryWriter.scalars` call logs under a tag has its shape and dtype checked on the
caller's thread; later ones of the same type under that tag are checked when read (each
check reads the framework's metadata, about a microsecond inside a training loop). A
tensor that breaks a rule there (not one element, complex) is not written and raises
:class:`~globalstep._errors.ConfigError` at the next call; a guarded one that turns out NaN
or infinite is written and raises :class:`~globalstep._errors.NonFiniteError` at the next
call (``scalar(..., guard=True)`` reads the value at once instead).

Restarts: the first point a writer writes decides. Where the run's logs already reach that
point's step P (a run resumed from a checkpoint, whose crashed attempt logged past it), the
writer marks a restart at P, or at the clock's step + 1 if that is lower, so that TensorBoard
(both of its loaders) and :mod:`globalstep.summary._reader` drop the points at P and above
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
    >>> from globalstep.summary._reader import read_run
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
import contextlib
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from globalstep import _durability
from globalstep._clock import MAX_STEP, Clock
from globalstep._closing import close_in_order
from globalstep._errors import ConfigError, NonFiniteError, StepOrderWarning, SummaryWriteError
from globalstep._guards import DEFAULT_STALE_THRESHOLD
from globalstep.summary._audit import Audited
from globalstep.summary._base import HISTOGRAM, SCALAR, SCALARS, TEXT, Item
from globalstep.summary._checks import check_step, check_tag, checked_options
from globalstep.summary._finite import NonFiniteHandler, check_finite
from globalstep.summary._formats import FORMATS, available, format_of
from globalstep.summary._queue import BATCH_ITEMS as _BATCH_ITEMS
from globalstep.summary._queue import BackgroundQueue, open_backends, reported
from globalstep.summary._restart import StepTracker, existing_max_step
from globalstep.summary._tracker import Tracker
from globalstep.summary._values import (
    FLOAT32_MAX,
    as_array,
    as_float,
    check_float32,
    float_limit,
    tensor_or_float,
)

__all__ = ["FORMATS", "StepOrderWarning", "SummaryWriter", "available_formats"]

# _BATCH_ITEMS, the queue's length that wakes the thread, is read here on the per-update
# path (and by bench/bench_summary.py).
_GROUP_TAGS = 16  # the most tags queued as one group (the queue's length bounds memory)
_wall_time = time.time
_OPEN_WRITERS: dict[SummaryWriter, None] = {}  # in opening order, closed in that order


def available_formats() -> tuple[str, ...]:
    """Returns the formats this install can write: JSONL always, event files with the extra.

    For code that should log to TensorBoard where it can and still run on the core
    install: ``SummaryWriter(logdir, formats=available_formats())``.

    Example:
        >>> "jsonl" in available_formats()
        True
    """
    return available()


def _close_open_writers() -> None:
    # One writer's error must not keep the others from writing their queues.
    close_in_order(*list(_OPEN_WRITERS), catching=SummaryWriteError)


atexit.register(_close_open_writers)


class SummaryWriter(StepTracker, Audited):
    """Writes step-keyed scalars, histograms and texts, off the training thread.

    Args:
        logdir: the run's directory, created if missing, or an fsspec URL.
        clock: the clock whose step each call uses when it gives none.
        formats: any of ``"tensorboard"`` (event files, ``tensorboard`` extra), ``"jsonl"``
            and the trackers ``"mlflow"``, ``"wandb"`` (or a ``Tracker``, see ``_tracker``).
        purge_step: marks a restart at opening: points at this step and above, written
            before, are dropped by TensorBoard and by the reader. Without it the first
            point written marks one where needed (see the module docstring).
        guard_tags: tags whose values must be finite; ``scalar(..., guard=True)`` guards
            any other.
        on_nonfinite: called with the :class:`~globalstep._errors.NonFiniteError` of a
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
        formats: Sequence[str | Tracker] = FORMATS,
        purge_step: int | None = None,
        guard_tags: Iterable[str] = ("loss",),
        on_nonfinite: NonFiniteHandler | None = None,
        flush_seconds: float = 2.0,
        stale_threshold: int = DEFAULT_STALE_THRESHOLD,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        options = checked_options(
            logdir,
            clock=clock,
            formats=formats,
            purge_step=purge_step,
            guard_tags=guard_tags,
            on_nonfinite=on_nonfinite,
            flush_seconds=flush_seconds,
            stale_threshold=stale_threshold,
            storage_options=storage_options,
        )
        StepTracker.__init__(
            self,
            options.logdir,
            clock=clock,
            purge_step=options.purge_step,
            existing=existing_max_step(options.logdir, storage_options),  # the restart check
            stale_threshold=options.stale_threshold,
        )
        self._guarded = options.guarded
        self._on_nonfinite = on_nonfinite
        self._known_tags: set[str] = set()
        self._closed = False
        self._float32 = any(f is not None and f.float32 for f in map(format_of, options.formats))
        # The largest magnitude a float value may have without further checks.
        self._limit = float_limit(self._float32)
        # Tags that enqueue_scalars() lets through on one check, with the type of value: a
        # float (in range), or the type of the tag's first tensor, whose shape and dtype
        # were checked on the caller's thread (later ones are checked when read).
        self._fast_tags: dict[str, type] = {}
        self._sink = BackgroundQueue(
            self.logdir,
            open_backends(self.logdir, options.formats, options.purge_step, storage_options),
            flush_seconds=options.flush_seconds,
            remote=options.remote,
            float32=self._float32,
            guarded=self._guarded,
        )
        self._queue = self._sink.items
        self._thread = self._sink.thread  # (bench/bench_torch.py times its CPU)
        _OPEN_WRITERS[self] = None
        self._sink.start()
        # Every checkpoint save makes the points accepted so far durable before it
        # commits, whoever wired the two (see globalstep._durability).
        self._durable = _durability.register(self.sync_points)

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
        if self._sink.error is not None:
            self._raise_error()
        if self._closed:
            raise ConfigError("writer", "must be open (close() was called)", self.logdir)

    def _raise_error(self) -> None:
        """Raises the background error, once: the writer then goes on with later calls."""
        error, path, lost = self._sink.take_error()
        if error is None:
            return
        if isinstance(error, NonFiniteError) and self._on_nonfinite is not None:
            self._on_nonfinite(error)
            return
        raise reported(error, path, lost) from error

    def _enqueue(self, item: Item) -> None:
        queue = self._queue
        queue.append(item)
        if len(queue) >= _BATCH_ITEMS:
            self._sink.grew()

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
        if self._sink.error is not None or self._closed:
            self._check_open()
        try:
            known = tag in self._known_tags
        except TypeError:  # an unhashable tag: check_tag names the rule
            known = False
        if not known:
            self._known_tags.add(check_tag(tag))
        if type(value) is not float:
            value = as_float(tag, value) if guard else tensor_or_float(tag, value)
        if type(value) is float:
            if (value > FLOAT32_MAX or value < -FLOAT32_MAX) and self._float32:
                check_float32(tag, value)
        else:
            self._sink.tensors = True
            if not known:  # a tag's first value: is it on an accelerator?
                self._note_device(value)
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

    def _note_device(self, tensor: Any) -> None:
        """Notes a tag's first tensor: one on an accelerator turns reading together on."""
        if getattr(tensor, "is_cpu", True) is False:
            self._sink.on_device = True

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
            self.enqueue_scalars(values.copy(), clock.step)
            return
        if self._sink.error is not None or self._closed:
            self._check_open()
        if type(values) is dict:
            values = values.copy()  # the caller may change it after the call
        elif isinstance(values, Mapping):
            values = dict(values)
        else:
            raise ConfigError("values", "must be a mapping from tag to number", values)
        if step is None and clock is not None:
            number = clock.step
        else:
            number = step if type(step) is int and 0 <= step <= MAX_STEP else check_step(step)
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
        if self._sink.error is not None or self._closed:
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
            self._sink.grew()

    def _checked(self, values: dict[str, Any], step: int) -> dict[str, Any]:
        """Checks every tag and value; returns the values as queued (numbers as floats)."""
        known, fast = self._known_tags, self._fast_tags
        checked = {}
        for tag, value in values.items():
            try:
                new = tag not in known
            except TypeError:  # an unhashable tag: check_tag names the rule
                new = True
            if new:
                known.add(check_tag(tag))
            if type(value) is not float:
                value = tensor_or_float(tag, value)
                if type(value) is not float:
                    self._sink.tensors = True
                    self._note_device(value)
                    checked[tag] = value
                    fast[tag] = type(value)
                    continue
            if value - value != 0.0:  # NaN or infinite
                if tag in self._guarded:
                    check_finite(tag, value, step, self._on_nonfinite)
            elif (value > FLOAT32_MAX or value < -FLOAT32_MAX) and self._float32:
                check_float32(tag, value)
            checked[tag] = value
            fast[tag] = float
        return checked

    def histogram(self, tag: str, values: Any, step: int | None = None) -> None:
        """Queues a histogram of ``values`` (any array-like of finite numbers; copied).

        Raises:
            ConfigError: a bad tag or step, or values that are not finite numbers.
        """
        self._check_open()
        check_tag(tag)
        array = as_array(tag, values)
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
        check_tag(tag)
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

    def set_params(self, params: Mapping[str, Any]) -> None:
        """Gives a tracker format the run's parameters (``Run``'s config); others have none."""
        self._sink.set_params(params)

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
        error, path, lost = self._sink.peek_error()
        if error is None or (isinstance(error, NonFiniteError) and self._on_nonfinite):
            return
        raise reported(error, path, lost) from error

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
        self._sink.stop()
        self._drain()
        self._sink.close_files()
        self._raise_error()

    def _drain(self, sync: bool = False) -> None:
        """Writes the queue on this thread (see :meth:`BackgroundQueue.drain`)."""
        self._sink.drain(sync)
