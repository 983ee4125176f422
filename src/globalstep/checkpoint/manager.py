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

import math
import numbers
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import numpy as np

from globalstep._closing import Closing
from globalstep.checkpoint.format import (
    commit,
    committed_names,
    load_state,
    read_arrays,
    remove_checkpoint,
    remove_stale,
    verify_checkpoint,
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
)
from globalstep.checkpoint.storage import DirectoryLock, open_storage
from globalstep.checkpoint.tree import (
    RestoreReport,
    flatten,
    placeholders,
    template_arrays,
    unflatten,
)
from globalstep.clock import MAX_STEP, Clock, Progress
from globalstep.errors import (
    CheckpointError,
    CheckpointExistsError,
    CheckpointNotFoundError,
    ConfigError,
    CorruptCheckpointError,
)
from globalstep.triggers import Trigger, every
from globalstep.units import DurationLike

__all__ = ["CheckpointManager", "CheckpointSummary", "step_name"]


def step_name(step: int) -> str:
    """Returns the directory name of ``step``'s checkpoint.

    Example:
        >>> step_name(1200)
        'step-000000001200'
    """
    return f"step-{step:012d}"


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
        read_only: inspect and restore without taking the writer's lock.

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
        if save_every is None or isinstance(save_every, Trigger):
            self._trigger = save_every
        else:
            self._trigger = every(save_every)
        self._storage = open_storage(directory)
        self.directory = self._storage.url if hasattr(self._storage, "url") else self._storage.root
        self._async = async_save
        self._read_only = read_only
        self._closed = False
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._infos: dict[int, CheckpointInfo] | None = None
        self._lock: DirectoryLock | None = None
        if not read_only:
            self._lock = DirectoryLock(self._storage)
            self._lock.acquire()
            try:
                self._resume_trigger()
            except BaseException:
                self._lock.release()  # no manager is returned, so nobody else could
                raise

    # ----------------------------------------------------------------- inspection

    def steps(self) -> list[int]:
        """Returns the steps of every committed checkpoint, oldest first."""
        return sorted(int(name[5:]) for name in committed_names(self._storage))

    def latest_step(self) -> int | None:
        """Returns the newest committed step, or None when there is none."""
        steps = self.steps()
        return steps[-1] if steps else None

    def metadata(self, step: int | None = None) -> dict[str, Any]:
        """Returns the checked state.json of ``step`` (default: the newest), reading no array.

        Raises:
            CheckpointNotFoundError: no such committed checkpoint.
            CorruptCheckpointError: the marker or state.json is damaged.
        """
        return load_state(self._storage, step_name(self._resolve(step)))

    def stored_policy(self) -> KeepPolicy | None:
        """Returns the retention policy recorded by the newest checkpoint's writer, if any."""
        steps = self.steps()
        if not steps:
            return None
        try:
            saved = self.metadata(steps[-1]).get("manager")
            return policy_from_config(saved["keep"]) if isinstance(saved, dict) else None
        except (CorruptCheckpointError, ConfigError, KeyError):
            return None

    def summaries(self, policy: KeepPolicy | None = None) -> list[CheckpointSummary]:
        """Describes every committed checkpoint, oldest first, reading no array.

        Args:
            policy: the policy whose reasons ``kept_because`` gives; default the manager's.
        """
        reasons = retained(policy or self.policy, list(self._scan().values()))
        out = []
        for step in self.steps():
            try:
                state = self.metadata(step)
            except CorruptCheckpointError as err:
                out.append(CheckpointSummary(step, 0.0, 0, error=str(err)))
                continue
            files = state.get("files", {})
            clocks = []
            for c in state.get("clocks", []):
                try:
                    clocks.append(Progress.from_dict(c))
                except ConfigError:  # another version's fields: the listing goes on
                    continue
            out.append(
                CheckpointSummary(
                    step=step,
                    created_unix=_number(state.get("created_unix")),
                    size_bytes=int(sum(_number(f.get("size")) for f in files.values())),
                    metrics=_metrics_from_json(state.get("metrics")),
                    clocks=clocks,
                    kept_because=reasons.get(step, "not kept"),
                )
            )
        return out

    def open(self, step: int | None = None) -> CheckpointReader:
        """Opens a checkpoint lazily: arrays are memory-mapped and read when indexed."""
        step = self._resolve(step)
        name = step_name(step)
        return CheckpointReader(self._storage, name, step, load_state(self._storage, name))

    def verify(self, step: int | None = None) -> None:
        """Checks every checksum of ``step`` (default: the newest).

        Raises:
            CorruptCheckpointError: a file is damaged; the message names it.
        """
        verify_checkpoint(self._storage, step_name(self._resolve(step)))

    def _resolve(self, step: int | None) -> int:
        steps = self.steps()
        if step is None:
            if not steps:
                raise CheckpointNotFoundError(
                    f"no committed checkpoint in {self.directory}", self.directory
                )
            return steps[-1]
        step = _step_of(step)
        if step not in steps:
            raise CheckpointNotFoundError(
                f"no committed checkpoint for step {step} in {self.directory}; "
                f"committed steps: {steps}",
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
    ) -> None:
        """Saves ``state`` as the checkpoint of ``step``, then applies retention.

        Args:
            step: the step, or a Clock whose step is used.
            state: the state tree (see :mod:`globalstep.checkpoint.tree`).
            metrics: numbers for ``keep_best`` and ``globalstep ckpt ls``.
            force: replace an existing checkpoint of this step (atomically).

        Raises:
            CheckpointExistsError: the step is saved already and ``force`` is False.
            CheckpointError: the manager is read-only or closed, a previous background
                save failed, or writing failed (earlier checkpoints stay intact).
            ConfigError: the step, state or metrics are invalid.
        """
        self._check_writable()
        self.wait()
        number = _step_of(step)
        name = step_name(number)
        if not force and number in self.steps():
            raise CheckpointExistsError(
                f"checkpoint {name} exists in {self.directory}; pass force=True to replace it",
                self._storage.join(name),
            )
        flat = flatten(state, copy=self._async)
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
        }
        if not self._async:
            self._commit(number, flat.arrays, document, force)
            return
        self._thread = threading.Thread(
            target=self._commit_in_background,
            args=(number, flat.arrays, document, force),
            name=f"globalstep-save-{number}",
        )
        self._thread.start()

    def maybe_save(
        self, clock: Clock, state: Any, *, metrics: Mapping[str, float] | None = None
    ) -> bool:
        """Saves when the ``save_every`` trigger fires for ``clock``; returns whether it did.

        Raises:
            ConfigError: the manager has no ``save_every``.
        """
        if self._trigger is None:
            raise ConfigError("save_every", "must be set to use maybe_save", None)
        if not isinstance(clock, Clock):
            raise ConfigError("clock", "must be a globalstep Clock", clock)
        if not self._trigger.should_fire(clock):
            return False
        self.save(clock, state, metrics=metrics)
        return True

    def _commit(self, step: int, arrays: Any, document: dict[str, Any], force: bool) -> None:
        commit(self._storage, step_name(step), arrays, document, force=force)
        infos = self._scan()
        infos[step] = CheckpointInfo(
            step, document["created_unix"], _metrics_from_json(document["metrics"])
        )
        self._apply(self.policy, dry_run=False)
        remove_stale(self._storage)

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

    def _scan(self) -> dict[int, CheckpointInfo]:
        if self._infos is None:
            infos = {}
            for step in self.steps():
                try:
                    state = load_state(self._storage, step_name(step))
                except CorruptCheckpointError:
                    # Unreadable metadata: retention still counts it, by step alone.
                    infos[step] = CheckpointInfo(step, 0.0, {})
                    continue
                infos[step] = CheckpointInfo(
                    step,
                    _number(state.get("created_unix")),
                    _metrics_from_json(state.get("metrics")),
                )
            self._infos = infos
        return self._infos

    def _apply(self, policy: KeepPolicy, *, dry_run: bool) -> list[int]:
        infos = self._scan()
        committed = set(self.steps())
        for step in set(infos) - committed:
            del infos[step]
        keep = retained(policy, [i for s, i in infos.items() if s in committed])
        doomed = sorted(set(infos) - set(keep))
        if not dry_run:
            for step in doomed:
                remove_checkpoint(self._storage, step_name(step))
                del infos[step]
        return doomed

    def prune(self, policy: KeepPolicy | None = None, *, dry_run: bool = False) -> list[int]:
        """Deletes what ``policy`` (default: the manager's) does not keep; returns those steps.

        The newest checkpoint is always kept.

        Raises:
            CheckpointError: the manager is read-only or closed.
        """
        self._check_writable()
        self.wait()
        if policy is not None and not isinstance(policy, KeepPolicy):
            raise ConfigError("policy", "must be a KeepPolicy", policy)
        return self._apply(policy or self.policy, dry_run=dry_run)

    def _resume_trigger(self) -> None:
        latest = self.latest_step()
        if self._trigger is None or latest is None:
            return
        try:
            saved = load_state(self._storage, step_name(latest)).get("manager", {})
            state = saved.get("save_trigger") if isinstance(saved, dict) else None
            if state is not None:
                self._trigger.load_state_dict(state)
        except (CorruptCheckpointError, ConfigError):
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
        if step is not None or not skip_corrupt:
            result = self._restore_one(self._resolve(step), template, partial)
        else:
            result = self._restore_newest_valid(template, partial)
        return result if partial else result[0]

    def _restore_newest_valid(self, template: Any, partial: bool) -> tuple[Any, RestoreReport]:
        steps = self.steps()
        if not steps:
            self._resolve(None)
        first: CorruptCheckpointError | None = None
        for candidate in reversed(steps):
            try:
                return self._restore_one(candidate, template, partial)
            except CorruptCheckpointError as err:
                first = first or err
        assert first is not None
        raise first

    def _restore_one(self, step: int, template: Any, partial: bool) -> tuple[Any, RestoreReport]:
        name = step_name(step)
        state = load_state(self._storage, name)
        structure = state["tree"]
        if template is not None:
            # Check the fit first, so that a misfit touches nothing in the template.
            unflatten(structure, placeholders(structure), template, partial=partial, apply=False)
        arrays = read_arrays(self._storage, name, state, into=template_arrays(structure, template))
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
            if self._lock is not None:
                self._lock.release()

    def __repr__(self) -> str:
        return f"CheckpointManager({self.directory!r}, policy={self.policy!r})"
