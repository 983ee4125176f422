"""The writer's formats, one registry: each file format's name, the backend that writes it,
the packages it needs, whether it writes to an fsspec URL and whether it keeps float32;
the trackers (``"mlflow"``, ``"wandb"``, or any ``Tracker(name, client=...)``) beside them.

Every part of ``summary/`` that must know a format asks here: the writer's checks (which
names are known, which reach a URL), the queue (which backend to open), the writer
(``available_formats``, float32 values). An unknown name is refused here, never passed on.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from globalstep._errors import ConfigError
from globalstep.summary._base import Backend
from globalstep.summary._tracker import TRACKERS, Tracker

__all__ = ["FORMATS", "Format", "available", "backend_for", "check_formats", "format_of"]

_COUNTER = itertools.count()  # tells apart the event files of writers opened in one second


@dataclass(frozen=True)
class Format:
    """A file format of the writer.

    Attributes:
        name: its name in ``formats``.
        open: opens its backend for ``(logdir, storage_options)``.
        needs: the modules it needs installed (its extra).
        remote: whether it writes to an fsspec URL (else local directories only).
        float32: whether it keeps a scalar as float32 (TensorBoard's ``simple_value``).
    """

    name: str
    open: Callable[[str, Mapping[str, Any] | None], Backend]
    needs: tuple[str, ...] = ()
    remote: bool = False
    float32: bool = False


def _tensorboard(logdir: str, storage_options: Mapping[str, Any] | None) -> Backend:
    from globalstep.summary._tensorboard import TensorBoardBackend

    return TensorBoardBackend(logdir, next(_COUNTER))


def _jsonl(logdir: str, storage_options: Mapping[str, Any] | None) -> Backend:
    from globalstep.summary._jsonl import JsonlBackend

    return JsonlBackend(logdir, storage_options)


_REGISTRY: dict[str, Format] = {
    f.name: f
    for f in (
        Format("tensorboard", _tensorboard, needs=("tensorboard", "google_crc32c"), float32=True),
        Format("jsonl", _jsonl, remote=True),
    )
}

FORMATS = tuple(_REGISTRY)
"""The file formats, in the writer's default order: ``("tensorboard", "jsonl")``."""


def format_of(chosen: str | Tracker) -> Format | None:
    """The file format of ``chosen``, None for a tracker.

    Raises:
        ConfigError: ``chosen`` names no format (never taken for another one).
    """
    if isinstance(chosen, Tracker):
        return None
    found = _REGISTRY.get(chosen)
    if found is None:
        raise ConfigError("formats", f"must name formats from {FORMATS + TRACKERS}", chosen)
    return found


def available() -> tuple[str, ...]:
    """The file formats whose packages this install has."""
    return tuple(
        f.name
        for f in _REGISTRY.values()
        if all(importlib.util.find_spec(name) is not None for name in f.needs)
    )


def check_formats(formats: Any) -> tuple[str | Tracker, ...]:
    """Returns ``formats`` as a tuple: a sequence naming each of :data:`FORMATS` and of the
    trackers (:data:`~globalstep.summary._tracker.TRACKERS`, by name or as a
    :class:`~globalstep.summary._tracker.Tracker`) at most once, at least one; a tracker's
    name becomes ``Tracker(name)``.

    Raises:
        ConfigError: ``formats`` breaks that rule.
    """
    known = FORMATS + TRACKERS
    if isinstance(formats, str) or not isinstance(formats, Sequence):
        raise ConfigError("formats", f"must be a sequence of names from {known}", formats)
    chosen = tuple(Tracker(f) if f in TRACKERS else f for f in formats)
    names = [f.name if isinstance(f, Tracker) else f for f in chosen]
    unknown = {f for f in chosen if not isinstance(f, Tracker)} - set(known)  # a Tracker's: any
    if not names or len(set(names)) != len(names) or unknown:
        raise ConfigError(
            "formats",
            f"must name each of {known} at most once (a tracker by name or as a Tracker; "
            "one of your own as Tracker(name, client=...), one per name), at least one",
            formats,
        )
    return chosen


def reach_urls(formats: Sequence[str | Tracker]) -> bool:
    """Whether every chosen format writes to an fsspec URL (no tracker's record does)."""
    return all((found := format_of(f)) is not None and found.remote for f in formats)


def backend_for(
    chosen: str | Tracker, logdir: str, storage_options: Mapping[str, Any] | None
) -> Backend:
    """Opens the backend of one format (checked by :func:`check_formats`)."""
    found = format_of(chosen)
    if found is None:
        from globalstep.summary._tracker import TrackerBackend

        assert isinstance(chosen, Tracker)
        return TrackerBackend(logdir, chosen)
    return found.open(logdir, storage_options)
