"""``tf.summary``'s step-keyed logging, through globalstep's restart-clean writer.

``globalstep.compat.tf.summary`` holds TensorFlow 2's names, arguments and semantics for
the calls a training loop makes: :func:`create_file_writer`, ``writer.as_default(step=)``,
:func:`scalar` with ``step=None`` taking the default step, ``experimental.set_step`` and
``get_step``, and :func:`flush`. Migrating is renaming an import::

    writer = summary.create_file_writer(logdir)
    with writer.as_default(step=optimizer.iterations):
        ...
        optimizer.apply_gradients(...)
        summary.scalar("loss", loss)        # at optimizer.iterations: the step after it

What differs from TensorFlow, on purpose:

- The points go through :class:`~globalstep.summary.SummaryWriter`: a resumed run's
  writer marks the restart itself, so TensorBoard shows each step once even where a killed
  attempt logged past the checkpoint (TensorFlow leaves the folded-back curve unless
  ``purge_step`` is right).
- The step may be a :class:`~globalstep._clock.Clock`, a ``tf.Variable`` or ``keras.Variable``
  (``optimizer.iterations``), a tensor or an int, and is read at each call. With no step
  set anywhere, the writer's clock is used (``create_file_writer(logdir, clock=clock)``).
  A value observed for an update carries the step *after* that update, as
  ``tf.summary.scalar(step=optimizer.iterations)`` after ``apply_gradients`` does.
- The calls run in Python, so they refuse to run inside ``tf.function`` (where they would
  log once, at tracing): return the value from the traced step and log it outside.
- ``scalar`` with no default writer returns False, as TensorFlow's does, and warns once,
  since nothing was written.

Example:
    >>> import tempfile
    >>> from globalstep import Clock
    >>> from globalstep.summary._reader import read_run
    >>> clock = Clock()
    >>> logdir = tempfile.mkdtemp()
    >>> writer = create_file_writer(logdir, clock=clock, formats=("jsonl",))
    >>> with writer.as_default():
    ...     for _ in range(3):
    ...         clock.tick()
    ...         _ = scalar("loss", 1.0 / clock.step)
    >>> writer.close()
    >>> [p.step for p in read_run(logdir).scalars["loss"]]
    [1, 2, 3]
"""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from globalstep._clock import Clock
from globalstep._errors import ConfigError

__all__ = ["SummaryFileWriter", "create_file_writer", "experimental", "flush", "scalar"]

_TRACED_HINT = (
    "It runs in Python, so inside tf.function it would log once, at tracing: return the "
    "value from the traced step and log it after the call."
)


class _Defaults(threading.local):
    """The default writers and steps, per thread (as TensorFlow keeps them per thread)."""

    def __init__(self) -> None:
        self.writers: list[SummaryFileWriter] = []
        self.steps: list[Any] = []
        self.step: Any = None


_defaults = _Defaults()
_warned_no_writer = False


def _traced() -> bool:
    """Whether TensorFlow (if loaded) is tracing a function on this thread now."""
    tf = sys.modules.get("tensorflow")
    return tf is not None and bool(tf.inside_function())


def _check_step_value(step: Any) -> None:
    if step is None or isinstance(step, Clock):
        return
    if isinstance(step, bool | float | str | bytes):
        raise ConfigError(
            "step",
            "must be an int, a Clock, or an integer variable or tensor (optimizer.iterations)",
            step,
        )


def _read_step(step: Any) -> int:
    """A step as an int: a Clock's step, a variable's or tensor's value, or the int."""
    if isinstance(step, Clock):
        return step.step
    if type(step) is int:
        return step
    value = step
    if hasattr(value, "value") and not callable(value.value):  # a keras.Variable
        value = value.value
    numpy = getattr(value, "numpy", None)
    try:
        array = np.asarray(numpy() if callable(numpy) else value)
    except Exception as err:  # a symbolic tensor
        raise ConfigError(
            "step", "must be a concrete value, not a traced one", type(step).__name__
        ) from err
    if array.shape != () or array.dtype.kind not in "iu":
        raise ConfigError("step", "must be a 0-d integer (a step)", step)
    return int(array)


class SummaryFileWriter:
    """TensorFlow's ``tf.summary.SummaryWriter`` over a globalstep SummaryWriter.

    Made by :func:`create_file_writer`; :attr:`writer` is the underlying
    :class:`~globalstep.summary.SummaryWriter` (its ``scalars``, ``histogram``, ``text``
    stay available).
    """

    def __init__(self, writer: Any, clock: Clock | None = None) -> None:
        self.writer = writer
        self.clock = clock

    def __repr__(self) -> str:
        return f"SummaryFileWriter({self.writer.logdir!r})"

    def set_as_default(self, step: Any = None) -> None:
        """Makes this the default writer (and ``step`` the default step, if given)."""
        _check_step_value(step)
        _defaults.writers = [self]
        _defaults.steps = [step]

    @contextlib.contextmanager
    def as_default(self, step: Any = None) -> Iterator[SummaryFileWriter]:
        """The default writer inside the ``with`` block; ``step`` its default step there
        (a Clock or ``optimizer.iterations`` is read at each call); flushed on exit, as
        TensorFlow's is."""
        _check_step_value(step)
        _defaults.writers.append(self)
        _defaults.steps.append(step)
        try:
            yield self
        finally:
            _defaults.writers.pop()
            _defaults.steps.pop()
            self.flush()

    def flush(self) -> None:
        """Writes everything queued."""
        self.writer.flush()

    def close(self) -> None:
        """Flushes and closes the writer."""
        self.writer.close()

    def init(self) -> None:
        """Does nothing, as in TensorFlow 2 eager mode (the files open with the writer)."""


def create_file_writer(
    logdir: Any,
    max_queue: int | None = None,
    flush_millis: int | None = None,
    filename_suffix: str | None = None,
    name: str | None = None,
    experimental_trackable: bool = False,
    *,
    clock: Clock | None = None,
    formats: Sequence[str] | None = None,
) -> SummaryFileWriter:
    """Opens a writer for ``logdir``, as ``tf.summary.create_file_writer`` does.

    Args:
        logdir: the directory (or an fsspec URL, JSONL only).
        max_queue: must be None: the writer queues and writes in batches itself.
        flush_millis: how often queued points are written (TensorFlow's default: 2 s).
        filename_suffix: must be None (the writer names its files).
        name: ignored, as in TensorFlow 2 eager mode.
        experimental_trackable: must be False.
        clock: the step of a ``scalar`` call with no step given nor set.
        formats: ``("tensorboard", "jsonl")`` by default (see SummaryWriter).

    Raises:
        ConfigError: an argument TensorFlow has and this writer cannot honour.
    """
    from globalstep.summary import FORMATS, SummaryWriter

    for parameter, value, default in (
        ("max_queue", max_queue, None),
        ("filename_suffix", filename_suffix, None),
        ("experimental_trackable", experimental_trackable, False),
    ):
        if value != default:
            raise ConfigError(
                parameter,
                f"must be {default!r} here (globalstep's writer decides its queue and files)",
                value,
                hint="Leave it out; flush_millis sets how often points are written.",
            )
    options: dict[str, Any] = {"clock": clock, "formats": FORMATS if formats is None else formats}
    if flush_millis is not None:
        if isinstance(flush_millis, bool) or not isinstance(flush_millis, int | float):
            raise ConfigError("flush_millis", "must be a number of milliseconds > 0", flush_millis)
        options["flush_seconds"] = flush_millis / 1000.0
    return SummaryFileWriter(SummaryWriter(logdir, **options), clock)


def _default() -> tuple[SummaryFileWriter | None, Any]:
    """The default writer and step: ``experimental.set_step``'s step, else the innermost
    ``as_default(step=)`` that gave one, else None."""
    writers = _defaults.writers
    if not writers:
        return None, None
    if _defaults.step is not None:
        return writers[-1], _defaults.step
    for step in reversed(_defaults.steps):
        if step is not None:
            return writers[-1], step
    return writers[-1], None


def scalar(name: str, data: Any, step: Any = None, description: str | None = None) -> bool:
    """Writes a scalar at a step to the default writer, as ``tf.summary.scalar`` does.

    Args:
        name: the tag.
        data: a real number (a Python or NumPy number, or an eager tensor of one element).
        step: the step: an int, a Clock, or ``optimizer.iterations`` (any integer variable
            or tensor); None takes ``experimental.set_step``'s, else ``as_default(step=)``'s,
            else the writer's clock's.
        description: must be None (the writer stores no descriptions).

    Returns:
        True when written; False when there is no default writer (and a warning, once).

    Raises:
        ConfigError: called inside ``tf.function``; no step anywhere; a bad step, tag or
            value (see :meth:`globalstep.summary.SummaryWriter.scalar`).
    """
    global _warned_no_writer
    if _traced():
        raise ConfigError(
            "scalar",
            "must be called outside tf.function (eagerly)",
            name,
            hint=_TRACED_HINT,
        )
    if description is not None:
        raise ConfigError(
            "description", "must be None (the writer stores no descriptions)", description
        )
    writer, default = _default()
    if writer is None:
        if not _warned_no_writer:
            _warned_no_writer = True
            warnings.warn(
                f"summary.scalar({name!r}) wrote nothing: there is no default writer. Wrap "
                "the loop in `with writer.as_default():` (writer = create_file_writer(logdir)).",
                UserWarning,
                stacklevel=2,
            )
        return False
    chosen = step if step is not None else default
    if chosen is None:
        if writer.clock is None:
            raise ConfigError(
                "step",
                "must be given: no default step is set and the writer has no clock",
                step,
                hint="Pass step=optimizer.iterations, use writer.as_default(step=...), "
                "experimental.set_step(...), or create_file_writer(logdir, clock=clock).",
            )
        writer.writer.scalar(name, data)
        return True
    _check_step_value(chosen)
    writer.writer.scalar(name, data, step=_read_step(chosen))
    return True


def flush(writer: SummaryFileWriter | None = None) -> None:
    """Writes what ``writer`` (the default writer for None) has queued."""
    if writer is None:
        writer = _default()[0]
    if writer is not None:
        writer.flush()


class experimental:  # noqa: N801 (TensorFlow's namespace name)
    """``tf.summary.experimental``'s default step."""

    @staticmethod
    def set_step(step: Any) -> None:
        """Sets the default step of every later ``scalar`` call (None unsets it)."""
        _check_step_value(step)
        _defaults.step = step

    @staticmethod
    def get_step() -> Any:
        """The default step set by :meth:`set_step`, or None."""
        return _defaults.step
