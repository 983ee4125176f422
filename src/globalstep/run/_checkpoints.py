"""The Run's checkpoints: the tree it stores, when it saves, and the step saved last.

A Run's checkpoint holds its own part beside the state tree, ``{"run": {...}, "state":
...}``: the clocks, the data position, the save trigger's state and the configuration (one
JSON string, see :mod:`globalstep.run._config`) and, where a save comes between a skipped
update and the next applied one, the skipped attempts pending (``"skipped"``, a JSON string,
see :mod:`globalstep.run._skipped`). When to save is the
:class:`~globalstep.checkpoint._save_trigger.SaveTrigger` of ``save_every`` (the part that
the CheckpointManager's own ``save_every`` uses); its state is stored in the run part,
where checkpoints written before this module kept it too, so that a resumed run saves
where an uninterrupted one would.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from globalstep._clock import MAX_STEP, Clock
from globalstep._errors import CorruptCheckpointError
from globalstep.checkpoint import CheckpointManager, SaveTrigger
from globalstep.run._config import check_drift, stored_config
from globalstep.run._skipped import Skipped, stored_skipped
from globalstep.run._stale import StaleCheck

__all__ = ["RunCheckpoints"]


class RunCheckpoints:
    """What a Run saves and restores, through its manager, and when.

    Args:
        manager: the run's CheckpointManager.
        trigger: the save trigger of the Run's ``save_every`` (None: none).
        clocks: every clock by name, the one that updates tick first.
        config: the configuration to store (as JSON, see :mod:`globalstep.run._config`).
        writes: whether this rank writes checkpoints (the writer rank, or every rank of a
            distributed manager); a rank that does not only notes the steps saved.

    Attributes:
        manager: the CheckpointManager.
        trigger: the save trigger, or None.
        fast: the fast tier's save trigger (the manager's ``fast_tier``), or None.
        saved_step: the step saved (or restored) last by this run in the durable
            directory, or None.
        next_check: the step from which :meth:`due` can be True.
        skipped: the skipped attempts pending (see :mod:`globalstep.run._skipped`),
            saved and restored with the run part.
        writes: as given.
    """

    def __init__(
        self,
        manager: CheckpointManager,
        trigger: SaveTrigger | None,
        clocks: dict[str, Clock],
        config: dict[str, Any],
        *,
        writes: bool,
    ) -> None:
        self.manager = manager
        self.trigger = trigger
        fast = manager.fast_tier
        self.fast = SaveTrigger(fast.save_every) if fast is not None else None
        self.saved_step: int | None = None
        self._fast_saved: int | None = None
        self._due: tuple[str, ...] = ()  # the tiers that due() found due, for save()
        self.next_check = 0
        self.writes = writes
        self.skipped = Skipped()
        self._clocks = clocks
        self._clock = next(iter(clocks.values()))
        self._config = json.dumps(config, sort_keys=True)
        self._metrics: dict[str, float] = {}  # the scalars of the update that made a save due

    def tree(self, state: Any, data_position: int, skipped: str | None) -> dict[str, Any]:
        """Returns the tree a checkpoint holds: the run part (with ``skipped``, the pending
        skipped attempts, where not None) and ``state``."""
        trigger = self.trigger
        part = {
            "clocks": dict(self._clocks),
            "data_position": data_position,
            "save_trigger": trigger.state_dict() if trigger is not None else None,
            "config": self._config,
        }
        if skipped is not None:
            part["skipped"] = skipped
        return {"run": part, "state": state}

    def load(self, step: int, state: Any, data_position: int) -> tuple[Any, int]:
        """Restores ``step``'s checkpoint into ``state`` and the clocks (in place) and the
        save trigger; returns the state tree and the data position restored.

        Raises:
            CheckpointError: as :meth:`CheckpointManager.restore
                <globalstep.checkpoint.CheckpointManager.restore>`.
        """
        held = stored_skipped(self.manager.document(step))
        tree = self.manager.restore(self.tree(state, data_position, held), step=step)
        part = tree["run"]
        self.skipped.load(part.get("skipped"))
        position = int(part["data_position"])
        if self.trigger is not None:
            # Another save_every than the checkpoint's: fire only at boundaries ahead.
            self.trigger.resume(part.get("save_trigger"), self._clock)
        if self.fast is not None:
            self.fast.restart(self._clock)
        restored = self.manager.last_restore
        fast = restored is not None and restored.tier == "fast"
        self.saved_step, self._fast_saved = (None, step) if fast else (step, None)
        self.next_check = 0
        return tree["state"], position

    def resume(
        self, state: Any, data_position: int, config: dict[str, Any], *, strict: bool, run: Path
    ) -> tuple[int | None, Any, int]:
        """Restores the newest checkpoint, where there is one, once its stored configuration
        was compared with ``config`` (see :func:`~globalstep.run._config.check_drift`;
        ``run``, the run's directory, is named in its warning).

        Returns:
            The step restored (None: no checkpoint, nothing touched), the state tree and
            the data position.

        Raises:
            ConfigError: the configuration differs and ``strict`` is True.
            CheckpointError: as :meth:`load`.
        """
        manager = self.manager
        while (latest := manager.latest_step()) is not None:
            try:
                saved = stored_config(manager.document(latest))
                check_drift(saved, config, strict=strict, directory=run, step=latest, stacklevel=4)
                state, position = self.load(latest, state, data_position)
            except CorruptCheckpointError:
                if latest in manager.steps():
                    raise
                continue  # a fast tier's checkpoint, set aside: the next newest
            return latest, state, position
        return None, state, data_position

    def source(self) -> str | None:
        """Where the last restore read from, where a fast tier is set (else None): the
        fast tier, or the durable directory and why not the fast tier."""
        restored, fast = self.manager.last_restore, self.manager.fast_tier
        if restored is None or fast is None:
            return None
        fast_path, why = os.fspath(fast.path), restored.fell_back_from
        if restored.tier == "fast":
            return f"fast tier {fast_path}; {why}" if why else f"fast tier {fast_path}"
        return f"{self.manager.directory}; fast tier {fast_path}: {why}" if why else None

    def due(self, scalars: dict[str, Any]) -> bool:
        """Asks the save triggers (the durable directory's, the fast tier's) at the clock's
        step, keeping ``scalars`` as the metrics of the save they make due and the tiers
        due for the next :meth:`save`; returns whether one is, and notes the next step
        worth asking (see
        :meth:`SaveTrigger.next_due <globalstep.checkpoint._save_trigger.SaveTrigger.next_due>`)."""
        clock, due, upcoming = self._clock, [], MAX_STEP + 1
        for tier, saves in (("durable", self.trigger), ("fast", self.fast)):
            if saves is None:
                continue
            # Its trigger asked directly: for one that is not of whole steps this runs at
            # every update, and next_check stays 0.
            if saves.trigger.should_fire(clock):
                due.append(tier)
            upcoming = min(upcoming, 0 if saves.grid is None else saves.next_due(clock.step))
        self.next_check = upcoming
        if due:
            self._metrics = scalars
        self._due = tuple(due)
        return bool(due)

    def save(self, state: Any, data_position: int, stale: StaleCheck | None) -> StaleCheck | None:
        """Saves a checkpoint at the clock's step in each tier that :meth:`due` found due
        (the fast tier first; the durable directory alone when called otherwise), with the
        numbers of the scalars that made it due as its metrics (the manager flushes and
        fsyncs the logs first); returns the stale check still to make at the next save.

        A step saved (or restored) already is not saved again; a rank that does not write
        only notes the step. ``stale`` is the tree that ``restore()`` returned, noted then:
        where it is the tree to save after updates, every array unchanged, or it still
        holds plain values restore() could not put in the loop's own objects (see
        :mod:`~globalstep.run._stale`), the save is refused; where it changed, it is not
        asked again (a tree that changes goes on changing).

        Raises:
            ConfigError: the tree to save is the stale one.
            CheckpointError: the save failed.
        """
        step, tiers, self._due = self._clock.step, self._due or ("durable",), ()
        if "fast" in tiers and step != self._fast_saved:
            stale = self._save(state, data_position, stale, "fast")
            self._fast_saved = step
        if "durable" not in tiers or step == self.saved_step:
            return stale
        if self.writes:
            stale = self._save(state, data_position, stale, "durable")
        self.saved_step = step
        return stale

    def _save(
        self, state: Any, data_position: int, stale: StaleCheck | None, tier: str
    ) -> StaleCheck | None:
        """One tier's save (see :meth:`save`)."""
        clock, manager = self._clock, self.manager
        step = clock.step
        if stale is not None and step != stale.step:
            stale.refuse_stale(state, step)
            stale = None
        metrics = {}
        for tag, value in self._metrics.items():
            if isinstance(value, int | float | np.integer | np.floating) and not isinstance(
                value, bool | np.bool_
            ):
                metrics[tag] = value
        manager.save(
            clock,
            self.tree(state, data_position, self.skipped.to_json()),
            metrics=metrics,
            force=step in manager.steps(),
            # The save makes the curves up to `step` durable before it commits (on the
            # save's thread when it is async): the writer is registered for every save.
            tier="fast" if tier == "fast" else "durable",
        )
        return stale
