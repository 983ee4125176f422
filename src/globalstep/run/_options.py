"""Run's options: its arguments checked; the checkpoint, writer and display options as values.

:class:`CheckpointOptions` and :class:`WriterOptions` are built and checked once, when the
Run is made, from the ``checkpoint_options`` and ``writer_options`` mappings it was given
(which are never edited): what a rank adds (a distributed manager, a read-only one) is a
field of its own, and each opens its part.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TextIO

from globalstep._clock import MAX_STEP, Clock
from globalstep._errors import ConfigError
from globalstep.checkpoint import LEDGER_FILE, CheckpointManager
from globalstep.run._audit import RunAudit
from globalstep.run._ranks import RankPlan
from globalstep.run._refusals import not_the_writer
from globalstep.run._rollback import Rollback
from globalstep.summary import ProgressDisplay, SummaryWriter, available_formats

__all__ = [
    "CheckpointOptions",
    "ProgressOptions",
    "WriterOptions",
    "check_arguments",
    "clocks_of",
]


def check_arguments(
    directory: Any,
    total_steps: Any,
    rollback: Any,
    flags: Mapping[str, Any],
    log_every: Any,
) -> None:
    """Checks the Run's plain arguments (``flags``: the bools, by name).

    Raises:
        ConfigError: one breaks its rule.
    """
    if not isinstance(directory, str | os.PathLike):
        raise ConfigError("directory", "must be a path", directory)
    if total_steps is not None and (
        isinstance(total_steps, bool)
        or not isinstance(total_steps, int)
        or not 0 <= total_steps <= MAX_STEP
    ):
        raise ConfigError("total_steps", "must be an int in [0, 2**63-1] or None", total_steps)
    if rollback is not None and not isinstance(rollback, Rollback):
        raise ConfigError("rollback", "must be a globalstep.run.Rollback or None", rollback)
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise ConfigError(name, "must be a bool", flag)
    if isinstance(log_every, bool) or not isinstance(log_every, int) or log_every < 1:
        raise ConfigError("log_every", "must be an int >= 1", log_every)


def clocks_of(clock: Clock | None, clocks: Sequence[Clock]) -> dict[str, Clock]:
    """Returns every clock by name, the one that updates tick first (``Clock()`` for None).

    Raises:
        ConfigError: a clock that is not one, or two of the same name.
    """
    clock = Clock() if clock is None else clock
    if not isinstance(clock, Clock):
        raise ConfigError("clock", "must be a globalstep Clock", clock)
    if isinstance(clocks, Clock) or not all(isinstance(c, Clock) for c in clocks):
        raise ConfigError("clocks", "must be a sequence of globalstep Clocks", clocks)
    out = {clock.name: clock}
    for other in clocks:
        if other.name in out:
            raise ConfigError("clocks", "must have distinct names", other.name)
        out[other.name] = other
    return out


@dataclass(frozen=True)
class CheckpointOptions:
    """The Run's :class:`~globalstep.checkpoint.CheckpointManager` keywords, for this rank.

    Attributes:
        keywords: the ``checkpoint_options`` given (read only).
        distributed: the ``distributed`` keyword the manager gets: the given one, or, on
            several ranks of an initialised process group, options naming the writer rank;
            None leaves the manager's default.
        read_only: this rank only reads the checkpoints (not the writer, and not every
            rank saves).
        all_ranks_save: every rank takes part in each save.
    """

    keywords: Mapping[str, Any]
    distributed: Any
    read_only: bool
    all_ranks_save: bool

    @classmethod
    def build(
        cls, options: Mapping[str, Any] | None, plan: RankPlan, fast_tier: Any = None
    ) -> CheckpointOptions:
        """Returns the options of ``checkpoint_options`` (and Run's ``fast_tier``) on the
        rank that ``plan`` says.

        On several ranks of an initialised process group the manager saves on every rank
        (the writer rank writes the replicated state and commits; sharded tensors are
        written by the rank holding them), unless ``distributed`` says otherwise. Before
        the group exists (ranks known from torchrun's variables), or with
        ``distributed=False``, the writer alone saves and the others only read.

        Raises:
            ConfigError: ``options`` holds ``save_every`` or ``fast_tier`` (Run's own
                parameters), or a fast tier on several ranks.
        """
        keywords = MappingProxyType(dict(options or {}))
        for name in ("save_every", "fast_tier"):
            if name in keywords:
                raise ConfigError(
                    "checkpoint_options",
                    f"must not hold {name}",
                    keywords[name],
                    hint=f"Pass {name} to Run: it saves after flushing the logs.",
                )
        if fast_tier is not None and plan.ranks is not None:
            raise ConfigError(
                "fast_tier",
                "is not supported on several ranks, nor with ranks= (each machine would "
                "restore from its own fast tier, at different steps); save to the durable "
                "directory alone",
                fast_tier,
            )
        if fast_tier is not None:
            keywords = MappingProxyType({**keywords, "fast_tier": fast_tier})
        chosen = keywords.get("distributed")
        all_ranks = plan.ranks is not None and plan.grouped
        if all_ranks and "distributed" not in keywords:
            from globalstep.checkpoint import DistributedOptions

            assert plan.ranks is not None
            chosen = DistributedOptions(writer_rank=plan.ranks.writer, group=plan.group)
        elif all_ranks and not chosen:
            all_ranks = False
        read_only = not all_ranks and not plan.is_writer
        return cls(keywords, chosen, read_only, all_ranks)

    def open(self, run: Path) -> CheckpointManager:
        """Opens the manager in the run's ``checkpoints/`` with these options, its ledger
        in ``run`` (``ledger.jsonl``) unless the options name one (``ledger=False``: none).

        Raises:
            ConfigError, LockError: as :class:`~globalstep.checkpoint.CheckpointManager`.
        """
        keywords = dict(self.keywords)
        keywords.setdefault("ledger", run / LEDGER_FILE)
        if self.distributed is not None:
            keywords["distributed"] = self.distributed
        if self.read_only:
            keywords["read_only"] = True
        return CheckpointManager(run / "checkpoints", **keywords)


@dataclass(frozen=True)
class WriterOptions:
    """The Run's :class:`~globalstep.summary.SummaryWriter` keywords.

    Attributes:
        keywords: the ``writer_options`` given, with ``formats`` defaulting to every
            format available here (read only).
        audit: the Run's resume audit, handed to the writer as it opens.
    """

    keywords: Mapping[str, Any]
    audit: RunAudit

    @classmethod
    def build(cls, options: Mapping[str, Any] | None, audit: RunAudit) -> WriterOptions:
        """Returns the options of ``writer_options``, with the Run's ``audit``.

        Raises:
            ConfigError: ``options`` holds ``clock`` (the Run's clock is the writer's).
        """
        keywords = dict(options or {})
        if "clock" in keywords:
            raise ConfigError("writer_options", "must not hold clock (the Run's is used)", None)
        keywords.setdefault("formats", available_formats())
        return cls(MappingProxyType(keywords), audit)

    def unsent(self, directory: Path) -> bool:
        """Whether a tracker format of these options has points in ``directory``'s record
        that an earlier process left unsent (an outage): a writer opening there sends
        them, so a Run opens its writer even where no update follows (a complete run)."""
        from globalstep.summary import has_unsent

        return has_unsent(str(directory), self.keywords["formats"])

    def open(
        self, directory: Path, clock: Clock, config: Mapping[str, Any], *, is_writer: bool
    ) -> SummaryWriter:
        """Opens the writer in ``directory`` on ``clock`` with these options, and hands the
        run's ``config`` (:func:`~globalstep.run._config.run_config`'s) to its tracker
        formats as the tracker run's parameters: the user's ``config`` at the top, the
        schedules and clocks under ``globalstep`` (``globalstep.schedules.lr...``).

        Raises:
            ConfigError: this is not the writer rank (``is_writer`` False).
        """
        if not is_writer:
            not_the_writer()
        writer = SummaryWriter(directory, clock=clock, **self.keywords)
        params = dict(config.get("config") or {})
        params["globalstep"] = {k: v for k, v in config.items() if k != "config"}
        writer.set_params(params)
        self.audit.attach(writer)
        return writer


@dataclass(frozen=True)
class ProgressOptions:
    """The Run's progress display: whether it shows one, every how many steps, where.

    Attributes:
        show: the ``progress`` flag.
        every_n_steps: the ``log_every`` steps between plain lines.
        stream: where the display goes (the run's messages too).
    """

    show: bool
    every_n_steps: int
    stream: TextIO

    def open(self, clock: Clock, total_steps: int | None) -> ProgressDisplay | None:
        """Opens the display on ``clock`` (None where it is not shown)."""
        if not self.show:
            return None
        return ProgressDisplay(
            clock, total_steps or None, every_n_steps=self.every_n_steps, stream=self.stream
        )
