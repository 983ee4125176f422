"""Reduce-on-plateau: a stateful schedule driven by a metric, not by the step alone.

It follows PyTorch's ``ReduceLROnPlateau`` rules: after more than ``patience`` updates
without improvement the value is multiplied by ``factor`` (never below ``min_value``), then
``cooldown`` updates pass before bad updates count again. Its state round-trips through
``state_dict()`` so that a resumed run reduces exactly where an uninterrupted run would.

Example:
    >>> lr = ReduceOnPlateau(0.1, patience=1)
    >>> [lr.update(loss) for loss in (1.0, 1.0, 1.0)]
    [0.1, 0.1, 0.010000000000000002]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from globalstep._clock import check_step
from globalstep._errors import ConfigError
from globalstep.schedules._base import (
    check_choice,
    check_number,
    check_range,
    check_steps,
)

__all__ = ["ReduceOnPlateau"]

_STATE_KEYS = ("value", "best", "bad_updates", "cooldown_left", "updates")


class PlateauRule:
    """PyTorch's ``ReduceLROnPlateau`` rules, the one implementation that
    :class:`ReduceOnPlateau` and :class:`globalstep.compat.torch.ReduceLROnPlateau` share.

    A subclass checks its parameters, sets ``mode``, ``factor``, ``patience``,
    ``threshold``, ``threshold_mode``, ``cooldown``, ``min_value`` and ``eps``, calls
    :meth:`_start` with the initial value, and passes each metric to :meth:`_record`; the
    state lives in ``_value``, ``_best``, ``_bad``, ``_cooldown_left`` and ``_updates``,
    which the subclass shows under its own names.
    """

    #: Whether a NaN or infinite metric counts as no improvement. globalstep's
    #: ReduceOnPlateau says so; torch compares it as it is (``-inf`` improves on any best in
    #: ``"min"`` mode, NaN never improves), and so does its compat twin.
    _finite_metrics_only: ClassVar[bool] = True

    mode: str
    factor: float
    patience: int
    threshold: float
    threshold_mode: str
    cooldown: int
    min_value: float
    eps: float
    _value: float
    _best: float

    def _start(self, initial: float) -> None:
        """Sets the state of a fresh rule: ``initial`` as the value, no best yet."""
        self._worse = math.inf if self.mode == "min" else -math.inf
        self._value = initial
        self._best = self._worse
        self._bad = 0
        self._cooldown_left = 0
        self._updates = 0

    def _is_better(self, metric: float) -> bool:
        """Whether ``metric`` improves on the best so far, by torch's ``is_better``."""
        best = self._best
        if self._finite_metrics_only and not math.isfinite(metric):
            return False
        if self.mode == "min" and self.threshold_mode == "rel":
            return metric < best * (1.0 - self.threshold)
        if self.mode == "min":
            return metric < best - self.threshold
        if self.threshold_mode == "rel":
            return metric > best * (self.threshold + 1.0)
        return metric > best + self.threshold

    def _record(self, metric: float) -> None:
        """One evaluation of ``metric`` (a float), as torch's ``step(metrics)``."""
        self._updates += 1
        if self._is_better(metric):
            self._best = metric
            self._bad = 0
        else:
            self._bad += 1
        if self._cooldown_left > 0:
            self._cooldown_left -= 1
            self._bad = 0
        if self._bad > self.patience:
            old = float(self._value)
            new = max(old * self.factor, self.min_value)
            if old - new > self.eps:
                self._value = new
            self._cooldown_left = self.cooldown
            self._bad = 0


class ReduceOnPlateau(PlateauRule):
    """Multiplies the value by ``factor`` when ``metric`` stops improving.

    Args:
        initial: the value until the first reduction.
        mode: ``"min"`` (lower metric is better) or ``"max"``.
        factor: the multiplier at each reduction, in (0, 1).
        patience: updates without improvement tolerated before a reduction, >= 0.
        threshold: how much better counts as better, >= 0.
        threshold_mode: ``"rel"`` (a fraction of the best) or ``"abs"``.
        cooldown: updates after a reduction during which bad updates do not count, >= 0.
        min_value: the value never goes below this, >= 0.
        eps: reductions smaller than this are skipped, >= 0.

    Raises:
        ConfigError: a parameter is out of range (named, with the value received).

    A metric that is NaN or infinite counts as no improvement, as in PyTorch.
    """

    def __init__(
        self,
        initial: float,
        *,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_value: float = 0.0,
        eps: float = 1e-8,
    ) -> None:
        for name, value in (("initial", initial), ("threshold", threshold), ("eps", eps)):
            check_number(name, value)
        check_number("factor", factor)
        check_range("factor", factor, "must be in (0, 1)", 0 < factor < 1)
        check_number("min_value", min_value)
        check_range("min_value", min_value, "must be >= 0", min_value >= 0)
        check_range("threshold", threshold, "must be >= 0", threshold >= 0)
        check_range("eps", eps, "must be >= 0", eps >= 0)
        for name, count in (("patience", patience), ("cooldown", cooldown)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ConfigError(name, "must be an int >= 0", count)
        check_choice("mode", mode, ("min", "max"))
        check_choice("threshold_mode", threshold_mode, ("rel", "abs"))
        self.initial = float(initial)
        self.mode = mode
        self.factor = float(factor)
        self.patience = patience
        self.threshold = float(threshold)
        self.threshold_mode = threshold_mode
        self.cooldown = cooldown
        self.min_value = float(min_value)
        self.eps = float(eps)
        self._start(self.initial)

    def __repr__(self) -> str:
        return (
            f"ReduceOnPlateau({self.initial!r}, mode={self.mode!r}, factor={self.factor!r}, "
            f"patience={self.patience}, value={self._value!r})"
        )

    @property
    def value(self) -> float:
        """The value now."""
        return self._value

    def update(self, metric: float) -> float:
        """Records one evaluation of the metric and returns the value to use from now on.

        Raises:
            ConfigError: ``metric`` is not a real number.
        """
        if isinstance(metric, bool) or not isinstance(metric, int | float | np.number):
            raise ConfigError("metric", "must be a real number", metric)
        self._record(float(metric))
        return self._value

    def __call__(self, step: int) -> float:
        """Returns the value now (the step is checked, not used: the metric drives it)."""
        check_step(step)
        return self._value

    def values(self, steps: Any) -> NDArray[np.float64]:
        """Returns the value now at every step of ``steps``."""
        return np.full(check_steps(steps).shape, self._value)

    def state_dict(self) -> dict[str, Any]:
        """Returns the state as a JSON-ready dict (``best`` is None before any finite metric)."""
        return {
            "value": self._value,
            "best": self._best if math.isfinite(self._best) else None,
            "bad_updates": self._bad,
            "cooldown_left": self._cooldown_left,
            "updates": self._updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores the state saved by :meth:`state_dict`.

        Raises:
            ConfigError: a key is missing or holds a value of the wrong kind.
        """
        if not isinstance(state, Mapping) or set(state) != set(_STATE_KEYS):
            raise ConfigError(
                "state", f"must be a mapping with keys {', '.join(_STATE_KEYS)}", state
            )
        for key in ("bad_updates", "cooldown_left", "updates"):
            count = state[key]
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ConfigError(f"state[{key!r}]", "must be an int >= 0", count)
        check_number("state['value']", state["value"])
        best = state["best"]
        if best is not None:
            check_number("state['best']", best)
        self._value = float(state["value"])
        self._best = float(best) if best is not None else self._worse
        self._bad = state["bad_updates"]
        self._cooldown_left = state["cooldown_left"]
        self._updates = state["updates"]
