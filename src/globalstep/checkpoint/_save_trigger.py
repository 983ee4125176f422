"""The save trigger: when a checkpoint is due (``save_every``), and the state it stores.

One owner of "is a save due?" for the manager's :meth:`~CheckpointManager.maybe_save` and
for :class:`~globalstep.Run`: the trigger made from ``save_every``, the state that a
checkpoint stores so that a resumed run saves where an uninterrupted one would, and, for a
trigger of whole steps (``save_every=500``), the next step at which it can fire, so that a
hot loop need not ask it at every update.

Example:
    >>> from globalstep import Clock
    >>> trigger, clock = SaveTrigger(100), Clock()
    >>> clock.tick(250)
    >>> trigger.due(clock), trigger.due(clock), trigger.next_due(clock.step)
    (True, False, 300)
    >>> SaveTrigger("1ep").grid is None  # not whole steps: ask at every update
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from globalstep._clock import Clock, Progress
from globalstep._errors import ConfigError
from globalstep._triggers import Trigger, every
from globalstep._units import Duration, DurationLike, Unit

__all__ = ["SaveTrigger"]


class SaveTrigger:
    """When a save is due: ``save_every`` as a trigger, with its state and its step grid.

    Args:
        save_every: a duration (``500``, ``"1ep"``, ``"30min"``) or a
            :class:`~globalstep._triggers.Trigger`.

    Raises:
        ConfigError: ``save_every`` is not a duration or a Trigger.

    Attributes:
        trigger: the trigger that decides (``every(save_every)`` for a duration).
        grid: ``(interval, start)`` where the trigger fires at ``start + k * interval``
            steps only (a whole number of steps); None otherwise.
    """

    __slots__ = ("_spec", "grid", "trigger")

    def __init__(self, save_every: DurationLike | Trigger) -> None:
        self._spec = save_every
        self.grid: tuple[int, int] | None = None
        if isinstance(save_every, Trigger):
            self.trigger = save_every
            return
        self.trigger = every(save_every)
        duration = Duration.parse(save_every, "save_every")
        if duration.unit is Unit.STEPS and duration.value.denominator == 1:
            interval = int(duration.value)
            self.grid = (interval, interval)

    @classmethod
    def of(cls, save_every: DurationLike | Trigger | None) -> SaveTrigger | None:
        """Returns the save trigger of a ``save_every`` option, or None for None."""
        return None if save_every is None else cls(save_every)

    def due(self, progress: Progress | Clock) -> bool:
        """Returns whether a save is due at ``progress`` (the trigger's ``should_fire``:
        True at most once per boundary crossed)."""
        return self.trigger.should_fire(progress)

    def next_due(self, step: int) -> int:
        """Returns the smallest step above ``step`` at which :meth:`due` can be True.

        For a trigger of whole steps (``grid``), the next grid point: below it ``due`` is
        False whatever the trigger's state. Otherwise ``step + 1``: ask at every update.
        """
        if self.grid is None:
            return step + 1
        interval, start = self.grid
        if step < start:
            return start
        return start + ((step - start) // interval + 1) * interval

    def state_dict(self) -> dict[str, Any]:
        """Returns the trigger's state, as a checkpoint stores it."""
        return self.trigger.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores a state from :meth:`state_dict`.

        Raises:
            ConfigError: the state is another trigger's.
        """
        self.trigger.load_state_dict(state)

    def resume(
        self, saved: Mapping[str, Any] | None, clock: Progress | Clock | None = None
    ) -> bool:
        """Restores the state a checkpoint stored; returns whether it did.

        Where nothing was stored (None) or the state is another trigger's (another
        ``save_every`` than the checkpoint's), the trigger keeps its own state, or, given
        ``clock``, skips past it so that it fires only at boundaries ahead.
        """
        if saved is not None:
            try:
                self.load_state_dict(saved)
            except ConfigError:
                pass
            else:
                return True
        if clock is not None:
            self.trigger.skip_past(clock)
        return False

    def restart(self, clock: Progress | Clock) -> None:
        """Starts again at ``clock`` (a rewind to an older step): fires only at boundaries
        ahead of it. A ``save_every`` given as a Trigger object keeps its state (it cannot
        be made anew) and skips past ``clock``."""
        if not isinstance(self._spec, Trigger):
            self.trigger = every(self._spec)
        self.trigger.skip_past(clock)

    def __repr__(self) -> str:
        return f"SaveTrigger({self.trigger!r})"
