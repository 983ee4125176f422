"""Globalstep schedules as Keras ``LearningRateSchedule`` objects, for Keras optimizers.

Part of :mod:`globalstep.integrations.keras` (which exports :class:`GlobalStepSchedule` and
:func:`learning_rate_schedule`): a core or compat schedule evaluated on the host at the
global step from inside a compiled ``fit()``, on the TensorFlow, JAX and torch backends.
Importing it registers the :mod:`globalstep.compat.keras` schedules with ``keras.saving``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np

from globalstep._errors import ConfigError
from globalstep.compat import keras as compat_keras
from globalstep.schedules import Schedule
from globalstep.schedules import from_config as schedule_from_config

__all__ = ["GlobalStepSchedule", "learning_rate_schedule"]

compat_keras.register_with_keras()

_COMPAT_MODULES = (
    "globalstep.compat.keras",
    "globalstep.compat.tf",
    "globalstep.compat.optax",
    "globalstep.compat.torch",
)

# The schedules of globalstep.compat.keras: Keras' own arithmetic, already Keras schedules.
_KERAS_SCHEDULES = tuple(
    cls
    for cls in (getattr(compat_keras, name) for name in compat_keras.__all__)
    if isinstance(cls, type) and not issubclass(cls, Warning)
)


def _compat_module(cls: type) -> str:
    """The compat module a config records for ``cls``, which :func:`_schedule_from` imports
    back: its ``__module__`` where that is a compat module, else the compat module that
    exports it (a class whose code lives in a private module), so the name recorded does
    not hang on where the code lives."""
    module = cls.__module__
    if module not in _COMPAT_MODULES:
        exporters = (m for m in _COMPAT_MODULES if sys.modules.get(m) is not None)
        module = next(
            (m for m in exporters if vars(sys.modules[m]).get(cls.__name__) is cls), module
        )
    return module


def _schedule_config(schedule: Any) -> dict[str, Any]:
    if isinstance(schedule, Schedule):
        return {"kind": "core", "config": schedule.to_config()}
    module = _compat_module(type(schedule))
    if module in _COMPAT_MODULES and callable(getattr(schedule, "get_config", None)):
        return {
            "kind": "compat",
            "module": module,
            "class": type(schedule).__name__,
            "config": schedule.get_config(),
        }
    raise ConfigError(
        "schedule",
        "must be a globalstep schedule (globalstep.schedules or globalstep.compat.*)",
        schedule,
        hint="Wrap other callables in a keras LearningRateSchedule of your own.",
    )


def _schedule_from(config: Mapping[str, Any]) -> Any:
    kind = config.get("kind")
    if kind == "core":
        return schedule_from_config(config["config"])
    if kind == "compat" and config.get("module") in _COMPAT_MODULES:
        module = importlib.import_module(config["module"])
        cls = getattr(module, str(config.get("class")), None)
        if isinstance(cls, type) and callable(getattr(cls, "from_config", None)):
            return cls.from_config(config["config"])  # type: ignore[attr-defined]
    raise ConfigError(
        "schedule",
        "must be a config written by GlobalStepSchedule.get_config() (a core schedule, or a "
        "class of globalstep.compat.keras/tf/optax/torch)",
        dict(config),
    )


def _check_accumulation(value: Any) -> int:
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError("gradient_accumulation_steps", "must be None or an int >= 1", value)
    return value


@keras.saving.register_keras_serializable(package="globalstep")
class GlobalStepSchedule(keras.optimizers.schedules.LearningRateSchedule):  # type: ignore[misc]
    """Any globalstep schedule as a Keras ``LearningRateSchedule``, evaluated at the step.

    The optimizer calls it with its micro-step counter; the schedule is read at the
    global step, ``iterations // gradient_accumulation_steps`` (the updates applied), on
    the host, from inside the compiled step, so its value is exactly ``schedule(step)``.

    Args:
        schedule: a core schedule or a non-Keras compat schedule.
        gradient_accumulation_steps: the optimizer's, if it accumulates gradients.

    Raises:
        ConfigError: ``schedule`` is not a globalstep schedule, or the accumulation is not
            an int >= 1.
    """

    __module__ = "globalstep.integrations.keras"  # its public home, which keras.saving records

    def __init__(self, schedule: Any, gradient_accumulation_steps: int | None = None) -> None:
        if isinstance(schedule, Mapping):
            schedule = _schedule_from(schedule)
        self._config = _schedule_config(schedule)
        self.schedule = schedule
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self._every = _check_accumulation(gradient_accumulation_steps)
        dtype = getattr(schedule, "dtype", None)
        self.dtype = np.dtype("float32" if dtype is None else str(dtype))
        if self.dtype.kind != "f":
            self.dtype = np.dtype(np.float32)

    def at(self, steps: Any) -> Any:
        """The schedule's values at global steps (a NumPy int or array), in its dtype."""
        array = np.asarray(steps, dtype=np.int64)
        values = getattr(self.schedule, "values", None)
        if values is not None:
            out = np.asarray(values(array.reshape(-1)), dtype=self.dtype)
        else:
            out = np.asarray([self.schedule(int(s)) for s in array.reshape(-1)], self.dtype)
        return out.reshape(array.shape)

    def at_iterations(self, iterations: Any) -> Any:
        """The values at optimizer micro-step counts (a NumPy int or array): the schedule
        read at the global step, ``iterations // gradient_accumulation_steps``."""
        return self.at(np.asarray(iterations, dtype=np.int64) // self._every)

    def __call__(self, step: Any) -> Any:
        if not hasattr(step, "dtype") or isinstance(step, np.generic | np.ndarray):
            return self.at_iterations(step)[()]
        return _on_host(self.at_iterations, keras.ops.convert_to_tensor(step), self.dtype)

    def get_config(self) -> dict[str, Any]:
        return {
            "schedule": self._config,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> GlobalStepSchedule:
        return cls(**config)


def _on_host(fn: Any, step: Any, dtype: np.dtype[Any]) -> Any:
    """``fn(step)`` evaluated on the host, from inside a compiled function if need be."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if tf.executing_eagerly():
            return tf.constant(fn(step.numpy()))
        out = tf.numpy_function(fn, [step], tf.as_dtype(dtype), stateful=False)
        return tf.ensure_shape(out, step.shape)
    if backend == "jax":
        import jax

        if isinstance(step, jax.core.Tracer):
            if dtype.itemsize > 4 and not jax.config.jax_enable_x64:
                # No float64 without x64: float32, as the update casts the rate to anyway.
                dtype = np.dtype(np.float32)
            narrow = dtype

            def call(s: Any) -> Any:
                return np.asarray(fn(s), dtype=narrow)

            return jax.pure_callback(
                call, jax.ShapeDtypeStruct(step.shape, dtype), step, vmap_method="sequential"
            )
        return jax.numpy.asarray(fn(np.asarray(step)))
    if backend == "torch":
        import torch

        return torch.as_tensor(fn(step.detach().cpu().numpy()), device=step.device)
    return fn(np.asarray(step))


def learning_rate_schedule(schedule: Any, *, gradient_accumulation_steps: int | None = None) -> Any:
    """Returns ``schedule`` as a Keras ``LearningRateSchedule`` for an optimizer.

    A :mod:`globalstep.compat.keras` schedule comes back as that same schedule's Keras
    face (it takes Keras' micro-step, as Keras' own schedule does); any other globalstep
    schedule as a :class:`GlobalStepSchedule` read at the global step.

    Raises:
        ConfigError: ``schedule`` is not a globalstep schedule.
    """
    if isinstance(schedule, _KERAS_SCHEDULES):
        if gradient_accumulation_steps is not None:
            raise ConfigError(
                "gradient_accumulation_steps",
                "must be None for a globalstep.compat.keras schedule, which takes the "
                "optimizer's micro-steps exactly as Keras' own schedule does",
                gradient_accumulation_steps,
            )
        if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            return schedule  # made after Keras was imported: its Keras face already
        # Made before: built again now, the constructor gives the Keras face.
        return type(schedule).from_config(schedule.get_config())  # type: ignore[attr-defined]
    return GlobalStepSchedule(schedule, gradient_accumulation_steps=gradient_accumulation_steps)
