"""Ranks: how a :class:`~globalstep.run.Run` behaves on several ranks (torch.distributed's,
or a TensorFlow multi-worker run's: any engine of :mod:`globalstep._group`).

:class:`Ranks` is the user's choice (the writer rank, the reduction of the scalars, the
step checks); :class:`RankPlan` is what this process does with it, decided once when the
Run is made (whether it writes, whether every rank saves, what it does per update).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from globalstep import distributed
from globalstep._clock import Clock
from globalstep._errors import ConfigError
from globalstep._group import active, check_writer_rank, how_to_initialise
from globalstep.distributed import Preemption

__all__ = ["RankPlan", "Ranks"]


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
    the writer logs them. A stop signal received by any rank (see the Run's
    ``stop_signals``) stops every rank at one common update, within ``2 * stop_every``
    updates of it (:class:`~globalstep.distributed.Preemption`: every ``stop_every``
    updates each rank looks for a request in the process group's Store, one round trip
    and no collective; the rank that got the signal writes it there).
    A Run on several ranks uses ``Ranks()`` unless told otherwise.

    Args:
        writer: the rank that writes, >= 0 (and below the world size).
        reduce: ``"mean"``, ``"sum"``, ``"max"`` or ``"min"`` to reduce the scalars;
            None (the default) logs the writer's own values. A
            :class:`~globalstep.run.Rollback` policy decides on every rank's value of its
            tag, gathered at each update (one small collective), reduced by this operation
            (the mean where it is None): the same decision on every rank.
        check_every: updates between step agreement checks, >= 1; None never checks.
        stop_every: updates between two looks at the Store for a stop request, >= 1
            (fewer: a sooner stop, one more Store round trip per update; 10 by default:
            a stop within 20 updates).

    Raises:
        ConfigError: a field breaks its rule.

    Example:
        >>> Ranks(reduce="mean")
        Ranks(writer=0, reduce='mean', check_every=100, stop_every=10)
    """

    writer: int = 0
    reduce: str | None = None
    check_every: int | None = 100
    stop_every: int = 10

    def __post_init__(self) -> None:
        check_writer_rank(self.writer, name="writer")
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
        stop = self.stop_every
        if isinstance(stop, bool) or not isinstance(stop, int) or stop < 1:
            raise ConfigError("stop_every", "must be an int >= 1", stop)


@dataclass(frozen=True)
class RankPlan:
    """What this process does on its rank, decided once (see :meth:`build`).

    Attributes:
        ranks: the Ranks in force, or None on one process.
        size: the world size.
        is_writer: whether this rank writes summaries, progress and checkpoints.
        check: the step agreement that each update calls, or None.
        grouped: several ranks in an initialised process group (every rank can save).
        per_update: whether :meth:`update` has anything to do on this rank.
        stop: the stop agreement :meth:`update` polls (see :meth:`polling`), or None.
    """

    ranks: Ranks | None
    size: int
    is_writer: bool
    check: distributed.StepAgreement | None
    grouped: bool
    per_update: bool
    stop: Preemption | None = None

    @classmethod
    def build(cls, ranks: Ranks | None, rollback: Any) -> RankPlan:
        """Returns the plan for ``ranks`` (None: ``Ranks()`` on several ranks) in this world.

        Raises:
            ConfigError: ``ranks`` is not a Ranks, its writer is not below the world size,
                or a ``rollback`` policy is given on several ranks without a process group.
        """
        if ranks is not None and not isinstance(ranks, Ranks):
            raise ConfigError("ranks", "must be a globalstep.run.Ranks or None", ranks)
        group = active()
        size = group.world_size
        if ranks is None and size > 1:
            ranks = Ranks()
        is_writer = ranks is None or group.is_writer(ranks.writer, name="ranks.writer")
        check = (
            distributed.StepAgreement(ranks.check_every)
            if ranks is not None and ranks.check_every is not None and size > 1
            else None
        )
        grouped = size > 1 and group.connected
        if rollback is not None and size > 1 and not grouped:
            raise ConfigError(
                "rollback",
                "needs an initialised process group on several ranks (the ranks decide on "
                "every rank's loss together)",
                rollback,
                hint=f"This run has {size} ranks from WORLD_SIZE but no process group: call "
                f"one of {how_to_initialise()} before making the Run.",
            )
        per_update = ranks is not None and (
            check is not None or ranks.reduce is not None or not is_writer
        )
        return cls(ranks, size, is_writer, check, grouped, per_update)

    def polling(self, stop: Preemption) -> RankPlan:
        """Returns this plan polling ``stop`` at each update, where it agrees over ranks."""
        if not stop.distributed:
            return self
        return dataclasses.replace(self, stop=stop, per_update=True)

    def update(self, scalars: dict[str, Any], clock: Clock) -> dict[str, Any]:
        """Polls the stop agreement, checks the steps when due, reduces the scalars, and
        returns what this rank logs (nothing, off the writer rank)."""
        stop = self.stop
        if stop is not None:
            stop.poll()  # an agreed stop calls the Run back (see run._signals)
        check = self.check
        if check is not None:
            check(clock)
        ranks = self.ranks
        assert ranks is not None
        if ranks.reduce is not None:
            scalars = distributed.reduce_metrics(scalars, op=ranks.reduce)
        return scalars if self.is_writer else {}
