"""The fast tier: a second checkpoint directory on fast local storage, saved often.

A :class:`FastTier` (``/dev/shm``, a local NVMe) beside the manager's own, durable
directory (a local disk, ``s3://``) shortens the work a process crash redoes: it saves
every ``save_every`` updates with the same commit protocol, format and checks (it is a
second :class:`~globalstep.checkpoint.CheckpointManager`), while the manager's own
``save_every`` keeps saving to the durable directory. Its rules:

- **One run.** The durable directory records a run id (``run.json``, written at the first
  open with a fast tier) and the fast tier's path; the fast tier records the same id and
  the durable directory. A fast tier holding another run's id, or checkpoints and no id,
  is refused (``ConfigError`` naming ``fast_tier``, both ids and both directories).
- **Restore** takes the newest committed step of either tier (the fast tier's copy of a
  step both hold). A fast checkpoint that fails the checks is set aside with a
  :class:`~globalstep.checkpoint.CheckpointWarning` naming it, and the newest good one of
  either tier is restored instead. The record of the last restore (:class:`Restored`)
  says which tier, and why the fast tier was not used: ``"missing"`` (it holds no
  checkpoint: a new machine, a deleted ``/dev/shm``) or ``"corrupt: <path>"``.
- **Retention apart.** The fast tier keeps its newest ``max_to_keep`` and never counts for
  the durable directory's retention, whose policy is unchanged.
- **Never more than the durable tier allows.** A restore of an older step than the newest
  of either tier (a rollback, a rewind) starts a new timeline in both: the first save
  after it, of either tier, deletes both tiers' newer checkpoints first, so that no
  restore returns to the abandoned timeline through the fast tier.
- A machine loss leaves the durable directory intact (the fast tier is lost with the
  machine); a process crash resumes from the fast tier. ``distributed=True`` managers
  refuse a fast tier.
"""

from __future__ import annotations

import json
import os
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from globalstep._clock import Clock
from globalstep._errors import (
    CheckpointError,
    CheckpointNotFoundError,
    CheckpointWarning,
    ConfigError,
    CorruptCheckpointError,
)
from globalstep._triggers import Trigger
from globalstep._units import Duration, DurationLike
from globalstep.checkpoint._directory.reading import READ_ATTEMPTS
from globalstep.checkpoint._save_trigger import SaveTrigger
from globalstep.storage import Storage, is_remote, open_storage

if TYPE_CHECKING:
    from globalstep.checkpoint._manager import CheckpointManager

__all__ = [
    "RUN_FILE",
    "FastTier",
    "Restored",
    "Tiers",
    "check_fast_tier",
    "fast_manager",
    "open_fast_tier",
    "recorded_fast_tier",
]

RUN_FILE = "run.json"
"""The run record of both tiers: ``{"run_id": ..., "fast_tier": path}`` in the durable
directory, ``{"run_id": ..., "durable": location}`` in the fast tier."""

_T = TypeVar("_T")


@dataclass(frozen=True)
class FastTier:
    """A fast checkpoint directory beside the durable one, saved every ``save_every``.

    Args:
        path: a local directory apart from the durable one (``/dev/shm/<run>``, a local
            NVMe); created if missing.
        save_every: how often it saves: a duration (``5``, ``"30s"``) or a Trigger.
        max_to_keep: how many of its newest checkpoints it keeps, >= 1.

    Raises:
        ConfigError: a field breaks its rule.

    Example:
        >>> import numpy as np, tempfile
        >>> from globalstep import Clock
        >>> from globalstep.checkpoint import CheckpointManager
        >>> fast = FastTier(tempfile.mkdtemp(), save_every=5)
        >>> clock = Clock()
        >>> with CheckpointManager(tempfile.mkdtemp(), save_every=50, fast_tier=fast) as m:
        ...     for _ in range(63):
        ...         clock.tick()
        ...         _ = m.maybe_save(clock, {"clock": clock, "w": np.ones(2)})
        ...     m.steps(), m.restore()["clock"]["step"], m.last_restore.tier
        ([50, 55, 60], 60, 'fast')
    """

    path: str | os.PathLike[str]
    save_every: DurationLike | Trigger
    max_to_keep: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.path, str | os.PathLike) or is_remote(os.fspath(self.path)):
            raise ConfigError(
                "path",
                "must be a local directory (a fast tier lives on /dev/shm or a local disk)",
                self.path,
            )
        if self.save_every is None:
            raise ConfigError("save_every", "must be a duration or a Trigger", None)
        if not isinstance(self.save_every, Trigger):
            duration = Duration.parse(self.save_every, "save_every")  # named as this field
            if duration.value <= 0:
                raise ConfigError("save_every", "must be > 0", self.save_every)
        SaveTrigger(self.save_every)  # its checks
        keep = self.max_to_keep
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ConfigError("max_to_keep", "must be an int >= 1", keep)


@dataclass(frozen=True)
class Restored:
    """The last restore of a manager: what the ledger records of it.

    Attributes:
        step: the step restored.
        tier: ``"fast"`` or ``"durable"``: the directory it was read from.
        seconds: how long the restore took.
        fell_back_from: why the fast tier was not used where it was not: ``"missing"``
            (it held no checkpoint) or ``"corrupt: <path>"`` (its newer checkpoint failed
            the checks); None where it was used, or held nothing newer.
    """

    step: int
    tier: str
    seconds: float
    fell_back_from: str | None = None


def _read_record(storage: Storage) -> dict[str, Any] | None:
    path = storage.join(RUN_FILE)
    if not storage.exists(path):
        return None
    try:
        record = json.loads(storage.read_bytes(path))
    except (ValueError, OSError) as err:
        raise CheckpointError(f"{path}: not a run record ({err})", path) from err
    if not isinstance(record, dict) or not isinstance(record.get("run_id"), str):
        raise CheckpointError(f"{path}: not a run record (no run_id)", path)
    return record


def _write_record(storage: Storage, record: dict[str, Any]) -> None:
    storage.replace_file(storage.join(RUN_FILE), json.dumps(record, sort_keys=True).encode())


def recorded_fast_tier(storage: Storage) -> str | None:
    """Returns the fast tier's path that the durable directory of ``storage`` records."""
    record = _read_record(storage)
    path = None if record is None else record.get("fast_tier")
    return path if isinstance(path, str) else None


def check_apart(path: str, durable: str) -> None:
    """Refuses a fast tier at, inside or around the durable directory."""
    if is_remote(durable):
        return
    fast = os.path.realpath(path)
    here = os.path.realpath(durable.removeprefix("file://").removeprefix("local://"))
    if fast == here or fast.startswith(here + os.sep) or here.startswith(fast + os.sep):
        raise ConfigError(
            "fast_tier",
            f"must be a directory apart from the durable one ({durable}): not it, not "
            "inside it, not around it",
            path,
        )


def claim(fast: Storage, durable: Storage, *, writable: bool, has_steps: bool) -> str | None:
    """Returns the run id that both tiers record, writing the records where missing
    (``writable``); refuses a fast tier of another run.

    Raises:
        ConfigError: the fast tier holds another run's id, or checkpoints and no id.
    """
    ours = _read_record(durable)
    if ours is None and writable:
        ours = {"run_id": uuid.uuid4().hex, "fast_tier": fast.location}
        _write_record(durable, ours)
    elif ours is not None and writable and ours.get("fast_tier") != fast.location:
        ours = {**ours, "fast_tier": fast.location}
        _write_record(durable, ours)
    theirs = _read_record(fast)
    run_id = None if ours is None else str(ours["run_id"])
    if theirs is None and not has_steps:
        if writable and run_id is not None:
            _write_record(fast, {"run_id": run_id, "durable": durable.location})
        return run_id
    if theirs is None or theirs["run_id"] != run_id:
        their_id = "none" if theirs is None else theirs["run_id"]
        raise ConfigError(
            "fast_tier",
            f"must hold this run's checkpoints or none: {fast.location} holds another "
            f"run's (its run id {their_id}, of {(theirs or {}).get('durable', 'unknown')}; "
            f"this run's id is {run_id}, of {durable.location})",
            fast.location,
            hint="Give another path, or delete that directory if its checkpoints are not needed.",
        )
    return run_id


class Tiers:
    """The fast tier beside a durable directory: its manager, trigger and the rules above.

    Args:
        fast: the fast tier's own manager (opened by the durable one).
        tier: its options.
        durable: the durable directory's storage.
        writable: whether the durable manager writes (not read-only).
    """

    def __init__(
        self, fast: CheckpointManager, tier: FastTier, durable: Storage, *, writable: bool
    ) -> None:
        self.fast = fast
        self.trigger = SaveTrigger(tier.save_every)
        self.run_id = claim(
            open_storage(fast.directory), durable, writable=writable, has_steps=bool(fast.steps())
        )
        self.set_aside: dict[int, str] = {}
        """Fast checkpoints that failed the checks, by step: the path named."""
        self.rewound_to: int | None = None
        """The step a restore went back to, until the first save after it."""

    def fast_steps(self) -> list[int]:
        """The fast tier's committed steps, less those set aside."""
        return [s for s in self.fast.steps() if s not in self.set_aside]

    def steps(self, durable: list[int]) -> list[int]:
        """Every step restore can take, of either tier, oldest first."""
        return sorted({*durable, *self.fast_steps()})

    def latest(self, durable: int | None) -> int | None:
        """The newest step restore can take."""
        fast = self.fast_steps()
        found = [s for s in (durable, fast[-1] if fast else None) if s is not None]
        return max(found) if found else None

    def read(
        self,
        step: int | None,
        fast: Callable[[int], _T],
        durable: Callable[[int | None], tuple[int, _T]],
        durable_steps: Callable[[], list[int]],
        *,
        skip_corrupt: bool = False,
    ) -> tuple[int, str, _T]:
        """Runs ``fast(step)`` on the fast tier's copy where it holds ``step`` (default:
        the newest of either tier) and it passes the checks, else ``durable(step)``.

        A fast checkpoint that fails is set aside with a warning; without ``step`` the
        newest good one of either tier is read instead (and, with ``skip_corrupt``, past a
        durable one that fails too).
        """
        skipped: dict[int, CorruptCheckpointError] = {}
        vanished = 0
        while vanished < READ_ATTEMPTS:
            chosen = step
            if step is None:
                candidates = [s for s in self.steps(durable_steps()) if s not in skipped]
                if not candidates and skipped:
                    raise skipped[max(skipped)]
                chosen = candidates[-1] if candidates else None
            try:
                if chosen is None or chosen not in self.fast_steps():
                    number, result = durable(chosen)
                    return number, "durable", result
                return chosen, "fast", fast(chosen)
            except CheckpointNotFoundError:
                if step is not None and chosen in self.fast_steps():
                    number, result = durable(step)  # pruned under the reader: the durable copy
                    return number, "durable", result
                if step is not None or chosen is None:
                    raise
                vanished += 1
            except CorruptCheckpointError as err:
                if chosen not in self.fast_steps():  # the durable directory's
                    if step is not None or chosen is None or not skip_corrupt:
                        raise
                    skipped[chosen] = err
                    continue
                self._set_aside(chosen, err)
                if step is not None:  # the durable copy of that step, if there is one
                    try:
                        number, result = durable(step)
                    except CheckpointNotFoundError:
                        raise err from None
                    return number, "durable", result
        raise CheckpointError(
            f"the fast tier {self.fast.directory} changed under every read", self.fast.directory
        )

    def _set_aside(self, step: int, err: CorruptCheckpointError) -> None:
        self.set_aside[step] = str(err.path or step)
        warnings.warn(
            f"the fast tier's checkpoint of step {step} ({err.path}) fails the checks "
            f"({err}); it is set aside and the newest good checkpoint of either tier is "
            "used instead",
            CheckpointWarning,
            stacklevel=5,
        )

    def restore(
        self,
        template: Any,
        step: int | None,
        partial: bool,
        durable: Callable[[int | None], tuple[int, Any]],
        durable_steps: Callable[[], list[int]],
        skip_corrupt: bool,
    ) -> tuple[int, str, Any, str | None, int]:
        """Restores as :meth:`CheckpointManager.restore` (``durable``: its restore of the
        durable directory); returns the step, the tier, the result as ``(tree, report)``,
        why the fast tier was not used, and the newest step of either tier."""

        def fast(number: int) -> Any:
            if partial:
                return self.fast.restore(template, step=number, partial=True)
            return self.fast.restore(template, step=number), None

        chosen, tier, result = self.read(
            step, fast, durable, durable_steps, skip_corrupt=skip_corrupt
        )
        newest = max([*durable_steps(), self.restored(chosen)])
        return chosen, tier, result, self.why_not_fast(chosen, tier), newest

    def why_not_fast(self, step: int, tier: str) -> str | None:
        """Why a restore of ``step`` from ``tier`` did not use the fast tier, or None."""
        newer = [s for s in self.set_aside if s > step]
        if newer:
            return f"corrupt: {self.set_aside[max(newer)]}"
        if tier == "durable" and not self.fast.steps():
            return "missing"
        return None

    def restored(self, chosen: int) -> int:
        """Notes a restore of ``chosen`` (a fast trigger of whole steps then fires at the
        boundaries ahead of it); returns the fast tier's newest step, set-aside ones
        included (-1: none)."""
        newest = max([*self.fast.steps(), -1])
        self.rewound_to = chosen if chosen < newest else None
        if self.trigger.grid is not None:  # whole steps: exact from the step alone
            clock = Clock()
            clock.tick(chosen)
            self.trigger.restart(clock)
        return newest

    def before_save(self, step: int, fast: bool) -> None:
        """Before a save of ``step`` (to the fast tier where ``fast``): after a rewind, the
        fast tier's newer checkpoints go first; a set-aside one of ``step`` is replaced."""
        if self.rewound_to is not None:
            for dropped in self.fast.drop_newer(self.rewound_to):
                self.set_aside.pop(dropped, None)
            self.rewound_to = None
        if fast:
            self.set_aside.pop(step, None)


def fast_manager(tier: Any, tiers: Tiers | None) -> CheckpointManager | None:
    """The manager a save of ``tier`` goes to: the fast tier's, or None for the durable one.

    Raises:
        ConfigError: ``tier`` is neither, or ``"fast"`` without a fast tier.
    """
    if tier == "fast" and tiers is not None:
        return tiers.fast
    if tier != "durable":
        raise ConfigError("tier", "must be 'durable' or, with a fast_tier, 'fast'", tier)
    return None


def check_fast_tier(tier: Any, distributed: Any) -> None:
    """Refuses a ``fast_tier`` that is not a FastTier (or None), or one with ``distributed``.

    Raises:
        ConfigError: it is refused; the message says why.
    """
    if tier is None:
        return
    if not isinstance(tier, FastTier):
        raise ConfigError("fast_tier", "must be a globalstep.FastTier or None", tier)
    if distributed:
        raise ConfigError(
            "fast_tier",
            "is not supported with distributed=True (each rank would need its own fast "
            "tier and one coordinated commit); save to the durable directory alone",
            tier,
        )


def open_fast_tier(
    tier: Any,
    durable: Storage,
    distributed: Any,
    *,
    writable: bool,
    make: Callable[[FastTier], CheckpointManager],
) -> Tiers | None:
    """Checks a manager's ``fast_tier`` and opens it (``make`` opens its manager).

    Raises:
        ConfigError: not a FastTier, with ``distributed``, or not apart from the durable
            directory; or the fast tier is another run's.
    """
    if tier is None:
        return None
    check_fast_tier(tier, distributed)
    check_apart(os.fspath(tier.path), durable.location)
    fast = make(tier)
    try:
        return Tiers(fast, tier, durable, writable=writable)
    except BaseException:
        fast.close()
        raise
