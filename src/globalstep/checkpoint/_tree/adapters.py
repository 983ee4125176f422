"""Framework adapters: torch, JAX, Keras and TensorFlow objects in checkpoint trees, found by type.

A state tree holds NumPy arrays, Python scalars and objects with ``state_dict()``. A
framework's own objects (a ``torch.nn.Module``, a ``jax.Array``, an optax state, a Keras
model) go into a tree as they are through an :class:`Adapter`, which turns the object into
such a plain tree on save and puts the restored tree back into it on restore.

No framework is imported to find an adapter: an object is offered to the adapters only when
the root of its type's module (``torch`` for ``torch.nn.modules.linear``) is registered, and
the integration module that holds that framework's adapters is imported on the first such
object. A restored node names its adapter (``"torch.nn.Module"``); the part before the first
dot picks the integration module from the same fixed table, so a checkpoint can never make
globalstep import anything else.

Example:
    >>> import numpy as np
    >>> class Pair:
    ...     def __init__(self, a, b):
    ...         self.a, self.b = a, b
    >>> class PairAdapter(Adapter):
    ...     name = "example.Pair"
    ...     def matches(self, obj):
    ...         return isinstance(obj, Pair)
    ...     def save(self, obj):
    ...         return {"a": obj.a, "b": obj.b}
    ...     def apply(self, obj, state):
    ...         obj.a, obj.b = state["a"], state["b"]
    >>> registry = Registry()
    >>> registry.add(PairAdapter(), roots=("doctest_example",))
    >>> Pair.__module__ = "doctest_example"
    >>> registry.find(Pair(1, 2)).name
    'example.Pair'
"""

from __future__ import annotations

import importlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar

from globalstep._errors import ConfigError, CorruptCheckpointError

__all__ = ["Adapter", "OpenTemplate", "Registry", "add", "find", "named", "register"]


class OpenTemplate(dict):  # type: ignore[type-arg]
    """A template dict for an object that creates some of its state later.

    An :meth:`Adapter.template` returns one where the object does not have all its
    variables yet (an optimizer before its first update creates its slots, a model before
    its first call its weights). Saved keys it lacks are not ``unexpected``: they are read
    without a template, listed as ``deferred`` in the restore's report, and handed to
    :meth:`Adapter.apply` with the rest, which keeps them until the object creates them
    (TensorFlow's deferred restoration); :meth:`Adapter.pending` says which still wait.
    """


class Adapter(ABC):
    """Turns one kind of framework object into a plain state tree and back.

    Attributes:
        name: stored in ``state.json`` and looked up on restore, e.g. ``"torch.nn.Module"``;
            the part before the first dot is the framework root whose loader holds it.
    """

    name: ClassVar[str]
    per_rank: ClassVar[bool] = False
    """Whether each rank of a distributed checkpoint saves its own (a random generator)."""
    reseeds: ClassVar[bool] = False
    """Whether :meth:`reseed` seeds the object afresh (used across a change of world size)."""

    @abstractmethod
    def matches(self, obj: Any) -> bool:
        """Returns True for the objects this adapter saves."""

    @abstractmethod
    def save(self, obj: Any) -> Any:
        """Returns a plain state tree for ``obj``.

        The tree holds NumPy arrays and scalars, ``bool``/``int``/``float``/``str``/``None``,
        dicts with string keys, lists, tuples, objects with ``state_dict()`` and other
        objects an adapter takes.
        """

    def template(self, obj: Any) -> Any:
        """Returns the tree :meth:`save` would give, for restoring into ``obj``.

        Its arrays may share memory with ``obj`` (``tensor.numpy()``), so that the reader
        fills them in place with no second copy. Defaults to :meth:`save`.
        """
        return self.save(obj)

    def restore(self, obj: Any, state: Any) -> Any:
        """Returns what stands for ``obj`` in the restored tree.

        ``state`` is the restored plain tree, with the saved data (its arrays may be the ones
        :meth:`template` gave, when the reader filled them in place) and nested adapted
        objects rebuilt by their adapters' :meth:`rebuild`. No side effects: the checkpoint's
        fit is final only after every object's restore(). Immutable kinds (a ``jax.Array``)
        return a new object here, placed like ``obj``. Defaults to ``obj`` itself.
        """
        del state
        return obj

    def apply(self, obj: Any, state: Any) -> None:  # noqa: B027 (optional hook, no-op default)
        """Puts the restored state (as for :meth:`restore`) into ``obj`` in place.

        Called once the whole checkpoint fits the template. An array of ``state`` may already
        be ``obj``'s own memory (the reader filled :meth:`template`'s view): copying it onto
        itself is correct, and skipping that copy is an optimisation. Defaults to nothing.
        """

    def rebuild(self, state: Any) -> Any:
        """Returns the restored value when there is no template. Defaults to the plain state."""
        return state

    def reseed(self, obj: Any, seed: int) -> None:
        """Seeds the random generator ``obj`` afresh from ``seed`` (where :attr:`reseeds`).

        Raises:
            TypeError: the adapter's objects are not random generators.
        """
        raise TypeError(f"{self.name} objects cannot be re-seeded")

    def pending(self, obj: Any) -> list[str]:
        """Returns the paths (relative to the adapted node) of values restored into ``obj``
        that still wait for it to create their variables (see :class:`OpenTemplate`).
        Defaults to none."""
        del obj
        return []


def _root(module: str) -> str:
    return module.partition(".")[0]


class Registry:
    """Adapters by framework root, loaded on first use; the process-wide one is below."""

    def __init__(self) -> None:
        self._loaders: dict[str, str] = {}
        self._adapters: list[tuple[frozenset[str], Adapter]] = []
        self._by_name: dict[str, Adapter] = {}
        self._loaded: set[str] = set()
        self._roots: set[str] = set()
        self._lock = threading.RLock()

    def register(self, root: str, loader: str) -> None:
        """Imports module ``loader`` the first time an object of framework ``root`` is seen."""
        if not root.isidentifier():
            raise ConfigError("root", "must be a module name without dots", root)
        self._loaders[root] = loader
        self._roots.add(root)

    def add(self, adapter: Adapter, *, roots: Iterable[str] = ()) -> None:
        """Adds an adapter, tried after those added before it.

        Args:
            adapter: the adapter; its name must be new.
            roots: the module roots of the types it takes; defaults to its name's root.
        """
        name = adapter.name
        with self._lock:
            if name in self._by_name:
                raise ConfigError("adapter", "names must be unique", name)
            taken = frozenset(roots) or frozenset({_root(name)})
            self._adapters.append((taken, adapter))
            self._by_name[name] = adapter
            self._roots |= taken

    def _load(self, root: str) -> None:
        with self._lock:
            if root in self._loaded:
                return
            self._loaded.add(root)
            loader = self._loaders.get(root)
        if loader is not None:
            importlib.import_module(loader)

    def find(self, obj: Any) -> Adapter | None:
        """Returns the adapter for ``obj``, or None when no adapter takes its type."""
        cls = type(obj)
        root = _root(cls.__module__)
        if root not in self._roots:
            # A user's subclass (``class Net(torch.nn.Module)`` in ``__main__``) belongs to
            # the framework of its nearest registered base.
            root = next(
                (r for r in (_root(b.__module__) for b in cls.__mro__[1:]) if r in self._roots),
                "",
            )
            if not root:
                return None
        if root not in self._loaded and root in self._loaders:
            try:
                self._load(root)
            except ImportError:
                return None
        for roots, adapter in self._adapters:
            if root in roots and adapter.matches(obj):
                return adapter
        return None

    def named(self, name: Any) -> Adapter:
        """Returns the adapter a checkpoint names, importing its framework's module.

        Raises:
            CorruptCheckpointError: no adapter has that name.
            MissingDependencyError: the framework it needs is not installed.
        """
        if not isinstance(name, str):
            raise CorruptCheckpointError(f"state.json: bad adapter name {name!r}")
        adapter = self._by_name.get(name)
        if adapter is None:
            root = _root(name)
            if root in self._loaders:
                self._load(root)
            adapter = self._by_name.get(name)
        if adapter is None:
            raise CorruptCheckpointError(
                f"state.json: no adapter named {name!r} (written by a newer globalstep?)"
            )
        return adapter


_REGISTRY = Registry()
for _framework, _module in (
    ("torch", "globalstep.integrations.torch"),
    ("jax", "globalstep.integrations.jax"),
    ("jaxlib", "globalstep.integrations.jax"),
    ("optax", "globalstep.integrations.jax"),
    ("flax", "globalstep.integrations.jax"),
    ("keras", "globalstep.integrations.keras"),
    ("tensorflow", "globalstep.integrations.tensorflow"),
    ("numpy", "globalstep.checkpoint._ranks.perrank"),
    ("random", "globalstep.checkpoint._ranks.perrank"),
):
    _REGISTRY.register(_framework, _module)


def register(root: str, loader: str) -> None:
    """Imports module ``loader`` the first time an object whose type's module root is ``root``
    is saved, or a node of an adapter named ``root.*`` is restored."""
    _REGISTRY.register(root, loader)


def add(adapter: Adapter, *, roots: Iterable[str] = ()) -> None:
    """Adds an adapter to the process-wide registry (an integration module does, at import)."""
    _REGISTRY.add(adapter, roots=roots)


def find(obj: Any) -> Adapter | None:
    """Returns the adapter that takes ``obj``, or None."""
    return _REGISTRY.find(obj)


def named(name: Any) -> Adapter:
    """Returns the adapter a checkpoint node names."""
    return _REGISTRY.named(name)
