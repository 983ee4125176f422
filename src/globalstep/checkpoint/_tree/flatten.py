"""Flattening a state tree into named arrays plus a JSON structure, and reading that
structure's nodes back (their kinds; every array or sharded node by flat name).

Arrays are named by their path, ``model/layer1/weight``; everything else goes into a JSON
node of one kind: ``value``, ``float``, ``dict``, ``list``, ``tuple``, ``array``,
``stateful``, ``adapted`` (a framework object, through its adapter), ``sharded`` or
``per_rank`` (a leaf each rank of a distributed save writes on its own, see
:mod:`~globalstep.checkpoint._ranks.perrank`: flattened with ``per_rank=True`` only).

Example:
    >>> import numpy as np
    >>> flat = flatten({"w": np.zeros(2, np.float32), "lr": 0.1})
    >>> sorted(flat.arrays), flat.structure["dict"]["lr"], list(array_nodes(flat.structure))
    (['w'], {'value': 0.1}, ['w'])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from globalstep._clock import Clock
from globalstep._errors import ConfigError, CorruptCheckpointError
from globalstep.checkpoint._ranks.perrank import PerRank
from globalstep.checkpoint._tree import adapters
from globalstep.checkpoint._tree.leaves import (
    check_key,
    dataclass_fields,
    encode_dtype,
    float_to_json,
    is_stateful,
    type_name,
)

__all__ = [
    "Flattened",
    "Sharded",
    "array_nodes",
    "flatten",
    "node_kind",
    "per_rank_nodes",
    "sharded_nodes",
]


@dataclass(frozen=True)
class Sharded:
    """A leaf whose data every rank writes a part of (a torch ``DTensor``), not the writer.

    Adapters return it for sharded values; :func:`flatten` collects it under
    ``Flattened.sharded`` and stores ``{"sharded": key, "dtype": ..., "shape": ...}`` in the
    structure, and :mod:`globalstep.checkpoint._ranks.coordinated` writes and reads the data.

    Attributes:
        value: the sharded object itself.
        dtype: the element type's name (``"float32"``, ``"bfloat16"``).
        shape: the global shape.
        whole: in a template, the adapter's template for the value saved whole (by one
            process, where the value was not sharded), which a restore then fills; None
            where it has none.
    """

    value: Any
    dtype: str
    shape: tuple[int, ...]
    whole: Any = None


@dataclass
class Flattened:
    """A state tree taken apart.

    Attributes:
        structure: the JSON tree, with array leaves replaced by ``{"array": key, ...}``.
        arrays: flat name -> array, in the order met.
        clocks: every Clock's Progress, as dicts.
        sharded: flat name -> sharded value (see :class:`Sharded`), in the order met.
        per_rank: flat name -> the JSON node of each per-rank leaf, which ``structure``
            holds as ``{"per_rank": name}``; None where per-rank leaves are ordinary ones
            (``flatten`` without ``per_rank``).
        rank_arrays: the per-rank leaves' arrays by flat name (not in ``arrays``).
    """

    structure: Any
    arrays: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)
    clocks: list[dict[str, Any]] = field(default_factory=list)
    sharded: dict[str, Any] = field(default_factory=dict)
    per_rank: dict[str, Any] | None = None
    rank_arrays: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)


def flatten(state: Any, *, copy: bool = False, per_rank: bool = False) -> Flattened:
    """Takes a state tree apart into a JSON structure and named arrays.

    Args:
        state: the tree (see the module docstring).
        copy: copy every array (for a background save that must not see later updates).
        per_rank: take the per-rank leaves (`perrank.is_per_rank`)
            apart on their own, into ``per_rank`` and ``rank_arrays`` (a distributed save);
            without it they are ordinary leaves and a ``PerRank`` mark is transparent.

    Raises:
        ConfigError: a key is unsafe, or a leaf is of a type that cannot be saved.

    Example:
        >>> flatten([np.int64(3), None]).structure["list"][1]
        {'value': None}
    """
    out = Flattened(structure=None, per_rank={} if per_rank else None)
    out.structure = _encode(state, "", out, copy)
    return out


def _rank_leaf(obj: Any, path: str, out: Flattened, copy: bool) -> dict[str, Any]:
    """The node standing for the per-rank leaf ``obj`` (unmarked), which is flattened on
    its own into ``out.per_rank`` and ``out.rank_arrays``."""
    assert out.per_rank is not None
    key = path or "_"
    inner = Flattened(structure=None)  # marks inside a per-rank leaf are transparent
    out.per_rank[key] = _encode(obj, path, inner, copy)
    if inner.sharded:
        raise ConfigError(
            "state",
            "per-rank leaves must not hold sharded tensors (each rank writes its own shards "
            "already): take the DTensor out of the PerRank mark",
            f"{key}: {', '.join(inner.sharded)}",
        )
    out.rank_arrays.update(inner.arrays)
    out.clocks.extend(inner.clocks)
    return {"per_rank": key}


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
    if isinstance(obj, PerRank):
        if out.per_rank is not None:
            return _rank_leaf(obj.value, path, out, copy)
        return _encode(obj.value, path, out, copy)
    adapter = adapters.find(obj)
    if out.per_rank is not None and (
        (adapter is not None and adapter.per_rank)
        or getattr(type(obj), "globalstep_per_rank", False) is True
    ):  # per-rank without a mark (is_per_rank), looked up once
        return _rank_leaf(obj, path, out, copy)
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
    fields = dataclass_fields(obj)
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
        f"{path or '<root>'}: {type_name(obj)}",
    )


_KINDS = (
    "value",
    "float",
    "dict",
    "list",
    "tuple",
    "array",
    "stateful",
    "adapted",
    "sharded",
    "per_rank",
)


_KIND_SET = frozenset(_KINDS)


def node_kind(node: Any, where: str) -> str:
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


def per_rank_nodes(structure: Any) -> dict[str, dict[str, Any]]:
    """Returns every per-rank node (``{"per_rank": name}``) of a saved structure by name.

    Raises:
        CorruptCheckpointError: the structure is malformed.
    """
    return _leaf_nodes(structure, "per_rank")


def _leaf_nodes(structure: Any, leaf: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}

    def walk(node: Any, where: str) -> None:
        kind = node_kind(node, where)
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
