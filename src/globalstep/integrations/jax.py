"""JAX and optax: arrays and pytrees in checkpoints, optax's counts checked against the clock.

Importing this module imports JAX; :mod:`globalstep.checkpoint._tree.adapters` imports it by
itself the first time a JAX, optax or flax object is saved or restored, so that a
``jax.Array``, an optax optimizer state or a flax struct goes into a
:class:`~globalstep.checkpoint.CheckpointManager` tree as it is:

- a ``jax.Array`` (bfloat16 and typed PRNG keys included) is stored as its host copy, and
  comes back as a ``jax.Array`` of the same dtype and weak type; given a template it is
  placed as the template is (its ``sharding``: device, or mesh and partition spec); an
  array of several processes (``jax.distributed``: not fully addressable) is a sharded
  leaf of a distributed checkpoint, each process writing the shards it addresses
  (replica 0 of each) and reading back the parts its template's shards cover;
- a namedtuple (every optax state) or a dataclass (flax structs) of these libraries is
  stored with its field names, and comes back as the template's own type, or, without a
  template, as a namedtuple with the same type name and fields (never a type imported by
  name from the checkpoint).

Schedules for optax: :mod:`globalstep.compat.optax` schedules trace under ``jax.jit``
themselves; :func:`traceable` makes any core schedule callable on a traced count. optax
calls a schedule with ``count``, the updates applied before the one it computes: the
clock's step before that update. Log what an update gives (its loss, and the rate it used:
``schedule(clock.step - 1)``, or ``opt_state.hyperparams["learning_rate"]`` under
``optax.inject_hyperparams``) after ``clock.tick()``, at the step after the update, the
convention of every logged value (see :mod:`globalstep._clock`).

Data: :class:`ResumableOrder` is the epoch's order of sample indices, a function of
``(seed, epoch)``, whose position is checkpoint state: a loop that indexes its own arrays
draws ``order.batches_of(batch_size)`` and resumes mid-epoch at the batch it reached; on
several processes (``jax.distributed``) each process draws its own share, and a restore on
another process count splits the rest of the epoch over the new processes.

Example:
    >>> import jax.numpy as jnp
    >>> from globalstep import Clock
    >>> import optax
    >>> opt = optax.sgd(0.1)
    >>> state = opt.init(jnp.zeros(2))
    >>> check_optax_count(state, Clock())  # no count in plain SGD's state: nothing to check
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from globalstep._clock import Clock
from globalstep._errors import ConfigError, StepError
from globalstep._optional import require
from globalstep.checkpoint import Adapter, Sharded, add_adapter
from globalstep.integrations._order import ResumableOrder
from globalstep.schedules import Schedule

jax = require("jax", "jax", "globalstep.integrations.jax")
jnp = require("jax.numpy", "jax", "globalstep.integrations.jax")

__all__ = [
    "JaxArrayAdapter",
    "PytreeAdapter",
    "ResumableOrder",
    "check_optax_count",
    "traceable",
]

_ROOTS = ("jax", "jaxlib", "optax", "flax")


def _is_key(obj: Any) -> bool:
    return bool(jax.dtypes.issubdtype(obj.dtype, jax.dtypes.prng_key))


def _weak(array: Any) -> Any:
    """``array`` as a weakly typed jax.Array, as a Python scalar becomes in JAX (a 0-d one:
    JAX has no public way to make a larger array weakly typed, and optax makes none)."""
    return jnp.asarray(array.item()) if array.ndim == 0 else array


def _spans_processes(obj: Any) -> bool:
    """Whether ``obj`` is an array of several processes (``jax.distributed``), which no
    process holds whole: each writes the shards it addresses."""
    return not bool(obj.is_fully_addressable) and not _is_key(obj)


def _sharded(obj: Any) -> Sharded:
    return Sharded(obj, str(obj.dtype), tuple(int(d) for d in obj.shape))


class JaxArrayAdapter(Adapter):
    """A ``jax.Array``: saved as its host copy; restored as a new array placed like the
    template's (the same sharding), with its dtype and weak type."""

    name = "jax.Array"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, jax.Array) and not isinstance(obj, jax.core.Tracer)

    def save(self, obj: Any) -> Any:
        if _spans_processes(obj):
            return _sharded(obj)
        if _is_key(obj):
            data = np.asarray(jax.random.key_data(obj))
            return {"key_data": data, "impl": str(jax.random.key_impl(obj))}
        return {"data": np.asarray(obj), "weak_type": bool(obj.weak_type)}

    def template(self, obj: Any) -> Any:
        if _spans_processes(obj):  # saved whole (by one process): read whole, then placed
            whole = {"data": np.empty(obj.shape, obj.dtype), "weak_type": False}
            return dataclasses.replace(_sharded(obj), whole=whole)
        if _is_key(obj):
            data = jax.random.key_data(obj)
            return {"key_data": np.empty(data.shape, data.dtype), "impl": ""}
        # A writable buffer of the right shape and dtype (the array itself is immutable).
        return {"data": np.empty(obj.shape, obj.dtype), "weak_type": False}

    def restore(self, obj: Any, state: Any) -> Any:
        if _spans_processes(obj) and isinstance(state, Mapping) and "data" in state:
            data = np.asarray(state["data"])  # saved whole: each process takes its parts
            return jax.make_array_from_callback(data.shape, obj.sharding, lambda i: data[i])
        return jax.device_put(self.rebuild(state), obj.sharding)

    def rebuild(self, state: Any) -> Any:
        if isinstance(state, jax.Array):  # a sharded array, read as the template's
            return state
        if isinstance(state, np.ndarray):  # a sharded array, read whole
            return jnp.asarray(state)
        if "key_data" in state:
            return jax.random.wrap_key_data(jnp.asarray(state["key_data"]), impl=state["impl"])
        array = jnp.asarray(state["data"])
        return _weak(array) if state.get("weak_type") else array


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and isinstance(getattr(type(obj), "_fields", None), tuple)


def _fields(obj: Any) -> dict[str, Any]:
    if _is_namedtuple(obj):
        return {name: getattr(obj, name) for name in obj._fields}
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _plain_namedtuple(type_name: Any, fields: Mapping[str, Any]) -> Any:
    name = type_name.rpartition(".")[2] if isinstance(type_name, str) else ""
    cls = collections.namedtuple(name if name.isidentifier() else "Restored", list(fields))  # type: ignore[misc]
    return cls(**fields)


class PytreeAdapter(Adapter):
    """A namedtuple (optax's states) or dataclass (flax structs) of JAX's libraries: saved
    with its field names; restored as the template's type with its leaves placed like the
    template's, or as a namedtuple of the same name and fields without a template."""

    name = "jax.pytree"

    def matches(self, obj: Any) -> bool:
        return _is_namedtuple(obj) or (dataclasses.is_dataclass(obj) and not isinstance(obj, type))

    def save(self, obj: Any) -> Any:
        kind = "namedtuple" if _is_namedtuple(obj) else "dataclass"
        cls = type(obj)
        return {
            "kind": kind,
            "type": f"{cls.__module__}.{cls.__qualname__}",
            "fields": _fields(obj),
        }

    def restore(self, obj: Any, state: Any) -> Any:
        return _place(obj, self.rebuild(state))

    def rebuild(self, state: Any) -> Any:
        return _plain_namedtuple(state.get("type"), state["fields"])


def _place(tmpl: Any, value: Any) -> Any:
    """``value`` (rebuilt without a template) shaped and placed as ``tmpl``."""
    if isinstance(tmpl, jax.Array) and isinstance(value, jax.Array | np.ndarray):
        return jax.device_put(value, tmpl.sharding)
    if _is_namedtuple(tmpl) or (dataclasses.is_dataclass(tmpl) and not isinstance(tmpl, type)):
        given = value._asdict() if _is_namedtuple(value) else dict(value)
        fields = {k: _place(v, given[k]) for k, v in _fields(tmpl).items()}
        if _is_namedtuple(tmpl):
            return type(tmpl)(**fields)
        new = copy.copy(tmpl)
        for key, field_value in fields.items():
            object.__setattr__(new, key, field_value)  # frozen dataclasses (flax) too
        return new
    if isinstance(tmpl, Mapping) and isinstance(value, Mapping):
        return {k: _place(tmpl[k], v) if k in tmpl else v for k, v in value.items()}
    if isinstance(tmpl, list | tuple) and isinstance(value, list | tuple):
        items = [_place(t, v) for t, v in zip(tmpl, value, strict=False)]
        return type(value)(items) if isinstance(value, list) else tuple(items)
    return value


add_adapter(JaxArrayAdapter(), roots=_ROOTS)
add_adapter(PytreeAdapter(), roots=_ROOTS)


def _counts(tree: Any, path: str) -> list[tuple[str, str, int]]:
    """Every optax ``count`` (and MultiSteps ``mini_step``/``gradient_step``) in ``tree``."""
    found: list[tuple[str, str, int]] = []
    if _is_namedtuple(tree):
        for name, value in _fields(tree).items():
            sub = f"{path}/{name}" if path else name
            if name in ("count", "gradient_step", "mini_step") and np.ndim(value) == 0:
                found.append((sub, name, int(np.asarray(value))))
            else:
                found.extend(_counts(value, sub))
    elif isinstance(tree, Mapping):
        for key, value in tree.items():
            found.extend(_counts(value, f"{path}/{key}" if path else str(key)))
    elif isinstance(tree, list | tuple):
        for i, value in enumerate(tree):
            found.extend(_counts(value, f"{path}/{i}" if path else str(i)))
    return found


def check_optax_count(
    opt_state: Any,
    clock: Clock | int,
    *,
    micro_steps: int | None = None,
    every_k: int | None = None,
) -> None:
    """Raises unless optax's update counters agree with the clock.

    Every ``count`` in the state (each stateful transformation's updates applied) must
    equal ``clock.step``; an ``optax.MultiSteps`` state's ``gradient_step`` must equal it
    too (its inner counts then agree by themselves) and, given the micro-batches consumed
    (``micro_steps``) and ``every_k``, its ``mini_step`` must be ``micro_steps % every_k``
    with ``gradient_step == micro_steps // every_k``.

    Args:
        opt_state: an optax optimizer state (any nesting of its namedtuples).
        clock: the clock of the optimizer's updates, or the step itself.
        micro_steps: micro-batches consumed so far, under ``optax.MultiSteps``.
        every_k: ``MultiSteps``' ``every_k_schedule`` as an int.

    Raises:
        StepError: a counter disagrees; the message names it, its path and the clock.
        ConfigError: ``micro_steps`` without ``every_k`` (or the reverse).

    Example:
        >>> import jax.numpy as jnp
        >>> import optax
        >>> from globalstep import Clock
        >>> state = optax.adam(0.1).init(jnp.zeros(2))
        >>> check_optax_count(state, 0)
        >>> check_optax_count(state, Clock())
    """
    if (micro_steps is None) != (every_k is None):
        raise ConfigError(
            "micro_steps", "must be given together with every_k", micro_steps, "Pass both."
        )
    step = clock.step if isinstance(clock, Clock) else int(clock)
    who = f"clock {clock.name!r} is at step {step}" if isinstance(clock, Clock) else f"step={step}"
    in_multisteps = False
    for path, name, value in _counts(opt_state, ""):
        if name == "mini_step":
            in_multisteps = True
            if micro_steps is not None and every_k is not None and value != micro_steps % every_k:
                raise StepError(
                    f"optax.MultiSteps' `mini_step` at {path} is {value}, but {micro_steps} "
                    f"micro-batches with every_k={every_k} leave {micro_steps % every_k}; "
                    "restore the optimizer state saved with the clock.",
                    value,
                )
            continue
        if name == "gradient_step":
            in_multisteps = True
            expected = step
            if micro_steps is not None and every_k is not None and step != micro_steps // every_k:
                raise StepError(
                    f"{who}, but {micro_steps} micro-batches with every_k={every_k} make "
                    f"{micro_steps // every_k} updates; tick the clock once per MultiSteps update.",
                    step,
                )
        else:
            expected = step
        if value != expected and not (in_multisteps and name == "count" and value == step):
            raise StepError(
                f"optax's `{name}` at {path} is {value}, but {who}; the optimizer state and "
                "the clock must be saved and restored together (tick the clock once per "
                "optimizer update, not per micro-batch).",
                value,
            )


def traceable(schedule: Schedule) -> Callable[[Any], Any]:
    """Returns ``schedule`` as a function optax can call with a traced count under jit.

    The value at each count is the schedule's own (computed on the host through
    ``jax.pure_callback``, bit for bit ``schedule(count)``), in the schedule's dtype cast to
    float32 unless JAX runs with 64-bit types.

    Args:
        schedule: a core globalstep schedule (compat.optax schedules trace by themselves).

    Raises:
        ConfigError: ``schedule`` is not a globalstep schedule.

    Example:
        >>> import jax
        >>> from globalstep.schedules import Linear
        >>> lr = traceable(Linear(0.0, 1.0, 10))
        >>> float(jax.jit(lr)(5))
        0.5
    """
    if not isinstance(schedule, Schedule):
        raise ConfigError(
            "schedule",
            "must be a globalstep schedule",
            schedule,
            "compat.optax schedules need no wrapping; pass them to optax directly.",
        )
    dtype = jnp.dtype(jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)
    out = dtype if schedule.numpy_dtype == np.float64 else jnp.dtype(jnp.float32)

    def host(count: Any) -> Any:
        return np.asarray(schedule.values(np.asarray(count, dtype=np.int64)), dtype=out)

    def fn(count: Any) -> Any:
        count = jnp.asarray(count)
        shape = jax.ShapeDtypeStruct(count.shape, out)
        return jax.pure_callback(host, shape, count, vmap_method="expand_dims")

    return fn
