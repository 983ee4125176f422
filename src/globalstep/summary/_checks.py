"""The writer's argument rules: tags, steps, formats and the constructor's options.

Each rule refuses a value with a :class:`~globalstep._errors.ConfigError` that names the
parameter, the rule and the value received, before the writer changes anything (the
directory the options name is created last, once every other option has passed).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from globalstep import _clock
from globalstep._clock import Clock
from globalstep._errors import ConfigError
from globalstep.summary._formats import check_formats, reach_urls
from globalstep.summary._tracker import Tracker

__all__ = [
    "WriterOptions",
    "check_step",
    "check_tag",
    "checked_options",
]

"""The output formats a writer knows."""


def check_tag(tag: Any) -> str:
    """Returns ``tag`` where it is a valid tag: a str of printable characters, not blank,
    without a backslash.

    Raises:
        ConfigError: ``tag`` breaks one of those rules.
    """
    if not isinstance(tag, str):
        raise ConfigError("tag", "must be a str", tag)
    if not tag.strip():
        raise ConfigError("tag", "must not be empty or blank", tag)
    if "\\" in tag:
        raise ConfigError("tag", "must not contain a backslash", tag, hint="Use '/' to group tags.")
    if not tag.isprintable():
        raise ConfigError("tag", "must hold printable characters only (no newline)", tag)
    return tag


_STEP_RULES = (
    _clock.STEP_RULES[0],
    "must be >= 0",
    "must be <= 2**63-1 (TensorBoard stores steps as int64)",
)


def check_step(step: Any, parameter: str = "step") -> int:
    """Returns ``step`` as an int where it is one (or :func:`operator.index` takes it, but a
    bool) in [0, 2**63-1]: :func:`globalstep._clock.check_step` in a summary's words.

    Raises:
        InvalidStepError: ``step`` (named ``parameter``) is not such an int (a ConfigError).
    """
    return _clock.check_step(step, parameter, rules=_STEP_RULES)


class WriterOptions(NamedTuple):
    """A writer's options, checked (see :class:`~globalstep.summary._writer.SummaryWriter`)."""

    logdir: str
    remote: bool  # whether logdir is an fsspec URL
    formats: tuple[str | Tracker, ...]
    purge_step: int | None
    guarded: frozenset[str]
    flush_seconds: float
    stale_threshold: int


def checked_options(
    logdir: Any,
    *,
    clock: Any,
    formats: Any,
    purge_step: Any,
    guard_tags: Iterable[str],
    on_nonfinite: Any,
    flush_seconds: Any,
    stale_threshold: Any,
    storage_options: Mapping[str, Any] | None,
) -> WriterOptions:
    """Checks a writer's options in the order of its parameters, then creates ``logdir``
    where it is a local directory, then checks ``stale_threshold``.

    Raises:
        ConfigError: an option breaks its rule, or ``logdir`` cannot be created.
    """
    if clock is not None and not isinstance(clock, Clock):
        raise ConfigError("clock", "must be a globalstep Clock or None", clock)
    formats = check_formats(formats)
    if purge_step is not None:
        purge_step = check_step(purge_step, "purge_step")
    if isinstance(guard_tags, str):
        raise ConfigError("guard_tags", "must be a collection of tags, not one str", guard_tags)
    guarded = frozenset(check_tag(t) for t in guard_tags)
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
    path = os.fspath(logdir)
    remote = _checked_place(path, formats, storage_options)
    if isinstance(stale_threshold, bool) or not isinstance(stale_threshold, int):
        raise ConfigError("stale_threshold", "must be an int >= 2", stale_threshold)
    if stale_threshold < 2:
        raise ConfigError("stale_threshold", "must be an int >= 2", stale_threshold)
    return WriterOptions(
        path, remote, formats, purge_step, guarded, float(flush_seconds), stale_threshold
    )


def _checked_place(
    logdir: str, formats: tuple[str | Tracker, ...], storage_options: Mapping[str, Any] | None
) -> bool:
    """Checks where the files go and creates a local ``logdir``; returns whether it is an
    fsspec URL."""
    from globalstep.storage import is_remote

    remote = is_remote(logdir)
    if storage_options is not None and not remote:
        raise ConfigError(
            "storage_options", "applies to fsspec URL logdirs (s3://...) only", storage_options
        )
    if remote and not reach_urls(formats):
        raise ConfigError(
            "formats",
            "must be ('jsonl',) for an fsspec URL logdir (event files are written to "
            "local directories only)",
            formats,
        )
    try:
        if not remote:
            os.makedirs(logdir, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            "logdir", "must be a directory that can be created", logdir, hint=str(err)
        ) from err
    return remote
