"""Building a tree back from its saved structure and arrays, against a template where one
is given, and the :class:`RestoreReport` of how it fitted.

Against a template, stateful objects receive their state (``load_state_dict``), framework
objects theirs through their adapter, writable arrays the saved values (in place where
they can), and the template's own mutable containers (dicts and other mutable mappings,
lists, dataclasses that are not frozen) the restored values of their entries, in place: a
loop that goes on counting in the dict it passed counts from the restored value. Those
are assigned only once the whole fit is known (a misfit leaves them untouched). Immutable
containers (tuples, namedtuples, frozen dataclasses, read-only mappings) come back as new
objects of the template's class. Without a template, a dict and a tuple: no class is ever
looked up by a name read from a file.

Example:
    >>> import numpy as np
    >>> from globalstep.checkpoint._tree.flatten import flatten
    >>> flat = flatten({"a": np.ones(2), "n": 3})
    >>> tree, report = unflatten(flat.structure, flat.arrays, {"a": np.zeros(2), "m": 1},
    ...                          partial=True)
    >>> tree["a"].tolist(), str(report)
    ([1.0, 1.0], 'missing: m; unexpected: n')
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from globalstep._errors import CorruptCheckpointError, MissingDependencyError, RestoreMismatchError
from globalstep.checkpoint._ranks.perrank import PerRank
from globalstep.checkpoint._tree import adapters
from globalstep.checkpoint._tree.adapters import OpenTemplate
from globalstep.checkpoint._tree.flatten import Sharded, node_kind
from globalstep.checkpoint._tree.leaves import (
    dataclass_fields,
    float_from_json,
    is_frozen,
    is_stateful,
    rebuilt_dataclass,
)

__all__ = ["Assignment", "RestoreReport", "assign", "build_tree", "unflatten"]


Assignment = tuple[Callable[[Any, Any, Any], None], Any, Any, Any]
"""``(setter, container, key, value)``: one entry of a template's own container to set to
its restored value (``operator.setitem`` for a mapping or a list, ``setattr`` for a
dataclass), once the fit is known (see :func:`assign`)."""


def assign(assignments: list[Assignment]) -> None:
    """Sets every entry listed to its restored value, in the template's own containers."""
    for setter, container, key, value in assignments:
        setter(container, key, value)


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
            assigned when it creates them (see :class:`~globalstep.checkpoint._tree.adapters.
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
    def __init__(
        self, arrays: Mapping[str, Any], apply: bool, ranks: Mapping[str, Any] | None = None
    ) -> None:
        self.arrays = arrays
        self.apply = apply
        self.ranks = ranks or {}
        """A per-rank node's value where no template has one: every saved rank's state."""
        self.report = RestoreReport()
        self.loads: list[tuple[Any, Any]] = []
        self.applies: list[tuple[adapters.Adapter, Any, Any]] = []
        self.copies: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
        self.targets: dict[str, np.ndarray[Any, Any]] = {}
        """The template's arrays met where the structure has an array (see check_fit)."""
        self.assignments: list[Assignment] = []
        """The entries of the template's own containers to set once the fit is known."""
        self.final = True
        """While checking the fit: every node built so far is what the restore returns,
        once each target is filled in place (no array to copy or convert, no dataclass to
        rebuild, no object to load), so the tree built is the restored tree (see Fit)."""

    def build(self, node: Any, tmpl: Any, path: str, has_tmpl: bool) -> Any:
        if has_tmpl and type(tmpl) is PerRank:  # the mark is the template's: kept
            inner = self.build(node, tmpl.value, path, True)
            return tmpl if inner is tmpl.value else PerRank(inner)
        kind = node_kind(node, path or "<root>")
        if has_tmpl and isinstance(tmpl, Sharded) and kind != "sharded" and tmpl.whole is not None:
            tmpl = tmpl.whole  # a sharded template for a value saved whole
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
        if kind == "per_rank":
            # Saved on another number of ranks: the template's object is restored from
            # every rank's state afterwards (checkpoint._rank_leaves), or the states given.
            return tmpl if has_tmpl else self.ranks.get(node["per_rank"])
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
            elif isinstance(tmpl, dict) and isinstance(tmpl.get("data"), np.ndarray):
                # A jax.Array of one process (its adapter's template: its host buffer) for
                # one that spanned several: read whole, then placed as the template is.
                dtype, shape = str(tmpl["data"].dtype), list(tmpl["data"].shape)
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
        fields = dataclass_fields(tmpl) if has_tmpl else None
        if fields is not None:
            self.final = False  # filled after the read, or its __init__ runs again
            values = self._entries(children, fields, path, True)
            if is_frozen(tmpl):
                return rebuilt_dataclass(tmpl, values)
            self._fill(setattr, tmpl, values, fields)
            return tmpl
        if has_tmpl and not isinstance(tmpl, Mapping):
            self.report.mismatched.append(
                f"{path or '<root>'}: expected {type(tmpl).__name__}, got a dict"
            )
            return tmpl
        values = self._entries(children, tmpl, path, has_tmpl)
        # An adapter's open template is only checked against (its object takes the state).
        if has_tmpl and isinstance(tmpl, MutableMapping) and not isinstance(tmpl, OpenTemplate):
            self._fill(operator.setitem, tmpl, values, tmpl)
            return tmpl
        return values

    def _fill(
        self,
        setter: Callable[[Any, Any, Any], None],
        container: Any,
        values: Mapping[Any, Any],
        current: Mapping[Any, Any],
    ) -> None:
        """Notes the entries of the template's own ``container`` to set to ``values``
        (``current`` holds what it has now: an entry already the restored object stays)."""
        for key, value in values.items():
            if value is not current[key]:
                self.assignments.append((setter, container, key, value))

    def _entries(self, children: Any, tmpl: Any, path: str, has_tmpl: bool) -> dict[str, Any]:
        """The restored value of every entry: the saved ones the template has (all of them
        without a template), then the template's own for those the checkpoint lacks."""
        result: dict[str, Any] = {}
        open_template = isinstance(tmpl, OpenTemplate)
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
        if has_tmpl and isinstance(tmpl, list):  # the template's own list, filled in place
            self._fill(operator.setitem, tmpl, dict(enumerate(items)), dict(enumerate(tmpl)))
            return tmpl
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
    ranks: Mapping[str, Any] | None = None,
) -> tuple[Any, RestoreReport]:
    """Rebuilds a tree from its structure and arrays, restoring stateful objects in place.

    Args:
        structure: the JSON structure from :func:`flatten`.
        arrays: every array by flat name.
        template: a tree of the expected shape; its stateful objects receive their state,
            its writable arrays the saved values (copied in where ``arrays`` holds
            another array than the template's own), and its mutable containers (dicts,
            lists, dataclasses that are not frozen) their entries' restored values.
        partial: allow a template that does not fit; otherwise a misfit raises. A framework
            object (an adapted node) is restored whole or, if anything in it misfits, left
            as it is.
        apply: call ``load_state_dict`` on the template's stateful objects and fill its
            containers; False only checks the fit.
        ranks: what stands, without a template, for each per-rank node left in the
            structure (a checkpoint of another world size): name -> value.

    Returns:
        The tree and the report of how it fitted the template.

    Raises:
        RestoreMismatchError: the template does not fit and ``partial`` is False.
        CorruptCheckpointError: the structure is malformed.

    Example:
        >>> from globalstep.checkpoint._tree.flatten import flatten
        >>> flat = flatten({"a": np.ones(2), "n": 3})
        >>> tree, report = unflatten(flat.structure, flat.arrays)
        >>> tree["n"], report.ok
        (3, True)
    """
    builder, tree = build_tree(structure, arrays, template, partial, apply, ranks)
    report = builder.report
    if apply:
        for target, source in builder.copies:
            np.copyto(target, source)
        for obj, state in builder.loads:
            obj.load_state_dict(state)
        for adapter, obj, state in builder.applies:
            adapter.apply(obj, state)
        assign(builder.assignments)
    return tree, report


def build_tree(
    structure: Any,
    arrays: Mapping[str, Any],  # arrays, or check_fit's stand-ins
    template: Any,
    partial: bool,
    apply: bool,
    ranks: Mapping[str, Any] | None = None,
) -> tuple[_Builder, Any]:
    """Walks the structure against the template; raises on a misfit unless ``partial``."""
    builder = _Builder(arrays, apply, ranks)
    try:
        tree = builder.build(structure, template, "", template is not None)
    except (KeyError, TypeError, AttributeError, IndexError) as err:
        raise CorruptCheckpointError(f"state.json: malformed tree ({err!r})") from err
    report = builder.report
    if not report.ok and not partial:
        raise RestoreMismatchError(
            f"the checkpoint does not fit the template: {report}. "
            "Pass partial=True to restore what fits; restore() then returns (tree, report), "
            "the report naming what was left out.",
            report,
        )
    return builder, tree
