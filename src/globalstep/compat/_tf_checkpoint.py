"""TensorFlow's ``tf.train.Checkpoint`` and ``tf.train.CheckpointManager``, on our storage.

The names, arguments and observable behaviour are TensorFlow's: checkpoints are named
``<checkpoint_name>-<N>``, numbered by the save counter unless ``checkpoint_number`` is
given, ``checkpoints`` lists them in save order, the manager's state survives a restart
through the ``checkpoint`` index file of the directory, and a restore returns a status with
``assert_consumed()``, ``assert_existing_objects_matched()`` and ``expect_partial()``.

What differs is underneath: each checkpoint is a directory committed atomically by
:mod:`globalstep.checkpoint.format` (safetensors arrays, JSON state, checksums, no pickle),
the index is replaced atomically, and a damaged index or checkpoint is an error, never
"no checkpoint" (TensorFlow then silently starts again from step 0). The objects are
globalstep state trees: NumPy arrays (restored in place), scalars, objects with
``state_dict()`` / ``load_state_dict()`` such as a :class:`~globalstep._clock.Clock`, and
TensorFlow's and Keras' own objects as they are (a ``tf.Variable`` step, a ``tf.Module``,
Keras models, optimizers and metrics: see :mod:`globalstep.integrations.tensorflow` and
:mod:`globalstep.integrations.keras`), restored in place with ``assign``. An optimizer
restored before its first update takes its slots' values when it creates them (deferred
restoration): ``assert_existing_objects_matched()`` passes before then, and
``assert_consumed()`` only once every value has found its variable, as in TensorFlow.

Example:
    >>> import numpy as np, tempfile
    >>> weights = np.zeros(3)
    >>> ckpt = Checkpoint(weights=weights)
    >>> manager = CheckpointManager(ckpt, tempfile.mkdtemp(), max_to_keep=3)
    >>> for _ in range(7):
    ...     weights += 1
    ...     path = manager.save()
    >>> [p.rsplit("/", 1)[-1] for p in manager.checkpoints]
    ['ckpt-5', 'ckpt-6', 'ckpt-7']
    >>> weights[:] = 0
    >>> ckpt.restore(manager.latest_checkpoint).assert_consumed() is not None
    True
    >>> weights.tolist()
    [7.0, 7.0, 7.0]
"""

from __future__ import annotations

import collections
import json
import logging
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from globalstep import _durability
from globalstep._clock import Clock
from globalstep._errors import (
    CheckpointError,
    CheckpointNotFoundError,
    ConfigError,
    CorruptCheckpointError,
    RestoreMismatchError,
)
from globalstep.checkpoint import (
    COMMIT_FILE,
    CheckpointWarning,
    Document,
    RestoreReport,
    array_nodes,
    check_key,
    decode_dtype,
    load_state,
    read_arrays,
    remove_checkpoint,
    template_arrays,
    unflatten,
)
from globalstep.checkpoint import (
    commit_checkpoint as commit,
)
from globalstep.checkpoint import (
    flatten_tree as flatten,
)
from globalstep.storage import Storage, open_storage

__all__ = ["Checkpoint", "CheckpointLoadStatus", "CheckpointManager"]

_INDEX = "checkpoint"
_COUNTER = "save_counter"


def _split(path: str) -> tuple[str, str]:
    directory, _, name = str(path).rstrip("/").rpartition("/")
    return directory or ".", name


def _evaluate(value: Any) -> int:
    if isinstance(value, Clock):
        return value.step
    if hasattr(value, "numpy"):
        return int(value.numpy())
    return int(value)


class _SaveCounter:
    """The number of ``save()`` calls, TF's ``save_counter`` (read with ``numpy()``)."""

    def __init__(self) -> None:
        self.value = 0

    def numpy(self) -> int:
        return self.value

    def assign_add(self, n: int) -> None:
        self.value += n

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __eq__(self, other: object) -> bool:
        return bool(self.value == other)

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"save_counter={self.value}"


def _log_unused(report: RestoreReport, save_path: str | None) -> None:
    """Logs the checkpoint's values that no object took (TF's warning at deletion)."""
    unused = [*report.unexpected, *report.pending()]
    if unused:
        logging.getLogger("globalstep").warning(
            "Values in the checkpoint %s were never restored (no object took them): %s. "
            "Call status.expect_partial() where a partial restore is meant, to silence "
            "this warning.",
            save_path,
            ", ".join(unused),
        )


class CheckpointLoadStatus:
    """What a restore matched, with TensorFlow's assertions.

    Attributes:
        report: the :class:`~globalstep.checkpoint._tree.build.RestoreReport`, or None when no
            checkpoint was given (initialisation only).
    """

    def __init__(
        self, report: RestoreReport | None, save_path: str | None, names: tuple[str, ...] = ()
    ) -> None:
        self.report = report
        self._save_path = save_path
        self._names = names
        # As TensorFlow does: dropping a status whose checkpoint held values nothing took
        # logs them, unless expect_partial() said a partial restore is meant.
        self._unused = (
            None if report is None else weakref.finalize(self, _log_unused, report, save_path)
        )
        if self._unused is not None:
            self._unused.atexit = False  # not at interpreter exit, with frameworks torn down

    def _nothing(self) -> None:
        if self.report is None:
            raise AssertionError(
                f"No checkpoint specified (save_path={self._save_path}); nothing is being restored."
            )

    def assert_consumed(self) -> CheckpointLoadStatus:
        """Raises AssertionError unless every saved value and every object matched.

        A value kept for a variable not created yet (an optimizer's slot before its first
        update) is not consumed until the variable exists and took it, as in TensorFlow:
        this fails until then, and passes after the first update.
        """
        self._nothing()
        assert self.report is not None
        pending = self.report.pending()
        if not self.report.ok or pending:
            report = str(self.report) if not self.report.ok else ""
            waiting = (
                f"values kept for variables not created yet: {', '.join(pending)} (they are "
                "assigned when their object builds: an optimizer at its first update, a "
                "model at its first call)"
                if pending
                else ""
            )
            detail = "; ".join(part for part in (report, waiting) if part)
            raise AssertionError(f"Unresolved objects or values in the checkpoint: {detail}")
        return self

    def assert_existing_objects_matched(self) -> CheckpointLoadStatus:
        """Raises AssertionError when an object of the Checkpoint found no saved value.

        Values kept for variables that do not exist yet (deferred restoration) do not make
        it fail: only objects that exist are checked.
        """
        self._nothing()
        assert self.report is not None
        if self.report.missing or self.report.mismatched:
            raise AssertionError(
                "Some objects had no matching value in the checkpoint: "
                f"missing {self.report.missing}, mismatched {self.report.mismatched}"
            )
        return self

    def assert_nontrivial_match(self) -> CheckpointLoadStatus:
        """Raises AssertionError when nothing but the save counter matched."""
        self._nothing()
        assert self.report is not None
        unmatched = set(self.report.missing) | {m.split(":")[0] for m in self.report.mismatched}
        if all(f"objects/{name}" in unmatched for name in self._names):
            raise AssertionError(
                f"Nothing except the save counter was restored from {self._save_path}."
            )
        return self

    def expect_partial(self) -> CheckpointLoadStatus:
        """Accepts a partial match silently: no warning about unused values is logged when
        this status is dropped (TensorFlow's meaning)."""
        if self._unused is not None:
            self._unused.detach()
        return self

    def run_restore_ops(self, session: Any = None) -> None:
        """Does nothing: values are restored eagerly."""

    def initialize_or_restore(self, session: Any = None) -> None:
        """Does nothing: values are restored eagerly."""


class Checkpoint:
    """Groups objects to save and restore together, TF's ``tf.train.Checkpoint``.

    Args:
        root: an optional root object, saved under ``"root"``.
        **kwargs: the objects by name: arrays, state trees, or objects with
            ``state_dict()`` / ``load_state_dict()``.

    Raises:
        ConfigError: a name would escape the directory, or is ``save_counter``.
    """

    def __init__(self, root: Any = None, **kwargs: Any) -> None:
        objects = dict(kwargs)
        if root is not None:
            objects["root"] = root
        for name in objects:
            check_key(name, "kwargs")
            if name == _COUNTER:
                raise ConfigError("kwargs", "must not use the reserved name 'save_counter'", name)
        self._objects = objects
        self._save_counter = _SaveCounter()

    def __getattr__(self, name: str) -> Any:
        objects = self.__dict__.get("_objects", {})
        if name in objects:
            return objects[name]
        raise AttributeError(name)

    @property
    def save_counter(self) -> _SaveCounter:
        """Incremented by each ``save()``; saved and restored with the checkpoint."""
        return self._save_counter

    def _tree(self) -> dict[str, Any]:
        return {_COUNTER: self._save_counter.value, "objects": self._objects}

    def write(self, file_prefix: str) -> str:
        """Writes a checkpoint at ``file_prefix`` (replacing one there) and returns it."""
        directory, name = _split(file_prefix)
        check_key(name, "file_prefix")
        storage = open_storage(directory)
        flat = flatten(self._tree())
        document = Document.of_tf(created_unix=time.time(), tree=flat.structure, clocks=flat.clocks)
        # The commit makes every open writer's points durable first (the one path all
        # checkpoints take); once it is committed, a tracker may send the points up to
        # its clock's step, as after a CheckpointManager save.
        commit(storage, name, flat.arrays, document, force=True)
        if len(flat.clocks) == 1:
            _durability.committed(int(flat.clocks[0]["step"]))
        return str(file_prefix)

    def save(self, file_prefix: str) -> str:
        """Increments the save counter and writes ``<file_prefix>-<save_counter>``."""
        self._save_counter.assign_add(1)
        path = self.write(f"{file_prefix}-{self._save_counter.value}")
        directory, _ = _split(path)
        _update_index(open_storage(directory), path, None)
        return path

    def read(self, save_path: str) -> CheckpointLoadStatus:
        """Restores from ``save_path``; the same as :meth:`restore`."""
        return self.restore(save_path)

    def restore(self, save_path: str | None) -> CheckpointLoadStatus:
        """Restores the objects from ``save_path`` in place and returns the match status.

        With ``save_path=None`` nothing is restored, and the status's assertions fail,
        as in TensorFlow.

        Raises:
            CheckpointNotFoundError: nothing is committed at ``save_path``.
            CorruptCheckpointError: the checkpoint fails verification.
            RestoreMismatchError: (a ValueError, as TF raises here) a saved array has
                another shape than the array it would restore into; nothing is restored.
        """
        if save_path is None:
            return CheckpointLoadStatus(None, None)
        directory, name = _split(save_path)
        storage = open_storage(directory)
        if not storage.exists(storage.join(name, COMMIT_FILE)):
            raise CheckpointNotFoundError(f"no committed checkpoint at {save_path}", save_path)
        state = load_state(storage, name)
        template = self._tree()
        into = template_arrays(state.tree, template)
        _check_shapes(state.tree, into)
        arrays = read_arrays(storage, name, state, into=into)
        tree, report = unflatten(state.tree, arrays, template, partial=True)
        counter = tree.get(_COUNTER) if isinstance(tree, dict) else None
        if isinstance(counter, int) and not isinstance(counter, bool):
            self._save_counter.value = counter
        objects = tree.get("objects") if isinstance(tree, dict) else None
        if isinstance(objects, dict):
            self._objects.update(objects)
        return CheckpointLoadStatus(report, save_path, tuple(self._objects))


def _check_shapes(structure: Any, into: dict[str, Any]) -> None:
    """Raises RestoreMismatchError, as TF raises ValueError at restore time, when a saved
    array would restore into an array (a variable) of another shape or dtype (before
    anything is restored)."""
    for key, node in array_nodes(structure).items():
        target = into.get(key)
        if target is None:
            continue
        if list(target.shape) != node.get("shape"):
            saved = tuple(node.get("shape") or ())
            raise RestoreMismatchError(
                f"Received incompatible tensor with shape {saved} when attempting to restore "
                f"variable with shape {target.shape} and name {key}. Restore into an array of "
                f"shape {saved}, or save a new checkpoint after changing the shape."
            )
        dtype = decode_dtype(node.get("dtype"))
        if dtype.newbyteorder("<") != target.dtype.newbyteorder("<"):
            raise RestoreMismatchError(
                f"The checkpoint holds {key} as {dtype}, but the variable (or array) it "
                f"would restore into is {target.dtype}. Create it as "
                f"{dtype} (tf.Variable(..., dtype=tf.{dtype})), or save a new checkpoint "
                "after changing the dtype."
            )


def _all(items: Any, kind: Any) -> bool:
    """True when ``items`` is a list of ``kind`` (bools are not numbers here)."""
    return isinstance(items, list) and all(
        isinstance(i, kind) and not isinstance(i, bool) for i in items
    )


def _read_index(storage: Storage) -> dict[str, Any] | None:
    path = storage.join(_INDEX)
    if not storage.exists(path):
        return None
    try:
        index = json.loads(storage.read_bytes(path).decode())
        if not isinstance(index, dict) or not _all(index.get("all_model_checkpoint_paths"), str):
            raise ValueError("not an index")
        if not _all(index.get("all_model_checkpoint_timestamps", []), int | float):
            raise ValueError("bad timestamps")
    except (UnicodeDecodeError, ValueError) as err:
        raise CorruptCheckpointError(
            f"{path} is not a checkpoint index; delete it to rebuild it from the committed "
            "checkpoints",
            path,
        ) from err
    return index


def _update_index(storage: Storage, latest: str, manager: CheckpointManager | None) -> None:
    if manager is None:
        index = _read_index(storage) or {}
        now = time.time()
        paths = index.get("all_model_checkpoint_paths", [])
        stamps = [*index.get("all_model_checkpoint_timestamps", []), *[now] * len(paths)]
        # Drop ``latest`` with its own timestamp, so later paths keep theirs.
        pairs = [(p, t) for p, t in zip(paths, stamps, strict=False) if p != latest]
        document = {
            "model_checkpoint_path": latest,
            "all_model_checkpoint_paths": [*(p for p, _ in pairs), latest],
            "all_model_checkpoint_timestamps": [*(t for _, t in pairs), now],
            "last_preserved_timestamp": index.get("last_preserved_timestamp", now),
        }
    else:
        document = manager.index_document(latest)
    storage.replace_file(storage.join(_INDEX), json.dumps(document, indent=1).encode())


def latest_checkpoint(checkpoint_dir: str) -> str | None:
    """Returns the newest checkpoint recorded in ``checkpoint_dir``'s index, or None.

    Raises:
        CorruptCheckpointError: the index exists but is damaged.
    """
    index = _read_index(open_storage(checkpoint_dir))
    if index is None:
        return None
    latest = index.get("model_checkpoint_path")
    return latest if isinstance(latest, str) else None


class CheckpointManager:
    """Keeps the newest ``max_to_keep`` checkpoints, TF's ``tf.train.CheckpointManager``.

    Args:
        checkpoint: the :class:`Checkpoint` to save and restore.
        directory: where checkpoints and the ``checkpoint`` index live.
        max_to_keep: checkpoints in the active set; None keeps every one.
        keep_checkpoint_every_n_hours: on leaving the active set, a checkpoint at least this
            many hours after the last preserved one is preserved for good.
        checkpoint_name: the name's prefix, ``ckpt`` by default.
        step_counter: the step (a Clock, an int-like, or anything with ``numpy()``), needed
            with ``checkpoint_interval``.
        checkpoint_interval: the least number of steps between two saves.
        init_fn: called by :meth:`restore_or_initialize` when there is no checkpoint.

    Raises:
        ValueError: ``max_to_keep`` <= 0, ``checkpoint_interval`` without
            ``step_counter``, or a name that would escape the directory (ConfigError).
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        directory: str,
        max_to_keep: int | None,
        keep_checkpoint_every_n_hours: float | None = None,
        checkpoint_name: str = "ckpt",
        step_counter: Any = None,
        checkpoint_interval: int | None = None,
        init_fn: Callable[[], Any] | None = None,
    ) -> None:
        if not isinstance(checkpoint, Checkpoint):
            raise ConfigError("checkpoint", "must be a globalstep.compat.tf.Checkpoint", checkpoint)
        if max_to_keep is not None and max_to_keep <= 0:
            raise ConfigError("max_to_keep", "must be a positive integer or None", max_to_keep)
        check_key(checkpoint_name, "checkpoint_name")
        if checkpoint_interval is not None and step_counter is None:
            raise ConfigError(
                "step_counter", "must be passed if `checkpoint_interval` is not None", None
            )
        self._checkpoint = checkpoint
        self._max_to_keep = max_to_keep
        self._keep_hours = keep_checkpoint_every_n_hours
        self._directory = str(directory).rstrip("/")
        self._prefix = f"{self._directory}/{checkpoint_name}"
        self._storage = open_storage(self._directory)
        self._step_counter = step_counter
        self._checkpoint_interval = checkpoint_interval
        self._last_checkpoint_step: int | None = None
        self._init_fn = init_fn
        now = time.time()
        self._maybe_delete: collections.OrderedDict[str, float] = collections.OrderedDict()
        index = _read_index(self._storage)
        if index is None:
            self._latest_checkpoint: str | None = None
            self._last_preserved_timestamp = now - 1.0
            return
        latest = index.get("model_checkpoint_path")
        self._latest_checkpoint = latest if isinstance(latest, str) else None
        preserved = index.get("last_preserved_timestamp")
        self._last_preserved_timestamp = min(
            float(preserved) if isinstance(preserved, int | float) else now - 1.0, now
        )
        paths = index["all_model_checkpoint_paths"]
        stamps = index.get("all_model_checkpoint_timestamps") or [
            self._last_preserved_timestamp
        ] * len(paths)
        for path, stamp in zip(paths, stamps, strict=False):
            stamp = min(float(stamp), now)
            if stamp > self._last_preserved_timestamp:
                self._maybe_delete[str(path)] = stamp

    @property
    def directory(self) -> str:
        """The directory the checkpoints live in."""
        return self._directory

    @property
    def checkpoint(self) -> Checkpoint:
        """The managed :class:`Checkpoint`."""
        return self._checkpoint

    @property
    def checkpoint_interval(self) -> int | None:
        """The least number of steps between two saves, or None."""
        return self._checkpoint_interval

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest checkpoint's path, or None."""
        return self._latest_checkpoint

    def index_document(self, latest: str) -> dict[str, Any]:
        """Returns the checkpoint index (TF's ``checkpoint`` file) this manager writes.

        Args:
            latest: the path of the newest checkpoint.
        """
        return {
            "model_checkpoint_path": latest,
            "all_model_checkpoint_paths": list(self._maybe_delete),
            "all_model_checkpoint_timestamps": list(self._maybe_delete.values()),
            "last_preserved_timestamp": self._last_preserved_timestamp,
        }

    @property
    def checkpoints(self) -> list[str]:
        """The managed checkpoints in save order, oldest first (preserved ones not listed)."""
        return list(self._maybe_delete)

    def _sweep(self) -> None:
        if not self._max_to_keep:
            return
        excess = len(self._maybe_delete) - self._max_to_keep
        for path, stamp in list(self._maybe_delete.items())[: max(0, excess)]:
            if self._keep_hours and stamp - self._keep_hours * 3600.0 >= (
                self._last_preserved_timestamp
            ):
                self._last_preserved_timestamp = stamp
            else:
                name = _split(path)[1]
                try:
                    if self._storage.exists(self._storage.join(name)):
                        remove_checkpoint(self._storage, name)
                except CheckpointError as err:
                    # The save itself is committed: a deletion that fails must not fail
                    # it. The checkpoint stays listed and is tried again at the next save.
                    warnings.warn(
                        f"retention could not delete {path} ({err}); it is tried again "
                        "at the next save",
                        CheckpointWarning,
                        stacklevel=3,
                    )
                    continue
            del self._maybe_delete[path]

    def save(self, checkpoint_number: Any = None, check_interval: bool = True) -> str | None:
        """Saves a checkpoint, records it, then deletes what falls out of the active set.

        Args:
            checkpoint_number: numbers this checkpoint; default the save counter (which
                every save increments).
            check_interval: with ``checkpoint_interval``, skip the save until enough steps
                passed.

        Returns:
            The new checkpoint's path, or None when the interval skipped it.
        """
        if self._checkpoint_interval is not None:
            current = _evaluate(self._step_counter)
            if self._last_checkpoint_step is not None:
                if current == self._last_checkpoint_step:
                    return None
                if check_interval and current < (
                    self._last_checkpoint_step + self._checkpoint_interval
                ):
                    return None
            self._last_checkpoint_step = current
        self._checkpoint.save_counter.assign_add(1)
        number = (
            self._checkpoint.save_counter.value
            if checkpoint_number is None
            else _evaluate(checkpoint_number)
        )
        path = self._checkpoint.write(f"{self._prefix}-{number}")
        self._maybe_delete.pop(path, None)
        self._maybe_delete[path] = time.time()
        self._latest_checkpoint = path
        # Record the new checkpoint before deleting anything, then record the deletions.
        _update_index(self._storage, path, self)
        self._sweep()
        _update_index(self._storage, path, self)
        return path

    def restore_or_initialize(self) -> str | None:
        """Restores the newest checkpoint, or calls ``init_fn`` when there is none.

        Returns:
            The restored path, or None.
        """
        if self._latest_checkpoint is not None:
            self._checkpoint.restore(self._latest_checkpoint)
            if self._checkpoint_interval is not None:
                self._last_checkpoint_step = _evaluate(self._step_counter)
            return self._latest_checkpoint
        if self._init_fn is not None:
            self._init_fn()
        return None

    def sync(self) -> None:
        """Does nothing: saves are synchronous."""
