"""Keras variables as checkpoint arrays: keyed by position and name, read, assigned.

The small pieces the state adapters (:mod:`._keras_state`), the deferred restoration
(:mod:`._keras_deferred`) and the callback share, part of
:mod:`globalstep.integrations.keras`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np

__all__ = ["arrays_of", "assign_all", "optimizer_of", "sync", "to_numpy", "variables_by_key"]


def variables_by_key(variables: Any, what: str) -> dict[str, Any]:
    """Variables keyed by position and name: ``0003.kernel``.

    Paths (``sequential_1/dense_2/kernel``) are not used: Keras numbers the names of a
    second model built in one process, so they would not match on a restore in the same
    process; the position in ``variables`` is fixed by the architecture. Optimizer slot
    names embed those paths, so optimizer keys are the position alone.
    """
    out: dict[str, Any] = {}
    for index, v in enumerate(variables):
        name = "" if what == "optimizer" else "." + str(v.name).replace("/", ".")
        out[f"{index:04d}{name}"] = v
    return out


def sync(model: Any) -> None:
    """On JAX, puts the training state back into the variables (fit() keeps it apart)."""
    sync = getattr(model, "jax_state_sync", None)
    if sync is not None:
        sync()


def optimizer_of(model: Any) -> Any:
    """The model's optimizer, built on its trainable variables where the model is built
    and the optimizer is not (an unbuilt model's optimizer builds at its first update)."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not optimizer.built and model.built:
        optimizer.build(model.trainable_variables)
    return optimizer


def to_numpy(variable: Any) -> Any:
    """A variable's value as a NumPy array of its own (a tensor first: TF's variables
    warn when NumPy converts them directly)."""
    value = variable.value
    if keras.backend.backend() == "tensorflow":
        return np.array(value.numpy())
    return np.array(keras.ops.convert_to_numpy(value))


def arrays_of(variables: Mapping[str, Any]) -> dict[str, Any]:
    return {k: to_numpy(v) for k, v in variables.items()}


def assign_all(variables: Mapping[str, Any], state: Mapping[str, Any]) -> None:
    for key, v in variables.items():
        v.assign(state[key])
