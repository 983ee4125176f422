"""Per-rank leaves: the state each rank of a distributed run holds for itself.

In a distributed checkpoint (``CheckpointManager(distributed=True)`` on every rank) the
state is replicated (one copy, written by the writer rank) or sharded (``DTensor``), except
for the leaves each rank holds on its own: its random generators, its sampler's position.
Those are *per-rank*: every rank writes its own copy, and on a restore with the same world
size rank ``r`` gets rank ``r``'s back, bit for bit.

A leaf is per-rank when it is wrapped in :class:`PerRank` (any value or subtree), or
without marking when it is one of:

- ``globalstep.integrations.torch.RNGState`` and ``torch.Generator``;
- ``numpy.random.Generator``, ``numpy.random.RandomState`` and ``random.Random``
  (saved through the adapters below, in place, on one process too);
- any object whose class has the attribute ``globalstep_per_rank = True``
  (``globalstep.integrations.torch.ResumableSampler`` sets it).

On one process (a manager without ``distributed``) nothing changes: a per-rank leaf is an
ordinary leaf, and ``PerRank`` is transparent. For a checkpoint saved on N ranks and
restored on M (see :mod:`globalstep.checkpoint._ranks.leaves`): an object with
``load_state_from_ranks(states, *, rank, world_size, step)`` gets every old rank's state;
a random generator is re-seeded deterministically (:func:`derived_seed`) with one
:class:`~globalstep._errors.WorldSizeWarning`; anything else is a
:class:`~globalstep._errors.WorldSizeError`.

Example:
    >>> import numpy as np
    >>> leaf = PerRank(np.zeros(2))
    >>> leaf.value.shape, is_per_rank(leaf), is_per_rank(np.random.default_rng(0))
    ((2,), True, True)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from globalstep.checkpoint._tree import adapters

__all__ = ["PerRank", "derived_seed", "is_per_rank", "reseed", "reseedable"]


class PerRank:
    """Marks a leaf or subtree of a state tree as per-rank: each rank saves its own.

    Use it the same way in the tree given to ``save`` and in the template given to
    ``restore``; the restored tree holds a ``PerRank`` there too (the template's own where
    its value is restored in place: an array filled, an object loaded).

    Args:
        value: any leaf or subtree a state tree may hold.

    Example:
        >>> import numpy as np
        >>> PerRank(np.arange(3))
        PerRank(array([0, 1, 2]))
    """

    __slots__ = ("value",)
    value: Any

    def __init__(self, value: Any) -> None:
        if isinstance(value, PerRank):
            value = value.value  # marking twice is marking once
        self.value = value

    def __repr__(self) -> str:
        return f"PerRank({self.value!r})"


def is_per_rank(obj: Any) -> bool:
    """Whether ``obj`` is saved per rank in a distributed checkpoint (see the module).

    Example:
        >>> is_per_rank(random.Random(0)), is_per_rank({"a": 1})
        (True, False)
    """
    if isinstance(obj, PerRank) or getattr(type(obj), "globalstep_per_rank", False) is True:
        return True
    adapter = adapters.find(obj)
    return adapter is not None and adapter.per_rank


def reseedable(obj: Any) -> bool:
    """Whether ``obj`` is a random generator :func:`reseed` can seed afresh."""
    if isinstance(obj, PerRank):
        obj = obj.value
    adapter = adapters.find(obj)
    if adapter is not None:
        return adapter.reseeds
    return getattr(type(obj), "globalstep_per_rank", False) is True and callable(
        getattr(obj, "reseed", None)
    )


def reseed(obj: Any, seed: int) -> None:
    """Seeds the random generator ``obj`` afresh with ``seed`` (an int in [0, 2**64)).

    Raises:
        TypeError: ``obj`` is not :func:`reseedable`.
    """
    if isinstance(obj, PerRank):
        obj = obj.value
    adapter = adapters.find(obj)
    if adapter is not None and adapter.reseeds:
        adapter.reseed(obj, seed)
    elif reseedable(obj):
        obj.reseed(seed)
    else:
        raise TypeError(f"{type(obj).__name__} is not a random generator globalstep can reseed")


def derived_seed(entropy: Sequence[int], *, rank: int, step: int) -> int:
    """A 64-bit seed from ``entropy`` (the saved states' digest, the leaf), the rank and
    the step, through NumPy's ``SeedSequence``: the same inputs give the same seed, and
    different ranks or steps independent ones.

    Example:
        >>> derived_seed([1, 2], rank=0, step=10) == derived_seed([1, 2], rank=0, step=10)
        True
        >>> derived_seed([1, 2], rank=0, step=10) != derived_seed([1, 2], rank=1, step=10)
        True
    """
    words = np.random.SeedSequence([*entropy, rank, step]).generate_state(2, np.uint64)
    return int(words[0])


# --- random generators of NumPy and Python, as tree leaves ------------------------------


class NumpyGeneratorAdapter(adapters.Adapter):
    """``numpy.random.Generator``: its bit generator's state, set back in place."""

    name = "numpy.random.Generator"
    per_rank = True
    reseeds = True

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, np.random.Generator)

    def save(self, obj: Any) -> Any:
        return _bit_state(obj.bit_generator.state)

    def apply(self, obj: Any, state: Any) -> None:
        obj.bit_generator.state = _plain(state)

    def rebuild(self, state: Any) -> Any:
        plain = _plain(state)
        kind = getattr(np.random, str(plain.get("bit_generator")), None)
        if not (isinstance(kind, type) and issubclass(kind, np.random.BitGenerator)):
            return plain
        bits = kind()
        bits.state = plain
        return np.random.Generator(bits)

    def reseed(self, obj: Any, seed: int) -> None:
        fresh = type(obj.bit_generator)(seed)
        obj.bit_generator.state = fresh.state


class RandomStateAdapter(adapters.Adapter):
    """``numpy.random.RandomState``: its Mersenne Twister state, set back in place."""

    name = "numpy.random.RandomState"
    per_rank = True
    reseeds = True

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, np.random.RandomState)

    def save(self, obj: Any) -> Any:
        name, keys, pos, has_gauss, cached = obj.get_state(legacy=True)
        return {
            "name": str(name),
            "keys": np.asarray(keys, dtype=np.uint32).copy(),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        }

    def apply(self, obj: Any, state: Any) -> None:
        obj.set_state(
            (
                str(state["name"]),
                np.asarray(state["keys"], dtype=np.uint32),
                int(state["pos"]),
                int(state["has_gauss"]),
                float(state["cached_gaussian"]),
            )
        )

    def rebuild(self, state: Any) -> Any:
        generator = np.random.RandomState()
        self.apply(generator, state)
        return generator

    def reseed(self, obj: Any, seed: int) -> None:
        obj.seed(np.random.SeedSequence(seed).generate_state(1)[0])


class PythonRandomAdapter(adapters.Adapter):
    """``random.Random``: its Mersenne Twister words, set back with ``setstate``."""

    name = "random.Random"
    per_rank = True
    reseeds = True

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, random.Random) and not isinstance(obj, random.SystemRandom)

    def save(self, obj: Any) -> Any:
        version, words, gauss = obj.getstate()
        return {"version": version, "state": np.array(words, dtype=np.uint32), "gauss": gauss}

    def apply(self, obj: Any, state: Any) -> None:
        words = tuple(int(w) for w in np.asarray(state["state"]).tolist())
        gauss = state["gauss"]
        obj.setstate((int(state["version"]), words, None if gauss is None else float(gauss)))

    def rebuild(self, state: Any) -> Any:
        generator = random.Random()
        self.apply(generator, state)
        return generator

    def reseed(self, obj: Any, seed: int) -> None:
        obj.seed(seed)


def _bit_state(state: Any) -> Any:
    """A bit generator's state dict with its big integers as decimal strings (JSON keeps
    no integer above 2**63 as one) and its arrays as they are."""
    if isinstance(state, dict):
        return {str(k): _bit_state(v) for k, v in state.items()}
    if isinstance(state, int) and not isinstance(state, bool):
        return {"int": str(state)}
    return state


def _plain(state: Any) -> Any:
    """The inverse of :func:`_bit_state`."""
    if isinstance(state, dict):
        if set(state) == {"int"} and isinstance(state["int"], str):
            return int(state["int"])
        return {k: _plain(v) for k, v in state.items()}
    return state


for _adapter, _roots in (
    (NumpyGeneratorAdapter(), ("numpy",)),
    (RandomStateAdapter(), ("numpy",)),
    (PythonRandomAdapter(), ("random",)),
):
    adapters.add(_adapter, roots=_roots)
