"""``torch.optim.lr_scheduler.ReduceLROnPlateau``: the one compat torch scheduler with state.

Its rate depends on the metrics it was given, not on the step, so it is not a pure
schedule: :meth:`ReduceLROnPlateau.step` records a metric, ``schedule(step)`` reads the rate
now, and ``state_dict()`` / ``load_state_dict()`` (JSON-ready, no pickle) carry it through a
:class:`~globalstep.checkpoint.CheckpointManager` so that a resumed run reduces where an
uninterrupted one would. The rules are torch's, operation for operation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from globalstep._clock import check_step
from globalstep._errors import ConfigError
from globalstep.compat._torch_base import (
    check_choice,
    check_rate,
    check_real,
    check_scalar,
    registry,
)
from globalstep.schedules import PlateauRule, Values, check_steps

__all__ = ["ReduceLROnPlateau"]

_STATE = ("lr", "best", "num_bad_epochs", "cooldown_counter", "last_epoch")
# The constructor's arguments, in order: kept under these names, and to_config()'s keys.
_CONFIG = (
    "base_lr",
    "mode",
    "factor",
    "patience",
    "threshold",
    "threshold_mode",
    "cooldown",
    "min_lr",
    "eps",
)


def _state(name: str, doc: str) -> Any:
    """A read-write property showing the rule's state attribute ``name`` under torch's name."""
    return property(
        lambda self: getattr(self, name), lambda self, v: setattr(self, name, v), doc=doc
    )


class ReduceLROnPlateau(PlateauRule):
    """Multiplies the rate by ``factor`` once ``patience`` evaluations pass without improvement.

    Args:
        base_lr: the optimizer's rate until the first reduction.
        mode: ``"min"`` (a lower metric is better) or ``"max"``.
        factor: the multiplier at each reduction, < 1.
        patience: evaluations without improvement tolerated before a reduction.
        threshold: how much better counts as better.
        threshold_mode: ``"rel"`` (a fraction of the best) or ``"abs"``.
        cooldown: evaluations after a reduction during which bad ones do not count.
        min_lr: the rate never goes below this.
        eps: reductions smaller than this are skipped.

    Raises:
        ConfigError: a parameter torch refuses (``factor >= 1``, an unknown mode), or one
            that is not a real number.

    Example:
        >>> lr = ReduceLROnPlateau(base_lr=0.1, patience=1)
        >>> for loss in (1.0, 1.0, 1.0):
        ...     lr.step(loss)
        >>> lr(3), lr.momentum(3)
        (0.010000000000000002, None)
    """

    base_lr: float

    def __init__(
        self,
        base_lr: float,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float = 0,
        eps: float = 1e-8,
    ) -> None:
        check_rate("base_lr", base_lr)
        check_real("factor", factor)
        if factor >= 1.0:
            raise ConfigError("factor", "must be < 1.0 (torch raises ValueError too)", factor)
        check_choice("mode", mode, ("min", "max"))
        check_choice("threshold_mode", threshold_mode, ("rel", "abs"))
        check_scalar("min_lr", min_lr)
        for name, value in (("patience", patience), ("cooldown", cooldown)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(name, "must be an int", value)
        check_real("threshold", threshold)
        check_real("eps", eps)
        values = (base_lr, mode, factor, patience, threshold, threshold_mode, cooldown, min_lr, eps)
        for name, argument in zip(_CONFIG, values, strict=True):
            setattr(self, name, argument)
        self._start(base_lr)

    # torch compares a non-finite metric as it is (see PlateauRule).
    _finite_metrics_only = False
    lr = _state("_value", "The rate now.")
    best = _state("_best", "The best metric so far (``inf`` or ``-inf`` before any).")
    num_bad_epochs = _state("_bad", "Evaluations without improvement since the last one.")
    cooldown_counter = _state("_cooldown_left", "Evaluations of cooldown left.")
    last_epoch = _state("_updates", "Evaluations recorded.")
    min_lr = _state("min_value", "The rate never goes below this.")

    def __repr__(self) -> str:
        return (
            f"ReduceLROnPlateau(base_lr={self.base_lr!r}, mode={self.mode!r}, "
            f"factor={self.factor!r}, patience={self.patience!r}, lr={self.lr!r})"
        )

    def step(self, metrics: Any) -> None:
        """Records one evaluation of the metric (``float(metrics)``, as torch reads it)."""
        self._record(float(metrics))

    def get_last_lr(self) -> list[float]:
        """The rate now, in a list as torch's ``get_last_lr()`` returns it."""
        return [self.lr]

    def __call__(self, step: int) -> float:
        """Returns the rate now (the step is checked, not used: the metrics drive it)."""
        check_step(step)
        return self._value

    def values(self, steps: Any) -> Values:
        """Returns the rate now at every step of ``steps``."""
        return np.full(check_steps(steps).shape, self._value, dtype=np.float64)

    def momentum(self, step: int) -> float | None:
        """None: ReduceLROnPlateau writes no momentum."""
        check_step(step)
        return None

    @property
    def has_momentum(self) -> bool:
        """False: ReduceLROnPlateau writes no momentum."""
        return False

    def state_dict(self) -> dict[str, Any]:
        """Returns the state, JSON-ready (``best`` is None before any improvement)."""
        return {
            "lr": self.lr,
            "best": None if self.best == self._worse else self.best,
            "num_bad_epochs": self.num_bad_epochs,
            "cooldown_counter": self.cooldown_counter,
            "last_epoch": self.last_epoch,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned.

        Raises:
            ConfigError: a key is missing or holds a value of the wrong kind.
        """
        if not isinstance(state, Mapping) or set(state) != set(_STATE):
            raise ConfigError("state", f"must be a mapping with keys {', '.join(_STATE)}", state)
        for key in ("num_bad_epochs", "cooldown_counter", "last_epoch"):
            if isinstance(state[key], bool) or not isinstance(state[key], int):
                raise ConfigError(f"state[{key!r}]", "must be an int", state[key])
        check_real("state['lr']", state["lr"])
        if state["best"] is not None:
            check_real("state['best']", state["best"], finite=False)
        self.lr = float(state["lr"])
        self.best = self._worse if state["best"] is None else float(state["best"])
        self.num_bad_epochs = state["num_bad_epochs"]
        self.cooldown_counter = state["cooldown_counter"]
        self.last_epoch = state["last_epoch"]

    def to_config(self) -> dict[str, Any]:
        """Returns the constructor's arguments (not the state) as a JSON-ready config."""
        return {"class": "ReduceLROnPlateau", "config": {n: getattr(self, n) for n in _CONFIG}}

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and self.to_config() == other.to_config()
            and self.state_dict() == other.state_dict()
        )

    __hash__ = None  # type: ignore[assignment]


registry()["ReduceLROnPlateau"] = ReduceLROnPlateau
