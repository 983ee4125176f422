"""Is the tree a Run is about to save the stale one :meth:`~globalstep.run.Run.restore`
returned? The two checks of its first save after updates.

A restore fills the user's own objects in place: arrays, stateful objects, and the
containers that can change (dicts, lists, dataclasses that are not frozen; see
:mod:`globalstep.checkpoint._tree.build`), so a loop that goes on in what it passed is saved as
it goes. Two things stay behind in the tree restore() returned, and a Run that keeps
saving it (``run.state``) would save them as they were restored, in silence:

- arrays a loop does not change in place (it builds a new tree at each update and never
  hands it over): :class:`~globalstep._unchanged.Unchanged` notes them;
- plain values (numbers, strings, NumPy scalars) in a container that cannot change in
  place (a tuple, a namedtuple, a frozen dataclass, a read-only mapping, or the tree's
  root itself), which restore() had to rebuild: the objects the loop was given still hold
  the values passed, and a loop that counts in them is never saved. :class:`RebuiltLeaf`
  notes each whose restored value differs from the one passed, and the first save after
  updates refuses while the rebuilt container is still the one in the tree.

Example:
    >>> passed = {"meta": (0, "adam")}
    >>> before = Passed.note(passed)
    >>> restored = {"meta": (15, "adam")}  # what a restore from step 15 returns
    >>> check = StaleCheck.take(restored, 15, before)
    >>> [str(leaf) for leaf in check.rebuilt]
    ['meta/0: restored 15, passed 0 (in a tuple)']
    >>> check.held(restored) == check.rebuilt, check.held({"meta": (16, "adam")})
    (True, [])
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from globalstep._unchanged import Unchanged
from globalstep.checkpoint import dataclass_fields, is_frozen
from globalstep.run._refusals import rebuilt_state, stale_state

__all__ = ["Passed", "RebuiltLeaf", "StaleCheck"]


_PLAIN = (bool, int, float, str, type(None), np.generic)
_LEAVES = frozenset({np.ndarray, bool, int, float, str, type(None)})
"""The common leaves, skipped by type alone (a walk of 10,000 arrays stays cheap)."""
_ABSENT = object()


def _children(obj: Any) -> Iterator[tuple[str, Any]] | None:
    """The entries of a container of a state tree by key (None for a leaf)."""
    if isinstance(obj, Mapping):
        return iter(obj.items())  # string keys (flatten refuses others)
    if isinstance(obj, list | tuple):
        return ((str(i), v) for i, v in enumerate(obj))
    fields = dataclass_fields(obj)
    return None if fields is None else iter(fields.items())


def _rebuilds(obj: Any) -> bool:
    """True for a container a restore cannot fill in place: it comes back as a new one."""
    if isinstance(obj, tuple):
        return True
    if isinstance(obj, Mapping):
        return not isinstance(obj, MutableMapping)
    return dataclass_fields(obj) is not None and is_frozen(obj)


def _rebuilt_containers(tree: Any) -> Iterator[tuple[str, Any]]:
    """Yields (path, container) for every container of ``tree`` a restore rebuilds, and
    ("", tree) for the root whatever it is (a plain root is rebuilt too)."""
    yield "", tree
    stack = [("", tree)]
    while stack:
        path, obj = stack.pop()
        children = _children(obj)
        if children is None:
            continue
        for key, child in children:
            kind = type(child)
            if kind in _LEAVES:
                continue
            sub = f"{path}/{key}" if path else key
            if kind is dict or kind is list:  # the common containers, filled in place
                stack.append((sub, child))
            elif _children(child) is not None:
                if _rebuilds(child):
                    yield sub, child
                stack.append((sub, child))


class Passed:
    """The containers of the tree passed to a restore that it would rebuild, by path:
    noted before the restore, whose in-place fills replace them in the user's dicts."""

    def __init__(self, containers: dict[str, Any]) -> None:
        self.containers = containers

    @classmethod
    def note(cls, tree: Any) -> Passed:
        return cls(dict(_rebuilt_containers(tree)))


def _same(a: Any, b: Any) -> bool:
    """True when two plain values are equal and of one type (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if a is b:
        return True
    equal = bool(a == b)
    if not equal and isinstance(a, float | np.floating):
        return math.isnan(a) and math.isnan(b)
    return equal


@dataclass(frozen=True)
class RebuiltLeaf:
    """A plain value restore() put in a container it rebuilt, not in the user's objects.

    Attributes:
        path: the value's path in the state tree (``"meta/0"``; ``"<root>"``).
        holder: the path of the rebuilt container (``""``: the root).
        container: the rebuilt container (the restored value itself at the root).
        restored: the value restored.
        passed: the value the tree passed to restore() held there.
    """

    path: str
    holder: str
    container: Any
    restored: Any
    passed: Any

    def __str__(self) -> str:
        kind = type(self.container).__name__
        where = f" (in a {kind})" if self.holder else f" (in the {kind} at the root)"
        if self.path == "<root>":
            where = ""
        return f"{self.path}: restored {self.restored!r}, passed {self.passed!r}{where}"


def _rebuilt_leaves(passed: Passed, restored: Any) -> list[RebuiltLeaf]:
    """The plain values of ``restored`` in containers the restore rebuilt (not the objects
    passed) that differ from the values passed there."""
    out: list[RebuiltLeaf] = []
    for holder, container in _rebuilt_containers(restored):
        before = passed.containers.get(holder, _ABSENT)
        if before is container or before is _ABSENT:
            continue
        if holder == "":  # the root: a plain value itself, or a rebuilt container
            if isinstance(container, _PLAIN) and not _same(container, before):
                out.append(RebuiltLeaf("<root>", "", container, container, before))
            if not _rebuilds(container):
                continue
        old = dict(_children(before) or ())
        for key, value in _children(container) or ():
            was = old.get(key, _ABSENT)
            if isinstance(value, _PLAIN) and was is not _ABSENT and not _same(value, was):
                path = f"{holder}/{key}" if holder else key
                out.append(RebuiltLeaf(path, holder, container, value, was))
    return out


def _at(tree: Any, path: str) -> Any:
    """The object at ``path`` in ``tree`` (``_ABSENT`` where there is none)."""
    obj = tree
    for key in path.split("/") if path else ():
        if isinstance(obj, Mapping):
            obj = obj.get(key, _ABSENT)
        elif isinstance(obj, list | tuple):
            obj = obj[int(key)] if key.isdigit() and int(key) < len(obj) else _ABSENT
        elif dataclass_fields(obj) is not None:
            obj = getattr(obj, key, _ABSENT)
        else:
            return _ABSENT
        if obj is _ABSENT:
            return _ABSENT
    return obj


class StaleCheck:
    """The tree restore() returned at ``step``, noted to ask at the first save after
    updates whether it is stale (see the module docstring); :meth:`take` returns None
    where there is nothing to ask.

    Attributes:
        step: the step restored.
        arrays: the arrays noted (None: none, or a leaf whose changes cannot be seen).
        rebuilt: the plain values restore() could put only in containers it rebuilt.
    """

    def __init__(self, step: int, arrays: Unchanged | None, rebuilt: list[RebuiltLeaf]) -> None:
        self.step = step
        self.arrays = arrays
        self.rebuilt = rebuilt

    @classmethod
    def take(cls, restored: Any, step: int, passed: Passed) -> StaleCheck | None:
        """Notes the tree ``restored`` at ``step``; ``passed``: the tree passed, noted
        before the restore."""
        arrays = Unchanged.take(restored, step)
        rebuilt = _rebuilt_leaves(passed, restored)
        return None if arrays is None and not rebuilt else cls(step, arrays, rebuilt)

    def held(self, tree: Any) -> list[RebuiltLeaf]:
        """The rebuilt values ``tree`` still holds: their container is still the one
        restore() made, at the same place."""
        return [leaf for leaf in self.rebuilt if _at(tree, leaf.holder) is leaf.container]

    def refuse_stale(self, tree: Any, step: int) -> None:
        """Raises where ``tree``, to be saved at ``step`` after updates, is stale.

        Raises:
            ConfigError: every array is the one restored, unchanged, or a plain value
                restore() could not put in the user's objects is still in the tree.
        """
        if self.arrays is not None and self.arrays.holds(tree):
            stale_state(self.arrays, step)
        held = self.held(tree)
        if held:
            rebuilt_state(held, self.step, step)
