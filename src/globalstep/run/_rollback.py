"""Rollback: the policy for bad updates, and the watch that a Run keeps of its tag.

:class:`Rollback` says when an update is bad (its tag not finite, or a spike above the
running median) and what a rollback skips; :class:`Watch` holds the running state (the
last good values, their median, the recent rollbacks) and answers for each update. The Run
does the rollback itself (restore the checkpoint, move the data position on, log it):
:meth:`Watch.admit`, :meth:`Watch.target` and :meth:`Watch.record` are its steps.

On several ranks of a process group the watch decides on every rank's value together:
each update gathers every rank's value of the tag (:func:`~globalstep.distributed.gather_floats`,
one small collective), the update is bad where any rank's value is not finite or where
their reduction spikes, and the writer rank chooses the step to restore
(:func:`~globalstep.distributed.broadcast_int`), so that every rank takes the same
decision at the same update, restores the same step and skips the same batches.
"""

from __future__ import annotations

import collections
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from globalstep import distributed
from globalstep._errors import ConfigError, DivergenceError
from globalstep.checkpoint import CheckpointManager
from globalstep.run._ranks import RankPlan
from globalstep.summary import SummaryWriter

__all__ = ["Bad", "Rollback", "Watch"]


@dataclass(frozen=True)
class Rollback:
    """When and how :class:`Run` rolls back a bad update.

    An update is bad when its ``tag`` scalar (the loss) is not finite, or exceeds
    ``spike_factor`` times the median of the last ``median_of`` good values (once that many
    are known). The run then restores the newest checkpoint at or before the bad step,
    moves the data position on by ``skip_batches`` batches past the bad one, marks the
    restart in the logs, records the event (tags ``run/rollback_from_step`` and a text
    ``run/rollback``), and goes on. More than ``max_rollbacks`` rollbacks within
    ``window_steps`` steps raise :class:`~globalstep._errors.DivergenceError` naming the bad
    steps.

    On several ranks (a process group, see :class:`~globalstep.run.Ranks`) the decision is
    made on every rank's value together, the same on every rank: an update is bad where
    the tag is not finite on any rank, or where the ranks' values reduced (by
    ``Ranks.reduce``'s operation; the mean where it is None) spike. Every rank then rolls
    back at the same update to the same step (the newest checkpoint the writer rank sees)
    and moves its data position on by the same ``skip_batches``. This costs one small
    collective per update (every rank's value of the tag gathered), and every rank must
    pass the tag to :meth:`Run.update` at the same updates (a rank without it, or with a
    value that is not a number, raises on every rank).

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


@dataclass(frozen=True)
class Bad:
    """A bad update: its tag's ``value`` at ``step``, and why it is bad."""

    value: float
    step: int
    reason: str


class Watch:
    """The running state of a :class:`Rollback` policy over a run's updates.

    Args:
        policy: the policy.
        plan: the run's rank plan; on several ranks of a process group the watch decides
            on every rank's value together (see :class:`Rollback`). None: one process.
    """

    def __init__(self, policy: Rollback, plan: RankPlan | None = None) -> None:
        self.policy = policy
        self._plan = plan if plan is not None and plan.grouped else None
        self._losses: collections.deque[float] = collections.deque(maxlen=policy.median_of)
        self._median = math.inf
        self._since_median = 0
        self._rollbacks: list[int] = []  # the bad steps rolled back from, within the window

    def check(self, scalars: Mapping[str, Any], step: int) -> Bad | None:
        """Returns the update's badness, or None where it is good (its value then joins
        the running median) or carries no value of the tag.

        On several ranks every rank must call it at the same update (see :class:`Rollback`).

        Raises:
            ConfigError: the tag's value is not a number; on several ranks, on any rank, or
                the tag was given on some ranks only (raised on every rank).
        """
        policy = self.policy
        if self._plan is not None:
            agreed = self._agreed(scalars, step)
            if agreed is None or isinstance(agreed, Bad):
                return agreed
            value = agreed
        elif policy.tag not in scalars:
            return None
        else:
            value = _number(policy.tag, scalars[policy.tag])
            if not math.isfinite(value):
                return Bad(value, step, "not finite")
        losses = self._losses
        if len(losses) == policy.median_of:
            self._since_median += 1
            if self._since_median >= max(1, policy.median_of // 10) or not math.isfinite(
                self._median
            ):
                self._median, self._since_median = statistics.median(losses), 0
            if value > policy.spike_factor * self._median and self._median > 0:
                reason = f"above {policy.spike_factor} x the median {self._median:.6g}"
                return Bad(value, step, reason)
        losses.append(value)
        return None

    def _agreed(self, scalars: Mapping[str, Any], step: int) -> float | Bad | None:
        """Every rank's value of the tag, gathered: the update's badness, the values reduced
        (to check for a spike), or None where no rank gave the tag; the same on every rank.

        Raises:
            ConfigError: a rank gave a value that is not a number, or the tag was given on
                some ranks only.
        """
        plan, tag = self._plan, self.policy.tag
        assert plan is not None
        assert plan.ranks is not None
        status, value, error = _ABSENT, 0.0, None
        if tag in scalars:
            try:
                status, value = _GIVEN, _number(tag, scalars[tag])
            except ConfigError as err:
                status, error = _INVALID, err
        rows = distributed.gather_floats([status, value], group=plan.group)
        if error is not None:
            raise error
        statuses = [int(row[0]) for row in rows]
        invalid = [r for r, s in enumerate(statuses) if s == _INVALID]
        if invalid:
            raise ConfigError(
                tag,
                "must be a number for the rollback policy on every rank",
                f"not a number on {_on(invalid)} at step {step}",
            )
        given = [r for r, s in enumerate(statuses) if s == _GIVEN]
        if not given:
            return None
        if len(given) < len(rows):
            raise ConfigError(
                tag,
                "must be passed to Run.update on every rank or on none, where a rollback "
                "policy watches it on several ranks",
                f"passed on {_on(given)} of {len(rows)} at step {step}",
                hint="Pass it at every update on every rank: the ranks decide together.",
            )
        values = [row[1] for row in rows]
        odd = [r for r, v in enumerate(values) if not math.isfinite(v)]
        if odd:
            return Bad(values[odd[0]], step, f"not finite on {_on(odd)}")
        op = plan.ranks.reduce or "mean"
        if op == "max":
            return max(values)
        if op == "min":
            return min(values)
        total = math.fsum(values)
        return total / len(values) if op == "mean" else total

    def _recent(self, bad: Bad) -> list[int]:
        return [s for s in self._rollbacks if s > bad.step - self.policy.window_steps]

    def admit(self, bad: Bad) -> None:
        """Checks that one more rollback is allowed within the window.

        Raises:
            DivergenceError: ``max_rollbacks`` were made within ``window_steps`` already.
        """
        policy, recent = self.policy, self._recent(bad)
        if len(recent) >= policy.max_rollbacks:
            steps = [*recent, bad.step]
            raise DivergenceError(
                f"`{policy.tag}` was bad at steps {steps} ({bad.value!r} at step {bad.step}: "
                f"{bad.reason}), more than max_rollbacks={policy.max_rollbacks} rollbacks "
                f"within window_steps={policy.window_steps}; the run stops. Lower the learning "
                "rate or check the data around these steps.",
                steps,
            )

    def target(self, bad: Bad, checkpoints: CheckpointManager) -> int:
        """Returns the step to roll back to: the newest checkpoint at or before the bad one
        (once one more rollback was found allowed, see :meth:`admit`, and the saves in
        flight were waited for). On several ranks every rank calls it, and every rank gets
        the step the writer rank found.

        Raises:
            DivergenceError: one more rollback is not allowed, or there is no checkpoint to
                roll back to.
        """
        self.admit(bad)
        checkpoints.wait()
        directory = checkpoints.directory
        candidates = [s for s in checkpoints.steps() if s <= bad.step]
        chosen = candidates[-1] if candidates else -1
        plan = self._plan
        if plan is not None and plan.ranks is not None:
            # The writer's view of the committed steps decides for every rank.
            chosen = distributed.broadcast_int(chosen, src=plan.ranks.writer, group=plan.group)
        if chosen < 0:
            raise DivergenceError(
                f"`{self.policy.tag}` was {bad.value!r} at step {bad.step} ({bad.reason}) and "
                f"there is no checkpoint at or before it in {directory} to roll back to; "
                "pass save_every to Run.",
                [bad.step],
            )
        return chosen

    def record(self, bad: Bad, writer: SummaryWriter | None, target: int, position: int) -> str:
        """Notes the rollback from ``bad`` to ``target`` (the median starts again), marks it in
        the logs (the restart, ``run/rollback_from_step`` and the text ``run/rollback``;
        nothing where ``writer`` is None, off the writer rank), and returns the message to
        print."""
        self._rollbacks = [*self._recent(bad), bad.step]
        self._median, self._since_median = math.inf, 0
        policy = self.policy
        message = (
            f"rolled back: `{policy.tag}` was {bad.value:.6g} at step {bad.step} ({bad.reason}); "
            f"restored step {target}, skipped {policy.skip_batches} batches after the bad one "
            f"(data position {position})"
        )
        if writer is not None:
            writer.restart(target + 1)
            writer.scalar("run/rollback_from_step", float(bad.step), step=target)
            writer.text("run/rollback", message, step=target)
        return message


_ABSENT, _GIVEN, _INVALID = 0, 1, 2  # what a rank had of the tag, as gathered


def _number(tag: str, raw: Any) -> float:
    try:
        return float(raw.item() if hasattr(raw, "item") else raw)
    except (TypeError, ValueError) as err:
        raise ConfigError(tag, "must be a number for the rollback policy", raw) from err


def _on(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
