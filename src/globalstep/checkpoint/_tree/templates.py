"""A template beside a saved structure: the template's arrays and sharded values that sit
where the structure has them, found through the same adapters that took framework objects
apart (:mod:`globalstep.checkpoint._tree.adapters`).

Example:
    >>> import numpy as np
    >>> from globalstep.checkpoint._tree.flatten import flatten
    >>> template = {"w": np.ones(2), "n": 3}
    >>> template_arrays(flatten(template).structure, template)["w"] is template["w"]
    True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from globalstep.checkpoint._ranks.perrank import PerRank, is_per_rank
from globalstep.checkpoint._tree import adapters
from globalstep.checkpoint._tree.flatten import Sharded, node_kind
from globalstep.checkpoint._tree.leaves import dataclass_fields

__all__ = ["template_arrays", "template_marked", "template_per_rank", "template_sharded"]


Leaf = Callable[[str, dict[str, Any], Any], bool]
"""``leaf(kind, node, tmpl)``: sees a node and the template's object there (a PerRank mark
taken off); True where it took the node (no descent there)."""


def _walk_template(
    structure: Any, template: Any, leaf: Leaf, *, at: Callable[[str, Any], bool] | None = None
) -> None:
    """Walks the saved structure and the template side by side; ``leaf`` sees every node
    first, and ``at(path, tmpl)`` (the node's flat name, the template's object as it is,
    marked or not) before it, where given: True takes the node too."""

    def walk(node: Any, tmpl: Any, path: str) -> None:
        if at is not None and at(path, tmpl):
            return
        if isinstance(tmpl, PerRank):
            tmpl = tmpl.value
        kind = node_kind(node, "<template>")
        if isinstance(tmpl, Sharded) and kind != "sharded" and tmpl.whole is not None:
            tmpl = tmpl.whole  # a sharded template for a value saved whole
        if leaf(kind, node, tmpl):
            return
        fields = dataclass_fields(tmpl)
        prefix = f"{path}/" if path else ""
        if kind == "dict" and fields is not None:
            walk(node, fields, path)
        elif kind == "dict" and isinstance(tmpl, Mapping):
            for k, child in node["dict"].items():
                if k in tmpl:
                    walk(child, tmpl[k], prefix + k)
        elif kind in ("list", "tuple") and isinstance(tmpl, list | tuple):
            for i, (child, sub) in enumerate(zip(node[kind], tmpl, strict=False)):
                walk(child, sub, f"{prefix}{i}")
        elif kind == "adapted":
            adapter = _template_adapter(node, tmpl)
            if adapter is not None:
                walk(node["state"], adapter.template(tmpl), path)

    if template is not None:
        walk(structure, template, "")


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


def template_marked(structure: Any, template: Any) -> dict[str, Any]:
    """Returns the template's per-rank objects (unmarked; see
    :func:`~globalstep.checkpoint._ranks.perrank.is_per_rank`) that sit where the saved structure
    has an ordinary node (a checkpoint holding one copy of them), by flat name."""
    found: dict[str, Any] = {}

    def at(path: str, tmpl: Any) -> bool:
        if tmpl is None or isinstance(tmpl, np.ndarray | Mapping | list | tuple):
            return False  # the common nodes first: no adapter lookup for them
        if not is_per_rank(tmpl):
            return False
        found[path or "_"] = tmpl.value if isinstance(tmpl, PerRank) else tmpl
        return True

    _walk_template(structure, template, lambda kind, node, tmpl: kind == "per_rank", at=at)
    return found


def _template_adapter(node: dict[str, Any], tmpl: Any) -> adapters.Adapter | None:
    """The adapter an adapted node names, if it takes the template object."""
    if tmpl is None:
        return None
    adapter = adapters.named(node["adapted"])
    return adapter if adapter.matches(tmpl) else None
