"""CheckpointManager: saves and restores state trees keyed by the step, and keeps a few.

The manager wires three small parts: a trigger decides when to save (``save_every``), a
retention policy decides what to keep (:mod:`globalstep.checkpoint.policy`), and the format
module commits the bytes crash-safely (:mod:`globalstep.checkpoint.format`). One process
writes a directory at a time; ``read_only=True`` inspects without the lock.

Example:
    >>> import numpy as np, tempfile
    >>> from globalstep import Clock
    >>> clock, weights = Clock(), np.zeros(3)
    >>> directory = tempfile.mkdtemp()
    >>> with CheckpointManager(directory, max_to_keep=2, save_every=100) as manager:
    ...     for _ in range(500):
    ...         weights += 1.0
    ...         clock.tick()
    ...         _ = manager.maybe_save(clock, {"clock": clock, "weights": weights})
    ...     manager.steps()
    [400, 500]
    >>> resumed_clock, resumed = Clock(), np.zeros(3)
    >>> with CheckpointManager(directory, max_to_keep=2, save_every=100) as manager:
    ...     tree = manager.restore({"clock": resumed_clock, "weights": resumed})
    >>> resumed_clock.step, float(resumed[0]), tree["weights"] is resumed
    (500, 500.0, True)
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import json
import math
import numbers
import os
import secrets
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, overload

import numpy as np

from globalstep import _durability
from globalstep._closing import Closing
from globalstep.checkpoint.format import (
    ARRAYS_FILE,
    COMMIT_FILE,
    STATE_FILE,
    commit,
    load_state,
    read_ahead,
    read_arrays,
    remove_checkpoint,
)
from globalstep.checkpoint.lazy import CheckpointReader
from globalstep.checkpoint.policy import (
    CheckpointInfo,
    KeepAny,
    KeepBest,
    KeepEveryNHours,
    KeepEveryNSteps,
    KeepLatest,
    KeepPolicy,
    policy_from_config,
    retained,
    unkept_steps,
)
from globalstep.checkpoint.save_trigger import SaveTrigger
from globalstep.checkpoint.tree import (
    RestoreReport,
    array_nodes,
    fit_template,
    flatten,
    template_sharded,
    unflatten,
)
from globalstep.clock import MAX_STEP, Clock, Progress
from globalstep.errors import (
    CheckpointError,
    CheckpointExistsError,
    CheckpointNotFoundError,
    CheckpointWarning,
    ConfigError,
    CorruptCheckpointError,
    StepError,
)
from globalstep.storage import DirectoryLock, Storage, open_storage, wrap_os_errors
from globalstep.triggers import Trigger
from globalstep.units import DurationLike

__all__ = [
    "CheckpointFollower",
    "CheckpointManager",
    "CheckpointSummary",
    "CheckpointWarning",
    "step_name",
]

_T = TypeVar("_T")
_STALE_PREFIXES = (".tmp-", ".trash-")
SUMMARY_INDEX = ".summaries.jsonl"
"""The writer's index of checkpoint summaries, a hint for ``globalstep ckpt ls``."""
_READ_ATTEMPTS = 20
"""How often a reader moves on to the newest checkpoint when the one it chose is pruned."""


class _VanishedError(Exception):
    """The checkpoint being read was deleted (pruned) under the reader."""


def step_name(step: int) -> str:
    """Returns the directory name of ``step``'s checkpoint.

    Example:
        >>> step_name(1200)
        'step-000000001200'
    """
    return f"step-{step:012d}"


_EMPTY_LISTINGS = 3
"""How often an empty listing is taken again before it is believed: a directory listed
while a writer renames in it (tmpfs on Linux 6.x) can come back without entries that were
there all along."""
_QUIET_NS = 100_000_000
"""How long a directory must be unchanged before a listing of it is trusted (0.1 s)."""


class _Index:
    """The step directories of one checkpoint directory, listed only when it changed.

    A listing is reused while the directory's stamp (its mtime, inode and size) is
    unchanged and the listing was taken after the directory had been quiet for 0.1 s (file
    system clocks tick coarsely, so a change in the same tick could keep the stamp). A
    reader polling 10,000 checkpoints then pays one ``stat`` per call. The writer, which
    alone changes the directory, records its own changes and lists again only when the
    stamp moves otherwise, or once the directory is quiet. Where rename is atomic, a name
    once seen with its marker stays committed until it leaves the listing. Every read
    checks the disk again, so the index is only ever a hint.
    """

    def __init__(self, storage: Storage, *, writer: bool) -> None:
        self._storage = storage
        self._writer = writer
        self._guard = threading.RLock()
        self._stamp: Any = None
        self._racy = True
        self._steps: list[int] = []
        self._committed: set[int] = set()
        self.stale: list[str] = []
        """Names of the last listing left by killed or failed saves (``.tmp-*``, ``.trash-*``)."""

    def candidates(self) -> list[int]:
        """Returns the steps of every entry named like a checkpoint, sorted."""
        with self._guard:
            stamp = self._storage.stamp()
            quiet = stamp is not None and time.time_ns() - stamp[1] >= _QUIET_NS
            reuse = (
                stamp is not None
                and stamp[0] == self._stamp
                and (not self._racy or (self._writer and not quiet))
            )
            if not reuse:
                steps = []
                stale = []
                with wrap_os_errors("listing the checkpoints", self._storage.root):
                    names = self._storage.listdir(self._storage.root)
                for name in names:
                    # Cheaper than a regex over 10,000 names: step- and at least 12 digits.
                    digits = name[5:]
                    if name.startswith("step-") and digits.isdigit() and digits.isascii():
                        if step_name(int(digits)) == name:
                            steps.append(int(digits))
                    elif name.startswith(_STALE_PREFIXES):
                        stale.append(name)
                steps.sort()
                self._steps = steps
                self.stale = stale
                if self._storage.atomic_rename:
                    self._committed.intersection_update(steps)
                else:  # markers come and go in place: look again every time
                    self._committed.clear()
                self._stamp = None if stamp is None else stamp[0]
                self._racy = not quiet
            return self._steps

    def listed(self) -> list[int]:
        """Returns the steps of the last listing, with the writer's own changes since
        (the writer alone adds or removes entries)."""
        with self._guard:
            return self._steps

    def committed(self, step: int) -> bool:
        """Returns whether ``step``'s directory holds its marker."""
        with self._guard:
            if step in self._committed:
                return True
        found = self._storage.exists(self._storage.join(step_name(step), COMMIT_FILE))
        if found:
            with self._guard:
                self._committed.add(step)
        return found

    def steps(self, *, relist: bool = True) -> list[int]:
        """Returns the committed steps, oldest first; ``relist=False`` (the writer, right
        after its own commit) starts from the last listing and its own changes since."""
        for _ in range(_EMPTY_LISTINGS):
            known = self._committed
            listing = self.candidates() if relist else self.listed()
            steps = [s for s in listing if s in known or self.committed(s)]
            if steps or not relist:
                return steps
            self._stamp = None
        return []

    def latest(self) -> int | None:
        """Returns the newest committed step, checking markers from the newest down."""
        for _ in range(_EMPTY_LISTINGS):
            for step in reversed(self.candidates()):
                if self.committed(step):
                    return step
            self._stamp = None
        return None

    def forget(self, step: int) -> None:
        """Drops what is known of ``step``: the next look checks the disk again."""
        with self._guard:
            self._committed.discard(step)
            self._stamp = None

    def changed(self, added: int | None = None, removed: int | None = None) -> None:
        """Records the writer's own change, so that it needs no new listing."""
        with self._guard:
            # New lists, never changed in place: another thread may be iterating the old.
            if removed is not None:
                self._committed.discard(removed)
                if removed in self._steps:
                    self._steps = [s for s in self._steps if s != removed]
            if added is not None:
                self._committed.add(added)
                if added not in self._steps:
                    steps = list(self._steps)
                    bisect.insort(steps, added)
                    self._steps = steps
            if self._stamp is not None and self._writer:
                stamp = self._storage.stamp()
                self._stamp = None if stamp is None else stamp[0]
                self._racy = True
            else:
                self._stamp = None


_DAMAGE_ERRNOS = frozenset(
    {errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ELOOP}
)


def _damage(err: CheckpointError) -> bool:
    """Whether an I/O error reading a checkpoint means the checkpoint itself is damaged
    (a file missing, a directory or link where a file belongs, no permission), rather
    than a passing failure of the machine (an I/O error, too many open files)."""
    cause = err.__cause__
    return isinstance(cause, OSError) and cause.errno in _DAMAGE_ERRNOS


def _brief(steps: list[int]) -> str:
    """A list of steps, shortened in the middle when long."""
    if len(steps) <= 12:
        return str(steps)
    return f"[{', '.join(map(str, steps[:5]))}, ... ({len(steps) - 10} more), " + (
        f"{', '.join(map(str, steps[-5:]))}]"
    )


def _sharded_bytes(state: Any) -> int:
    """The bytes of a checkpoint's sharded chunks, as its state.json lists them (0 if none)."""
    section = state.get("sharded") if isinstance(state, dict) else None
    tensors = section.get("tensors") if isinstance(section, dict) else None
    if not isinstance(tensors, dict):
        return 0
    return sum(
        int(_number(chunk.get("length")))
        for tensor in tensors.values()
        if isinstance(tensor, dict) and isinstance(tensor.get("chunks"), list)
        for chunk in tensor["chunks"]
        if isinstance(chunk, dict)
    )


def _brief_keys(keys: list[str]) -> str:
    return ", ".join(keys[:3]) + (f", ... ({len(keys) - 3} more)" if len(keys) > 3 else "")


def _step_of(step: Any) -> int:
    if isinstance(step, Clock):
        return step.step
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise ConfigError("step", "must be an int in [0, 2**63-1] or a Clock", step)
    return step


def _metrics_to_json(metrics: Any) -> dict[str, Any]:
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise ConfigError("metrics", "must map names to numbers", metrics)
    out: dict[str, Any] = {}
    for name, value in metrics.items():
        # NumPy scalars count (np.float32 from a mean is common); bools do not.
        if (
            not isinstance(name, str)
            or isinstance(value, bool | np.bool_)
            or not isinstance(value, numbers.Real)
        ):
            raise ConfigError("metrics", "must map names to numbers", metrics)
        number = int(value) if isinstance(value, numbers.Integral) else float(value)
        out[name] = number if math.isfinite(number) else repr(number)
    return out


def _metrics_from_json(metrics: Any) -> dict[str, float]:
    if not isinstance(metrics, dict):
        return {}
    out = {}
    for name, value in metrics.items():
        if (isinstance(value, int | float) and not isinstance(value, bool)) or value in (
            "nan",
            "inf",
            "-inf",
        ):
            out[str(name)] = float(value)
    return out


def _number(value: Any, default: float = 0.0) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return default


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


class CheckpointManager(Closing):
    """Saves state trees by step into ``directory``, keeps some, and restores them.

    Args:
        directory: a local path or an fsspec URL (``memory://...``, ``s3://...``).
        max_to_keep: keep the newest N; ``None`` keeps every checkpoint.
        keep_every_n_hours: also keep one checkpoint per N hours of wall time.
        keep_every_n_steps: also keep each checkpoint whose step is a multiple of N.
        keep_best: also keep the best k by a metric, e.g. ``KeepBest("loss", k=2)``.
        save_every: when :meth:`maybe_save` saves: a duration (``500``, ``"1ep"``,
            ``"30min"``) or a :class:`~globalstep.triggers.Trigger`.
        async_save: write in a background thread; the caller waits only for the copy.
            The thread still takes the GIL for its Python work and after each system
            call, which slows a training loop that gives the GIL up in every op (torch):
            for a small state saved every few milliseconds a synchronous save costs the
            loop less (BENCHMARKS.md, "Run: the per-update path"); async pays off when
            writing and syncing the files takes long.
        read_only: inspect and restore without taking the writer's lock.
        distributed: ``True`` or a
            :class:`~globalstep.checkpoint.distributed.DistributedOptions`: open it on every
            rank of an initialised torch.distributed group and save on every rank with the
            same step; one rank writes replicated state and commits once every rank wrote
            its shards (see :mod:`globalstep.checkpoint.distributed`).
        storage_options: keyword arguments for the fsspec file system of a URL
            ``directory``, e.g. ``{"endpoint_url": "http://127.0.0.1:9000"}`` for an
            S3-compatible store (see :class:`~globalstep.storage.FsspecStorage`
            for listing consistency, retries and the writer's lock there).

    Raises:
        ConfigError: a parameter is out of range.
        LockError: another live writer holds ``directory``.

    Retention keeps what any policy keeps, plus the newest checkpoint, and deletes only
    after the new checkpoint is committed. See the module docstring for an example.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_to_keep: int | None = 5,
        keep_every_n_hours: float | None = None,
        keep_every_n_steps: int | None = None,
        keep_best: KeepBest | None = None,
        save_every: DurationLike | Trigger | None = None,
        async_save: bool = False,
        read_only: bool = False,
        distributed: Any = False,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if keep_best is not None and not isinstance(keep_best, KeepBest):
            raise ConfigError("keep_best", "must be a KeepBest(metric, k, mode)", keep_best)
        if not isinstance(async_save, bool):
            raise ConfigError("async_save", "must be a bool", async_save)
        if max_to_keep is None:
            self.policy: KeepPolicy = KeepAny(())
        else:
            policies: list[KeepPolicy] = [KeepLatest(max_to_keep)]
            if keep_every_n_hours is not None:
                policies.append(KeepEveryNHours(keep_every_n_hours))
            if keep_every_n_steps is not None:
                policies.append(KeepEveryNSteps(keep_every_n_steps))
            if keep_best is not None:
                policies.append(keep_best)
            self.policy = KeepAny(tuple(policies))
        self._trigger = SaveTrigger.of(save_every)
        self._storage = open_storage(directory, storage_options)
        self.directory = self._storage.url if hasattr(self._storage, "url") else self._storage.root
        self._coordinator: Any = None
        if distributed is not False and not read_only:
            from globalstep.checkpoint import distributed as _distributed

            options = _distributed.options_from(distributed)
            if options is not None:
                self._coordinator = _distributed.Coordinator(options, self._storage)
        self._participant = self._coordinator is not None and not self._coordinator.is_writer
        self._async = async_save
        self._read_only = read_only
        self._closed = False
        self._thread: _InFlight | threading.Thread | None = None  # the save in flight
        self._saver: Any = None  # the thread pool of one that writes async saves
        self._error: BaseException | None = None
        self._infos: dict[int, CheckpointInfo] = {}
        self._warned: set[str] = set()
        self._sweep_due = True
        self._resumed_from: int | None = None
        self._last_saved: int | None = None
        self._index_lines: int | None = None
        self._index = _Index(self._storage, writer=not read_only)
        self._lock: DirectoryLock | None = None
        if not read_only and not self._participant:
            self._lock = DirectoryLock(self._storage)
            self._lock.acquire()
            try:
                self._resume_trigger()
            except BaseException:
                self._lock.release()  # no manager is returned, so nobody else could
                raise
        elif self._participant:
            self._resume_trigger()  # maybe_save must fire where the writer's fires

    # ----------------------------------------------------------------- inspection

    def steps(self) -> list[int]:
        """Returns the steps of every committed checkpoint, oldest first."""
        return self._index.steps()

    def latest_step(self) -> int | None:
        """Returns the newest committed step, or None when there is none.

        Cheap enough to poll: with 10,000 checkpoints a call on an unchanged directory
        costs one ``stat``.
        """
        return self._index.latest()

    def incomplete(self) -> dict[int, str]:
        """Returns the entries named like checkpoints that readers ignore, and why.

        These are step directories without their ``COMMITTED`` marker (a save cut short on
        an object store, or a marker deleted by hand), and entries that are not
        directories. ``globalstep ckpt verify`` and ``ckpt ls --all`` report them.
        """
        out = {}
        for step in self._index.candidates():
            if self._index.committed(step):
                continue
            path = self._storage.join(step_name(step))
            if self._storage.is_dir(path):
                out[step] = f"no {COMMIT_FILE} marker: not committed, readers ignore it"
            elif self._storage.is_symlink(path) or self._storage.exists(path):
                out[step] = "not a directory"
            # else: pruned since the listing, so not there any more
        return out

    def metadata(self, step: int | None = None) -> dict[str, Any]:
        """Returns the checked state.json of ``step`` (default: the newest), reading no array.

        Raises:
            CheckpointNotFoundError: no such committed checkpoint.
            CorruptCheckpointError: the marker or state.json is damaged.
        """
        return self._read(step, self._load)[1]

    def stored_policy(self) -> KeepPolicy | None:
        """Returns the retention policy recorded by the newest checkpoint's writer, if any."""
        try:
            saved = self.metadata().get("manager")
            return policy_from_config(saved["keep"]) if isinstance(saved, dict) else None
        except (CheckpointError, ConfigError, KeyError, TypeError):
            return None

    def summaries(self, policy: KeepPolicy | None = None) -> list[CheckpointSummary]:
        """Describes every committed checkpoint, oldest first, reading no array.

        A checkpoint that cannot be read is listed with its ``error``; one pruned while
        being listed is left out.

        Args:
            policy: the policy whose reasons ``kept_because`` gives; default the manager's.
        """
        hints = self._summary_hints()
        states: dict[int, dict[str, Any] | str] = {}
        for step in self.steps():
            hint = hints.get(step)
            if hint is not None and hint.get("ids") == self._file_ids(step):
                states[step] = hint["state"]  # the files are those the writer described
                continue
            try:
                states[step] = self._checked(step, self._load)
            except _VanishedError:
                continue
            except CorruptCheckpointError as err:
                states[step] = str(err)
        infos = [
            CheckpointInfo(s, 0.0, {})
            if isinstance(state, str)
            else CheckpointInfo(
                s, _number(state.get("created_unix")), _metrics_from_json(state.get("metrics"))
            )
            for s, state in states.items()
        ]
        reasons = retained(policy or self.policy, infos)
        out = []
        for step, state in states.items():
            if isinstance(state, str):
                out.append(CheckpointSummary(step, 0.0, 0, error=state))
                continue
            files = state.get("files", {})
            clocks = []
            for c in state.get("clocks", []):
                try:
                    clocks.append(Progress.from_dict(c))
                except (ConfigError, TypeError, AttributeError):  # another version's fields
                    continue
            out.append(
                CheckpointSummary(
                    step=step,
                    created_unix=_number(state.get("created_unix")),
                    size_bytes=int(
                        sum(_number(f.get("size")) for f in files.values() if isinstance(f, dict))
                        + _sharded_bytes(state)
                    ),
                    metrics=_metrics_from_json(state.get("metrics")),
                    clocks=clocks,
                    kept_because=reasons.get(step, "not kept"),
                )
            )
        return out

    def _file_ids(self, step: int) -> list[Any]:
        name = step_name(step)
        return [
            self._storage.file_id(self._storage.join(name, COMMIT_FILE)),
            self._storage.file_id(self._storage.join(name, STATE_FILE)),
        ]

    def _summary_hints(self) -> dict[int, dict[str, Any]]:
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

    def _record_summary(self, step: int, document: dict[str, Any]) -> None:
        """Appends the new checkpoint's summary to the index ``ckpt ls`` reads (a hint)."""
        ids = self._file_ids(step)
        if ids[0] is None:
            return  # this storage cannot tell a file's identity: no index
        arrays = self._storage.file_id(self._storage.join(step_name(step), ARRAYS_FILE))
        entry = {
            "step": step,
            "ids": ids,
            "state": {
                "created_unix": document["created_unix"],
                "metrics": document["metrics"],
                "clocks": document["clocks"],
                "files": {
                    ARRAYS_FILE: {"size": arrays[1] if arrays else 0},
                    "sharded": {"size": _sharded_bytes(document)},
                },
            },
        }
        path = self._storage.join(SUMMARY_INDEX)
        try:
            if self._index_lines is None:
                try:
                    self._index_lines = self._storage.read_bytes(path).count(b"\n")
                except FileNotFoundError:
                    self._index_lines = 0
            if self._index_lines > 2 * len(self._index.candidates()) + 64:
                self._compact_summaries()
            self._storage.append_line(path, json.dumps(entry).encode() + b"\n")
            self._index_lines = (self._index_lines or 0) + 1
        except OSError as err:
            self._warn_once("index", f"the summary index {path} is not kept up ({err})")

    def _compact_summaries(self) -> None:
        """Rewrites the index with the entries of committed checkpoints only."""
        hints = self._summary_hints()
        live = [hints[s] for s in self.steps() if s in hints]
        data = b"".join(json.dumps(entry).encode() + b"\n" for entry in live)
        self._storage.replace_file(self._storage.join(SUMMARY_INDEX), data)
        self._index_lines = len(live)

    def open(self, step: int | None = None) -> CheckpointReader:
        """Opens a checkpoint lazily: arrays are memory-mapped and read when indexed.

        Without ``step``, a checkpoint pruned while being opened is replaced by the newest
        one still there.

        Raises:
            CheckpointNotFoundError: no committed checkpoint (or none for ``step``).
            CorruptCheckpointError: the checkpoint is damaged; the message names it.
        """

        def action(number: int) -> CheckpointReader:
            return CheckpointReader(self._storage, step_name(number), number, self._load(number))

        return self._read(step, action)[1]

    def verify(self, step: int | None = None) -> None:
        """Checks every checksum of ``step`` (default: the newest).

        Raises:
            CheckpointNotFoundError: no committed checkpoint (or none for ``step``).
            CorruptCheckpointError: a file is damaged; the message names it.
        """

        def action(number: int) -> None:
            name = step_name(number)
            state = self._load(number)
            read_arrays(self._storage, name, state, keep=False)
            if "sharded" in state:
                from globalstep.checkpoint.distributed import verify_sharded

                verify_sharded(self._storage, name, state)

        self._read(step, action)

    def follow(
        self,
        *,
        after: int | None = None,
        timeout_seconds: float | None = None,
        poll_seconds: float = 1.0,
    ) -> CheckpointFollower:
        """Iterates over checkpoints as a live run commits them, for an evaluator.

        Like TensorFlow's ``tf.train.checkpoints_iterator`` and Keras'
        ``SidecarEvaluator``: each newly committed checkpoint is yielded once, opened (a
        :class:`CheckpointReader`, whose memory map keeps the arrays readable even if the
        writer prunes the checkpoint afterwards), in step order. Checkpoints the writer
        pruned before they could be opened are skipped with a :class:`CheckpointWarning`
        and listed in the iterator's ``missed``.

        Args:
            after: yield checkpoints with a step above this; default: start with the
                newest checkpoint present (as TensorFlow does).
            timeout_seconds: stop when no new checkpoint came for this long; None waits
                for ever.
            poll_seconds: how often to look for a new checkpoint.

        Raises:
            ConfigError: an argument is out of range.

        Example:
            >>> import numpy as np, tempfile
            >>> directory = tempfile.mkdtemp()
            >>> with CheckpointManager(directory) as writer:
            ...     writer.save(5, {"w": np.ones(2)})
            >>> reader = CheckpointManager(directory, read_only=True)
            >>> [r.step for r in reader.follow(timeout_seconds=0.0, poll_seconds=0.01)]
            [5]
        """
        if after is not None:
            after = _step_of(after)
        for name, value in (("timeout_seconds", timeout_seconds), ("poll_seconds", poll_seconds)):
            if value is None and name == "timeout_seconds":
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigError(name, "must be a finite number of seconds >= 0", value)
        return CheckpointFollower(self, after, timeout_seconds, poll_seconds)

    # ----------------------------------------------------------------- reading

    def _load(self, step: int) -> dict[str, Any]:
        """Reads and checks ``step``'s marker and state.json, and that it is ``step``'s."""
        name = step_name(step)
        state = load_state(self._storage, name)
        saved = state.get("step")
        if saved != step or isinstance(saved, bool):
            raise CorruptCheckpointError(
                f"{self._storage.join(name)}: its state.json is of step {saved!r}, not "
                f"{step} (a copy or a rename of another checkpoint?)",
                self._storage.join(name),
            )
        return state

    def _still_committed(self, step: int) -> bool:
        self._index.forget(step)
        return self._index.committed(step)

    def _checked(self, step: int, action: Callable[[int], _T]) -> _T:
        """Runs ``action(step)``, telling a checkpoint pruned under it from a damaged one.

        A failure of a checkpoint whose marker is gone raises _VanishedError. One whose marker
        is still there is tried once more (a checkpoint replaced with ``force`` between two
        reads fails once); a second failure is corruption, named with the checkpoint.
        """
        for attempt in range(2):
            try:
                return action(step)
            except (CheckpointError, ConfigError, StepError) as err:
                if isinstance(err, CheckpointNotFoundError | CheckpointExistsError) or (
                    type(err) is CheckpointError and not _damage(err)
                ):
                    raise
                if not self._still_committed(step):
                    raise _VanishedError(step) from err
                if attempt == 1:
                    name = step_name(step)
                    raise CorruptCheckpointError(
                        f"checkpoint {name} of {self.directory} is damaged: {err}",
                        err.path if isinstance(err, CheckpointError) and err.path else name,
                    ) from err
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(self, step: int | None, action: Callable[[int], _T]) -> tuple[int, _T]:
        """Runs ``action`` on ``step``, or on the newest checkpoint: when the writer prunes
        the one chosen, on the newest one still there (a bounded number of times)."""
        if step is not None:
            step = _step_of(step)
        for _ in range(_READ_ATTEMPTS):
            chosen = self._resolve(step)
            try:
                return chosen, self._checked(chosen, action)
            except _VanishedError:
                if step is not None:
                    raise CheckpointNotFoundError(
                        f"checkpoint {step_name(step)} of {self.directory} was deleted while "
                        "being read (pruned by its writer?)",
                        self._storage.join(step_name(step)),
                    ) from None
        raise CheckpointError(
            f"every checkpoint of {self.directory} chosen in {_READ_ATTEMPTS} tries was "
            "deleted while being read; is a writer pruning faster than it saves?",
            self.directory,
        )

    def _resolve(self, step: int | None) -> int:
        if step is None:
            latest = self._index.latest()
            if latest is None:
                raise CheckpointNotFoundError(
                    f"no committed checkpoint in {self.directory}", self.directory
                )
            return latest
        step = _step_of(step)
        if not self._index.committed(step):
            raise CheckpointNotFoundError(
                f"no committed checkpoint for step {step} in {self.directory}; "
                f"committed steps: {_brief(self.steps())}",
                self._storage.join(step_name(step)),
            )
        return step

    # ----------------------------------------------------------------- saving

    def save(
        self,
        step: int | Clock,
        state: Any,
        *,
        metrics: Mapping[str, float] | None = None,
        force: bool = False,
        before_commit: Callable[[], None] | None = None,
    ) -> None:
        """Saves ``state`` as the checkpoint of ``step``, then applies retention.

        Args:
            step: the step, or a Clock whose step is used.
            state: the state tree (see :mod:`globalstep.checkpoint.tree`).
            metrics: numbers for ``keep_best`` and ``globalstep ckpt ls``.
            force: replace an existing checkpoint of this step (atomically).
            before_commit: called once before anything is written: what else must be on
                disk before this checkpoint exists. It runs on the save's thread (the
                background one for an async save); if it raises, nothing is saved and the
                save fails with its error.

        Before anything is written (and before ``before_commit``), every open
        :class:`~globalstep.summary.SummaryWriter` of the process makes the points it
        accepted so far durable (see :mod:`globalstep._durability`, which says why all of
        them): a crash after the commit never loses a point logged before the save, with
        or without ``globalstep.Run``. A writer whose points cannot be written fails the
        save with its error (``SummaryWriteError``, or ``NonFiniteError`` for a guarded
        loss read as NaN), and nothing is saved.

        Raises:
            CheckpointExistsError: the step is saved already and ``force`` is False.
            CheckpointError: the manager is read-only or closed, a previous background
                save failed (a writer's error of an async save is its cause), or writing
                failed (earlier checkpoints stay intact).
            ConfigError: the step, state or metrics are invalid.
            SummaryWriteError: an open writer's points could not be written (raised as
                the writer raised it; nothing was saved).
            NonFiniteError: an open writer read a guarded value that is NaN or infinite.
        """
        self._check_writable()
        self.wait()
        number = _step_of(step)
        if self._coordinator is None:
            self._save(number, state, metrics, force, None, before_commit)
            return
        round_ = self._coordinator.begin(number)
        try:
            self._save(number, state, metrics, force, round_, before_commit)
        except BaseException as err:
            round_.abort(err)
            raise

    def _save(
        self,
        number: int,
        state: Any,
        metrics: Mapping[str, float] | None,
        force: bool,
        round_: Any,
        before_commit: Callable[[], None] | None = None,
    ) -> None:
        if self._participant:
            # This rank's own logs and files, if any, before its part of the save.
            _durability.sync_registered()
            if before_commit is not None:
                before_commit()
            self._participate(state, round_)
            return
        name = step_name(number)
        abandoned = [] if self._resumed_from is None else self._abandoned(self._resumed_from)
        # Whether the step is committed already, asked once (the commit is told).
        marked = None if number in abandoned else self._index.committed(number)
        if marked and not force:
            raise CheckpointExistsError(
                f"checkpoint {name} exists in {self.directory}; pass force=True to replace it",
                self._storage.join(name),
            )
        flat = flatten(state, copy=self._async)
        if round_ is not None:
            from globalstep.checkpoint.distributed import prepare

            prepare(round_, flat.sharded, copy=self._async)
        elif flat.sharded:
            raise ConfigError(
                "state",
                "holds sharded tensors (DTensor, FSDP2's fully_shard); every rank writes its "
                "shards, so open the CheckpointManager with distributed=True on every rank",
                _brief_keys(list(flat.sharded)),
            )
        document = {
            "step": number,
            "created_unix": time.time(),
            "metrics": _metrics_to_json(metrics),
            "clocks": flat.clocks,
            "tree": flat.structure,
            "manager": {
                "keep": self.policy.to_config(),
                "save_trigger": self._trigger.state_dict() if self._trigger else None,
            },
            "previous_step": self.latest_step(),
        }
        # The listing latest_step() just took: no entry of this step, nothing to clear.
        fresh = number not in self._index.listed()
        if self._resumed_from is not None:
            document["timeline"] = {"resumed_from": self._resumed_from, "abandoned": abandoned}
            document["previous_step"] = self._resumed_from
            self._resumed_from = None
        args: tuple[Any, ...] = (number, flat.arrays, document, force, abandoned, round_)
        args += (before_commit, fresh, marked)
        if not self._async:
            self._commit(*args)
            return
        self._thread = self._submit(self._commit_in_background, args)

    def _submit(self, work: Callable[..., None], args: tuple[Any, ...]) -> _InFlight:
        """Runs ``work(*args)`` on the manager's save thread, made at the first async save
        and kept (so a save does not wait for a new thread to be scheduled); interpreter
        exit waits for the save in flight, as it would for a thread of its own."""
        if self._saver is None:
            from concurrent.futures import ThreadPoolExecutor

            self._saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="globalstep-save")
        return _InFlight(self._saver.submit(work, *args))

    def _participate(self, state: Any, round_: Any) -> None:
        """A rank other than the writer: writes its shards and waits for the commit."""
        from globalstep.checkpoint.distributed import prepare

        flat = flatten(state, copy=self._async)
        prepare(round_, flat.sharded, copy=self._async)
        if not self._async:
            round_.participate()
            return
        self._thread = self._submit(self._in_background, (round_.participate,))

    def _in_background(self, work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as err:  # surfaced by the next save, wait or close
            self._error = err

    def maybe_save(
        self, clock: Clock, state: Any, *, metrics: Mapping[str, float] | None = None
    ) -> bool:
        """Saves when the ``save_every`` trigger fires for ``clock``; returns whether it did.

        A save here is :meth:`save`'s: every open writer's points are made durable first.

        Raises:
            ConfigError: the manager has no ``save_every``.
            CheckpointError, SummaryWriteError, NonFiniteError: as :meth:`save` raises them.
        """
        if self._trigger is None:
            raise ConfigError("save_every", "must be set to use maybe_save", None)
        if not isinstance(clock, Clock):
            raise ConfigError("clock", "must be a globalstep Clock", clock)
        if not self._trigger.due(clock):
            return False
        self.save(clock, state, metrics=metrics)
        return True

    def _abandoned(self, resumed_from: int) -> list[int]:
        """The checkpoints newer than the one resumed from: the abandoned timeline's."""
        return [s for s in self.steps() if s > resumed_from]

    def _commit(
        self,
        step: int,
        arrays: Any,
        document: dict[str, Any],
        force: bool,
        abandoned: list[int],
        round_: Any = None,
        before_commit: Callable[[], None] | None = None,
        fresh: bool = False,
        marked: bool | None = None,
    ) -> None:
        try:
            self._commit_once(
                step, arrays, document, force, abandoned, round_, before_commit, fresh, marked
            )
        except BaseException as err:
            if round_ is not None:
                round_.abort(err)
            raise

    def _commit_once(
        self,
        step: int,
        arrays: Any,
        document: dict[str, Any],
        force: bool,
        abandoned: list[int],
        round_: Any,
        before_commit: Callable[[], None] | None = None,
        fresh: bool = False,
        marked: bool | None = None,
    ) -> None:
        # The curves up to this step reach the disk before the checkpoint exists.
        _durability.sync_registered()
        if before_commit is not None:
            before_commit()
        # The abandoned timeline goes before the new checkpoint is committed.
        # Oldest first, so that until the last deletion the old timeline's newest is the
        # newest checkpoint (a crash resumes there, as if the rollback had not started),
        # and after it the checkpoint resumed from is: never a mix of the two.
        for old in abandoned:
            try:
                self._delete(step_name(old))
            except CheckpointError as err:
                raise CheckpointError(
                    f"step {step} was not saved: the abandoned timeline's checkpoint "
                    f"{step_name(old)} could not be deleted ({err}); a later restore would "
                    "return to it. Make it deletable and save again.",
                    self._storage.join(step_name(old)),
                ) from err
            self._index.changed(removed=old)
            self._infos.pop(old, None)
        try:
            commit(
                self._storage,
                step_name(step),
                arrays,
                document,
                force=force,
                hooks=round_,
                fresh=fresh and step not in abandoned,
                marked=marked,
            )
        except BaseException:
            self._sweep_due = True  # leftovers of this attempt go at the next save
            self._index.forget(step)
            raise
        if round_ is not None:
            round_.committed()
        self._index.changed(added=step)
        self._last_saved = step
        self._record_summary(step, document)
        self._infos[step] = CheckpointInfo(
            step, document["created_unix"], _metrics_from_json(document["metrics"])
        )
        # The checkpoint is committed: nothing below may fail the save.
        # The listing this save took (the writer alone changes the directory): no new one.
        self._apply(self.policy, dry_run=False, relist=False)
        if self._sweep_due or self._index.stale or not self._storage.atomic_rename:
            self._sweep()

    def _delete(self, name: str) -> None:
        """Deletes a committed checkpoint so that no reader ever sees half of it.

        Locally it is renamed aside first (atomic), then removed; unlike a commit this
        needs no fsync: after a crash the checkpoint is either whole or swept as stale.
        Elsewhere the marker goes first, so that what is left is not committed.
        """
        if not self._storage.atomic_rename:
            remove_checkpoint(self._storage, name)
            return
        final = self._storage.join(name)
        with wrap_os_errors(f"deleting {name}", final):
            trash = self._storage.join(f".trash-{name}-{secrets.token_hex(4)}")
            self._storage.rename(final, trash)
            self._storage.remove_tree(trash)

    def _sweep(self) -> None:
        """Removes temporary directories left by killed saves; never fails a save."""
        self._sweep_due = False
        storage = self._storage
        # The listing this save took and the writer's own changes since: markers already
        # looked up by retention are not asked for again.
        candidates = self._index.listed()
        names = list(self._index.stale)
        if not storage.atomic_rename:  # written in place: a step without its marker is stale
            names += [step_name(s) for s in candidates if not self._index.committed(s)]
        left = []
        for name in names:
            if self._skip_entry(name):
                left.append(name)
                continue
            try:
                storage.remove_tree(storage.join(name))
            except OSError as err:
                left.append(name)
                self._sweep_due = True
                self._warn_once(
                    f"sweep:{name}",
                    f"the leftover {storage.join(name)} of an earlier save could not be "
                    f"removed ({err}); it is tried again at the next save",
                )
        if names:
            self._index.changed()
        self._index.stale = [n for n in left if n.startswith(_STALE_PREFIXES)]

    def _skip_entry(self, name: str) -> bool:
        """Whether retention or the sweep must leave ``name`` alone (a link: never ours)."""
        if self._storage.is_symlink(self._storage.join(name)):
            self._warn_once(
                f"link:{name}",
                f"{self._storage.join(name)} is a symbolic link the writer did not create; "
                "it is left alone (neither followed nor deleted). Remove it by hand.",
            )
            return True
        return False

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, CheckpointWarning, stacklevel=4)

    def _commit_in_background(self, *args: Any) -> None:
        try:
            self._commit(*args)
        except BaseException as err:  # surfaced by the next save, wait or close
            self._error = err

    def wait(self) -> None:
        """Waits for a background save; raises its error, if it failed.

        Raises:
            CheckpointError: the background save failed (the original error is its cause).
        """
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise CheckpointError(f"a background save failed: {error}", self.directory) from error

    # ----------------------------------------------------------------- retention

    def _scan(self, policy: KeepPolicy, *, relist: bool = True) -> list[CheckpointInfo]:
        """What retention knows of each committed checkpoint, oldest first.

        Metadata is read once per checkpoint, and only for a policy that looks at
        creation times or metrics; a checkpoint whose metadata cannot be read counts by
        its step alone.
        """
        committed = self._index.steps(relist=relist)
        known = set(committed)
        for step in [s for s in self._infos if s not in known]:
            del self._infos[step]
        out = []
        needs_metadata = policy.needs_metadata
        for step in committed:
            info = self._infos.get(step)
            if info is None:
                if needs_metadata:
                    try:
                        state = self._load(step)
                    except CheckpointError:
                        info = CheckpointInfo(step, 0.0, {})
                    else:
                        info = CheckpointInfo(
                            step,
                            _number(state.get("created_unix")),
                            _metrics_from_json(state.get("metrics")),
                        )
                    self._infos[step] = info
                else:
                    info = CheckpointInfo(step, 0.0, {})
            out.append(info)
        return out

    def _apply(self, policy: KeepPolicy, *, dry_run: bool, relist: bool = True) -> list[int]:
        """Deletes what ``policy`` does not keep; returns the steps deleted (or doomed).

        An entry that cannot be deleted is named once in a :class:`CheckpointWarning`
        and tried again at the next save; it never fails the save.
        """
        doomed = unkept_steps(policy, self._index.steps(relist=relist), self._last_saved)
        if doomed is None:
            infos = self._scan(policy, relist=relist)
            keep = retained(policy, infos)
            doomed = [i.step for i in infos if i.step not in keep]
        if dry_run:
            return doomed
        deleted = []
        for step in doomed:
            name = step_name(step)
            if self._skip_entry(name):
                continue
            try:
                self._delete(name)
            except CheckpointError as err:
                self._index.forget(step)
                self._warn_once(
                    f"delete:{name}",
                    f"retention could not delete {name} ({err}); it is tried again at "
                    "the next save",
                )
                continue
            self._index.changed(removed=step)
            self._infos.pop(step, None)
            deleted.append(step)
        return deleted

    def prune(self, policy: KeepPolicy | None = None, *, dry_run: bool = False) -> list[int]:
        """Deletes what ``policy`` (default: the manager's) does not keep; returns those steps.

        The newest checkpoint is always kept.

        Raises:
            CheckpointError: the manager is read-only or closed.
        """
        self._check_writable()
        self.wait()
        if self._participant:
            return []  # the writer rank prunes
        if policy is not None and not isinstance(policy, KeepPolicy):
            raise ConfigError("policy", "must be a KeepPolicy", policy)
        return self._apply(policy or self.policy, dry_run=dry_run)

    def _resume_trigger(self) -> None:
        if self._trigger is None or self.latest_step() is None:
            return
        try:
            saved = self.metadata().get("manager", {})
            self._trigger.resume(saved.get("save_trigger") if isinstance(saved, dict) else None)
        except (CorruptCheckpointError, CheckpointNotFoundError, ConfigError):
            # Another trigger, or a damaged newest checkpoint that restore will report:
            # the trigger then starts afresh.
            return

    # ----------------------------------------------------------------- restoring

    @overload
    def restore(
        self,
        template: Any = None,
        *,
        step: int | None = None,
        partial: Literal[False] = False,
        skip_corrupt: bool = False,
    ) -> Any: ...

    @overload
    def restore(
        self,
        template: Any = None,
        *,
        step: int | None = None,
        partial: Literal[True],
        skip_corrupt: bool = False,
    ) -> tuple[Any, RestoreReport]: ...

    def restore(
        self,
        template: Any = None,
        *,
        step: int | None = None,
        partial: bool = False,
        skip_corrupt: bool = False,
    ) -> Any:
        """Restores a checkpoint: the newest committed one, or ``step``'s.

        Args:
            template: a tree like the saved one; its writable arrays are filled in place
                and its stateful objects (Clock, triggers, ...) restored in place. The fit
                is checked before anything is touched; stateful objects are restored only
                after every checksum passed, but on a checksum failure the template's
                arrays may already hold the unverified bytes.
            step: the step to restore; default the newest.
            partial: restore what fits the template and return ``(tree, report)``.
            skip_corrupt: where the newest checkpoint is corrupt, restore the newest one
                that verifies instead (only without ``step``).

        Returns:
            The restored tree, or ``(tree, report)`` with ``partial=True``.

        Raises:
            CheckpointNotFoundError: no committed checkpoint (or none for ``step``).
            CorruptCheckpointError: the checkpoint fails verification; names the file.
            RestoreMismatchError: the checkpoint does not fit the template.
        """
        self.wait()

        def action(number: int) -> tuple[Any, RestoreReport]:
            return self._restore_one(number, template, partial)

        if step is not None or not skip_corrupt:
            chosen, result = self._read(step, action)
        else:
            chosen, result = self._restore_newest_valid(action)
        if not self._read_only and not self._closed:
            latest = self.latest_step()
            # Resuming from an older step starts a new timeline: the first save abandons
            # the newer checkpoints, so that no later restore returns to them.
            self._resumed_from = chosen if latest is not None and chosen < latest else None
        return result if partial else result[0]

    def _restore_newest_valid(
        self, action: Callable[[int], tuple[Any, RestoreReport]]
    ) -> tuple[int, tuple[Any, RestoreReport]]:
        corrupt: dict[int, CorruptCheckpointError] = {}
        for _ in range(_READ_ATTEMPTS):
            candidates = [s for s in self.steps() if s not in corrupt]
            if not candidates:
                if corrupt:
                    raise corrupt[max(corrupt)]
                raise CheckpointNotFoundError(
                    f"no committed checkpoint in {self.directory}", self.directory
                )
            for candidate in reversed(candidates):
                try:
                    return candidate, self._checked(candidate, action)
                except _VanishedError:
                    break  # pruned under us: list again, newest first
                except CorruptCheckpointError as err:
                    corrupt[candidate] = err
        raise CheckpointError(
            f"every checkpoint of {self.directory} chosen in {_READ_ATTEMPTS} tries was "
            "deleted while being read; is a writer pruning faster than it saves?",
            self.directory,
        )

    def _restore_one(self, step: int, template: Any, partial: bool) -> tuple[Any, RestoreReport]:
        name = step_name(step)
        # The disk reads the arrays ahead from the start: while state.json is read and
        # parsed, the tree walked and the template checked (issue 14: a cold restore of
        # 10,000 arrays 4% faster by median than when it started after state.json).
        with read_ahead(self._storage, name) as ahead:
            state = self._load(step)
            structure = state["tree"]
            nodes = array_nodes(structure)  # one walk, for the fit check and the read
            # Check the fit first, so that a misfit touches nothing in the template; the
            # same walk finds the template's arrays to fill in place and builds the tree.
            fit = (
                None
                if template is None
                else fit_template(structure, template, partial=partial, nodes=nodes)
            )
            arrays: dict[str, Any] = read_arrays(
                self._storage,
                name,
                state,
                into=None if fit is None else fit.targets,
                nodes=nodes,
                ahead=ahead,
            )
        if "sharded" in state:
            from globalstep.checkpoint.distributed import load_sharded

            targets = template_sharded(structure, template)
            arrays.update(
                load_sharded(
                    self._storage, name, state, targets, rebuild=self._coordinator is not None
                )
            )
        restored = None if fit is None else fit.restored(arrays)
        if restored is not None:
            return restored  # every array read into the template's: the tree is built
        return unflatten(structure, arrays, template, partial=partial)

    # ----------------------------------------------------------------- lifetime

    def _check_writable(self) -> None:
        if self._read_only:
            raise CheckpointError(
                f"this manager of {self.directory} is read-only; open it without "
                "read_only=True to save or prune",
                self.directory,
            )
        if self._closed:
            raise CheckpointError(f"this manager of {self.directory} is closed", self.directory)

    def close(self) -> None:
        """Waits for a background save, then releases the lock; closing twice is harmless.

        Raises:
            CheckpointError: the background save failed.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.wait()
        finally:
            if self._saver is not None:
                self._saver.shutdown()
            if self._lock is not None:
                self._lock.release()

    def __repr__(self) -> str:
        return f"CheckpointManager({self.directory!r}, policy={self.policy!r})"


class _InFlight:
    """An async save handed to the manager's save thread."""

    def __init__(self, future: Any) -> None:
        self._future = future

    def join(self) -> None:
        """Waits until the save has finished (its errors are kept by the manager)."""
        self._future.result()

    def is_alive(self) -> bool:
        """True until the save has finished."""
        return not self._future.done()


class CheckpointFollower(Iterator[CheckpointReader]):
    """The iterator of :meth:`CheckpointManager.follow`: each new checkpoint, opened, once.

    Attributes:
        missed: the steps it knew of (listed, or named as a checkpoint's predecessor) that
            were pruned before it could open them, in the order found.
        last_step: the step of the checkpoint yielded last, or None.
    """

    def __init__(
        self,
        manager: CheckpointManager,
        after: int | None,
        timeout_seconds: float | None,
        poll_seconds: float,
    ) -> None:
        self._manager = manager
        self._timeout = timeout_seconds
        self._poll = poll_seconds
        self._start_at_newest = after is None
        self.last_step: int | None = after
        self.missed: list[int] = []

    def _miss(self, step: int, why: str) -> None:
        if step in self.missed:
            return
        self.missed.append(step)
        warnings.warn(
            f"checkpoint step {step} of {self._manager.directory} was {why} before it could "
            "be read; it is skipped",
            CheckpointWarning,
            stacklevel=3,
        )

    def _next_pending(self) -> CheckpointReader | None:
        manager = self._manager
        if self._start_at_newest:
            latest = manager.latest_step()
            if latest is None:
                return None
            self._start_at_newest = False
            self.last_step = latest - 1
        floor = -1 if self.last_step is None else self.last_step
        for step in [s for s in manager.steps() if s > floor]:

            def action(number: int) -> CheckpointReader:
                state = manager._load(number)
                return CheckpointReader(manager._storage, step_name(number), number, state)

            try:
                reader = manager._checked(step, action)
            except _VanishedError:
                self._miss(step, "pruned")
                self.last_step = step
                continue
            previous = reader.state.get("previous_step")
            if (
                isinstance(previous, int)
                and not isinstance(previous, bool)
                and previous > floor
                and previous < step
                and self.last_step is not None
                and previous not in self.missed
            ):
                self._miss(previous, "committed and pruned")
            self.last_step = step
            return reader
        return None

    def __next__(self) -> CheckpointReader:
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            reader = self._next_pending()
            if reader is not None:
                return reader
            if deadline is not None and time.monotonic() >= deadline:
                raise StopIteration
            pause = self._poll
            if deadline is not None:
                pause = min(pause, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
