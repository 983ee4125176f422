"""State trees: flattening into named arrays plus a JSON structure, and back.

A state tree is nested dicts (string keys), lists and tuples whose leaves are NumPy arrays
(any fixed-size dtype, bfloat16 and the float8 types of ``ml_dtypes`` included), NumPy
scalars, Python ``bool``/``int``/``float``/``str``, ``None``, objects with
``state_dict()`` / ``load_state_dict()`` (a :class:`~globalstep.clock.Clock`, triggers, ...),
and framework objects that an :mod:`~globalstep.checkpoint.adapters` adapter takes (torch
modules and tensors, JAX arrays and pytrees, Keras models). A dataclass instance is saved
as a dict of its fields and a namedtuple as a tuple; restored against a template of the
same kind they come back as the template's class (without one, as a dict and a tuple: no
class is ever looked up by a name read from a file). Arrays are named by their path,
``model/layer1/weight``; everything else goes into a JSON node. Nothing is pickled: an array
of Python objects is refused.

Example:
    >>> import numpy as np
    >>> flat = flatten({"w": np.zeros(2, np.float32), "lr": 0.1})
    >>> sorted(flat.arrays), flat.structure["dict"]["lr"]
    (['w'], {'value': 0.1})
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np

from globalstep._optional import require
from globalstep.checkpoint import adapters
from globalstep.clock import Clock
from globalstep.errors import (
    ConfigError,
    CorruptCheckpointError,
    MissingDependencyError,
    RestoreMismatchError,
)

__all__ = [
    "SAFETENSORS_CODES",
    "Fit",
    "Flattened",
    "RestoreReport",
    "Sharded",
    "array_nodes",
    "check_fit",
    "check_key",
    "decode_dtype",
    "encode_dtype",
    "fit_template",
    "flatten",
    "float_from_json",
    "float_to_json",
    "is_shape",
    "is_stateful",
    "placeholders",
    "safetensors_code",
    "sharded_nodes",
    "template_arrays",
    "template_sharded",
    "unflatten",
]

# NumPy dtype name -> safetensors dtype code; other dtypes are stored as raw bytes ("U8").
SAFETENSORS_CODES: dict[str, str] = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "int16": "I16",
    "uint16": "U16",
    "float16": "F16",
    "bfloat16": "BF16",
    "int32": "I32",
    "uint32": "U32",
    "float32": "F32",
    "float64": "F64",
    "int64": "I64",
    "uint64": "U64",
    "float8_e5m2": "F8_E5M2",
    "float8_e4m3fn": "F8_E4M3",
    "complex64": "C64",
}
CODE_ITEMSIZE: dict[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "C64": 8,
}
_FORBIDDEN_KEYS = {"", ".", "..", "__metadata__"}


def check_key(key: Any, parameter: str = "state") -> str:
    """Returns ``key`` if it is a safe tree key or file name part, else raises.

    A key is a non-empty string without ``/``, ``\\``, NUL, and not ``.`` or ``..``, so that
    paths built from it stay inside the checkpoint and flattened names stay unambiguous.

    Raises:
        ConfigError: the key is not a string or would escape or collide.

    Example:
        >>> check_key("layer1")
        'layer1'
    """
    if (
        not isinstance(key, str)
        or key in _FORBIDDEN_KEYS
        or "/" in key
        or "\\" in key
        or "\x00" in key
    ):
        raise ConfigError(
            parameter,
            "keys must be non-empty strings without '/', '\\\\' or NUL, and not '.' or '..'",
            key,
        )
    return key


def is_shape(shape: Any) -> TypeGuard[list[int]]:
    """True for a shape as JSON holds it: a list of non-negative ints (bools are not).

    Example:
        >>> is_shape([2, 3]), is_shape([2.0]), is_shape([True])
        (True, False, False)
    """
    if type(shape) is not list:
        return False
    for dim in shape:  # noqa: SIM110 - a loop, not all() over a generator: once per array
        if type(dim) is not int or dim < 0:
            return False
    return True


def is_stateful(obj: Any) -> bool:
    """Returns True for objects restored in place through ``load_state_dict``."""
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    )


def float_to_json(value: float) -> Any:
    """Returns a JSON node for a float, spelling non-finite values as strings."""
    if math.isfinite(value):
        return {"value": value}
    return {"float": repr(value)}


def float_from_json(text: Any) -> float:
    """Reads a non-finite float written by :func:`float_to_json`."""
    if text not in ("nan", "inf", "-inf"):
        raise CorruptCheckpointError(f"state.json: bad non-finite float {text!r}")
    return float(text)


def _ml_dtypes_name(dtype: np.dtype[Any]) -> str | None:
    module = type(dtype.type).__module__ + dtype.type.__module__
    return dtype.name if "ml_dtypes" in module else None


def encode_dtype(dtype: np.dtype[Any]) -> Any:
    """Returns a JSON description of a NumPy dtype (little-endian), for state.json."""
    known = _ENCODED.get(dtype)
    if known is not None:
        return copy.deepcopy(known) if isinstance(known, list | dict) else known
    name = _ml_dtypes_name(dtype)
    descr = (
        {"ml_dtypes": name}
        if name is not None
        else np.lib.format.dtype_to_descr(dtype.newbyteorder("<"))
    )
    _ENCODED[dtype] = descr  # a state holds many arrays of a few dtypes: describe each once
    return copy.deepcopy(descr) if isinstance(descr, list | dict) else descr


_ENCODED: dict[np.dtype[Any], Any] = {}
_DECODED: dict[str, np.dtype[Any]] = {}


def decode_dtype(descr: Any) -> np.dtype[Any]:
    """Rebuilds a dtype from :func:`encode_dtype`'s output.

    Raises:
        CorruptCheckpointError: the description is not a dtype, or names Python objects.
    """
    if isinstance(descr, str) and descr in _DECODED:
        return _DECODED[descr]
    dtype: np.dtype[Any]
    try:
        if isinstance(descr, dict):
            ml_dtypes = require("ml_dtypes", "bf16", "restoring bfloat16 and float8 arrays")
            name = descr.get("ml_dtypes")
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(name)
            dtype = np.dtype(getattr(ml_dtypes, name))
        else:
            if isinstance(descr, list):
                descr = [tuple(field) if isinstance(field, list) else field for field in descr]
            dtype = np.dtype(np.lib.format.descr_to_dtype(descr))
    except (ValueError, TypeError, AttributeError, IndexError, KeyError) as err:
        raise CorruptCheckpointError(f"state.json: bad dtype {descr!r}") from err
    if dtype.hasobject:
        raise CorruptCheckpointError(f"state.json: dtype {descr!r} holds Python objects")
    if isinstance(descr, str):
        _DECODED[descr] = dtype
    return dtype


def safetensors_code(dtype: np.dtype[Any]) -> str:
    """Returns the safetensors dtype code an array of ``dtype`` is stored under."""
    name = _ml_dtypes_name(dtype) or dtype.name
    if dtype.fields is None and dtype.byteorder in "=<|" and name in SAFETENSORS_CODES:
        return SAFETENSORS_CODES[name]
    return "U8"


@dataclass(frozen=True)
class Sharded:
    """A leaf whose data every rank writes a part of (a torch ``DTensor``), not the writer.

    Adapters return it for sharded values; :func:`flatten` collects it under
    ``Flattened.sharded`` and stores ``{"sharded": key, "dtype": ..., "shape": ...}`` in the
    structure, and :mod:`globalstep.checkpoint.distributed` writes and reads the data.

    Attributes:
        value: the sharded object itself.
        dtype: the element type's name (``"float32"``, ``"bfloat16"``).
        shape: the global shape.
    """

    value: Any
    dtype: str
    shape: tuple[int, ...]


@dataclass
class Flattened:
    """A state tree taken apart.

    Attributes:
        structure: the JSON tree, with array leaves replaced by ``{"array": key, ...}``.
        arrays: flat name -> array, in the order met.
        clocks: every Clock's Progress, as dicts.
        sharded: flat name -> sharded value (see :class:`Sharded`), in the order met.
    """

    structure: Any
    arrays: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)
    clocks: list[dict[str, Any]] = field(default_factory=list)
    sharded: dict[str, Any] = field(default_factory=dict)


def flatten(state: Any, *, copy: bool = False) -> Flattened:
    """Takes a state tree apart into a JSON structure and named arrays.

    Args:
        state: the tree (see the module docstring).
        copy: copy every array (for a background save that must not see later updates).

    Raises:
        ConfigError: a key is unsafe, or a leaf is of a type that cannot be saved.

    Example:
        >>> flatten([np.int64(3), None]).structure["list"][1]
        {'value': None}
    """
    out = Flattened(structure=None)
    out.structure = _encode(state, "", out, copy)
    return out


def _encode(obj: Any, path: str, out: Flattened, copy: bool) -> Any:
    """The JSON node of ``obj``; ``path`` is its flat name ("" at the root)."""
    if type(obj) is np.ndarray:  # the common leaf first: per-array cost adds up
        array = obj
    elif isinstance(obj, np.ndarray | np.generic):
        array = np.asarray(obj)
    else:
        array = None
    if array is not None:
        if array.dtype.hasobject:
            raise ConfigError(
                "state",
                "arrays must not hold Python objects (that would need pickle)",
                f"{path or '<root>'}: dtype={array.dtype}",
            )
        key = path or "_"
        out.arrays[key] = np.array(array, copy=True) if copy else array
        node: dict[str, Any] = {
            "array": key,
            "dtype": encode_dtype(array.dtype),
            "shape": list(array.shape),
        }
        if isinstance(obj, np.generic):
            node["numpy_scalar"] = True
        return node
    if obj is None or isinstance(obj, bool | int | str):
        return {"value": obj}
    if isinstance(obj, Sharded):
        key = path or "_"
        out.sharded[key] = obj.value
        return {"sharded": key, "dtype": obj.dtype, "shape": list(obj.shape)}
    if isinstance(obj, float):
        return float_to_json(obj)
    adapter = adapters.find(obj)
    if adapter is not None:
        return {"adapted": adapter.name, "state": _encode(adapter.save(obj), path, out, copy)}
    if isinstance(obj, Mapping):
        prefix = f"{path}/" if path else ""
        children = {}
        for k, v in obj.items():
            check_key(k)
            children[k] = _encode(v, prefix + k, out, copy)
        return {"dict": children}
    if isinstance(obj, list | tuple):
        kind = "list" if isinstance(obj, list) else "tuple"
        prefix = f"{path}/" if path else ""
        return {kind: [_encode(v, f"{prefix}{i}", out, copy) for i, v in enumerate(obj)]}
    fields = _dataclass_fields(obj)
    if fields is not None:
        return _encode(fields, path, out, copy)
    if is_stateful(obj):
        if isinstance(obj, Clock):
            out.clocks.append(obj.progress().to_dict())
        return {"stateful": _encode(obj.state_dict(), path, out, copy)}
    raise ConfigError(
        "state",
        "leaves must be arrays, scalars, strings, None, dataclasses, objects with "
        "state_dict() or framework objects globalstep has an adapter for (torch, JAX, Keras)",
        f"{path or '<root>'}: {_type_name(obj)}",
    )


def _dataclass_fields(obj: Any) -> dict[str, Any] | None:
    """A dataclass instance's fields by name (None for anything else or a stateful one)."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type) or is_stateful(obj):
        return None
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _rebuilt_dataclass(tmpl: Any, values: dict[str, Any]) -> Any:
    """A new instance of ``tmpl``'s dataclass with ``values`` (its ``__init__`` runs)."""
    fields = dataclasses.fields(tmpl)
    made = dataclasses.replace(tmpl, **{f.name: values[f.name] for f in fields if f.init})
    for f in fields:
        if not f.init:
            object.__setattr__(made, f.name, values[f.name])
    return made


def _type_name(obj: Any) -> str:
    module = type(obj).__module__
    name = type(obj).__qualname__
    return name if module == "builtins" else f"{module}.{name}"


@dataclass
class RestoreReport:
    """How a checkpoint fits a template; every list holds flattened paths.

    Attributes:
        missing: in the template, not in the checkpoint (left as the template has them).
        unexpected: in the checkpoint, not in the template (not restored).
        mismatched: in both, with another shape, dtype or kind (left as the template has
            them), each as ``"path: expected ..., got ..."``.
        deferred: in the checkpoint, for variables a framework object creates later (an
            optimizer's slots before its first update): kept by the object's adapter and
            assigned when it creates them (see :class:`~globalstep.checkpoint.adapters.
            OpenTemplate`); :meth:`pending` says which still wait.
    """

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    waiting: list[tuple[adapters.Adapter, Any, str]] = field(
        default_factory=list, repr=False, compare=False
    )
    """(adapter, object, path) of each restored object that kept deferred values."""

    @property
    def ok(self) -> bool:
        """True when the checkpoint fits the template exactly (deferred values fit too:
        their objects take them when they create their variables)."""
        return not (self.missing or self.unexpected or self.mismatched)

    def pending(self) -> list[str]:
        """The deferred values not assigned yet, as paths: their objects have not created
        the variables that take them (the optimizer has not made its first update)."""
        out: list[str] = []
        for adapter, obj, path in self.waiting:
            out.extend(f"{path}/{key}" if path else key for key in adapter.pending(obj))
        return out

    def __str__(self) -> str:
        parts = [
            f"{name}: {', '.join(items)}"
            for name, items in (
                ("missing", self.missing),
                ("unexpected", self.unexpected),
                ("mismatched", self.mismatched),
                ("deferred", self.deferred),
            )
            if items
        ]
        return "; ".join(parts) or "exact match"


def _same_dtype(a: np.dtype[Any], b: np.dtype[Any]) -> bool:
    """True when two dtypes differ at most in byte order (state.json stores little-endian)."""
    return a == b or a.newbyteorder("<") == b.newbyteorder("<")


_KINDS = ("value", "float", "dict", "list", "tuple", "array", "stateful", "adapted", "sharded")
_KIND_SET = frozenset(_KINDS)


def _kind(node: Any, where: str) -> str:
    if not isinstance(node, dict):
        raise CorruptCheckpointError(f"state.json: node at {where} is not an object")
    kinds = _KIND_SET.intersection(node)  # few keys: one C-level pass
    if len(kinds) != 1:
        raise CorruptCheckpointError(f"state.json: node at {where} has no single kind")
    (kind,) = kinds
    return kind


def array_nodes(structure: Any) -> dict[str, dict[str, Any]]:
    """Returns every array node of a saved structure by flat name.

    Raises:
        CorruptCheckpointError: the structure is malformed.
    """
    return _leaf_nodes(structure, "array")


def sharded_nodes(structure: Any) -> dict[str, dict[str, Any]]:
    """Returns every sharded node (see :class:`Sharded`) of a saved structure by flat name.

    Raises:
        CorruptCheckpointError: the structure is malformed.
    """
    return _leaf_nodes(structure, "sharded")


def _leaf_nodes(structure: Any, leaf: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}

    def walk(node: Any, where: str) -> None:
        kind = _kind(node, where)
        if kind == leaf:
            key = node[leaf]
            if not isinstance(key, str) or key in found:
                raise CorruptCheckpointError(f"state.json: bad or repeated array key {key!r}")
            found[key] = node
        elif kind == "dict":
            children = node["dict"]
            if not isinstance(children, dict):
                raise CorruptCheckpointError(f"state.json: dict at {where} is not an object")
            for k, child in children.items():
                walk(child, f"{where}/{k}")
        elif kind in ("list", "tuple"):
            children = node[kind]
            if not isinstance(children, list):
                raise CorruptCheckpointError(f"state.json: {kind} at {where} is not a list")
            for i, child in enumerate(children):
                walk(child, f"{where}/{i}")
        elif kind == "stateful":
            walk(node["stateful"], where)
        elif kind == "adapted":
            walk(node["state"], where)

    walk(structure, "<root>")
    return found


def _walk_template(
    structure: Any, template: Any, leaf: Callable[[str, dict[str, Any], Any], bool]
) -> None:
    """Walks the saved structure and the template side by side; ``leaf(kind, node, tmpl)``
    sees every node first and returns True where it took the node (no descent there)."""

    def walk(node: Any, tmpl: Any) -> None:
        kind = _kind(node, "<template>")
        if leaf(kind, node, tmpl):
            return
        fields = _dataclass_fields(tmpl)
        if kind == "dict" and fields is not None:
            walk(node, fields)
        elif kind == "dict" and isinstance(tmpl, Mapping):
            for k, child in node["dict"].items():
                if k in tmpl:
                    walk(child, tmpl[k])
        elif kind in ("list", "tuple") and isinstance(tmpl, list | tuple):
            for child, sub in zip(node[kind], tmpl, strict=False):
                walk(child, sub)
        elif kind == "adapted":
            adapter = _template_adapter(node, tmpl)
            if adapter is not None:
                walk(node["state"], adapter.template(tmpl))

    if template is not None:
        walk(structure, template)


def template_arrays(structure: Any, template: Any) -> dict[str, np.ndarray[Any, Any]]:
    """Returns the template's arrays that sit where the saved structure has an array."""
    found: dict[str, np.ndarray[Any, Any]] = {}

    def leaf(kind: str, node: dict[str, Any], tmpl: Any) -> bool:
        if kind == "array" and isinstance(tmpl, np.ndarray):
            found[node["array"]] = tmpl
        return kind == "array"

    _walk_template(structure, template, leaf)
    return found


def template_sharded(structure: Any, template: Any) -> dict[str, Any]:
    """Returns the template's sharded values (see :class:`Sharded`) that sit where the saved
    structure has a sharded node, and None where the template has something else there (a
    plain tensor's array)."""
    found: dict[str, Any] = {}

    def leaf(kind: str, node: dict[str, Any], tmpl: Any) -> bool:
        if kind == "sharded":
            found[node["sharded"]] = tmpl.value if isinstance(tmpl, Sharded) else None
        return kind == "sharded"

    _walk_template(structure, template, leaf)
    return found


def _template_adapter(node: dict[str, Any], tmpl: Any) -> adapters.Adapter | None:
    """The adapter an adapted node names, if it takes the template object."""
    if tmpl is None:
        return None
    adapter = adapters.named(node["adapted"])
    return adapter if adapter.matches(tmpl) else None


def _same_memory(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    """True when two arrays are the same view of the same bytes (nothing to copy)."""
    if a is b:
        return True
    # The cheap attributes first: the data pointers build two dicts.
    if a.shape != b.shape or a.strides != b.strides or a.dtype != b.dtype:
        return False
    return bool(a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def _foreign_read_only(tmpl: Any) -> bool:
    """True for a read-only array over another library's buffer (``np.asarray(jax_array)``
    views a memoryview or a DLPack capsule), which a restore could never fill in place."""
    if not isinstance(tmpl, np.ndarray) or tmpl.flags.writeable:
        return False
    base: Any = tmpl
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base, memoryview) or type(base).__name__ == "PyCapsule"


class _Builder:
    def __init__(self, arrays: Mapping[str, Any], apply: bool) -> None:
        self.arrays = arrays
        self.apply = apply
        self.report = RestoreReport()
        self.loads: list[tuple[Any, Any]] = []
        self.applies: list[tuple[adapters.Adapter, Any, Any]] = []
        self.copies: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
        self.targets: dict[str, np.ndarray[Any, Any]] = {}
        """The template's arrays met where the structure has an array (see check_fit)."""
        self.final = True
        """While checking the fit: every node built so far is what the restore returns,
        once each target is filled in place (no array to copy or convert, no dataclass to
        rebuild, no object to load), so the tree built is the restored tree (see Fit)."""

    def build(self, node: Any, tmpl: Any, path: str, has_tmpl: bool) -> Any:
        kind = _kind(node, path or "<root>")
        if kind == "value":
            value = node["value"]
            if value is not None and not isinstance(value, bool | int | float | str):
                raise CorruptCheckpointError(f"state.json: bad value at {path or '<root>'}")
            return value
        if kind == "float":
            return float_from_json(node["float"])
        if kind == "array":
            return self._array(node, tmpl, path, has_tmpl)
        if kind == "sharded":
            return self._sharded(node, tmpl, path, has_tmpl)
        if kind == "adapted":
            return self._adapted(node, tmpl, path, has_tmpl)
        if kind == "stateful":
            self.final = False
            state = self.build(node["stateful"], None, path, False)
            if not has_tmpl:
                return state
            if not is_stateful(tmpl):
                self.report.mismatched.append(
                    f"{path or '<root>'}: expected {type(tmpl).__name__}, got a stateful object"
                )
                return tmpl
            self.loads.append((tmpl, state))
            return tmpl
        children = node[kind]
        if not isinstance(children, dict if kind == "dict" else list):
            raise CorruptCheckpointError(f"state.json: bad {kind} at {path or '<root>'}")
        if kind == "dict":
            return self._dict(children, tmpl, path, has_tmpl)
        return self._sequence(kind, children, tmpl, path, has_tmpl)

    def _adapted(self, node: dict[str, Any], tmpl: Any, path: str, has_tmpl: bool) -> Any:
        self.final = False
        if has_tmpl:
            adapter = adapters.named(node["adapted"])
            if not adapter.matches(tmpl):
                self.report.mismatched.append(
                    f"{path or '<root>'}: expected {type(tmpl).__name__}, got a {node['adapted']}"
                )
                return tmpl
            # The fit is checked against the adapter's template; getting the data into the
            # object is the adapter's own restore()/apply(), given the plain state.
            check = _Builder(self.arrays, apply=False)
            check.targets = self.targets
            check.build(node["state"], adapter.template(tmpl), path, True)
            for name in ("missing", "unexpected", "mismatched"):
                getattr(self.report, name).extend(getattr(check.report, name))
            if check.report.ok:  # an object that does not fit keeps no deferred values
                self.report.deferred.extend(check.report.deferred)
            if not self.apply or not check.report.ok:
                return tmpl  # a partial restore leaves an object that does not fit untouched
            state = self.build(node["state"], None, path, False)
            self.applies.append((adapter, tmpl, state))
            if check.report.deferred:
                self.report.waiting.append((adapter, tmpl, path))
            return adapter.restore(tmpl, state)
        state = self.build(node["state"], None, path, False)
        if not self.apply:
            return state
        try:
            adapter = adapters.named(node["adapted"])
        except MissingDependencyError:
            return state  # the framework is not installed: the plain state still reads
        return adapter.rebuild(state)

    def _array(self, node: dict[str, Any], tmpl: Any, path: str, has_tmpl: bool) -> Any:
        array = self.arrays[node["array"]]
        if has_tmpl and array is tmpl:  # filled in place: nothing to check or copy
            return array[()] if node.get("numpy_scalar") else array
        if has_tmpl and isinstance(tmpl, np.ndarray):
            self.targets[node["array"]] = tmpl
            if not self.apply and tmpl.shape == array.shape:  # checking the fit only
                flags = tmpl.flags
                if (
                    flags.writeable
                    and flags.c_contiguous
                    and tmpl.dtype == array.dtype
                    and not node.get("numpy_scalar")
                ):
                    return tmpl  # it fits, and the restore reads into it and returns it
                if _same_dtype(tmpl.dtype, array.dtype) and not _foreign_read_only(tmpl):
                    self.final = False
                    return tmpl  # it fits (what is returned is unused: unflatten rebuilds)
        self.final = False
        if has_tmpl:
            if not isinstance(tmpl, np.ndarray | np.generic):
                self.report.mismatched.append(
                    f"{path or '<root>'}: expected {type(tmpl).__name__}, got an array"
                )
                return tmpl
            if tmpl.shape != array.shape or not _same_dtype(tmpl.dtype, array.dtype):
                self.report.mismatched.append(
                    f"{path or '<root>'}: expected {tmpl.dtype}{list(tmpl.shape)}, "
                    f"got {array.dtype}{list(array.shape)}"
                )
                return tmpl
            if (
                isinstance(tmpl, np.ndarray)
                and _foreign_read_only(tmpl)
                and not _same_memory(array, tmpl)
            ):
                self.report.mismatched.append(
                    f"{path or '<root>'}: the template array is a read-only view of another "
                    "library's buffer (np.asarray of a jax.Array?) and cannot be filled in "
                    "place; pass the jax.Array itself, or a writable np.array(...) copy"
                )
                return tmpl
            if (
                isinstance(tmpl, np.ndarray)
                and tmpl.flags.writeable
                and not _same_memory(array, tmpl)
            ):
                # Read into a new array (the template is not C-contiguous, or of the other
                # byte order): copied over once the fit is known, so it is filled in place too.
                self.copies.append((tmpl, array))
                return tmpl
        if node.get("numpy_scalar"):
            return array[()]
        return array

    def _sharded(self, node: dict[str, Any], tmpl: Any, path: str, has_tmpl: bool) -> Any:
        """A sharded leaf: its loaded value (the template's own, filled in place, or the
        whole tensor) is in ``arrays``; the fit is checked from the node alone."""
        self.final = False
        if has_tmpl:
            if isinstance(tmpl, Sharded):
                dtype, shape = tmpl.dtype, list(tmpl.shape)
            elif isinstance(tmpl, np.ndarray):
                dtype, shape = str(tmpl.dtype), list(tmpl.shape)
            else:
                self.report.mismatched.append(
                    f"{path or '<root>'}: expected {type(tmpl).__name__}, got a sharded tensor"
                )
                return tmpl
            if dtype != node.get("dtype") or shape != node.get("shape"):
                self.report.mismatched.append(
                    f"{path or '<root>'}: expected {dtype}{shape}, "
                    f"got {node.get('dtype')}{node.get('shape')}"
                )
            return tmpl
        if not self.apply:
            return None
        return self.arrays[node["sharded"]]

    def _dict(self, children: Any, tmpl: Any, path: str, has_tmpl: bool) -> Any:
        fields = _dataclass_fields(tmpl) if has_tmpl else None
        if fields is not None:
            self.final = False  # its __init__ runs again with the arrays read
            values = self._dict(children, fields, path, True)
            return _rebuilt_dataclass(tmpl, values)
        if has_tmpl and not isinstance(tmpl, Mapping):
            self.report.mismatched.append(
                f"{path or '<root>'}: expected {type(tmpl).__name__}, got a dict"
            )
            return tmpl
        result: dict[str, Any] = {}
        open_template = isinstance(tmpl, adapters.OpenTemplate)
        for key, child in children.items():
            sub = f"{path}/{key}" if path else key
            if has_tmpl and key not in tmpl:
                if open_template:  # for a variable the object creates later
                    self.report.deferred.append(sub)
                    result[key] = self.build(child, None, sub, False)
                    continue
                self.report.unexpected.append(sub)
                continue
            result[key] = self.build(child, tmpl[key] if has_tmpl else None, sub, has_tmpl)
        if has_tmpl:
            for key in tmpl:
                if key not in children:
                    self.report.missing.append(f"{path}/{key}" if path else str(key))
                    result[key] = tmpl[key]
        return result

    def _sequence(self, kind: str, children: Any, tmpl: Any, path: str, has_tmpl: bool) -> Any:
        if has_tmpl and not isinstance(tmpl, list | tuple):
            self.report.mismatched.append(
                f"{path or '<root>'}: expected {type(tmpl).__name__}, got a {kind}"
            )
            return tmpl
        items = []
        for i, child in enumerate(children):
            sub = f"{path}/{i}" if path else str(i)
            if has_tmpl and i >= len(tmpl):
                self.report.unexpected.append(sub)
                continue
            items.append(self.build(child, tmpl[i] if has_tmpl else None, sub, has_tmpl))
        if has_tmpl:
            for i in range(len(children), len(tmpl)):
                self.report.missing.append(f"{path}/{i}" if path else str(i))
                items.append(tmpl[i])
        named = kind == "tuple" and has_tmpl and isinstance(tmpl, tuple) and hasattr(tmpl, "_make")
        if named and len(items) == len(tmpl):
            return tmpl._make(items)  # a namedtuple comes back as the template's class
        return tuple(items) if kind == "tuple" else items


def unflatten(
    structure: Any,
    arrays: Mapping[str, np.ndarray[Any, Any]],
    template: Any = None,
    *,
    partial: bool = False,
    apply: bool = True,
) -> tuple[Any, RestoreReport]:
    """Rebuilds a tree from its structure and arrays, restoring stateful objects in place.

    Args:
        structure: the JSON structure from :func:`flatten`.
        arrays: every array by flat name.
        template: a tree of the expected shape; its stateful objects receive their state,
            and its writable arrays the saved values (copied in where ``arrays`` holds
            another array than the template's own).
        partial: allow a template that does not fit; otherwise a misfit raises. A framework
            object (an adapted node) is restored whole or, if anything in it misfits, left
            as it is.
        apply: call ``load_state_dict`` on the template's stateful objects; False only
            checks the fit.

    Returns:
        The tree and the report of how it fitted the template.

    Raises:
        RestoreMismatchError: the template does not fit and ``partial`` is False.
        CorruptCheckpointError: the structure is malformed.

    Example:
        >>> flat = flatten({"a": np.ones(2), "n": 3})
        >>> tree, report = unflatten(flat.structure, flat.arrays)
        >>> tree["n"], report.ok
        (3, True)
    """
    builder, tree = _build(structure, arrays, template, partial, apply)
    report = builder.report
    if apply:
        for target, source in builder.copies:
            np.copyto(target, source)
        for obj, state in builder.loads:
            obj.load_state_dict(state)
        for adapter, obj, state in builder.applies:
            adapter.apply(obj, state)
    return tree, report


def _build(
    structure: Any,
    arrays: Mapping[str, Any],  # arrays, or check_fit's stand-ins
    template: Any,
    partial: bool,
    apply: bool,
) -> tuple[_Builder, Any]:
    """Walks the structure against the template; raises on a misfit unless ``partial``."""
    builder = _Builder(arrays, apply)
    try:
        tree = builder.build(structure, template, "", template is not None)
    except (KeyError, TypeError, AttributeError, IndexError) as err:
        raise CorruptCheckpointError(f"state.json: malformed tree ({err!r})") from err
    report = builder.report
    if not report.ok and not partial:
        raise RestoreMismatchError(
            f"the checkpoint does not fit the template: {report}. "
            "Pass partial=True to restore what fits.",
            report,
        )
    return builder, tree


@dataclass(frozen=True)
class Fit:
    """How a saved structure fits a template, found before anything is read (see
    :func:`fit_template`)."""

    targets: dict[str, np.ndarray[Any, Any]]
    """The template's arrays that sit where the structure has an array (to fill in place)."""
    tree: Any
    """The tree the fit check built: the restored tree where :meth:`restored` says so."""
    report: RestoreReport
    final: bool
    """True when ``tree`` is the restored tree once every target is filled in place."""

    def restored(self, arrays: Mapping[str, Any]) -> tuple[Any, RestoreReport] | None:
        """Returns the restored tree and its report without a second walk, where the
        restore's ``arrays`` are exactly the targets, each filled in place; None otherwise
        (then :func:`unflatten` builds the tree).

        Example:
            >>> flat = flatten({"w": np.zeros(2)})
            >>> fit = fit_template(flat.structure, {"w": np.ones(2)})
            >>> fit.restored(fit.targets)[0]["w"] is fit.targets["w"]
            True
            >>> fit.restored({"w": np.ones(2)}) is None
            True
        """
        if not self.final or len(arrays) != len(self.targets):
            return None
        targets = self.targets
        for key, array in arrays.items():
            if targets.get(key) is not array:
                return None
        return self.tree, self.report


def check_fit(
    structure: Any,
    template: Any,
    *,
    partial: bool = False,
    nodes: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, np.ndarray[Any, Any]]:
    """Checks that a saved structure fits ``template`` before anything is read, and returns
    the template's arrays that sit where the structure has an array (to fill in place):
    ``fit_template(...).targets``.

    Example:
        >>> flat = flatten({"w": np.zeros(2)})
        >>> template = {"w": np.ones(2)}
        >>> check_fit(flat.structure, template)["w"] is template["w"]
        True
    """
    return fit_template(structure, template, partial=partial, nodes=nodes).targets


def fit_template(
    structure: Any,
    template: Any,
    *,
    partial: bool = False,
    nodes: Mapping[str, dict[str, Any]] | None = None,
) -> Fit:
    """Checks that a saved structure fits ``template`` before anything is read: returns
    the template's arrays to fill in place and, from the same walk, the tree a restore
    returns where every array is read into its template's (see :class:`Fit`).

    One walk does it all: :func:`unflatten` with ``apply=False`` against stand-ins of the
    saved arrays, collecting what :func:`template_arrays` would find.

    Args:
        structure: the saved JSON structure.
        template: the template tree.
        partial: allow a misfit (it is left out of the restore, as :func:`unflatten` does).
        nodes: ``array_nodes(structure)``, where the caller has it already.

    Raises:
        RestoreMismatchError: the template does not fit and ``partial`` is False.
        CorruptCheckpointError: the structure is malformed.

    Example:
        >>> flat = flatten({"w": np.zeros(2)})
        >>> template = {"w": np.ones(2)}
        >>> fit_template(flat.structure, template).targets["w"] is template["w"]
        True
    """
    saved = {key: _Saved(shape, dtype) for key, shape, dtype in _saved_arrays(structure, nodes)}
    builder, tree = _build(structure, saved, template, partial, False)
    return Fit(builder.targets, tree, builder.report, builder.final)


class _Saved:
    """A saved array's shape and dtype, standing in for it while :func:`check_fit` walks:
    lighter than :func:`placeholders`' zero-byte arrays, and all a fit check looks at."""

    __slots__ = ("dtype", "shape")
    strides = None  # never the same memory as a template array

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
        self.shape = shape
        self.dtype = dtype

    def __getitem__(self, index: Any) -> _Saved:
        return self  # a NumPy scalar's value: unused by a fit check


def _saved_arrays(
    structure: Any, nodes: Mapping[str, dict[str, Any]] | None = None
) -> Iterator[tuple[str, tuple[int, ...], np.dtype[Any]]]:
    """Yields (key, shape, dtype) of every saved array, checked; ``nodes`` is
    ``array_nodes(structure)`` where the caller has it already."""
    dtypes: dict[Any, np.dtype[Any]] = {}
    for key, node in (array_nodes(structure) if nodes is None else nodes).items():
        shape = node.get("shape")
        if not is_shape(shape):
            raise CorruptCheckpointError(f"state.json: bad shape for {key!r}")
        descr = node.get("dtype")
        dtype = dtypes.get(descr) if isinstance(descr, str) else None
        if dtype is None:
            dtype = decode_dtype(descr)
            if isinstance(descr, str):
                dtypes[descr] = dtype
        yield key, tuple(shape), dtype


def placeholders(structure: Any) -> dict[str, np.ndarray[Any, Any]]:
    """Returns a zero-byte stand-in for every saved array, to check a template's fit first."""
    out = {}
    bases: dict[np.dtype[Any], np.ndarray[Any, Any]] = {}
    for key, shape, dtype in _saved_arrays(structure):
        base = bases.get(dtype)
        if base is None:
            base = bases[dtype] = np.empty(1, dtype)
        # np.ndarray, not as_strided: the latter goes through the array interface's type
        # string, which cannot tell ml_dtypes' float8_e5m2 ('<f1') from other dtypes.
        out[key] = np.ndarray(shape, base.dtype, base, strides=(0,) * len(shape))
    return out
