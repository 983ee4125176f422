"""Keras models, optimizers, metrics and variables as checkpoint state (their adapters).

Part of :mod:`globalstep.integrations.keras` (which exports :func:`model_state`); importing
it registers the adapters ``keras.Model``, ``keras.Optimizer``, ``keras.Metric`` and
``keras.Variable`` with :mod:`globalstep.checkpoint._tree.adapters`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras

from globalstep._errors import ConfigError
from globalstep.checkpoint import Adapter, add_adapter
from globalstep.integrations._keras_deferred import defer, pending_of, saved_arrays, template_of
from globalstep.integrations._keras_variables import (
    arrays_of,
    assign_all,
    optimizer_of,
    sync,
    to_numpy,
    variables_by_key,
)

__all__ = ["model_state"]


def _with_optimizer(model: Any, read: Callable[[Any, str], Any]) -> dict[str, Any]:
    """``read`` of the model and of its optimizer (None without one), the state synced."""
    sync(model)
    optimizer = optimizer_of(model)
    return {
        "variables": read(model, "model"),
        "optimizer": None if optimizer is None else read(optimizer, "optimizer"),
    }


class _ModelAdapter(Adapter):
    """A Keras model: all of ``model.variables`` and its optimizer's (built first where
    the model is built; otherwise both take their values when they build)."""

    name = "keras.Model"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, keras.Model)

    def save(self, obj: Any) -> Any:
        return _with_optimizer(obj, saved_arrays)

    def template(self, obj: Any) -> Any:
        return _with_optimizer(obj, template_of)

    def apply(self, obj: Any, state: Any) -> None:
        sync(obj)
        defer(obj, "model", state["variables"])
        optimizer = optimizer_of(obj)
        if optimizer is not None and state["optimizer"] is not None:
            defer(optimizer, "optimizer", state["optimizer"], model=obj)

    def pending(self, obj: Any) -> list[str]:
        optimizer = getattr(obj, "optimizer", None)
        out = pending_of(obj, "variables/")
        return out if optimizer is None else out + pending_of(optimizer, "optimizer/")


class _OptimizerAdapter(Adapter):
    """A Keras optimizer: its ``variables`` (iterations included). Before it is built, the
    slots it creates at its first update take their values then (deferred restoration)."""

    name = "keras.Optimizer"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, keras.optimizers.Optimizer)

    def save(self, obj: Any) -> Any:
        return saved_arrays(obj, "optimizer")

    def template(self, obj: Any) -> Any:
        return template_of(obj, "optimizer")

    def apply(self, obj: Any, state: Any) -> None:
        defer(obj, "optimizer", state)

    def pending(self, obj: Any) -> list[str]:
        return pending_of(obj)


class _VariableAdapter(Adapter):
    """One Keras variable, as its array."""

    name = "keras.Variable"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, keras.Variable)

    def save(self, obj: Any) -> Any:
        return to_numpy(obj)

    def apply(self, obj: Any, state: Any) -> None:
        obj.assign(state)


class _MetricAdapter(Adapter):
    """A Keras metric: its ``variables`` (totals and counts), keyed like a model's."""

    name = "keras.Metric"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, keras.metrics.Metric)

    def save(self, obj: Any) -> Any:
        return arrays_of(variables_by_key(obj.variables, "model"))

    def apply(self, obj: Any, state: Any) -> None:
        assign_all(variables_by_key(obj.variables, "model"), state)


add_adapter(_ModelAdapter())
add_adapter(_OptimizerAdapter())
add_adapter(_VariableAdapter())
add_adapter(_MetricAdapter())


class _ModelState:
    """A model's state as a state_dict object, for models of any class (see model_state)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def state_dict(self) -> Any:
        return _ModelAdapter().save(self.model)

    def load_state_dict(self, state: Any) -> None:
        _ModelAdapter().apply(self.model, state)


def model_state(model: Any) -> Any:
    """Returns an object with ``state_dict()``/``load_state_dict()`` for ``model``'s state.

    The adapter takes models whose class comes from Keras; this also takes a model of a
    class defined elsewhere (your own ``keras.Model`` subclass): put it in the tree.

    Raises:
        ConfigError: ``model`` is not a Keras model.
    """
    if not isinstance(model, keras.Model):
        raise ConfigError("model", "must be a keras.Model", model)
    return _ModelState(model)
