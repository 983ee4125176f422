"""Keras' deferred restoration: values kept for variables an object creates when it builds.

Part of :mod:`globalstep.integrations.keras`. Restored into an optimizer that has not made
its first update (or a model not called yet), the values of the variables it creates
later are kept and assigned when its ``build()`` creates them, as TensorFlow's deferred
restoration does; a save before then writes them as they were restored.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Mapping
from typing import Any

import keras

from globalstep._errors import RestoreMismatchError
from globalstep.checkpoint import OpenTemplate
from globalstep.integrations._keras_variables import arrays_of, assign_all, variables_by_key

__all__ = ["defer", "pending_of", "saved_arrays", "template_of"]

# Values restored into an optimizer before it created its slots (or a model before it
# created its weights), by key, kept until the object builds: TensorFlow's deferred
# restoration. Weak keys: a dropped object drops its values.
_PENDING: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_HOOKED = "_globalstep_restores_on_build"


def _existing(obj: Any, what: str) -> dict[str, Any]:
    """The variables ``obj`` has now whose keys hold when it builds.

    A built object: all of them. A model not built yet: none (its variables' positions
    change when it builds). An optimizer not built yet: its own ``iterations`` and
    learning-rate variables, which its ``__init__`` creates first (keys 0000 and 0001
    before and after the build); others it has then may move when it builds (a
    ``LossScaleOptimizer`` puts its loss-scale variables before its inner optimizer's).
    """
    if obj.built:
        return variables_by_key(obj.variables, what)
    if what == "model":
        return {}
    own = [getattr(obj, "_iterations", None), getattr(obj, "_learning_rate", None)]
    return {
        key: v
        for key, v in variables_by_key(obj.variables, what).items()
        if any(v is o for o in own)
    }


def saved_arrays(obj: Any, what: str) -> dict[str, Any]:
    """What a save writes for ``obj``: its variables, and the values it keeps for
    variables it has not created yet (so a save before the first update loses none)."""
    return {**_PENDING.get(obj, {}), **arrays_of(_existing(obj, what))}


def template_of(obj: Any, what: str) -> Any:
    """The restore template: the variables that exist, open for the rest when ``obj``
    creates variables later (see :class:`~globalstep.checkpoint._tree.OpenTemplate`)."""
    arrays = arrays_of(_existing(obj, what))
    return arrays if obj.built else OpenTemplate(arrays)


def _dtype_name(variable: Any) -> str:
    return str(keras.backend.standardize_dtype(variable.dtype))


def _check_fits(key: str, variable: Any, value: Any, what: str) -> None:
    """Raises RestoreMismatchError when a deferred value does not fit the variable the
    object created for it (same key, another shape or dtype)."""
    expected = f"{_dtype_name(variable)}{list(variable.shape)}"
    got = f"{value.dtype}{list(value.shape)}"
    if expected != got:
        raise RestoreMismatchError(
            f"the {what}'s variable {key} ({variable.path}) was created as {expected}, but "
            f"the checkpoint restored into it holds {got}: build the {what} as it was when "
            "the checkpoint was saved, or restore with partial=True and leave it out "
            "(restore() then returns (tree, report))",
            None,
        )


def _eagerly() -> Any:
    """Outside any function being traced (an optimizer builds inside the first trace of a
    ``tf.function`` train step): the restored values are assigned once, not at each call."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.init_scope()
    return contextlib.nullcontext()


def _stateless() -> bool:
    """True inside a Keras ``StatelessScope``, where an assignment is recorded and then
    dropped: a model built by ``compute_output_spec`` (compiled fit()'s symbolic build on
    JAX and torch) creates its variables there, initialised when the scope ends."""
    try:
        from keras.src.backend.common.stateless_scope import in_stateless_scope
    except ImportError:  # pragma: no cover - a Keras that moved it
        return False
    return bool(in_stateless_scope())


def _take_pending(obj: Any, what: str) -> None:
    """Assigns the values kept for ``obj`` to the variables it has now (later, where it
    builds inside a stateless scope: at its optimizer's build, see :func:`defer`)."""
    pending = _PENDING.get(obj)
    if not pending or _stateless():
        return
    existing = _existing(obj, what)
    ready = [k for k in pending if k in existing]
    for key in ready:
        _check_fits(key, existing[key], pending[key], what)
    with _eagerly():
        for key in ready:
            existing[key].assign(pending.pop(key))
    if not pending:
        del _PENDING[obj]


# Models whose kept values are also tried when this optimizer builds (a model built in a
# stateless scope takes them there: fit() builds the optimizer just after the model).
_AFTER: weakref.WeakKeyDictionary[Any, weakref.WeakSet[Any]] = weakref.WeakKeyDictionary()


def defer(obj: Any, what: str, state: Mapping[str, Any], model: Any = None) -> None:
    """Assigns what ``obj`` has now and keeps the rest until its ``build()`` creates it
    (with ``model``: an optimizer whose build also assigns that model's kept values)."""
    existing = _existing(obj, what)
    assign_all({k: v for k, v in existing.items() if k in state}, state)
    rest = {k: v for k, v in state.items() if k not in existing}
    if model is not None and model in _PENDING:
        _AFTER.setdefault(obj, weakref.WeakSet()).add(model)
    if not rest:
        _PENDING.pop(obj, None)
        if model is None or model not in _PENDING:
            return
    else:
        _PENDING[obj] = rest
    build = obj.build
    if getattr(build, _HOOKED, False):
        return

    @functools.wraps(build)
    def build_then_restore(*args: Any, **kwargs: Any) -> Any:
        result = build(*args, **kwargs)
        _take_pending(obj, what)
        for later in list(_AFTER.pop(obj, ())):
            _take_pending(later, "model")
        return result

    setattr(build_then_restore, _HOOKED, True)
    # Past Keras' and TensorFlow's attribute tracking: a bound method is no state.
    object.__setattr__(obj, "build", build_then_restore)


def pending_of(obj: Any, prefix: str = "") -> list[str]:
    return [prefix + key for key in _PENDING.get(obj, {})]
