"""The catalogue of ``globalstep ckpt ls``: one summary per checkpoint, and the writer's index.

A summary says what a checkpoint is (its step, time, size, metrics and clocks, and why
retention keeps it) without reading an array. The writer appends each new checkpoint's
summary to ``.summaries.jsonl``, with the identity of the files it was taken from, so that
listing 10,000 checkpoints need not parse 10,000 state.json files; the index is only a
hint, used only while the files are still those.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from globalstep._clock import Progress
from globalstep._errors import ConfigError, CorruptCheckpointError
from globalstep.checkpoint._directory.index import StepIndex, step_name
from globalstep.checkpoint._directory.policy import CheckpointInfo, KeepPolicy, retained
from globalstep.checkpoint._directory.reading import Reading, VanishedError
from globalstep.checkpoint._files.document import ARRAYS_FILE, COMMIT_FILE, STATE_FILE, Document
from globalstep.checkpoint._files.metadata import info_of, metrics_from_json, number, sharded_bytes

__all__ = ["SUMMARY_INDEX", "Catalogue", "CheckpointSummary"]

SUMMARY_INDEX = ".summaries.jsonl"
"""The writer's index of checkpoint summaries, a hint for ``globalstep ckpt ls``."""


@dataclass(frozen=True)
class CheckpointSummary:
    """One committed checkpoint, as ``globalstep ckpt ls`` shows it (no array is read).

    Attributes:
        step: its step.
        created_unix: its creation time, seconds since the epoch.
        size_bytes: the size of its files.
        metrics: the metrics saved with it.
        clocks: every clock's Progress at the save.
        kept_because: why retention keeps it.
        error: why it cannot be read, for a corrupt checkpoint; else None.
    """

    step: int
    created_unix: float
    size_bytes: int
    metrics: dict[str, float] = field(default_factory=dict)
    clocks: list[Progress] = field(default_factory=list)
    kept_because: str = ""
    error: str | None = None


def _summary(step: int, state: Document, kept_because: str) -> CheckpointSummary:
    files = state.files if isinstance(state.files, dict) else {}
    clocks = []
    for c in state.clocks if isinstance(state.clocks, list) else []:
        try:
            clocks.append(Progress.from_dict(c))
        except (ConfigError, TypeError, AttributeError):  # another version's fields
            continue
    return CheckpointSummary(
        step=step,
        created_unix=number(state.created_unix),
        size_bytes=int(
            sum(number(f.get("size")) for f in files.values() if isinstance(f, dict))
            + sharded_bytes(state)
        ),
        metrics=metrics_from_json(state.metrics),
        clocks=clocks,
        kept_because=kept_because,
    )


class Catalogue:
    """Describes a directory's checkpoints; the writer keeps their summary index.

    Args:
        reading: how the directory's checkpoints are read (and its storage and index).
        warn_once: ``warn_once(key, message)``: a warning given once per key.
    """

    def __init__(self, reading: Reading, warn_once: Callable[[str, str], None]) -> None:
        self._reading = reading
        self._storage = reading.storage
        self._index: StepIndex = reading.index
        self._warn_once = warn_once
        self._lines: int | None = None

    def summaries(self, policy: KeepPolicy) -> list[CheckpointSummary]:
        """Describes every committed checkpoint, oldest first (see the manager's)."""
        hints = self.hints()
        states: dict[int, Document | str] = {}
        for step in self._index.steps():
            hint = hints.get(step)
            if hint is not None and hint.get("ids") == self._file_ids(step):
                # The files are those the writer described.
                states[step] = Document.from_dict(hint["state"])
                continue
            try:
                states[step] = self._reading.checked(step, self._reading.load)
            except VanishedError:
                continue
            except CorruptCheckpointError as err:
                states[step] = str(err)
        infos = [
            CheckpointInfo(s, 0.0, {}) if isinstance(state, str) else info_of(s, state)
            for s, state in states.items()
        ]
        reasons = retained(policy, infos)
        return [
            CheckpointSummary(step, 0.0, 0, error=state)
            if isinstance(state, str)
            else _summary(step, state, reasons.get(step, "not kept"))
            for step, state in states.items()
        ]

    def _file_ids(self, step: int) -> list[Any]:
        name = step_name(step)
        return [
            self._storage.file_id(self._storage.join(name, COMMIT_FILE)),
            self._storage.file_id(self._storage.join(name, STATE_FILE)),
        ]

    def hints(self) -> dict[int, dict[str, Any]]:
        """The writer's summary index: step -> what ``summaries`` needs, with the identity
        (inode, size, mtime) of the files it was taken from. Only a hint: an entry is used
        only while both files are still those, and a torn or foreign line is skipped."""
        try:
            data = self._storage.read_bytes(self._storage.join(SUMMARY_INDEX))
        except OSError:
            return {}
        lines = data.splitlines()
        try:  # one parse for the whole file; line by line only where a line is torn
            entries = json.loads(b"[" + b",".join(lines) + b"]")
        except ValueError:
            entries = []
            for line in lines:
                with contextlib.suppress(ValueError):
                    entries.append(json.loads(line))
        hints = {}
        for entry in entries:
            if (
                isinstance(entry, dict)
                and isinstance(entry.get("step"), int)
                and isinstance(entry.get("state"), dict)
                and entry.get("ids", [None])[0] is not None
            ):
                hints[entry["step"]] = entry
        return hints

    def record(self, step: int, document: Document) -> None:
        """Appends the new checkpoint's summary to the index ``ckpt ls`` reads (a hint)."""
        ids = self._file_ids(step)
        if ids[0] is None:
            return  # this storage cannot tell a file's identity: no index
        arrays = self._storage.file_id(self._storage.join(step_name(step), ARRAYS_FILE))
        entry = {
            "step": step,
            "ids": ids,
            "state": {
                "created_unix": document.created_unix,
                "metrics": document.metrics,
                "clocks": document.clocks,
                "files": {
                    ARRAYS_FILE: {"size": arrays[1] if arrays else 0},
                    "sharded": {"size": sharded_bytes(document)},
                },
            },
        }
        path = self._storage.join(SUMMARY_INDEX)
        try:
            if self._lines is None:
                try:
                    self._lines = self._storage.read_bytes(path).count(b"\n")
                except FileNotFoundError:
                    self._lines = 0
            if self._lines > 2 * len(self._index.candidates()) + 64:
                self._compact()
            self._storage.append_line(path, json.dumps(entry).encode() + b"\n")
            self._lines = (self._lines or 0) + 1
        except OSError as err:
            self._warn_once("index", f"the summary index {path} is not kept up ({err})")

    def _compact(self) -> None:
        """Rewrites the index with the entries of committed checkpoints only."""
        hints = self.hints()
        live = [hints[s] for s in self._index.steps() if s in hints]
        data = b"".join(json.dumps(entry).encode() + b"\n" for entry in live)
        self._storage.replace_file(self._storage.join(SUMMARY_INDEX), data)
        self._lines = len(live)
