"""How the leaves of a state tree are written down in state.json: keys, shapes, dtypes and
their safetensors codes, floats (JSON has no NaN), and which objects are stateful or
dataclasses.

A dtype is described, little-endian, as NumPy's ``.npy`` header describes it (``"<f4"``,
a list for a structured dtype), or by its ``ml_dtypes`` name (``bfloat16``, the float8
types); safetensors has a code for the common ones and stores the rest as raw bytes
(``"U8"``).

Example:
    >>> import numpy as np
    >>> encode_dtype(np.dtype("<f4")), safetensors_code(np.dtype("<f4"))
    ('<f4', 'F32')
    >>> float_to_json(float("nan")), float_from_json("nan")
    ({'float': 'nan'}, nan)
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, TypeGuard

import numpy as np

from globalstep._errors import ConfigError, CorruptCheckpointError
from globalstep._optional import require

__all__ = [
    "CODE_ITEMSIZE",
    "SAFETENSORS_CODES",
    "check_key",
    "dataclass_fields",
    "decode_dtype",
    "encode_dtype",
    "float_from_json",
    "float_to_json",
    "is_frozen",
    "is_shape",
    "is_stateful",
    "rebuilt_dataclass",
    "safetensors_code",
    "type_name",
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


def dataclass_fields(obj: Any) -> dict[str, Any] | None:
    """A dataclass instance's fields by name (None for anything else or a stateful one)."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type) or is_stateful(obj):
        return None
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def is_frozen(obj: Any) -> bool:
    """True for an instance of a frozen dataclass (its fields cannot be set in place).

    Example:
        >>> import dataclasses
        >>> @dataclasses.dataclass(frozen=True)
        ... class Point:
        ...     x: int
        >>> is_frozen(Point(1))
        True
    """
    params = getattr(type(obj), "__dataclass_params__", None)
    return bool(getattr(params, "frozen", False))


def rebuilt_dataclass(tmpl: Any, values: dict[str, Any]) -> Any:
    """A new instance of ``tmpl``'s dataclass with ``values`` (its ``__init__`` runs)."""
    fields = dataclasses.fields(tmpl)
    made = dataclasses.replace(tmpl, **{f.name: values[f.name] for f in fields if f.init})
    for f in fields:
        if not f.init:
            object.__setattr__(made, f.name, values[f.name])
    return made


def type_name(obj: Any) -> str:
    module = type(obj).__module__
    name = type(obj).__qualname__
    return name if module == "builtins" else f"{module}.{name}"
