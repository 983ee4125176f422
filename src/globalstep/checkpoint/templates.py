"""A template beside a saved structure: the template's arrays and sharded values that sit
where the structure has them, found through the same adapters that took framework objects
apart (:mod:`globalstep.checkpoint.adapters`).

Example:
    >>> import numpy as np
    >>> from globalstep.checkpoint.flatten import flatten
    >>> template = {"w": np.ones(2), "n": 3}
    >>> template_arrays(flatten(template).structure, template)["w"] is template["w"]
    True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from globalstep.checkpoint import adapters
from globalstep.checkpoint.flatten import (
    Sharded,
    node_kind,
)
from globalstep.checkpoint.leaves import (
    dataclass_fields,
)
from globalstep.checkpoint.perrank import PerRank

__all__ = ["template_arrays", "template_per_rank", "template_sharded"]


def _walk_template(
    structure: Any, template: Any, leaf: Callable[[str, dict[str, Any], Any], bool]
) -> None:
    """Walks the saved structure and the template side by side; ``leaf(kind, node, tmpl)``
    sees every node first and returns True where it took the node (no descent there)."""

    def walk(node: Any, tmpl: Any) -> None:
        if isinstance(tmpl, PerRank):
            tmpl = tmpl.value
        kind = node_kind(node, "<template>")
        if leaf(kind, node, tmpl):
            return
        fields = dataclass_fields(tmpl)
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


def template_per_rank(structure: Any, template: Any) -> dict[str, Any]:
    """Returns the template's objects (unmarked) that sit where the saved structure has a
    per-rank node (``{"per_rank": name}``), by name; a name the template lacks is absent."""
    found: dict[str, Any] = {}

    def leaf(kind: str, node: dict[str, Any], tmpl: Any) -> bool:
        if kind == "per_rank":
            found[node["per_rank"]] = tmpl
        return kind == "per_rank"

    _walk_template(structure, template, leaf)
    return found


def _template_adapter(node: dict[str, Any], tmpl: Any) -> adapters.Adapter | None:
    """The adapter an adapted node names, if it takes the template object."""
    if tmpl is None:
        return None
    adapter = adapters.named(node["adapted"])
    return adapter if adapter.matches(tmpl) else None
