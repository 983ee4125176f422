"""Keras 3: globalstep schedules as Keras schedules, a step-keeping callback, and state.

Imported lazily by :mod:`globalstep.checkpoint._tree.adapters` the first time a Keras object is
checkpointed; importing it imports Keras (on the backend ``KERAS_BACKEND`` names).

- :func:`learning_rate_schedule` turns any globalstep schedule (core or compat) into a
  registered, serialisable ``keras.optimizers.schedules.LearningRateSchedule`` that runs on
  the symbolic step of a compiled ``fit()`` on the TensorFlow, JAX and torch backends.
  A :mod:`globalstep.compat.keras` schedule is one already (Keras' own arithmetic, bit for
  bit); any other schedule is evaluated on the host from inside the compiled step
  (``tf.numpy_function``, ``jax.pure_callback``, a plain call on torch), so the rate an
  update uses is exactly the schedule's value at the global step.
- :class:`GlobalStepCallback` keeps a :class:`~globalstep._clock.Clock` equal to
  ``optimizer.iterations`` (the updates applied, with ``gradient_accumulation_steps``
  minded), writes each batch's own loss and the rate its update used at the step after
  that update (the convention of :mod:`globalstep._clock`), to a
  :class:`~globalstep.summary.SummaryWriter`, and saves checkpoints with a
  :class:`~globalstep.checkpoint.CheckpointManager`.
- :func:`follow` keeps a clock equal to ``optimizer.iterations`` in a custom training loop
  (a ``GradientTape`` loop, eager or in ``tf.function``, or a loop on the JAX or torch
  backend): one call after each ``apply_gradients``, outside the traced step.
- :class:`ResumableDataset` is a ``keras.utils.PyDataset`` whose batch order is a function
  of (seed, epoch), so :func:`fit` continues a restored run at the right batch inside
  its epoch.
- Models, optimizers, metrics and variables go into checkpoint trees as they are
  (adapters named ``keras.Model``, ``keras.Optimizer``, ``keras.Metric``,
  ``keras.Variable``): all of ``model.variables`` (the dropout seed generators' state
  included) and the optimizer's, the optimizer built first where the model is built.
  Keys are positions in ``variables`` with the variable's name (``0003.kernel``), so a
  model rebuilt in the same process (whose layer names Keras numbers anew) restores too;
  ``/`` in names becomes ``.``. Restored into an optimizer that has not made its first
  update (or a model not called yet), the values of the variables it creates later are
  kept and assigned when its ``build()`` creates them, as TensorFlow's deferred
  restoration does; the restore's report lists them as ``deferred`` and its
  ``pending()`` the ones still waiting.

Example:
    >>> import keras, numpy as np
    >>> from globalstep.schedules import ExponentialDecay
    >>> lr = learning_rate_schedule(ExponentialDecay(0.1, 10, 0.5))
    >>> float(keras.ops.convert_to_numpy(lr(keras.ops.convert_to_tensor(10))))
    0.05
"""

from __future__ import annotations

from globalstep.integrations._keras_callback import GlobalStepCallback
from globalstep.integrations._keras_data import ResumableDataset
from globalstep.integrations._keras_fit import fit
from globalstep.integrations._keras_follow import Follower, follow
from globalstep.integrations._keras_schedule import GlobalStepSchedule, learning_rate_schedule
from globalstep.integrations._keras_state import model_state
from globalstep.integrations._keras_variables import to_numpy as _numpy  # noqa: F401 (tests)

__all__ = [
    "Follower",
    "GlobalStepCallback",
    "GlobalStepSchedule",
    "ResumableDataset",
    "fit",
    "follow",
    "learning_rate_schedule",
    "model_state",
]
