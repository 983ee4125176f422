"""Skipped updates: where the values a skipped update reports are logged.

An update that is skipped (a mixed-precision overflow: ``run.update(..., applied=False)``,
or under ``attach`` an ``optimizer.step()`` a ``GradScaler`` skipped) leaves the step at
S. It was an attempt at update number S, the one that, once an attempt applies, makes the
step S + 1. So its values are logged with that update, at step S + 1, under tags of their
own: ``skipped/<tag>`` holds the last skipped attempt's value of each tag and
``run/skipped_updates`` how many attempts were skipped before the one that applied. The
main tags keep one point per step, the applied attempt's.

Why not at S: a checkpoint at S is saved right after the update that made the step S, so
a point at S written after it is one that a crash can take back and a resumed run writes
again; the restart mark of the resumed run, at S, would then void the applied update's
point at S, which the checkpoint covers, and a tracker, which receives the points at and
below the newest committed step, would receive S twice. At S + 1 they are written with the
applied update and share its fate: covered by the next checkpoint, replayed with it after a
crash. The attempts not yet followed by an applied update are *pending*: a checkpoint
saved then (a stop signal, a time trigger, the final save) holds them in its run part
(``"skipped"``, only where there are some), so a run resumed from it logs them, as an
uninterrupted one would, with its first applied update. Attempts skipped after a run's last
applied update are logged by no step (the run never reaches the step they would be drawn
at); the checkpoint of the final save holds them where it is saved after them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from globalstep._errors import ConfigError
from globalstep.checkpoint import Document

__all__ = ["COUNT_TAG", "PREFIX", "Skipped", "stored_skipped"]

PREFIX = "skipped/"
"""The prefix of the tags that hold the skipped attempts' values."""

COUNT_TAG = "run/skipped_updates"
"""The tag of the number of attempts skipped before the update that applied."""


class Skipped:
    """The skipped attempts since the last applied update: how many, and their values.

    Attributes:
        count: attempts skipped since the last applied update.
        values: the last skipped attempt's value of each tag, as floats.
    """

    def __init__(self) -> None:
        self.count = 0
        self.values: dict[str, float] = {}

    def note(self, scalars: Mapping[str, Any]) -> None:
        """Notes one skipped attempt and its scalars.

        Raises:
            ConfigError: a value is not a number.
        """
        self.count += 1
        for tag, value in scalars.items():
            self.values[tag] = _number(tag, value)

    def take(self, scalars: dict[str, Any], *, skipped: bool, log: bool) -> dict[str, Any]:
        """The scalars to log for an update: none for a skipped attempt (held, see
        :meth:`note`); for an applied one, its own with the attempts held before it, which
        are then no longer pending. With ``log`` False (a rank that writes no logs) none,
        the attempts counted all the same (every rank's run part holds them where the
        writer rank's does).

        Raises:
            ConfigError: a skipped attempt's value is not a number.
        """
        if skipped:
            self.note(scalars)
            return {}
        if not log:
            self.count, self.values = 0, {}
            return {}
        scalars = dict(scalars)
        for tag, value in self.values.items():
            scalars[PREFIX + tag] = value
        scalars[COUNT_TAG] = float(self.count)
        self.count, self.values = 0, {}
        return scalars

    def to_json(self) -> str | None:
        """The pending attempts as a checkpoint's run part holds them, or None for none."""
        if not self.count:
            return None
        return json.dumps({"count": self.count, "values": self.values}, sort_keys=True)

    def load(self, text: str | None) -> None:
        """Replaces the pending attempts with those a checkpoint held (None: none)."""
        self.count, self.values = 0, {}
        if text is not None:
            held = json.loads(text)
            self.count = int(held["count"])
            self.values = {str(tag): float(value) for tag, value in held["values"].items()}


def _number(tag: str, value: Any) -> float:
    """``value`` (a number, a NumPy scalar, a one-element tensor) as a float."""
    try:
        return float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError):
        raise ConfigError(
            tag,
            "must be a number, a NumPy scalar or a one-element tensor (a skipped update's "
            "value is held until the update that applies)",
            value,
        ) from None


def stored_skipped(document: Document) -> str | None:
    """The skipped attempts pending that a checkpoint holds (the text :meth:`Skipped.to_json`
    made), read from its ``state.json`` (:meth:`CheckpointManager.document
    <globalstep.checkpoint.CheckpointManager.document>`); None where it holds none."""
    try:
        text = document.tree["dict"]["run"]["dict"]["skipped"]["value"]
    except (KeyError, TypeError):
        return None
    return text if isinstance(text, str) else None
