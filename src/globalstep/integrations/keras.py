"""Keras 3: globalstep schedules as Keras schedules, a step-keeping callback, and state.

Imported lazily by :mod:`globalstep.checkpoint.adapters` the first time a Keras object is
checkpointed; importing it imports Keras (on the backend ``KERAS_BACKEND`` names).

- :func:`learning_rate_schedule` turns any globalstep schedule (core or compat) into a
  registered, serialisable ``keras.optimizers.schedules.LearningRateSchedule`` that runs on
  the symbolic step of a compiled ``fit()`` on the TensorFlow, JAX and torch backends.
  A :mod:`globalstep.compat.keras` schedule is one already (Keras' own arithmetic, bit for
  bit); any other schedule is evaluated on the host from inside the compiled step
  (``tf.numpy_function``, ``jax.pure_callback``, a plain call on torch), so the rate an
  update uses is exactly the schedule's value at the global step.
- :class:`GlobalStepCallback` keeps a :class:`~globalstep.clock.Clock` equal to
  ``optimizer.iterations`` (the updates applied, with ``gradient_accumulation_steps``
  minded), writes each batch's own loss and the rate its update used at the step after
  that update (the convention of :mod:`globalstep.clock`), to a
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

import contextlib
import functools
import importlib
import threading
import warnings
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import keras
import numpy as np

from globalstep.checkpoint import adapters
from globalstep.clock import Clock
from globalstep.compat import keras as compat_keras
from globalstep.errors import ConfigError, RestoreMismatchError, StepError
from globalstep.schedules._base import Schedule
from globalstep.schedules._base import from_config as schedule_from_config
from globalstep.triggers import Trigger, every

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

compat_keras.register_with_keras()

_COMPAT_MODULES = (
    "globalstep.compat.keras",
    "globalstep.compat.tf",
    "globalstep.compat.optax",
    "globalstep.compat.torch",
)


# --------------------------------------------------------------------------- schedules


def _schedule_config(schedule: Any) -> dict[str, Any]:
    if isinstance(schedule, Schedule):
        return {"kind": "core", "config": schedule.to_config()}
    module = type(schedule).__module__
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

    def _host(self, iterations: Any) -> Any:
        return self.at(np.asarray(iterations, dtype=np.int64) // self._every)

    def __call__(self, step: Any) -> Any:
        if not hasattr(step, "dtype") or isinstance(step, np.generic | np.ndarray):
            return self._host(step)[()]
        return _on_host(self._host, keras.ops.convert_to_tensor(step), self.dtype)

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
    if compat_keras.is_compat_schedule(schedule):
        if gradient_accumulation_steps is not None:
            raise ConfigError(
                "gradient_accumulation_steps",
                "must be None for a globalstep.compat.keras schedule, which takes the "
                "optimizer's micro-steps exactly as Keras' own schedule does",
                gradient_accumulation_steps,
            )
        return compat_keras.keras_face_of(schedule)
    return GlobalStepSchedule(schedule, gradient_accumulation_steps=gradient_accumulation_steps)


# --------------------------------------------------------------------------- state


def _variables_by_key(variables: Any, what: str) -> dict[str, Any]:
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


def _sync(model: Any) -> None:
    """On JAX, puts the training state back into the variables (fit() keeps it apart)."""
    sync = getattr(model, "jax_state_sync", None)
    if sync is not None:
        sync()


def _optimizer_of(model: Any) -> Any:
    """The model's optimizer, built on its trainable variables where the model is built
    and the optimizer is not (an unbuilt model's optimizer builds at its first update)."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not optimizer.built and model.built:
        optimizer.build(model.trainable_variables)
    return optimizer


def _numpy(variable: Any) -> Any:
    """A variable's value as a NumPy array of its own (a tensor first: TF's variables
    warn when NumPy converts them directly)."""
    value = variable.value
    if keras.backend.backend() == "tensorflow":
        return np.array(value.numpy())
    return np.array(keras.ops.convert_to_numpy(value))


def _arrays(variables: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _numpy(v) for k, v in variables.items()}


def _assign(variables: Mapping[str, Any], state: Mapping[str, Any]) -> None:
    for key, v in variables.items():
        v.assign(state[key])


# ------------------------------------------------------------- deferred restoration

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
        return _variables_by_key(obj.variables, what)
    if what == "model":
        return {}
    own = [getattr(obj, "_iterations", None), getattr(obj, "_learning_rate", None)]
    return {
        key: v
        for key, v in _variables_by_key(obj.variables, what).items()
        if any(v is o for o in own)
    }


def _saved_arrays(obj: Any, what: str) -> dict[str, Any]:
    """What a save writes for ``obj``: its variables, and the values it keeps for
    variables it has not created yet (so a save before the first update loses none)."""
    return {**_PENDING.get(obj, {}), **_arrays(_existing(obj, what))}


def _template(obj: Any, what: str) -> Any:
    """The restore template: the variables that exist, open for the rest when ``obj``
    creates variables later (see :class:`~globalstep.checkpoint.adapters.OpenTemplate`)."""
    arrays = _arrays(_existing(obj, what))
    return arrays if obj.built else adapters.OpenTemplate(arrays)


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
            "the checkpoint was saved, or restore with partial=True and leave it out",
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
    builds inside a stateless scope: at its optimizer's build, see :func:`_defer`)."""
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


def _defer(obj: Any, what: str, state: Mapping[str, Any], model: Any = None) -> None:
    """Assigns what ``obj`` has now and keeps the rest until its ``build()`` creates it
    (with ``model``: an optimizer whose build also assigns that model's kept values)."""
    existing = _existing(obj, what)
    _assign({k: v for k, v in existing.items() if k in state}, state)
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


def _pending(obj: Any, prefix: str = "") -> list[str]:
    return [prefix + key for key in _PENDING.get(obj, {})]


class _ModelAdapter(adapters.Adapter):
    """A Keras model: all of ``model.variables`` and its optimizer's (built first where
    the model is built; otherwise both take their values when they build)."""

    name = "keras.Model"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, keras.Model)

    def save(self, obj: Any) -> Any:
        _sync(obj)
        optimizer = _optimizer_of(obj)
        return {
            "variables": _saved_arrays(obj, "model"),
            "optimizer": None if optimizer is None else _saved_arrays(optimizer, "optimizer"),
        }

    def template(self, obj: Any) -> Any:
        _sync(obj)
        optimizer = _optimizer_of(obj)
        return {
            "variables": _template(obj, "model"),
            "optimizer": None if optimizer is None else _template(optimizer, "optimizer"),
        }

    def apply(self, obj: Any, state: Any) -> None:
        _sync(obj)
        _defer(obj, "model", state["variables"])
        optimizer = _optimizer_of(obj)
        if optimizer is not None and state["optimizer"] is not None:
            _defer(optimizer, "optimizer", state["optimizer"], model=obj)

    def pending(self, obj: Any) -> list[str]:
        optimizer = getattr(obj, "optimizer", None)
        out = _pending(obj, "variables/")
        return out if optimizer is None else out + _pending(optimizer, "optimizer/")


class _OptimizerAdapter(adapters.Adapter):
    """A Keras optimizer: its ``variables`` (iterations included). Before it is built, the
    slots it creates at its first update take their values then (deferred restoration)."""

    name = "keras.Optimizer"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, keras.optimizers.Optimizer)

    def save(self, obj: Any) -> Any:
        return _saved_arrays(obj, "optimizer")

    def template(self, obj: Any) -> Any:
        return _template(obj, "optimizer")

    def apply(self, obj: Any, state: Any) -> None:
        _defer(obj, "optimizer", state)

    def pending(self, obj: Any) -> list[str]:
        return _pending(obj)


class _VariableAdapter(adapters.Adapter):
    """One Keras variable, as its array."""

    name = "keras.Variable"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, keras.Variable)

    def save(self, obj: Any) -> Any:
        return _numpy(obj)

    def apply(self, obj: Any, state: Any) -> None:
        obj.assign(state)


class _MetricAdapter(adapters.Adapter):
    """A Keras metric: its ``variables`` (totals and counts), keyed like a model's."""

    name = "keras.Metric"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, keras.metrics.Metric)

    def save(self, obj: Any) -> Any:
        return _arrays(_variables_by_key(obj.variables, "model"))

    def apply(self, obj: Any, state: Any) -> None:
        _assign(_variables_by_key(obj.variables, "model"), state)


adapters.add(_ModelAdapter())
adapters.add(_OptimizerAdapter())
adapters.add(_VariableAdapter())
adapters.add(_MetricAdapter())


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


class _TorchRandomState:
    """torch's global generator, which Keras' torch backend draws unseeded dropout from
    (Dropout's SeedGenerator state stays unused there), as a state_dict object.

    ``fit()`` itself draws from it before the first batch (the DataLoader's seed, the
    symbolic build), and a resumed run calls ``fit()`` at other points than an
    uninterrupted one, so the callback sets the generator back to ``at_batch_end`` (the
    state after the previous update, or the restored one) at each ``fit()``'s first batch.
    """

    def __init__(self) -> None:
        self.at_batch_end: Any = None

    def state_dict(self) -> dict[str, Any]:
        import torch

        return {"cpu": torch.get_rng_state().numpy().copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        import torch

        self.at_batch_end = torch.from_numpy(np.array(state["cpu"], dtype=np.uint8))
        torch.set_rng_state(self.at_batch_end)


# --------------------------------------------------------------------------- data


class ResumableDataset(keras.utils.PyDataset):  # type: ignore[misc]
    """Batches of arrays in an order that is a function of (seed, epoch), resumable.

    Batch ``j`` of the run is batch ``j % steps_per_epoch`` of epoch
    ``j // steps_per_epoch``, whose order is a permutation drawn from ``(seed, epoch)``.
    The position (the batches training has consumed, counted by a
    :class:`GlobalStepCallback` given ``data=``) is state of its own, saved with
    ``state_dict()``.

    Plain ``model.fit(data, epochs=n)`` (and ``evaluate``, ``predict``) sees a finite
    ``PyDataset`` of ``steps_per_epoch`` batches: each epoch Keras runs is the data's next
    epoch (the position's epoch first, with a callback), its batches in the data's order,
    so ``n`` epochs end after ``n * steps_per_epoch`` updates, on the batches :func:`fit`
    gives. Keras' ``shuffle`` of the batch order is not applied (the data is shuffled by
    ``(seed, epoch)``, which a checkpoint restores; Python's random state is not). It
    starts epochs at their first batch only: where the position is inside an epoch (a run
    restored mid-epoch), or for ``steps_per_epoch`` other than the data's, the callback
    refuses plain ``fit()``; with ``workers > 1`` or ``use_multiprocessing`` (whose
    workers read ahead across Keras' epochs) the data refuses it.
    :func:`fit` continues inside an epoch: during its ``model.fit`` calls the data is one
    stream of the run's batches from the position.

    Args:
        x: an array, or a list/tuple/dict of arrays, of the same length.
        y: targets, likewise, or None.
        batch_size: rows per batch, >= 1.
        seed: the shuffling seed.
        shuffle: reorder each epoch; False keeps the rows' order.
        drop_remainder: drop the last, smaller batch of each epoch.

    Raises:
        ConfigError: an argument breaks its rule.
    """

    def __init__(
        self,
        x: Any,
        y: Any = None,
        *,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        drop_remainder: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError("batch_size", "must be an int >= 1", batch_size)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError("seed", "must be an int >= 0", seed)
        self.x, self.y = x, y
        lengths = {len(a) for a in keras.tree.flatten((x, y)) if a is not None}
        if len(lengths) != 1:
            raise ConfigError("x", "must hold arrays of one length (y's too)", sorted(lengths))
        self.rows = lengths.pop()
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.drop_remainder = drop_remainder
        full, rest = divmod(self.rows, batch_size)
        self.steps_per_epoch = full if drop_remainder or not rest else full + 1
        if self.steps_per_epoch < 1:
            raise ConfigError("batch_size", f"must be <= the {self.rows} rows", batch_size)
        self.position = 0  # batches consumed by training
        self._start = 0  # the position at which the running fit() began
        self._streaming = False  # inside globalstep's fit(): one stream from _start
        # Under plain model.fit(): the epoch Keras is running, the next one, and the
        # batches served since Keras began the epoch (under a lock: TensorFlow's tf.data
        # calls __getitem__ from threads of its own, one after another).
        self._epoch = 0
        self._next_epoch = 0
        self._served = 0
        self._lock = threading.Lock()
        self._order: tuple[int, np.ndarray] | None = None

    @property
    def num_batches(self) -> int | None:
        """The batches of one epoch; None (endless, one stream) inside :func:`fit`.

        Raises:
            ConfigError: under plain ``model.fit``, Keras would read the data with workers
                (asked here, the first thing Keras reads: before it starts their pool).
        """
        if self._streaming:
            return None
        self._refuse_workers()
        return self.steps_per_epoch

    def _refuse_workers(self) -> None:
        if self.workers > 1 or (self.workers > 0 and self.use_multiprocessing):
            raise ConfigError(
                "workers",
                "must be 1 without use_multiprocessing for plain model.fit() on a "
                "ResumableDataset (Keras' workers read batches ahead across its epochs, "
                "before the data knows which epoch is next)",
                (self.workers, self.use_multiprocessing),
                hint="Use globalstep.integrations.keras.fit(model, data, epochs=...), "
                "which reads the data as one stream, or workers=1.",
            )

    def __len__(self) -> int:
        """The batches of one epoch, ``steps_per_epoch``."""
        return self.steps_per_epoch

    def on_epoch_begin(self) -> None:
        """Keras starts an epoch: under plain ``model.fit`` it is the data's next one.

        Raises:
            ConfigError: under plain ``model.fit``, Keras reads the data with workers.
        """
        if not self._streaming:
            self._refuse_workers()
            with self._lock:
                self._epoch = self._next_epoch
                self._served = 0

    def on_epoch_end(self) -> None:
        """Keras ends an epoch (or the pass its model building makes over one batch, or
        a reset): the data's next epoch follows only once this one served all its
        batches."""
        if not self._streaming:
            with self._lock:
                if self._served >= self.steps_per_epoch and self._next_epoch == self._epoch:
                    self._next_epoch = self._epoch + 1
                self._served = 0

    def order(self, epoch: int) -> np.ndarray:
        """The row order of ``epoch``."""
        cached = self._order  # read once: Keras may call from a prefetching thread
        if cached is None or cached[0] != epoch:
            rows = np.arange(self.rows)
            if self.shuffle:
                rows = np.random.default_rng([self.seed, epoch]).permutation(self.rows)
            cached = (epoch, rows)
            self._order = cached
        return cached[1]

    def batch(self, index: int) -> Any:
        """Batch ``index`` of the whole run (epoch ``index // steps_per_epoch``)."""
        epoch, k = divmod(index, self.steps_per_epoch)
        rows = self.order(epoch)[k * self.batch_size : (k + 1) * self.batch_size]
        x = keras.tree.map_structure(lambda a: a[rows], self.x)
        if self.y is None:
            return (x,)
        return x, keras.tree.map_structure(lambda a: a[rows], self.y)

    @contextlib.contextmanager
    def streaming(self) -> Iterator[None]:
        """The data as :func:`fit` reads it: one endless stream of the run's batches from
        the position (``num_batches`` None), index 0 being batch ``position``."""
        self._streaming = True
        try:
            yield
        finally:
            self._streaming = False
            self._next_epoch = self.position // self.steps_per_epoch

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]  # worker processes get a copy without it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"ResumableDataset(rows={self.rows}, batch_size={self.batch_size}, "
            f"seed={self.seed}, position={self.position})"
        )

    def __getitem__(self, index: int) -> Any:
        if self._streaming:
            return self.batch(self._start + index)
        with self._lock:
            epoch, served = self._epoch, self._served
            self._served = served + 1
        # One reader (workers are refused): the k-th batch asked for in the epoch is its
        # k-th, whatever index Keras' shuffle gave it.
        return self.batch(epoch * self.steps_per_epoch + served)

    def begin(self, steps: int | None = None) -> None:
        """Marks the start of a fit() call at the current position (the callback does).

        Args:
            steps: the batches per epoch the ``fit()`` call runs, where known.

        Raises:
            ConfigError: under plain ``model.fit``, the position is inside an epoch, or
                ``steps`` is not the data's ``steps_per_epoch``.
        """
        self._start = self.position
        if self._streaming:
            return
        epoch, batch = divmod(self.position, self.steps_per_epoch)
        if batch:
            raise ConfigError(
                "data",
                f"is at batch {batch} of epoch {epoch} ({self.position} batches consumed), "
                "where plain model.fit() would start the epoch again from its first batch",
                self,
                hint="Continue with globalstep.integrations.keras.fit(model, data, "
                "epochs=...), which runs the rest of the epoch first.",
            )
        if steps is not None and steps != self.steps_per_epoch:
            raise ConfigError(
                "steps_per_epoch",
                f"must be left out of model.fit() on a ResumableDataset, whose epochs are "
                f"its {self.steps_per_epoch} batches",
                steps,
                hint="Use globalstep.integrations.keras.fit(model, data, epochs=...) to "
                "run part of an epoch.",
            )
        self._next_epoch = epoch

    def state_dict(self) -> dict[str, Any]:
        """The position and what decides the order."""
        return {
            "position": self.position,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "rows": self.rows,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores the position; the order's settings must be the saved ones.

        Raises:
            ConfigError: the seed, batch size, rows or shuffle differ from the saved ones.
        """
        for name in ("seed", "batch_size", "rows", "shuffle"):
            if state[name] != getattr(self, name):
                raise ConfigError(
                    name,
                    f"must equal the checkpoint's ({state[name]!r}) to resume the same order",
                    getattr(self, name),
                )
        self.position = int(state["position"])
        self._start = self.position
        self._next_epoch = self.position // self.steps_per_epoch


# --------------------------------------------------------------------------- callback


class _BatchLossMean(keras.metrics.Mean):  # type: ignore[misc]
    """Keras' loss tracker (the epoch's running mean), also keeping the last batch's loss."""

    def __init__(self, name: str = "loss", dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)
        self.last = self.add_variable(shape=(), initializer="zeros", dtype=self.dtype, name="last")

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        self.last.assign(keras.ops.cast(keras.ops.mean(values), self.dtype))
        super().update_state(values, sample_weight=sample_weight)


class GlobalStepCallback(keras.callbacks.Callback):  # type: ignore[misc]
    """Keeps a clock at ``optimizer.iterations``; logs and checkpoints keyed by it.

    After each batch whose update was applied (every batch, or every
    ``gradient_accumulation_steps``-th) the clock ticks, and the callback asserts that it
    equals ``optimizer.iterations``; writes ``loss`` (that batch's own loss) and ``lr``
    (the rate that update used) at the clock's step after the update, the first update's
    at step 1 (the convention of every logged value, see :mod:`globalstep.clock`: the
    step ``optimizer.iterations`` holds after ``apply_gradients``, as Keras' TensorBoard
    callback logs it); and lets the manager's ``save_every`` decide whether to save
    :meth:`state`.

    Args:
        clock: the run's clock (a new one if None).
        writer: where to write the per-update scalars, or None.
        manager: where to save, or None.
        save_every: when to save: a duration (``100``, ``"1ep"``) or a Trigger; default
            every 100 updates.
        data: the run's :class:`ResumableDataset`, whose position is saved.
        extra: more entries for the checkpoint tree.
        rate_tag: the tag of the rate: ``"lr"``, as ``Run``, the demo and the guides log
            it; ``"learning_rate"`` keeps the name the callback wrote before (its curves
            were then one step earlier, from step 0).

    Raises:
        ConfigError: an argument of the wrong kind.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        writer: Any = None,
        manager: Any = None,
        save_every: Any = 100,
        data: ResumableDataset | None = None,
        extra: Mapping[str, Any] | None = None,
        rate_tag: str = "lr",
    ) -> None:
        super().__init__()
        if clock is not None and not isinstance(clock, Clock):
            raise ConfigError("clock", "must be a globalstep Clock or None", clock)
        if not isinstance(rate_tag, str) or not rate_tag.strip() or rate_tag == "loss":
            raise ConfigError("rate_tag", "must be a non-empty tag other than 'loss'", rate_tag)
        if data is not None and not isinstance(data, ResumableDataset):
            raise ConfigError("data", "must be a ResumableDataset or None", data)
        self.clock = clock if clock is not None else Clock()
        self.writer = writer
        self.manager = manager
        self.data = data
        self.extra = dict(extra or {})
        self.rate_tag = rate_tag
        self._save: Trigger = save_every if isinstance(save_every, Trigger) else every(save_every)
        self._rate_fn: Any = None
        self._plain_iterations: bool | None = None  # optimizer.iterations not overridden
        self._fused: Any = None  # the TensorFlow reads in one graph call, False: none
        self._fused_optimizer: Any = None  # the optimizer they read
        self._torch = _TorchRandomState() if keras.backend.backend() == "torch" else None

    def set_model(self, model: Any) -> None:
        if model is not getattr(self, "model", None):
            self._fused = self._plain_iterations = None  # another model: read from it anew
        super().set_model(model)
        tracker = getattr(model, "_loss_tracker", None)
        if tracker is not None and not isinstance(tracker, _BatchLossMean):
            model._loss_tracker = _BatchLossMean(name=tracker.name, dtype=tracker.dtype)

    # -- state

    def state(self) -> dict[str, Any]:
        """The checkpoint tree: model (variables and optimizer), clock, data position, and on
        the torch backend torch's global generator (unseeded dropout draws from it)."""
        tree: dict[str, Any] = {"model": model_state(self.model), "clock": self.clock}
        if self._torch is not None:
            tree["torch_random"] = self._torch
        if self.data is not None:
            tree["data"] = self.data
        tree.update(self.extra)
        return tree

    def restore(self, model: Any, **kwargs: Any) -> bool:
        """Restores the newest checkpoint into ``model``, the clock and the data, if any.

        Returns:
            Whether a checkpoint was restored.
        """
        if self.manager is None or self.manager.latest_step() is None:
            return False
        self.set_model(model)
        self.manager.restore(self.state(), **kwargs)
        return True

    # -- steps

    def _accumulation(self) -> int:
        return int(self.model.optimizer.gradient_accumulation_steps or 1)

    def _iterations(self) -> int:
        iterations = self.model.optimizer.iterations
        if isinstance(iterations, keras.Variable):
            return int(_numpy(iterations))
        return int(keras.ops.convert_to_numpy(iterations))

    def _check(self, iterations: int | None = None) -> None:
        """Raises unless the clock is at ``optimizer.iterations`` (read if not given)."""
        if iterations is None:
            iterations = self._iterations()
        if iterations != self.clock.step:
            raise StepError(
                f"the clock ({self.clock.name!r}) is at step {self.clock.step} but "
                f"optimizer.iterations is {iterations}: they must count the same updates. "
                "Restore both from one checkpoint (GlobalStepCallback.restore), or start "
                "both at 0.",
                self.clock.step,
            )

    def on_train_begin(self, logs: Any = None) -> None:
        if self._torch is not None and self._torch.at_batch_end is None:
            import torch

            self._torch.at_batch_end = torch.get_rng_state()  # a fresh run
        _sync(self.model)
        self._check()
        self._save.skip_past(self.clock)  # fire only at boundaries still ahead
        if self.data is not None:
            self.data.begin((self.params or {}).get("steps"))
        progress = self.clock.progress()
        if progress.step_in_epoch and self.data is None:
            warnings.warn(
                f"resuming at step {progress.step}, inside epoch {progress.epoch} (batch "
                f"{progress.step_in_epoch}): the data is not a ResumableDataset, so fit() "
                "restarts this epoch from its first batch.",
                UserWarning,
                stacklevel=2,
            )

    def _rate(self, micro_step: int) -> float | None:
        lr = self.model.optimizer._learning_rate
        if isinstance(lr, GlobalStepSchedule):
            return float(lr.at(micro_step // lr._every))
        if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
            step = keras.ops.convert_to_tensor(micro_step)
            backend = keras.backend.backend()
            if backend == "jax":  # the value the jitted update computed
                import jax

                if self._rate_fn is None:
                    self._rate_fn = jax.jit(lambda s: lr(s))
                return float(self._rate_fn(step))
            if backend == "tensorflow":  # the value the traced update computed
                import tensorflow as tf

                if self._rate_fn is None:
                    # One graph call instead of the schedule's ~17 eager ops (1.35 of the
                    # callback's 1.74 ms a batch, profiled on a 32-64-1 MLP).
                    self._rate_fn = tf.function(lambda s: lr(s), autograph=False)
                return float(self._rate_fn(step).numpy())
            return float(keras.ops.convert_to_numpy(lr(step)))
        try:
            constant = self.model.optimizer.learning_rate
            if isinstance(constant, keras.Variable):  # a fixed rate (TF's warns in NumPy)
                return float(_numpy(constant))
            return float(keras.ops.convert_to_numpy(constant))
        except (TypeError, ValueError):
            return None

    def _fused_reads(self) -> tuple[int, float, float] | None:
        """On TensorFlow, (micro-steps, the batch's loss, the rate its update used) read
        by one graph call: three eager reads and the schedule's eager ops cost several
        times that after each batch. None where it does not apply (another backend, no
        batch-loss tracker, a rate that is neither a Keras schedule nor a variable)."""
        optimizer = self.model.optimizer
        if self._fused is None or self._fused_optimizer is not optimizer:  # (recompiled)
            self._fused, self._fused_optimizer = False, optimizer
            tracker = getattr(self.model, "_loss_tracker", None)
            lr: Any = getattr(optimizer, "_learning_rate", None)
            schedule = isinstance(lr, keras.optimizers.schedules.LearningRateSchedule)
            if (
                keras.backend.backend() == "tensorflow"
                and isinstance(tracker, _BatchLossMean)
                and not isinstance(lr, GlobalStepSchedule)
                and (schedule or isinstance(lr, keras.Variable))
            ):
                import tensorflow as tf

                counter, last = optimizer._iterations.value, tracker.last.value

                def reads() -> Any:
                    micro = counter.read_value()
                    rate = lr(micro - 1) if schedule else lr.value.read_value()
                    return micro, tf.cast(last.read_value(), tf.float64), tf.cast(rate, tf.float64)

                self._fused = tf.function(reads, autograph=False)
        if self._fused is False:
            return None
        micro, loss, rate = self._fused()
        return int(micro.numpy()), float(loss.numpy()), float(rate.numpy())

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self._torch is not None and batch == 0:  # each fit()'s first batch
            import torch

            torch.set_rng_state(self._torch.at_batch_end)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._torch is not None:
            import torch

            self._torch.at_batch_end = torch.get_rng_state()
        _sync(self.model)
        if self.data is not None:
            self.data.position += 1
        fused = self._fused_reads() if self.writer is not None else None
        if fused is not None:
            micro, loss, fused_rate = fused
        else:
            micro = int(_numpy(self.model.optimizer._iterations))
        if micro % self._accumulation():
            return  # a micro-batch: gradients accumulated, no update applied
        self.clock.tick()
        if self._plain_iterations is None:
            self._plain_iterations = (
                type(self.model.optimizer).iterations is keras.optimizers.Optimizer.iterations
            )
        if self._plain_iterations:  # optimizer.iterations is micro // accumulation: no read
            self._check(micro // self._accumulation())
        else:
            self._check()
        if self.writer is not None:
            # Observed for the update just applied: at the step after it (the clock's,
            # optimizer.iterations), with the rate that update used.
            scalars: dict[str, float] = {}
            if fused is not None:
                scalars["loss"] = loss
                rate: float | None = fused_rate
            else:
                tracker = getattr(self.model, "_loss_tracker", None)
                if isinstance(tracker, _BatchLossMean):
                    scalars["loss"] = float(_numpy(tracker.last))
                rate = self._rate(micro - 1)
            if rate is not None:
                scalars[self.rate_tag] = rate
            self.writer.scalars(scalars, step=self.clock.step)
        if self.manager is not None and self._save.should_fire(self.clock):
            if self.writer is not None:
                self.writer.flush()  # the curves are durable up to the newest checkpoint
            self.manager.save(self.clock, self.state())

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.data is None or self.data.position % self.data.steps_per_epoch == 0:
            self.clock.end_epoch()


def fit(
    model: Any,
    data: ResumableDataset,
    *,
    epochs: int,
    callbacks: Any = (),
    **kwargs: Any,
) -> list[Any]:
    """``model.fit`` over a :class:`ResumableDataset`, continuing inside a restored epoch.

    Where the data's position is inside epoch ``e`` at batch ``k``, a first ``fit()`` runs
    the epoch's remaining batches (``initial_epoch=e``), then a second the later epochs,
    so every batch is the one an uninterrupted run would see. (Plain ``model.fit(data,
    epochs=n)`` runs whole epochs only; see :class:`ResumableDataset`.)

    Returns:
        The ``History`` of each ``fit()`` call made.

    Raises:
        ConfigError: ``data`` is not a ResumableDataset, or ``epochs`` is not an int >= 1.
    """
    if not isinstance(data, ResumableDataset):
        raise ConfigError("data", "must be a ResumableDataset", data)
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ConfigError("epochs", "must be an int >= 1", epochs)
    for name in ("x", "y", "steps_per_epoch", "initial_epoch", "batch_size"):
        if name in kwargs:
            raise ConfigError(name, "is set by fit() from the data; leave it out", kwargs[name])
    kwargs.setdefault("shuffle", False)  # the data shuffles itself, by (seed, epoch)
    with data.streaming():
        return _fit_stream(model, data, epochs, list(callbacks), kwargs)


def _fit_stream(
    model: Any, data: ResumableDataset, epochs: int, callbacks: list[Any], kwargs: Any
) -> list[Any]:
    spe = data.steps_per_epoch
    epoch, k = divmod(data.position, spe)
    histories = []
    if k and epoch < epochs:
        histories.append(
            model.fit(
                data,
                epochs=epoch + 1,
                initial_epoch=epoch,
                steps_per_epoch=spe - k,
                callbacks=callbacks,
                **kwargs,
            )
        )
        epoch += 1
    if epoch < epochs:
        histories.append(
            model.fit(
                data,
                epochs=epochs,
                initial_epoch=epoch,
                steps_per_epoch=spe,
                callbacks=callbacks,
                **kwargs,
            )
        )
    return histories


# --------------------------------------------------------------------------- custom loops


def _read_iterations(optimizer: Any) -> Any:
    """``optimizer.iterations`` as a host value (a NumPy or Python integer)."""
    iterations = optimizer.iterations
    if isinstance(iterations, keras.Variable):
        iterations = iterations.value
    if keras.backend.backend() == "tensorflow":
        return iterations.numpy()  # an eager tensor; a symbolic one has no numpy()
    return keras.ops.convert_to_numpy(iterations)


_TRACED_HINT = (
    "Call it after the traced step returns, in the Python loop: the traced step "
    "(tf.function, jax.jit) runs Python once, at tracing, so a tick there would count "
    "one update for the whole run."
)


class Follower:
    """A clock kept equal to an optimizer's ``iterations`` (see :func:`follow`)."""

    def __init__(self, optimizer: Any, clock: Clock) -> None:
        self.optimizer = optimizer
        self.clock = clock
        self._tf = keras.backend.backend() == "tensorflow"
        iterations = optimizer.iterations
        # Without gradient accumulation ``iterations`` is the optimizer's own variable,
        # read in place (one read a call); with it, a new tensor each call.
        self._variable = iterations.value if isinstance(iterations, keras.Variable) else None
        self._index: int | None = None
        self._read_op: Any = None
        if self._tf and self._variable is not None:
            import tensorflow as tf

            # The read op alone: half the cost of variable.numpy() (which also records it
            # for gradient tapes and copies it with an identity).
            handle, dtype, op = self._variable.handle, self._variable.dtype, tf.raw_ops
            self._read_op = lambda: op.ReadVariableOp(resource=handle, dtype=dtype)

    def __repr__(self) -> str:
        return f"Follower({type(self.optimizer).__name__}, {self.clock!r})"

    def _read(self) -> int:
        try:
            if self._read_op is not None:
                return int(self._read_op().numpy())
            return int(_read_iterations(self.optimizer))
        except (AttributeError, TypeError, NotImplementedError) as err:
            raise ConfigError(
                "follower",
                "must be called outside a traced function (optimizer.iterations is symbolic here)",
                self,
                hint=_TRACED_HINT,
            ) from err

    def __call__(self, iterations: Any = None) -> int:
        """Ticks the clock for the updates applied since the last call; returns the step.

        Args:
            iterations: ``optimizer.iterations`` as the loop holds it, where the optimizer's
                variable is not the live counter (a stateless JAX loop: the value of the
                ``iteration`` entry of the optimizer variables it returns, floor-divided by
                ``gradient_accumulation_steps`` if set); None reads ``optimizer.iterations``.

        Returns:
            The clock's step, equal to ``optimizer.iterations``.

        Raises:
            ConfigError: called inside a traced function (``tf.function``, ``jax.jit``), or
                ``iterations`` is not an integer.
            StepError: the optimizer's count went back (restored without the clock), or
                the clock was ticked by something else.
        """
        value = self._read() if iterations is None else _host_int(iterations)
        step = self.clock.step
        if value == step + 1:
            self.clock.tick()
        elif value != step:
            if value < step:
                raise StepError(
                    f"optimizer.iterations is {value} but the clock ({self.clock.name!r}) is "
                    f"at step {step}: the optimizer's count went back. Restore the optimizer "
                    "and the clock from one checkpoint, or tick the clock only through its "
                    "follower.",
                    value,
                )
            self.clock.tick(value - step)
        return value

    def stateless(self, optimizer_variables: Any) -> int:
        """:meth:`__call__` for a stateless loop (``optimizer.stateless_apply``, the JAX way).

        Args:
            optimizer_variables: the optimizer variables' values the step returned, in the
                order of ``optimizer.variables``.

        Returns:
            The clock's step, equal to the iterations those values hold.

        Raises:
            ConfigError: ``optimizer_variables`` is not as long as ``optimizer.variables``.
        """
        variables = self.optimizer.variables
        if len(optimizer_variables) != len(variables):
            raise ConfigError(
                "optimizer_variables",
                f"must hold one value per optimizer variable ({len(variables)})",
                f"{len(optimizer_variables)} values",
            )
        if self._index is None:
            counter = self.optimizer.iterations
            if not isinstance(counter, keras.Variable):  # gradient accumulation
                counter = self.optimizer._iterations
            self._index = next(i for i, v in enumerate(variables) if v is counter)
        every = int(getattr(self.optimizer, "gradient_accumulation_steps", None) or 1)
        return self(_host_int(optimizer_variables[self._index]) // every)


def _host_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError("iterations", "must be an integer (optimizer.iterations)", value)
    if isinstance(value, int):
        return value
    if isinstance(value, keras.Variable):
        value = value.value
    try:
        if isinstance(value, np.ndarray | np.generic):
            array = np.asarray(value)
        elif callable(getattr(value, "numpy", None)) and keras.backend.backend() == "tensorflow":
            array = np.asarray(value.numpy())  # an eager tensor (a symbolic one raises)
        else:
            array = np.asarray(keras.ops.convert_to_numpy(value))
    except Exception as err:  # a tracer or a symbolic tensor: no value yet
        raise ConfigError(
            "iterations",
            "must be a concrete integer, not a traced one",
            type(value).__name__,
            hint=_TRACED_HINT,
        ) from err
    if array.shape != () or array.dtype.kind not in "iu":
        raise ConfigError("iterations", "must be a 0-d integer (optimizer.iterations)", value)
    return int(array)


def follow(optimizer: Any, clock: Clock) -> Follower:
    """Makes ``clock`` follow ``optimizer.iterations`` in a custom training loop.

    Call the returned :class:`Follower` once after each ``apply_gradients`` (or
    ``optimizer.apply``), outside any traced function: it reads ``optimizer.iterations``
    (one host read of one integer) and ticks the clock by what it gained, so the clock
    counts exactly the updates the optimizer counts: one per applied update, none for an
    update a ``keras.optimizers.LossScaleOptimizer`` skipped (non-finite gradients), one
    per ``gradient_accumulation_steps`` micro-batches. It works the same way for an eager
    loop and for a step in ``tf.function``, on the TensorFlow, JAX and torch backends.
    A value logged after the call carries the step after the update, as
    ``tf.summary.scalar(step=optimizer.iterations)`` does (see :mod:`globalstep.clock`).

    Cost: reading the variable right after a ``tf.function`` step is one eager op, tens
    to a couple of hundred microseconds on a loaded CPU; the cheapest is to return
    ``optimizer.iterations`` from the traced step (``return loss, optimizer.iterations``)
    and pass it, ``follower(iterations)``: an output of the step is read as it is, with no
    op of its own (see ``bench/bench_tf.py``).

    Args:
        optimizer: a Keras optimizer (a ``LossScaleOptimizer`` too).
        clock: the clock to advance; it must be at ``optimizer.iterations`` now (both 0,
            or both restored from one checkpoint).

    Returns:
        The :class:`Follower`; ``follower()`` returns the step.

    Raises:
        ConfigError: ``optimizer`` is not a Keras optimizer, or ``clock`` not a Clock.
        StepError: the clock is not at ``optimizer.iterations``.

    Example:
        >>> import keras, numpy as np
        >>> from globalstep import Clock
        >>> w = keras.Variable(np.zeros(2, "float32"))
        >>> opt = keras.optimizers.SGD(0.1)
        >>> clock = Clock()
        >>> step = follow(opt, clock)
        >>> opt.apply([keras.ops.ones(2)], [w])
        >>> step()
        1
        >>> clock.step
        1
    """
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ConfigError("optimizer", "must be a Keras optimizer", type(optimizer).__name__)
    if not isinstance(clock, Clock):
        raise ConfigError("clock", "must be a globalstep Clock", clock)
    follower = Follower(optimizer, clock)
    value = follower._read()
    if value != clock.step:
        raise StepError(
            f"the clock ({clock.name!r}) is at step {clock.step} but optimizer.iterations is "
            f"{value}: they must count the same updates. Restore both from one checkpoint "
            "before follow(), or start both at 0.",
            clock.step,
        )
    return follower
