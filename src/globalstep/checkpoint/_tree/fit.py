"""Checking how a saved structure fits a template before anything is read: the template's
arrays to fill in place, the report, and (:class:`Fit`) the restored tree itself where
every array is read into its template's.

Example:
    >>> import numpy as np
    >>> from globalstep.checkpoint._tree.flatten import flatten
    >>> flat = flatten({"w": np.zeros(2)})
    >>> sorted(check_fit(flat.structure, {"w": np.ones(2)}))
    ['w']
    >>> placeholders(flat.structure)["w"].shape
    (2,)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from globalstep._errors import CorruptCheckpointError
from globalstep.checkpoint._tree.build import Assignment, RestoreReport, assign, build_tree
from globalstep.checkpoint._tree.flatten import array_nodes
from globalstep.checkpoint._tree.leaves import decode_dtype, is_shape

__all__ = ["Fit", "check_fit", "fit_template", "placeholders"]


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
    assignments: list[Assignment]
    """The entries of the template's own containers that :meth:`restored` sets (the
    restored values of plain leaves: the tree holds the template's containers)."""

    def restored(self, arrays: Mapping[str, Any]) -> tuple[Any, RestoreReport] | None:
        """Returns the restored tree and its report without a second walk, where the
        restore's ``arrays`` are exactly the targets, each filled in place, once the
        template's containers received their entries' restored values; None otherwise
        (then :func:`unflatten` builds the tree, and fills them).

        Example:
            >>> from globalstep.checkpoint._tree.flatten import flatten
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
        assign(self.assignments)
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
        >>> from globalstep.checkpoint._tree.flatten import flatten
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
        >>> from globalstep.checkpoint._tree.flatten import flatten
        >>> flat = flatten({"w": np.zeros(2)})
        >>> template = {"w": np.ones(2)}
        >>> fit_template(flat.structure, template).targets["w"] is template["w"]
        True
    """
    saved = {key: _Saved(shape, dtype) for key, shape, dtype in _saved_arrays(structure, nodes)}
    builder, tree = build_tree(structure, saved, template, partial, False)
    return Fit(builder.targets, tree, builder.report, builder.final, builder.assignments)


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
