"""Did a state tree's arrays change since a moment? For Run's refusal of stale checkpoints.

A loop that builds a new tree at each update (JAX and optax, ``w = w - lr * g`` in NumPy)
and never hands it to :class:`~globalstep.run.Run` leaves ``run.state`` holding the arrays
:meth:`~globalstep.run.Run.restore` returned; every checkpoint would then save those. An
:class:`Unchanged` taken at restore answers, at the first save after updates, whether every
array of the tree is still the one it saw, unchanged:

- a NumPy array: the same object, with the same bytes (an XXH3-64 digest, taken once at
  restore and once at that save, stopping at the first array that differs);
- a torch tensor: the same storage at the same version (every in-place change bumps
  ``tensor._version``; tensors of a module's or optimizer's ``state_dict()`` included);
- any other array (a JAX array, immutable): the same object.

The answer is "unchanged" only when the tree holds at least one array and every leaf is
one of these or a plain value: Python numbers, strings and stateful objects other than
arrays (a :class:`~globalstep.run.GeneratorState`, a clock) are not compared, since a
rebound weight beside a random generator that moves is still a stale checkpoint. A tree
with a leaf of an unknown kind (a Keras model, an adapted object) is never called
unchanged: nothing is claimed that is not known.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from globalstep.checkpoint import checksum_of

__all__ = ["Unchanged"]


class _UnknownLeafError(Exception):
    """A leaf whose changes cannot be seen: the tree is never called unchanged."""


def _arrays(obj: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Yields (path, array) for every array leaf of ``obj``, in order."""
    if isinstance(obj, np.ndarray):
        yield path, obj
    elif obj is None or isinstance(obj, bool | int | float | str | np.generic):
        return
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from _arrays(value, f"{path}/{key}")
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            yield from _arrays(value, f"{path}/{i}")
    elif _is_array(obj):
        yield path, obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _arrays(getattr(obj, f.name), f"{path}/{f.name}")
    elif callable(getattr(obj, "state_dict", None)):
        yield from _arrays(obj.state_dict(), path)
    else:
        raise _UnknownLeafError(path)


def _is_array(obj: Any) -> bool:
    """A torch tensor or a JAX array, told apart by duck typing (no framework imported)."""
    root = type(obj).__module__.partition(".")[0]
    if root == "torch":
        return hasattr(obj, "_version") and hasattr(obj, "data_ptr")
    return root in ("jax", "jaxlib") and hasattr(obj, "shape") and hasattr(obj, "dtype")


def _token(array: Any) -> Any:
    """What tells a later look that ``array`` changed, besides its identity."""
    if isinstance(array, np.ndarray):
        return None  # its digest, taken only where needed (see Unchanged.holds)
    if hasattr(array, "_version"):
        return (array.data_ptr(), array._version)
    return ()  # immutable: the object itself says it all


def _digest(array: np.ndarray[Any, Any]) -> str:
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return checksum_of(flat.data)


class Unchanged:
    """The arrays of a state tree at one step, to tell later whether any changed.

    Use :meth:`take`; it returns None for a tree that can never be called unchanged.

    Example:
        >>> w = np.zeros(3)
        >>> seen = Unchanged.take({"w": w}, step=0)
        >>> seen.holds({"w": w})
        True
        >>> w -= 1.0  # changed in place
        >>> seen.holds({"w": w})
        False
    """

    def __init__(self, step: int, leaves: list[tuple[str, Any, Any]]) -> None:
        self.step = step
        self._leaves = leaves
        # The NumPy arrays' digests, by position in ``leaves`` (their tokens are None).
        self._digests: dict[int, str] = {
            i: _digest(array)
            for i, (_, array, _) in enumerate(leaves)
            if isinstance(array, np.ndarray)
        }

    @classmethod
    def take(cls, tree: Any, step: int) -> Unchanged | None:
        """Notes the arrays of ``tree`` at ``step``; None when there are none or a leaf of
        an unknown kind (see the module docstring)."""
        try:
            leaves = [(path, a, _token(a)) for path, a in _arrays(tree, "")]
        except _UnknownLeafError:
            return None
        if not leaves:
            return None
        return cls(step, leaves)

    @property
    def paths(self) -> list[str]:
        """The paths of the arrays noted (``"/w"``, ``"/params/0"``, ...)."""
        return [path for path, _, _ in self._leaves]

    def holds(self, tree: Any) -> bool:
        """True when ``tree`` holds the very arrays noted, each unchanged."""
        try:
            now = list(_arrays(tree, ""))
        except _UnknownLeafError:
            return False
        leaves = self._leaves
        if len(now) != len(leaves):
            return False
        for (path, array), (old_path, old, token) in zip(now, leaves, strict=True):
            if array is not old or path != old_path:
                return False
            if token is not None and _token(array) != token:
                return False
        # The costly part last, stopping at the first array that differs.
        return all(_digest(leaves[i][1]) == digest for i, digest in self._digests.items())
