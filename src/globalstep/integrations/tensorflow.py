"""TensorFlow: ``tf.Variable`` and ``tf.Module`` objects in checkpoint trees as they are.

Imported lazily by :mod:`globalstep.checkpoint._tree.adapters` the first time an object of a
TensorFlow type (``tf.Variable``, a ``tf.Module`` or a subclass of one) is checkpointed, or
a node one of its adapters wrote is restored; importing it imports TensorFlow. Keras
models, optimizers, metrics and variables (``tf.keras`` is Keras 3) are Keras objects:
their adapters are in :mod:`globalstep.integrations.keras`.

- A ``tf.Variable`` (adapter ``tensorflow.Variable``, the seeds' ``global_step`` among
  them) is saved as its value, a NumPy array of its dtype and shape, and restored in place
  with ``assign``, on the variable's own device: the same variable object, its handle and
  device unchanged. A checkpoint whose array has another shape or dtype does not fit (the
  restore raises :class:`~globalstep._errors.RestoreMismatchError` naming the key, the
  variable's dtype and shape and the checkpoint's); nothing is assigned then.
- A ``tf.Module`` (adapter ``tensorflow.Module``) is saved as its variables by their
  attribute path (``encoder.layers.0.w``: the path ``tf.Module`` itself walks, its
  ``_flatten``), so the same class built again restores in place.

Loading never executes code: the values are arrays in a safetensors file, the keys JSON.

For custom training loops: :func:`follow` keeps a clock at ``optimizer.iterations`` (the
step advanced by ``apply_gradients`` itself), and :class:`ResumableTFDataset` is a shuffled
``tf.data`` pipeline whose position is checkpoint state, so a resumed loop continues at
the batch it reached, mid-epoch. On several workers (``MultiWorkerMirroredStrategy``)
:class:`ResumableOrder` splits each epoch's order of row indices over the workers, each
drawing its own share (``tf.gather`` the rows), and a restore on another number of workers
splits the rest of the epoch over the new ones: every row drawn once per epoch.

Example:
    >>> import tensorflow as tf, tempfile
    >>> from globalstep.checkpoint import CheckpointManager
    >>> step = tf.Variable(0, trainable=False, name="global_step")
    >>> with CheckpointManager(tempfile.mkdtemp()) as manager:
    ...     _ = step.assign_add(7)
    ...     _ = manager.save(7, {"step": step})
    ...     _ = step.assign(0)
    ...     _ = manager.restore({"step": step})
    >>> int(step.numpy())
    7
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from globalstep._errors import ConfigError
from globalstep.checkpoint import Adapter, add_adapter
from globalstep.integrations._order import ResumableOrder
from globalstep.integrations._tf_data import ResumableTFDataset

__all__ = [
    "ResumableOrder",
    "ResumableTFDataset",
    "follow",
    "module_variables",
    "variable_array",
]


def follow(optimizer: Any, clock: Any) -> Any:
    """:func:`globalstep.integrations.keras.follow` (TensorFlow's optimizers are Keras'):
    the clock ticks with ``optimizer.iterations``; call the result after each update. It
    owns the clock's ticks (a ``Run.update`` beside it leaves the tick to it) until its
    ``detach()``."""
    from globalstep.integrations import keras as integration

    return integration.follow(optimizer, clock)


def variable_array(variable: Any) -> np.ndarray[Any, Any]:
    """Returns a ``tf.Variable``'s value as a NumPy array of its own (a copy).

    Raises:
        ConfigError: the variable holds strings (or another dtype that is not numbers or
            booleans), which have no fixed-size array form to restore into.
    """
    value = np.array(variable.numpy())
    if value.dtype.kind in "OSUV":
        raise ConfigError(
            "variable",
            "must hold numbers or booleans (a tf.string variable has no fixed-size array "
            "form to restore into)",
            f"{variable.name}: dtype={variable.dtype.name}",
            hint="Keep text in a Python str leaf of the state tree instead.",
        )
    return value


def _template(variable: Any) -> np.ndarray[Any, Any]:
    """An empty array of the variable's dtype and shape, which a restore fills."""
    shape = variable.shape
    if not shape.is_fully_defined():  # shape=None variables: the value's current shape
        return variable_array(variable)
    return np.empty(tuple(shape.as_list()), np.dtype(variable.dtype.as_numpy_dtype))


def _assign(variable: Any, value: Any) -> None:
    """Assigns ``value`` to the variable in place, on its device."""
    with tf.device(variable.device):
        variable.assign(tf.constant(value, dtype=variable.dtype))


def module_variables(module: Any) -> dict[str, Any]:
    """Returns a ``tf.Module``'s variables by attribute path, ``.``-joined
    (``layers.0.w``), in the order ``module.variables`` gives them.

    Raises:
        ConfigError: two variables would get the same key (a ``.`` or ``/`` inside an
            attribute name or dict key makes two paths read alike).
    """
    out: dict[str, Any] = {}
    for path, variable in module._flatten(
        predicate=lambda v: isinstance(v, tf.Variable), with_path=True
    ):
        key = ".".join(str(part).replace("/", ".") for part in path)
        if key in out and out[key] is not variable:
            raise ConfigError(
                "module",
                "variables must have distinct attribute paths once '/' reads as '.'",
                key,
            )
        out[key] = variable
    return out


class _VariableAdapter(Adapter):
    """One ``tf.Variable``, as its array; restored in place with ``assign``."""

    name = "tensorflow.Variable"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, tf.Variable)

    def save(self, obj: Any) -> Any:
        return variable_array(obj)

    def template(self, obj: Any) -> Any:
        return _template(obj)

    def apply(self, obj: Any, state: Any) -> None:
        _assign(obj, state)


class _ModuleAdapter(Adapter):
    """A ``tf.Module``: its variables by attribute path, each restored in place."""

    name = "tensorflow.Module"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, tf.Module)

    def save(self, obj: Any) -> Any:
        return {key: variable_array(v) for key, v in module_variables(obj).items()}

    def template(self, obj: Any) -> Any:
        return {key: _template(v) for key, v in module_variables(obj).items()}

    def apply(self, obj: Any, state: Mapping[str, Any]) -> None:
        for key, variable in module_variables(obj).items():
            _assign(variable, state[key])


add_adapter(_VariableAdapter())
add_adapter(_ModuleAdapter())
