"""Run: the parts of a training loop wired so that checkpoints, curves and the step agree.

A :class:`Run` holds a :class:`~globalstep.clock.Clock` (and any other named clocks), the
schedules, a :class:`~globalstep.checkpoint.CheckpointManager` in ``<directory>/checkpoints``,
a :class:`~globalstep.summary.SummaryWriter` in ``<directory>/logs`` and a progress display.
It owns no training loop and hides nothing: each part is an attribute that works alone
(``run.clock``, ``run.schedules``, ``run.checkpoints``, ``run.writer``, ``run.progress``).
What it adds is the wiring between them, which is where runs go wrong after a crash:

- :meth:`Run.restore` restores the newest checkpoint into the state tree, or leaves the tree
  as it is for a new run; the order in which the writer is opened does not matter (the
  writer marks the restart at the first step it writes again).
- Before a checkpoint at step S commits, every scalar logged at steps <= S is flushed and
  fsynced, so a crash at any moment loses only points after the newest checkpoint, which
  the resumed run writes again.
- SIGINT (Ctrl-C) and SIGTERM (what schedulers send before pre-emption) save a checkpoint
  after the update in flight and exit with status 130 or 143; a second signal exits at
  once. Leaving the ``with`` block normally saves a final checkpoint.
- The run's configuration (schedules, the clocks' batch size and steps per epoch, and the
  ``config`` given) is stored with each checkpoint; resuming with another one warns with
  the differences (:class:`ConfigDriftWarning`), or raises with ``strict=True``.
- An opt-in :class:`Rollback` policy restores the newest checkpoint when the loss is not
  finite or spikes, skips a few batches and goes on.
- One tick per update: :meth:`Run.update` ticks the clock unless an owner claimed its
  ticks (``attach`` does, see :meth:`Clock.claim_ticks
  <globalstep.clock.Clock.claim_ticks>`), and refuses a clock advanced elsewhere.
- No stale checkpoint: a loop that builds a new state tree per update (JAX, optax,
  ``w = w - lr * g``) hands it over with ``run.update(..., state=tree)``; a save of the
  restored tree, every array unchanged after updates, is refused with that advice.

The data position (``run.data_position``, the batches drawn so far, read with
:meth:`Run.next_batch`) is state of its own, saved with the checkpoint and never derived
from the step: a rollback moves it on while the step goes back.

Example:
    A complete NumPy loop: shuffled mini-batches, a noise term from a saved random
    generator, a cosine schedule, a checkpoint every 50 updates, two scalars per update.
    Run the function again on the same directory and it resumes where it stopped.

    >>> import tempfile
    >>> import numpy as np
    >>> from globalstep import Clock, CosineDecay, Run
    >>> from globalstep.run import GeneratorState
    >>> inputs = np.random.default_rng(0).normal(size=(100, 3))
    >>> targets = inputs @ np.array([1.0, -2.0, 0.5])
    >>> def train(directory):
    ...     weights, noise = np.zeros(3), np.random.default_rng(1)
    ...     with Run(directory, total_steps=200, save_every=50,
    ...              clock=Clock(steps_per_epoch=5, batch_size=20),
    ...              schedules={"lr": CosineDecay(0.1, decay_steps=200)},
    ...              config={"model": "linear"}, progress=False) as run:
    ...         run.restore({"weights": weights, "noise": GeneratorState(noise)})
    ...         while not run.done:
    ...             epoch, index = divmod(run.next_batch(), 5)
    ...             order = np.random.default_rng([7, epoch]).permutation(100)
    ...             rows = order[index * 20:(index + 1) * 20]
    ...             error = inputs[rows] @ weights - targets[rows]
    ...             lr = run.value("lr")  # the rate of update number run.step
    ...             gradient = 2 * inputs[rows].T @ error / 20 + 1e-3 * noise.normal(size=3)
    ...             weights -= lr * gradient
    ...             run.update(loss=float(np.mean(error**2)), lr=lr)
    ...     return weights
    >>> directory = tempfile.mkdtemp()
    >>> weights = train(directory)  # doctest: +ELLIPSIS
    globalstep: new run in ...
    globalstep: finished at step 200; checkpoint saved in ...
    >>> np.round(weights, 2)
    array([ 1. , -2. ,  0.5])
    >>> _ = train(directory)  # doctest: +ELLIPSIS
    globalstep: resumed from step 200 ...
    globalstep: the run is complete (step 200 of 200); pass a larger total_steps to go on
"""

from __future__ import annotations

import collections
import json
import math
import os
import signal
import statistics
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import numpy as np

from globalstep import distributed
from globalstep._closing import Closing
from globalstep._tracing import opaque
from globalstep._unchanged import Unchanged
from globalstep.checkpoint import CheckpointManager
from globalstep.clock import MAX_STEP, Clock
from globalstep.errors import ConfigDriftWarning, ConfigError, DivergenceError
from globalstep.schedules._base import MEMO_BITS, MEMO_MASK, memo_of
from globalstep.summary.progress import ProgressDisplay
from globalstep.summary.writer import SummaryWriter, available_formats
from globalstep.triggers import Trigger, every
from globalstep.units import Duration, DurationLike, Unit

__all__ = ["ConfigDriftWarning", "GeneratorState", "Ranks", "Rollback", "Run"]

_EXIT_STATUS: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143}


@dataclass(frozen=True)
class Rollback:
    """When and how :class:`Run` rolls back a bad update.

    An update is bad when its ``tag`` scalar (the loss) is not finite, or exceeds
    ``spike_factor`` times the median of the last ``median_of`` good values (once that many
    are known). The run then restores the newest checkpoint at or before the bad step,
    moves the data position on by ``skip_batches`` batches past the bad one, marks the
    restart in the logs, records the event (tags ``run/rollback_from_step`` and a text
    ``run/rollback``), and goes on. More than ``max_rollbacks`` rollbacks within
    ``window_steps`` steps raise :class:`~globalstep.errors.DivergenceError` naming the bad
    steps.

    Args:
        tag: the scalar passed to :meth:`Run.update` that is checked.
        spike_factor: a value above this many times the running median is a spike, > 1.
        median_of: good values in the running median, >= 1.
        skip_batches: batches skipped after the bad one, >= 0.
        max_rollbacks: rollbacks allowed within the window, >= 1.
        window_steps: the window, in steps, >= 1.

    Raises:
        ConfigError: a field breaks its rule.
    """

    tag: str = "loss"
    spike_factor: float = 10.0
    median_of: int = 100
    skip_batches: int = 10
    max_rollbacks: int = 3
    window_steps: int = 1000

    def __post_init__(self) -> None:
        if not isinstance(self.tag, str) or not self.tag:
            raise ConfigError("tag", "must be a non-empty str", self.tag)
        factor = self.spike_factor
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not factor > 1:
            raise ConfigError("spike_factor", "must be a number > 1 (inf turns spikes off)", factor)
        for name, minimum in (
            ("median_of", 1),
            ("skip_batches", 0),
            ("max_rollbacks", 1),
            ("window_steps", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(name, f"must be an int >= {minimum}", value)


class GeneratorState:
    """Makes a NumPy ``Generator`` a leaf of a state tree: saved and restored in place.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(3)
        >>> leaf = GeneratorState(rng)
        >>> saved = leaf.state_dict()
        >>> first = rng.normal()
        >>> leaf.load_state_dict(saved)
        >>> rng.normal() == first
        True
    """

    def __init__(self, generator: np.random.Generator) -> None:
        if not isinstance(generator, np.random.Generator):
            raise ConfigError("generator", "must be a numpy.random.Generator", generator)
        self.generator = generator

    def state_dict(self) -> dict[str, Any]:
        """Returns the bit generator's state (JSON-ready)."""
        return dict(self.generator.bit_generator.state)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores the state saved by :meth:`state_dict`.

        Raises:
            ConfigError: the state is not one of this bit generator's.
        """
        try:
            self.generator.bit_generator.state = dict(state)
        except (TypeError, ValueError, KeyError) as err:
            raise ConfigError(
                "state", "must be a bit generator state from GeneratorState.state_dict()", state
            ) from err


def _jsonable(value: Any, path: str) -> Any:
    """Returns ``value`` with NumPy scalars as Python numbers; refuses what JSON cannot hold."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic) and value.shape == ():
        return value.item()
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(f"{path} key", "must be a str", key)
            out[key] = _jsonable(item, f"{path}[{key!r}]")
        return out
    if isinstance(value, list | tuple):
        return [_jsonable(item, f"{path}[{i}]") for i, item in enumerate(value)]
    raise ConfigError(
        path, "must be JSON-ready: None, bool, int, float, str, or lists and dicts of them", value
    )


def _flat_items(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(_flat_items(value[key], f"{prefix}.{key}" if prefix else key))
        return out
    return {prefix: value}


def config_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Returns one line per setting that differs, as ``key: saved -> current``.

    Example:
        >>> config_differences({"lr": 0.01, "batch": 20}, {"lr": 0.5, "batch": 20})
        ['lr: 0.01 (checkpoint) -> 0.5 (now)']
    """
    before, after = _flat_items(dict(saved), ""), _flat_items(dict(current), "")
    lines = []
    for key in sorted(set(before) | set(after)):
        old = before.get(key, "<absent>")
        new = after.get(key, "<absent>")
        if old != new or type(old) is not type(new):
            lines.append(f"{key}: {old!r} (checkpoint) -> {new!r} (now)")
    return lines


@dataclass(frozen=True)
class Ranks:
    """How a :class:`Run` behaves on several ranks (processes of torch.distributed).

    Rank ``writer`` alone writes the summaries, shows the progress display, prints the
    run's messages and commits the checkpoints. In an initialised process group every rank
    takes part in each save through a distributed
    :class:`~globalstep.checkpoint.CheckpointManager` (the writer writes the replicated
    state, each rank the shards it holds); before the group exists, or with
    ``checkpoint_options={"distributed": False}``, the writer alone saves and the others
    read the same directory without taking its lock. Every ``check_every`` calls of
    :meth:`Run.update` the ranks' steps are compared
    (:func:`globalstep.distributed.assert_steps_agree`, one small collective); with
    ``reduce``, the scalars given to :meth:`Run.update` are reduced across the ranks
    (:func:`globalstep.distributed.reduce_metrics`, one collective per update) before
    the writer logs them. A Run on several ranks uses ``Ranks()`` unless told otherwise.

    Args:
        writer: the rank that writes, >= 0 (and below the world size).
        reduce: ``"mean"``, ``"sum"``, ``"max"`` or ``"min"`` to reduce the scalars;
            None (the default) logs the writer's own values.
        check_every: updates between step agreement checks, >= 1; None never checks.

    Raises:
        ConfigError: a field breaks its rule.

    Example:
        >>> Ranks(reduce="mean")
        Ranks(writer=0, reduce='mean', check_every=100)
    """

    writer: int = 0
    reduce: str | None = None
    check_every: int | None = 100

    def __post_init__(self) -> None:
        if isinstance(self.writer, bool) or not isinstance(self.writer, int) or self.writer < 0:
            raise ConfigError("writer", "must be an int >= 0 (a rank)", self.writer)
        if self.reduce is not None and self.reduce not in distributed.REDUCE_OPS:
            raise ConfigError(
                "reduce",
                f"must be one of {', '.join(map(repr, distributed.REDUCE_OPS))} or None",
                self.reduce,
            )
        every = self.check_every
        if every is not None and (
            isinstance(every, bool) or not isinstance(every, int) or every < 1
        ):
            raise ConfigError("check_every", "must be an int >= 1 or None", every)


def _save_trigger(value: Any) -> tuple[Trigger | None, tuple[int, int] | None]:
    """The trigger for ``save_every``, and (interval, start) where it counts whole steps."""
    if value is None or isinstance(value, Trigger):
        return value, None
    trigger = every(value)
    duration = Duration.parse(value, "save_every")
    if duration.unit is Unit.STEPS and duration.value.denominator == 1:
        interval = int(duration.value)
        return trigger, (interval, interval)
    return trigger, None


class Run(Closing):
    """A training run's clock, schedules, checkpoints, curves and progress, wired together.

    Args:
        directory: the run's directory: ``checkpoints/`` and ``logs/`` go inside.
        total_steps: the run's length in updates; ``run.done`` turns True there. None runs
            until the loop stops.
        clock: the clock that :meth:`update` ticks; default ``Clock()``. Give it
            ``steps_per_epoch`` and ``batch_size`` for epoch and sample counts.
        clocks: further named clocks (a GAN's critic), saved and restored with the run;
            the loop ticks them itself.
        schedules: name to schedule; :meth:`value` reads one at the clock's step.
        save_every: when :meth:`update` saves a checkpoint: a duration (``500``, ``"1ep"``,
            ``"30min"``) or a trigger; None saves only at the end and on a signal.
        config: hyperparameters to store with each checkpoint and compare on resuming
            (JSON-ready: numbers, strings, lists and dicts).
        strict: raise instead of warning when the configuration differs on resuming.
        rollback: the policy for bad updates; None (the default) never rolls back.
        progress: show a progress display (a live bar on a terminal, else a line every
            ``log_every`` steps).
        log_every: steps between the display's lines.
        stream: where messages and the display go; standard output by default.
        handle_signals: save and exit on SIGINT and SIGTERM (only where the Run is made in
            the main thread).
        checkpoint_options: keywords for the :class:`~globalstep.checkpoint.CheckpointManager`
            (``max_to_keep``, ``keep_best``, ``async_save``, ...).
        writer_options: keywords for the :class:`~globalstep.summary.SummaryWriter`
            (``formats``, ``flush_seconds``, ``guard_tags``, ...).
        ranks: how the run behaves on several ranks (see :class:`Ranks`); None uses
            ``Ranks()`` where torch.distributed runs more than one process (see
            :func:`globalstep.distributed.world_size`), and nothing of it on one.

    Raises:
        ConfigError: a parameter breaks its rule.
        LockError: another process writes this run's checkpoints.

    Attributes:
        clock: the clock :meth:`update` ticks.
        clocks: every clock by name, ``clock`` included.
        schedules: the schedules by name.
        checkpoints: the CheckpointManager.
        writer: the SummaryWriter (opened when first used).
        progress: the ProgressDisplay, or None.
        is_writer: whether this rank writes summaries, progress and checkpoints (True on
            one process).
        ranks_check: the :class:`~globalstep.distributed.StepAgreement` that
            :meth:`update` calls, or None.
        state: the state tree given to :meth:`restore`, as restored.
        data_position: batches drawn so far (see :meth:`next_batch`).
        config: the configuration stored with each checkpoint.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        total_steps: int | None = None,
        clock: Clock | None = None,
        clocks: Sequence[Clock] = (),
        schedules: Mapping[str, Any] | None = None,
        save_every: DurationLike | Trigger | None = None,
        config: Mapping[str, Any] | None = None,
        strict: bool = False,
        rollback: Rollback | None = None,
        progress: bool = True,
        log_every: int = 100,
        stream: TextIO | None = None,
        handle_signals: bool = True,
        checkpoint_options: Mapping[str, Any] | None = None,
        writer_options: Mapping[str, Any] | None = None,
        ranks: Ranks | None = None,
    ) -> None:
        if not isinstance(directory, str | os.PathLike):
            raise ConfigError("directory", "must be a path", directory)
        if total_steps is not None and (
            isinstance(total_steps, bool)
            or not isinstance(total_steps, int)
            or not 0 <= total_steps <= MAX_STEP
        ):
            raise ConfigError("total_steps", "must be an int in [0, 2**63-1] or None", total_steps)
        clock = Clock() if clock is None else clock
        if not isinstance(clock, Clock):
            raise ConfigError("clock", "must be a globalstep Clock", clock)
        if isinstance(clocks, Clock) or not all(isinstance(c, Clock) for c in clocks):
            raise ConfigError("clocks", "must be a sequence of globalstep Clocks", clocks)
        all_clocks = {clock.name: clock}
        for other in clocks:
            if other.name in all_clocks:
                raise ConfigError("clocks", "must have distinct names", other.name)
            all_clocks[other.name] = other
        schedules = dict(schedules or {})
        for name, schedule in schedules.items():
            if not isinstance(name, str) or not callable(schedule):
                raise ConfigError(
                    "schedules", "must map names (str) to schedules (callables of the step)", name
                )
        if rollback is not None and not isinstance(rollback, Rollback):
            raise ConfigError("rollback", "must be a globalstep.run.Rollback or None", rollback)
        for name, flag in (("strict", strict), ("progress", progress)):
            if not isinstance(flag, bool):
                raise ConfigError(name, "must be a bool", flag)
        if not isinstance(handle_signals, bool):
            raise ConfigError("handle_signals", "must be a bool", handle_signals)
        if isinstance(log_every, bool) or not isinstance(log_every, int) or log_every < 1:
            raise ConfigError("log_every", "must be an int >= 1", log_every)
        checkpoint_kwargs = dict(checkpoint_options or {})
        if "save_every" in checkpoint_kwargs:
            raise ConfigError(
                "checkpoint_options",
                "must not hold save_every",
                checkpoint_kwargs["save_every"],
                hint="Pass save_every to Run: it saves after flushing the logs.",
            )
        self._writer_kwargs = dict(writer_options or {})
        if "clock" in self._writer_kwargs:
            raise ConfigError("writer_options", "must not hold clock (the Run's is used)", None)
        self._writer_kwargs.setdefault("formats", available_formats())
        if ranks is not None and not isinstance(ranks, Ranks):
            raise ConfigError("ranks", "must be a globalstep.run.Ranks or None", ranks)
        size = distributed.world_size()
        if ranks is None and size > 1:
            ranks = Ranks()
        if ranks is not None and ranks.writer >= size:
            raise ConfigError(
                "ranks.writer",
                f"must be a rank below the world size, {size}",
                ranks.writer,
            )
        self.ranks = ranks
        self.is_writer = ranks is None or distributed.is_writer(ranks.writer)
        self.ranks_check = (
            distributed.StepAgreement(ranks.check_every)
            if ranks is not None and ranks.check_every is not None and size > 1
            else None
        )
        if rollback is not None and size > 1:
            raise ConfigError(
                "rollback",
                "is not supported on several ranks yet",
                rollback,
                hint=f"Pass rollback=None (this run has {size} ranks).",
            )
        # update()'s one extra check: anything to do per update on this rank?
        self._per_rank = ranks is not None and (
            self.ranks_check is not None or ranks.reduce is not None or not self.is_writer
        )

        self.directory = Path(directory)
        self.total_steps = total_steps
        self.clock = clock
        self.clocks = all_clocks
        self.schedules: dict[str, Any] = schedules
        self._memos: dict[str, tuple[Any, dict[int, list[float]]]] = {}  # see value()
        self.save_trigger, self._save_grid = _save_trigger(save_every)
        self._next_save_check = 0  # the step from which update() asks the save trigger
        self._next_check = 0  # the step from which update() looks at more than the step
        self.strict = strict
        self.rollback = rollback
        self.data_position = 0
        self.state: Any = None
        self.config = self._build_config(config)
        self._config_json = json.dumps(self.config, sort_keys=True)
        self._stream = stream if stream is not None else sys.stdout
        self._show_progress = progress
        self._log_every = log_every
        self._writer: SummaryWriter | None = None
        self.progress: ProgressDisplay | None = None
        self._restored = False
        self._careful = True
        self._started_at = 0
        self._saved_step: int | None = None
        self._signal: int | None = None
        self._old_handlers: dict[int, Any] = {}
        self._closed = False
        self._losses: collections.deque[float] = collections.deque(
            maxlen=rollback.median_of if rollback else 1
        )
        self._median = math.inf
        self._since_median = 0
        self._rollbacks: list[int] = []
        self._last_metrics: dict[str, float] = {}
        self._ticked_to = 0  # the clock's step after the last update (see update())
        self._stale_check: Unchanged | None = None  # see save()

        # On several ranks of an initialised process group the manager saves on every rank
        # (the writer rank writes the replicated state and commits; sharded tensors are
        # written by the rank holding them), unless checkpoint_options says otherwise.
        # Before the group exists (ranks known from torchrun's variables), or with
        # distributed=False, the writer alone saves and the others only read.
        grouped = size > 1 and distributed._initialised() is not None
        self._all_ranks_save = ranks is not None and grouped
        if ranks is not None and grouped and "distributed" not in checkpoint_kwargs:
            from globalstep.checkpoint.distributed import DistributedOptions

            checkpoint_kwargs["distributed"] = DistributedOptions(writer_rank=ranks.writer)
        elif self._all_ranks_save and not checkpoint_kwargs["distributed"]:
            self._all_ranks_save = False
        if not self._all_ranks_save and not self.is_writer:
            checkpoint_kwargs["read_only"] = True
        self.checkpoints = CheckpointManager(self.directory / "checkpoints", **checkpoint_kwargs)
        if handle_signals and threading.current_thread() is threading.main_thread():
            for signum in _EXIT_STATUS:
                self._old_handlers[signum] = signal.signal(signum, self._on_signal)

    # ----------------------------------------------------------------- configuration

    def _build_config(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        if config is not None and not isinstance(config, Mapping):
            raise ConfigError("config", "must be a mapping of JSON-ready values", config)
        schedules = {}
        for name, schedule in self.schedules.items():
            to_config = getattr(schedule, "to_config", None)
            schedules[name] = (
                _jsonable(to_config(), f"schedules[{name!r}]") if callable(to_config) else None
            )
        clocks = {
            name: {
                "steps_per_epoch": c.steps_per_epoch,
                "batch_size": c.batch_size,
                "tokens_per_step": c.tokens_per_step,
            }
            for name, c in self.clocks.items()
        }
        return {
            "config": _jsonable(dict(config or {}), "config"),
            "schedules": schedules,
            "clocks": clocks,
        }

    def _saved_config(self, step: int) -> dict[str, Any] | None:
        """The configuration stored with ``step``'s checkpoint, read from its metadata."""
        try:
            node = self.checkpoints.metadata(step)["tree"]["dict"]["run"]["dict"]["config"]
            saved = json.loads(node["value"])
        except (KeyError, TypeError, ValueError):
            return None
        return saved if isinstance(saved, dict) else None

    def _check_drift(self, step: int) -> None:
        saved = self._saved_config(step)
        if saved is None:
            return
        lines = config_differences(saved, self.config)
        if not lines:
            return
        if self.strict:
            raise ConfigError(
                "config",
                f"must match the configuration stored with the checkpoint of step {step} "
                "(strict=True)",
                lines,
                hint="Restore the old values, or start the run in a new directory.",
            )
        warnings.warn(
            f"resuming {self.directory} at step {step} with a configuration that differs "
            "from the checkpoint's:\n  "
            + "\n  ".join(lines)
            + "\nThe run goes on with the new values; pass strict=True to refuse.",
            ConfigDriftWarning,
            stacklevel=3,
        )

    # ----------------------------------------------------------------- state

    def _tree(self, state: Any) -> dict[str, Any]:
        trigger = self.save_trigger
        return {
            "run": {
                "clocks": dict(self.clocks),
                "data_position": self.data_position,
                "save_trigger": trigger.state_dict() if trigger is not None else None,
                "config": self._config_json,
            },
            "state": state,
        }

    def _load_run_part(self, part: Mapping[str, Any]) -> None:
        self.data_position = int(part["data_position"])
        self._next_save_check = self._next_check = 0
        saved = part.get("save_trigger")
        if self.save_trigger is not None:
            try:
                if saved is None:
                    raise ConfigError("save_trigger", "was not saved", saved)
                self.save_trigger.load_state_dict(saved)
            except ConfigError:
                # Another save_every than the checkpoint's: fire only at boundaries ahead.
                self.save_trigger.skip_past(self.clock)

    def restore(self, state: Any = None) -> Any:
        """Restores the newest checkpoint into ``state``, or starts a new run with it.

        Arrays in ``state`` are filled in place and stateful leaves (modules, optimizers,
        :class:`GeneratorState`, ...) restored in place; the clocks, the data position and
        the save trigger are restored with them. Before anything is touched, the stored
        configuration is compared with this run's (see ``strict``).

        Args:
            state: the state tree to checkpoint (see :mod:`globalstep.checkpoint.tree`).

        Returns:
            The tree, restored (leaves that cannot be filled in place, such as Python
            numbers, are new objects in it); also kept as ``run.state``.

        Raises:
            ConfigError: ``restore`` was called already, or the configuration differs and
                ``strict=True``.
            CorruptCheckpointError: the newest checkpoint fails verification.
            RestoreMismatchError: the checkpoint does not fit ``state``.
        """
        self._check_usable()
        if self._restored:
            raise ConfigError("restore", "must be called once per Run", "a second call")
        latest = self.checkpoints.latest_step()
        if latest is None:
            self.state = state
            self._say(f"new run in {self.directory}")
        else:
            self._check_drift(latest)
            tree = self.checkpoints.restore(self._tree(state), step=latest)
            self._load_run_part(tree["run"])
            self.state = tree["state"]
            self._saved_step = latest
            self._say(f"resumed from step {self.clock.step} ({self.checkpoints.directory})")
        self._restored = True
        self._careful = self.rollback is not None
        self._next_save_check = self._next_check = 0
        self._started_at = self._ticked_to = self.clock.step
        # Noted now, asked at the first save after updates (see save()).
        self._stale_check = Unchanged.take(self.state, self._started_at)
        if self.done and latest is not None:
            self._say(
                f"the run is complete (step {self.clock.step} of {self.total_steps}); "
                "pass a larger total_steps to go on"
            )
        self._start_progress()
        return self.state

    def _start_progress(self) -> None:
        if self._show_progress and self.progress is None and self.is_writer:
            self.progress = ProgressDisplay(
                self.clock,
                self.total_steps or None,
                every_n_steps=self._log_every,
                stream=self._stream,
            )

    # ----------------------------------------------------------------- the loop

    @property
    def step(self) -> int:
        """The clock's step: updates applied so far (see :mod:`globalstep.clock`)."""
        return self.clock.step

    @property
    def done(self) -> bool:
        """True once the clock has reached ``total_steps`` (never without one)."""
        return self.total_steps is not None and self.clock.step >= self.total_steps

    @property
    def writer(self) -> SummaryWriter:
        """The run's SummaryWriter in ``<directory>/logs``, opened on first use."""
        writer = self._writer
        if writer is None:
            self._check_usable()
            if not self.is_writer:
                raise ConfigError(
                    "writer",
                    "is open on the writer rank only",
                    f"rank {distributed.rank()}",
                    hint="Guard the call with `if run.is_writer:`, or pass the values to "
                    "run.update (reduced across ranks with Ranks(reduce=...)).",
                )
            writer = self._writer = SummaryWriter(
                self.directory / "logs", clock=self.clock, **self._writer_kwargs
            )
        return writer

    def next_batch(self) -> int:
        """Returns the data position (batches drawn so far) and moves it on by one.

        Index the data with it (``epoch, index = divmod(run.next_batch(), batches)``):
        it is restored with the checkpoint, and a rollback moves it past bad batches.
        """
        position = self.data_position
        self.data_position = position + 1
        return position

    def value(self, name: str) -> float:
        """Returns schedule ``name`` at the clock's step: the value update number
        ``run.step`` uses.

        Core and compat schedules answer an int step from their own memo of ``values()``
        (see :func:`globalstep.schedules._base.memo_fill`), so this costs a lookup and stays
        bit-equal to ``values()``; other callables are called with the step.

        Raises:
            KeyError: no schedule has that name.
        """
        try:
            # The per-update path: the schedule's memo, read here while the name still
            # maps to the schedule it belongs to.
            schedule, memo = self._memos[name]
            if self.schedules[name] is schedule:
                step = self.clock._step
                return memo[step >> MEMO_BITS][step & MEMO_MASK]
        except KeyError:
            pass
        try:
            schedule = self.schedules[name]
        except KeyError:
            raise KeyError(
                f"no schedule named {name!r}; this run has {sorted(self.schedules)}"
            ) from None
        value = float(schedule(self.clock.step))
        own = memo_of(schedule)
        if own is not None:
            self._memos[name] = (schedule, own)
        return value

    @opaque
    def update(self, *, applied: bool = True, state: Any = None, **scalars: Any) -> bool:
        """Reports one update: ticks the clock, logs the scalars, saves when it is time.

        Call it once per optimizer update, after the update, in Python (not inside a
        function that ``tf.function`` or ``jax.jit`` traces). With a :class:`Rollback`
        policy a bad value of its tag rolls the run back instead (the clock does not tick).
        After a SIGINT or SIGTERM it saves a checkpoint at the step reached and raises
        ``SystemExit`` with status 130 or 143.

        The clock ticks here unless something else owns its ticks
        (:meth:`Clock.claim_ticks <globalstep.clock.Clock.claim_ticks>`: an optimizer
        hooked by ``globalstep.integrations.torch.attach`` claims its clock), and then the
        owner's tick is the update's one. A clock advanced by anything else between two
        updates is refused, since each update would then count twice.

        Args:
            applied: False for an update that was skipped (a mixed-precision overflow):
                the scalars are logged at the unchanged step and the clock does not tick.
            state: the state tree after this update, for loops that build a new tree at
                each update instead of changing the restored one in place (JAX and optax,
                ``w = w - lr * g`` in NumPy): it replaces ``run.state`` and is what the
                next checkpoint saves. None keeps ``run.state``.
            **scalars: values to log at the step after the update (``loss=..., lr=...``,
                the rate being the one the update used, ``run.value("lr")`` read before
                it; the convention of every logged value, see :mod:`globalstep.clock`):
                numbers, NumPy scalars or one-element tensors.

        Returns:
            False when the update was rolled back, else True.

        Raises:
            ConfigError: :meth:`restore` was not called first, a bad tag or value, or the
                clock was advanced elsewhere since the last update.
            DivergenceError: too many rollbacks within the policy's window.
            TracingError: ``tf.function`` or ``jax.jit`` is tracing the call.
        """
        if self._careful:  # before restore(), with a rollback policy, or after a signal
            if not self._restored:
                self._not_restored()
            if self.rollback is not None and not self._check_update(scalars):
                return False
        if state is not None:
            self.state = state
            self._stale_check = None  # the loop hands its tree over: nothing to suspect
        clock = self.clock
        if clock.tick_owner is None:
            if clock._step != self._ticked_to:
                self._ticked_elsewhere()
            if applied:
                clock.advance()
        self._ticked_to = clock._step
        if self._per_rank:
            scalars = self._rank_update(scalars)
        if scalars:
            (self._writer or self.writer).enqueue_scalars(scalars, clock._step)  # a dict of its own
        if clock._step >= self._next_check:
            self._after_update(scalars)
        return True

    def _after_update(self, scalars: dict[str, Any]) -> None:
        """The display, the save trigger and a signal, once one of them may be due; notes
        the step before which none can be (a live bar: none)."""
        step = self.clock._step
        progress = self.progress
        if progress is not None and (step >= progress._next_line or progress._bar is not None):
            progress.update(**scalars)
        if step >= self._next_save_check:
            self._maybe_save(scalars)
        if self._signal is not None:
            self._stop_for_signal()
        upcoming = self._next_save_check
        if progress is not None:
            upcoming = 0 if progress._bar is not None else min(upcoming, progress._next_line)
        self._next_check = upcoming
        if self._signal is not None:  # one that came while this ran: the next update stops
            self._next_check = 0

    def _rank_update(self, scalars: dict[str, Any]) -> dict[str, Any]:
        """On several ranks: checks the steps when due, reduces the scalars, and returns
        what this rank logs (nothing, off the writer rank)."""
        check = self.ranks_check
        if check is not None:
            check(self.clock)
        ranks = self.ranks
        assert ranks is not None
        if ranks.reduce is not None:
            scalars = distributed.reduce_metrics(scalars, op=ranks.reduce)
        return scalars if self.is_writer else {}

    def _maybe_save(self, scalars: dict[str, Any]) -> None:
        """Asks the save trigger; for a trigger of steps, notes the next step worth asking."""
        trigger = self.save_trigger
        if trigger is None:
            self._next_save_check = MAX_STEP + 1
            return
        if trigger.should_fire(self.clock):
            self._last_metrics = scalars
            self.save()
        grid = self._save_grid
        if grid is not None:
            # every(interval, start) fires at start + k * interval only: below the next one,
            # should_fire is False whatever its state.
            interval, start = grid
            step = self.clock.step
            self._next_save_check = (
                start if step < start else start + ((step - start) // interval + 1) * interval
            )

    def _ticked_elsewhere(self) -> None:
        clock = self.clock
        raise ConfigError(
            "clock",
            "must be ticked once per update, by Run.update or by one owner; it was advanced "
            f"from step {self._ticked_to} to {clock.step} since the last update, outside it",
            clock,
            hint="Each update would count twice. Remove the other tick (clock.tick(), a "
            "callback's or hook's), or let it own the ticks with "
            "clock.claim_ticks('<what ticks it>') and Run.update leaves the tick to it "
            "(globalstep.integrations.torch.attach claims its clock itself).",
        )

    def _not_restored(self) -> None:
        raise ConfigError(
            "restore",
            "must be called before the first update",
            None,
            hint="Call run.restore(state): it resumes from the newest checkpoint, or starts "
            "a new run with the state as it is.",
        )

    def save(self) -> None:
        """Saves a checkpoint at the clock's step, after flushing and fsyncing the logs.

        A step saved already by this run is not saved again. On several ranks (see
        :class:`Ranks`) every rank calls it at the same step: the writer rank writes the
        replicated state and commits once every rank wrote its shards (see
        :mod:`globalstep.checkpoint.distributed`).

        Raises:
            CheckpointError: the save failed.
        """
        self._check_usable()
        step = self.clock.step
        if step == self._saved_step:
            return
        if not self.is_writer and not self._all_ranks_save:
            self._saved_step = step
            return
        check = self._stale_check
        if check is not None and step != check.step:
            self._refuse_stale(check, step)
        metrics = {}
        for tag, value in self._last_metrics.items():
            if isinstance(value, int | float | np.integer | np.floating) and not isinstance(
                value, bool | np.bool_
            ):
                metrics[tag] = value
        self.checkpoints.save(
            self.clock,
            self._tree(self.state),
            metrics=metrics,
            force=step in self.checkpoints.steps(),
            # The save makes the curves up to `step` durable before it commits (on the
            # save's thread when it is async): the writer is registered for every save.
        )
        self._saved_step = step

    def _refuse_stale(self, check: Unchanged, step: int) -> None:
        """Raises when the tree to save is the restored one, every array unchanged, after
        updates were applied; else stops asking (a tree that changes goes on changing)."""
        if not check.holds(self.state):
            self._stale_check = None
            return
        raise ConfigError(
            "state",
            f"must change while updates are applied: the tree to save at step {step} is "
            f"the one restore() returned at step {check.step}, every array unchanged, so the "
            "checkpoint would hold stale arrays (and a resumed run would restart from them)",
            check.paths,
            hint="If the loop builds a new tree at each update (JAX, optax, "
            "`w = w - lr * g`), pass it: run.update(..., state=new_tree); or change the "
            "restored arrays in place (`w -= lr * g`).",
        )

    # ----------------------------------------------------------------- rollback

    def _check_update(self, scalars: Mapping[str, Any]) -> bool:
        policy = self.rollback
        assert policy is not None
        if policy.tag not in scalars:
            return True
        raw = scalars[policy.tag]
        try:
            value = float(raw.item() if hasattr(raw, "item") else raw)
        except (TypeError, ValueError) as err:
            raise ConfigError(policy.tag, "must be a number for the rollback policy", raw) from err
        if not math.isfinite(value):
            self._roll_back(value, "not finite")
            return False
        losses = self._losses
        if len(losses) == policy.median_of:
            self._since_median += 1
            if self._since_median >= max(1, policy.median_of // 10) or not math.isfinite(
                self._median
            ):
                self._median, self._since_median = statistics.median(losses), 0
            if value > policy.spike_factor * self._median and self._median > 0:
                self._roll_back(
                    value, f"above {policy.spike_factor} x the median {self._median:.6g}"
                )
                return False
        losses.append(value)
        return True

    def _roll_back(self, value: float, reason: str) -> None:
        policy = self.rollback
        assert policy is not None
        bad_step = self.clock.step
        recent = [s for s in self._rollbacks if s > bad_step - policy.window_steps]
        if len(recent) >= policy.max_rollbacks:
            steps = [*recent, bad_step]
            raise DivergenceError(
                f"`{policy.tag}` was bad at steps {steps} ({value!r} at step {bad_step}: "
                f"{reason}), more than max_rollbacks={policy.max_rollbacks} rollbacks within "
                f"window_steps={policy.window_steps}; the run stops. Lower the learning rate or "
                "check the data around these steps.",
                steps,
            )
        self.checkpoints.wait()
        candidates = [s for s in self.checkpoints.steps() if s <= bad_step]
        if not candidates:
            raise DivergenceError(
                f"`{policy.tag}` was {value!r} at step {bad_step} ({reason}) and there is no "
                f"checkpoint at or before it in {self.checkpoints.directory} to roll back to; "
                "pass save_every to Run.",
                [bad_step],
            )
        target = candidates[-1]
        position = self.data_position + policy.skip_batches
        tree = self.checkpoints.restore(self._tree(self.state), step=target)
        self._load_run_part(tree["run"])
        self.state = tree["state"]
        self._ticked_to = self.clock.step
        self.data_position = position
        self._saved_step = target
        self._rollbacks = [*recent, bad_step]
        self._median, self._since_median = math.inf, 0
        writer = self.writer
        writer.restart(target + 1)
        writer.scalar("run/rollback_from_step", float(bad_step), step=target)
        message = (
            f"rolled back: `{policy.tag}` was {value:.6g} at step {bad_step} ({reason}); "
            f"restored step {target}, skipped {policy.skip_batches} batches after the bad one "
            f"(data position {position})"
        )
        writer.text("run/rollback", message, step=target)
        self._say(message)

    # ----------------------------------------------------------------- stopping

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._signal is not None:
            # The second signal: exit at once, as the default action does.
            self._restore_handlers()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self._signal = signum
        self._next_save_check = self._next_check = 0
        name = signal.Signals(signum).name
        self._say(
            f"got {name}: saving a checkpoint after the update in flight, then exiting "
            f"(send {name} again to exit at once)"
        )

    def _stop_for_signal(self) -> None:
        signum = self._signal
        assert signum is not None
        self.save()
        if self._writer is not None:
            self._writer.sync()
        self._say(
            f"saved step {self.clock.step} after {signal.Signals(signum).name}; run again to resume"
        )
        raise SystemExit(_EXIT_STATUS[signum])

    def _restore_handlers(self) -> None:
        handlers, self._old_handlers = self._old_handlers, {}
        for signum, handler in handlers.items():
            signal.signal(signum, handler)

    def _say(self, line: str) -> None:
        if not self.is_writer:
            return
        self._stream.write(f"globalstep: {line}\n")
        self._stream.flush()

    def _check_usable(self) -> None:
        if self._closed:
            raise ConfigError("run", "must be open (close() was called)", str(self.directory))

    def close(self) -> None:
        """Ends the run: saves a final checkpoint, then closes the writer, the display and
        the checkpoint manager, and gives the signal handlers back. Closing twice does
        nothing.

        Raises:
            CheckpointError: the final save failed.
            SummaryWriteError: a log write failed.
        """
        self._finish(save=self._restored)

    def _close_after(self, error: BaseException | None) -> None:
        # Saved already when a signal stopped the run; an error leaves no final checkpoint
        # (the state may be half updated), and the body's error is the one raised.
        if error is None:
            self.close()
            return
        try:
            self._finish(save=False)
        except Exception:
            if isinstance(error, SystemExit | KeyboardInterrupt):
                raise
            # The body's error is the one to see.

    def _finish(self, *, save: bool) -> None:
        if self._closed:
            return
        steps_done = self.clock.step
        try:
            if save and steps_done != self._saved_step:
                self.save()
            if save and steps_done != self._started_at:
                self._say(
                    f"finished at step {steps_done}; checkpoint saved in "
                    f"{self.checkpoints.directory}"
                )
        finally:
            self._closed = True
            self._restore_handlers()
            # The checkpoints first: an async save fsyncs the logs before it commits.
            closers: list[Callable[[], None]] = [self.checkpoints.close]
            if self.progress is not None:
                closers.append(self.progress.close)
            if self._writer is not None:
                closers.append(self._writer.close)
            first: BaseException | None = None
            for close in closers:
                try:
                    close()
                except Exception as err:
                    first = first or err
            if first is not None:
                raise first

    def __repr__(self) -> str:
        return f"Run({str(self.directory)!r}, step={self.clock.step})"
