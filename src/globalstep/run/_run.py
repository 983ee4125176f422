"""The Run: clock, schedules, checkpoints, curves and progress wired together (wiring only).

Its parts live beside it in :mod:`globalstep.run`: the options, the ranks, the stored
configuration, the rollback watch, the signals; the save trigger is
:class:`~globalstep.checkpoint._save_trigger.SaveTrigger`. See the package's docstring for
what the wiring guarantees.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from globalstep._clock import Clock
from globalstep._closing import Closing, close_in_order
from globalstep._errors import ConfigError
from globalstep._memo import MEMO_BITS, MEMO_MASK
from globalstep._tracing import opaque
from globalstep._triggers import Trigger
from globalstep._units import DurationLike
from globalstep.checkpoint import FastTier, SaveTrigger
from globalstep.distributed import DEFAULT_STOP_SIGNALS, check_signals
from globalstep.run import _refusals
from globalstep.run._audit import RunAudit
from globalstep.run._checkpoints import RunCheckpoints
from globalstep.run._config import run_config
from globalstep.run._goodput import Goodput
from globalstep.run._messages import Messages
from globalstep.run._options import (
    CheckpointOptions,
    ProgressOptions,
    WriterOptions,
    check_arguments,
    clocks_of,
)
from globalstep.run._ranks import RankPlan, Ranks
from globalstep.run._rollback import Rollback, Watch
from globalstep.run._schedules import Memos, first_value, schedules_of
from globalstep.run._signals import exit_status, stop_for
from globalstep.run._stale import Passed, StaleCheck
from globalstep.summary import ProgressDisplay, ResumeAudit, SummaryWriter

__all__ = ["Run"]


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
        fast_tier: a :class:`~globalstep.checkpoint.FastTier` saved to as well (one process).
        config: hyperparameters to store with each checkpoint and compare on resuming
            (JSON-ready: numbers, strings, lists and dicts).
        strict: raise instead of warning when the configuration differs on resuming.
        rollback: the policy for bad updates; None (the default) never rolls back.
        progress: show a progress display (a live bar on a terminal, else a line every
            ``log_every`` steps).
        log_every: steps between the display's lines.
        stream: where messages and the display go; standard output by default.
        handle_signals: False catches no signal (they are caught only where the Run is
            made in the main thread).
        stop_signals: the signals that save and exit (status 128 + the number; a second,
            1 s later, exits at once); on several ranks one to any rank stops all.
        checkpoint_options: keywords for the :class:`~globalstep.checkpoint.CheckpointManager`
            (``max_to_keep``, ``keep_best``, ``async_save``, ...).
        writer_options: keywords for the :class:`~globalstep.summary.SummaryWriter`
            (``formats``, ``flush_seconds``, ``guard_tags``, ...).
        ranks: how the run behaves on several ranks (see :class:`Ranks`); None uses
            ``Ranks()`` where torch.distributed runs more than one process (see
            :func:`globalstep.distributed.world_size`), and nothing of it on one.
        audit: on resuming, compare the values logged again with the crashed attempt's
            (``run/_audit.py``): True (equal floats), a tolerance >= 0, or False.

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
        is_writer: whether this rank writes logs, progress and checkpoints (True on one).
        ranks_check: the :class:`~globalstep.distributed.StepAgreement` update() calls.
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
        fast_tier: FastTier | None = None,
        config: Mapping[str, Any] | None = None,
        strict: bool = False,
        rollback: Rollback | None = None,
        progress: bool = True,
        log_every: int = 100,
        stream: TextIO | None = None,
        handle_signals: bool = True,
        stop_signals: Sequence[int] = DEFAULT_STOP_SIGNALS,
        checkpoint_options: Mapping[str, Any] | None = None,
        writer_options: Mapping[str, Any] | None = None,
        ranks: Ranks | None = None,
        audit: bool | float = True,
    ) -> None:
        flags = {"strict": strict, "progress": progress, "handle_signals": handle_signals}
        check_arguments(directory, total_steps, rollback, flags, log_every)
        self.clocks = clocks_of(clock, clocks)
        self.clock = next(iter(self.clocks.values()))
        self.schedules: dict[str, Any] = schedules_of(schedules)
        self._audit = RunAudit(audit)
        self._writer_options = WriterOptions.build(writer_options, self._audit)
        signals = check_signals(stop_signals, "stop_signals")
        plan = RankPlan.build(ranks, rollback)
        self.ranks, self.is_writer, self.ranks_check = plan.ranks, plan.is_writer, plan.check
        options = CheckpointOptions.build(checkpoint_options, plan, fast_tier)
        saves = SaveTrigger.of(save_every)  # checked before the manager takes the lock
        self.directory, self.total_steps = Path(directory), total_steps
        self._memos: Memos = {}  # see value()
        # _next_check: the step from which update() looks at more than the step
        self.data_position = self._next_check = 0
        self.strict, self.rollback = strict, rollback
        self._watch = Watch(rollback, plan) if rollback is not None else None
        self.state: Any = None
        self.config = run_config(config, self.schedules, self.clocks)
        self._stream = stream if stream is not None else sys.stdout
        self._display = ProgressOptions(progress and self.is_writer, log_every, self._stream)
        self._writer: SummaryWriter | None = None
        self.progress: ProgressDisplay | None = None
        self._restored, self._closed, self._careful = False, False, True
        self._started_at = self._ticked_to = 0  # _ticked_to: the step after the last update
        self._stale_check: StaleCheck | None = None  # see save()
        self.checkpoints = manager = options.open(self.directory)
        self._goodput = Goodput(manager.ledger, self, lambda: self._writer)
        writes = plan.is_writer or options.all_ranks_save
        self._saves = RunCheckpoints(manager, saves, self.clocks, self.config, writes=writes)
        self.save_trigger = saves.trigger if saves is not None else None
        self._messages = Messages(
            self._stream, self.is_writer, self.directory, manager.directory, total_steps
        )
        self._signals = stop_for(signals, handle_signals, plan, self._messages, self._on_stop)
        self._plan = plan = plan.polling(self._signals)
        self._per_rank = plan.per_update  # update()'s one extra check on several ranks

    def restore(self, state: Any = None) -> Any:
        """Restores the newest checkpoint into ``state``, or starts a new run with it.

        Arrays in ``state`` are filled in place; stateful leaves (modules, optimizers,
        :class:`GeneratorState`, ...), dicts, lists and dataclasses that are not frozen are
        restored in place, the clocks, data position and save trigger with them. Before
        anything is touched, the stored configuration is compared (see ``strict``).

        Args:
            state: the state tree to checkpoint (see :mod:`globalstep.checkpoint.tree`).

        Returns:
            The tree, restored (a tuple or a frozen dataclass, which cannot be filled in
            place, is a new object in it); also kept as ``run.state``.

        Raises:
            ConfigError: a second call, or the configuration differs and ``strict=True``.
            CorruptCheckpointError: the newest checkpoint fails verification.
            RestoreMismatchError: the checkpoint does not fit ``state``.
        """
        self._check_usable()
        if self._restored:
            raise ConfigError("restore", "must be called once per Run", "a second call")
        passed = Passed.note(state)  # what a restore rebuilds: noted for save()'s check
        latest, self.state, self.data_position = self._saves.resume(
            state, self.data_position, self.config, strict=self.strict, run=self.directory
        )
        done = self.done and latest is not None  # resumed, and complete already
        self._audit.begin(self.directory / "logs", latest if self.is_writer else None)
        self._goodput.resumed(latest)
        self._messages.started(latest, self.clock.step, done=done, source=self._saves.source())
        self._restored = True
        self._careful = self.rollback is not None
        self._started_at = self._ticked_to = self.clock.step
        self._stale_check = StaleCheck.take(self.state, self._started_at, passed)  # save()
        self.progress = self._display.open(self.clock, self.total_steps)
        if self.is_writer and self._writer_options.unsent(self.directory / "logs"):
            _ = self.writer  # it sends the tracker points an earlier process left unsent
        return self.state

    @property
    def step(self) -> int:
        """The clock's step: updates applied so far (see :mod:`globalstep._clock`)."""
        return self.clock.step

    @property
    def done(self) -> bool:
        """True once the clock has reached ``total_steps`` (never without one)."""
        return self.total_steps is not None and self.clock.step >= self.total_steps

    @property
    def writer(self) -> SummaryWriter:
        """The run's SummaryWriter in ``<directory>/logs``, opened on first use."""
        if self._writer is None:
            self._check_usable()
            logs, options = self.directory / "logs", self._writer_options
            self._writer = options.open(logs, self.clock, self.config, is_writer=self.is_writer)
        return self._writer

    def next_batch(self) -> int:
        """Returns the data position (batches drawn so far) and moves it on by one.

        Index the data with it (``epoch, index = divmod(run.next_batch(), batches)``):
        it is restored with the checkpoint, and a rollback moves it past bad batches.
        """
        self.data_position += 1
        return self.data_position - 1

    def value(self, name: str) -> float:
        """Returns schedule ``name`` at the clock's step (the value update ``run.step`` uses).

        Core and compat schedules answer an int step from their own memo of ``values()``
        (see :func:`globalstep._memo.memo_fill`), so this costs a lookup and stays
        bit-equal to ``values()``; other callables are called with the step.

        Raises:
            KeyError: no schedule has that name.
        """
        try:
            # The per-update path: the memo, while the name maps to the schedule it is of.
            schedule, memo = self._memos[name]
            if self.schedules[name] is schedule:
                step = self.clock.step
                return memo[step >> MEMO_BITS][step & MEMO_MASK]
        except KeyError:
            pass
        return first_value(self.schedules, self._memos, name, self.clock.step)

    @opaque
    def update(self, *, applied: bool = True, state: Any = None, **scalars: Any) -> bool:
        """Reports one update: ticks the clock, logs the scalars, saves when it is time.

        Call it once per optimizer update, after the update, in Python (not inside a
        function that ``tf.function`` or ``jax.jit`` traces). A bad value of a
        :class:`Rollback` policy's tag rolls the run back instead (the clock does not
        tick); after a stop signal it saves (on several ranks, at the update they agree on)
        and raises ``SystemExit`` (128 + the signal's number). The clock ticks here unless
        an owner claimed its ticks (:meth:`~globalstep._clock.Clock.claim_ticks`, as
        ``globalstep.integrations.torch.attach`` and the Keras/TensorFlow ``follow`` do):
        the owner's tick is the update's one. A clock advanced elsewhere is refused.

        Args:
            applied: False for an update that was skipped (a mixed-precision overflow): no
                tick; the scalars go with the next update applied (see ``run/_skipped.py``).
            state: the state tree after this update, for loops that build a new tree at
                each update instead of changing the restored one in place (JAX and optax,
                ``w = w - lr * g`` in NumPy): it replaces ``run.state`` and is what the
                next checkpoint saves. None keeps ``run.state``.
            **scalars: values to log at the step after the update (``loss=..., lr=...``,
                the rate being the one the update used, ``run.value("lr")`` read before
                it; the convention of every logged value, see :mod:`globalstep._clock`):
                numbers, NumPy scalars or one-element tensors.

        Returns:
            False when the update was rolled back, else True.

        Raises:
            ConfigError: :meth:`restore` was not called first, a bad tag or value, or the
                clock was advanced elsewhere since the last update.
            DivergenceError: too many rollbacks within the policy's window.
            TracingError: ``tf.function`` or ``jax.jit`` is tracing the call.
        """
        if self._careful and self._rolled_back(scalars):  # before restore(), or a policy
            return False
        if state is not None:  # the loop hands its tree over: nothing to suspect
            self.state, self._stale_check = state, None
        step = (clock := self.clock).step
        if clock.tick_owner is None:
            if step != self._ticked_to:
                _refusals.ticked_elsewhere(clock, self._ticked_to)
            if applied:
                step = clock.advance()
        skipped, self._ticked_to = step == self._ticked_to, step  # skipped: the step stayed
        if self._per_rank:
            scalars = self._plan.update(scalars, clock)
        if skipped or self._saves.skipped.count:  # (see globalstep.run._skipped)
            scalars = self._saves.skipped.take(scalars, skipped=skipped, log=self.is_writer)
        if scalars:
            (self._writer or self.writer).enqueue_scalars(scalars, step)  # a dict of its own
        if step >= self._next_check:
            self._after_update(scalars, step)
        return True

    def _rolled_back(self, scalars: dict[str, Any]) -> bool:
        """Refuses an update before restore(); rolls a bad one back (see :class:`Rollback`)."""
        if not self._restored:
            _refusals.not_restored()
        watch = self._watch
        if watch is None or (bad := watch.check(scalars, self.clock.step)) is None:
            return False
        target = watch.target(bad, self.checkpoints)
        position = self.data_position + watch.policy.skip_batches
        self.state, _ = self._saves.load(target, self.state, self.data_position)
        self._ticked_to, self._next_check, self.data_position = self.clock.step, 0, position
        writer = self.writer if self.is_writer else None  # off the writer: nothing logged
        self._messages.say(watch.record(bad, writer, target, position))
        return True

    def _after_update(self, scalars: dict[str, Any], step: int) -> None:
        """The display, the save trigger and a signal, once one of them may be due; notes
        the step before which none can be (a live bar: none)."""
        progress = self.progress
        if progress is not None and step >= progress.next_due:
            progress.update(**scalars)
        saves = self._saves
        if step >= saves.next_check and saves.due(scalars):
            self.save()
        self._audit.tell(
            self._messages, self._goodput.ledger
        )  # where the resume audit ended (a save drains)
        if self._signals.agreed is not None:
            self._stop_for_signal(self._signals.agreed)
        upcoming = saves.next_check
        if progress is not None:
            upcoming = min(upcoming, progress.next_due)
        # A signal that came while this ran: the next update stops.
        self._next_check = upcoming if self._signals.agreed is None else 0

    def save(self) -> None:
        """Saves a checkpoint at the clock's step, after flushing and fsyncing the logs.

        A step saved already by this run is not saved again. On several ranks (see
        :class:`Ranks`) every rank calls it at the same step: the writer rank writes the
        replicated state and commits once every rank wrote its shards (see
        :mod:`globalstep.checkpoint._ranks.coordinated`).

        Raises:
            CheckpointError: the save failed.
        """
        self._check_usable()
        self._goodput.before_save()  # the figures so far: durable with this checkpoint
        self._stale_check = self._saves.save(self.state, self.data_position, self._stale_check)

    def _on_stop(self, signum: int) -> None:
        """A stop agreed (``_signals.agreed``): this update's end saves and exits."""
        self._saves.next_check = self._next_check = 0

    def _stop_for_signal(self, signum: int) -> None:
        self.save()
        if self._writer is not None:
            self._writer.sync()
        self._messages.saved_after_signal(signum, self.clock.step)
        raise SystemExit(exit_status(signum))

    def _check_usable(self) -> None:
        if self._closed:
            raise ConfigError("run", "must be open (close() was called)", str(self.directory))

    def close(self) -> None:
        """Ends the run: saves a final checkpoint, closes the checkpoint manager, the display
        and the writer, and gives the signal handlers back; closing twice does nothing.

        Raises:
            CheckpointError: the final save failed.
            SummaryWriteError: a log write failed.
        """
        self._finish(save=self._restored)

    def _close_after(self, error: BaseException | None) -> None:
        # An error leaves no final checkpoint (the state may be half updated; a signal's
        # stop saved already), and the body's error is the one raised.
        self._goodput.stopped_by(error)
        try:
            self._finish(save=error is None and self._restored)
        except Exception:
            if error is None or isinstance(error, SystemExit | KeyboardInterrupt):
                raise

    def _finish(self, *, save: bool) -> None:
        if self._closed:
            return
        steps_done = self.clock.step
        try:
            if save and steps_done != self._saves.saved_step:
                self.save()
            if save and steps_done != self._started_at:
                self._messages.finished(steps_done)
        finally:
            self._closed = True
            self._signals.close()
            # The checkpoints first: an async save fsyncs the logs before it commits.
            close_in_order(self.checkpoints, self._goodput, self.progress, self._writer)
            self._audit.tell(self._messages, self._goodput.ledger, closing=True)

    @property
    def audit(self) -> ResumeAudit | None:
        """The resume audit's outcome, once told (see ``audit``); None before or without."""
        return self._audit.outcome

    def __repr__(self) -> str:
        return f"Run({str(self.directory)!r}, step={self.clock.step})"
