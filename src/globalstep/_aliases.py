"""The old import paths, for one release: every module that went private when each package
got one door (issue 34) still imports, with a ``DeprecationWarning`` naming its door.

One table, ``OLD``: an old module's name, the door that now holds its public names, and
the private module (or modules, for the facades that re-exported several) that hold all of
its old names, so that code written against the old path keeps running unchanged.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence
from typing import Any

_C = "globalstep.checkpoint"
_S = "globalstep.summary"
_H = "globalstep.schedules"
_T = "globalstep.storage"

OLD: dict[str, tuple[str, tuple[str, ...]]] = {
    "globalstep.clock": ("globalstep", ("globalstep._clock",)),
    "globalstep.errors": ("globalstep", ("globalstep._errors",)),
    "globalstep.triggers": ("globalstep", ("globalstep._triggers",)),
    "globalstep.units": ("globalstep", ("globalstep._units",)),
    "globalstep.guards": ("globalstep", ("globalstep._guards",)),
    "globalstep.cli": ("the `globalstep` command", ("globalstep._cli",)),
    "globalstep.demo": ("the `globalstep demo` command", ("globalstep._demo",)),
    "globalstep.preemption": ("globalstep.distributed", ("globalstep.distributed._preemption",)),
    f"{_C}.manager": (_C, (f"{_C}._manager",)),
    f"{_C}.save_trigger": (_C, (f"{_C}._save_trigger",)),
    f"{_C}.command": ("the `globalstep ckpt` command", (f"{_C}._command",)),
    f"{_C}.leaves": (_C, (f"{_C}._tree.leaves",)),
    f"{_C}.flatten": (_C, (f"{_C}._tree.flatten",)),
    f"{_C}.build": (_C, (f"{_C}._tree.build",)),
    f"{_C}.fit": (_C, (f"{_C}._tree.fit",)),
    f"{_C}.templates": (_C, (f"{_C}._tree.templates",)),
    f"{_C}.adapters": (_C, (f"{_C}._tree.adapters",)),
    f"{_C}.arrays": (_C, (f"{_C}._files.arrays",)),
    f"{_C}.fastio": (_C, (f"{_C}._files.fastio",)),
    f"{_C}.document": (_C, (f"{_C}._files.document",)),
    f"{_C}.commit": (_C, (f"{_C}._files.commit",)),
    f"{_C}.lazy": (_C, (f"{_C}._files.lazy",)),
    f"{_C}.policy": (_C, (f"{_C}._directory.policy",)),
    f"{_C}.distributed": (_C, (f"{_C}._ranks.coordinated",)),
    f"{_C}.shards": (_C, (f"{_C}._ranks.shards",)),
    f"{_C}.perrank": (_C, (f"{_C}._ranks.perrank",)),
    f"{_C}.format": (
        _C,
        (
            f"{_C}._files.commit",
            f"{_C}._files.arrays",
            f"{_C}._files.document",
            f"{_C}._files.fastio",
            f"{_C}._directory.reading",
        ),
    ),
    f"{_C}.tree": (
        _C,
        tuple(f"{_C}._tree.{name}" for name in ("build", "fit", "flatten", "leaves", "templates")),
    ),
    f"{_C}.storage": (_T, (_T,)),
    f"{_S}.writer": (_S, (f"{_S}._writer",)),
    f"{_S}.reader": (_S, (f"{_S}._reader",)),
    f"{_S}.logs": ("the `globalstep logs` command", (f"{_S}._logs",)),
    f"{_S}.log_helpers": (_S, (f"{_S}._log_helpers",)),
    f"{_S}.finite": (_S, (f"{_S}._finite",)),
    f"{_S}.progress": (_S, (f"{_S}._progress",)),
    f"{_H}.core": (_H, (_H,)),
    f"{_H}.compose": (_H, (f"{_H}._compose",)),
    f"{_H}.plateau": (_H, (f"{_H}._plateau",)),
    f"{_H}.explain": (_H, (f"{_H}._explain",)),
    f"{_H}.plan": (_H, (f"{_H}._plan",)),
    f"{_T}.base": (_T, (f"{_T}._base",)),
    f"{_T}.local": (_T, (f"{_T}._local",)),
    f"{_T}.remote": (_T, (f"{_T}._remote",)),
    f"{_T}.lock": (_T, (f"{_T}._lock",)),
}


def message(old: str) -> str:
    door = OLD[old][0]
    where = door if door.startswith("the ") else f"`{door}` (`from {door} import ...`)"
    return (
        f"`{old}` is deprecated and will be removed in the next release: its public names "
        f"are in {where}"
    )


class _OldModule(types.ModuleType):
    """An old path that named several private modules: each name looked up in them."""

    homes: Sequence[types.ModuleType] = ()

    def __getattr__(self, name: str) -> Any:
        for home in self.homes:
            if hasattr(home, name):
                return getattr(home, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")


class _Loader(importlib.abc.Loader):
    def __init__(self, old: str) -> None:
        self.old = old
        self.kept: tuple[Any, Any] | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        homes = [importlib.import_module(name) for name in OLD[spec.name][1]]
        if len(homes) == 1:
            # the module itself: patching the old path patches the code
            self.kept = (homes[0].__spec__, getattr(homes[0], "__loader__", None))
            return homes[0]
        module = _OldModule(spec.name)
        module.homes = homes
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        if self.kept is not None:  # the import system gave the module the old path's spec
            module.__spec__, module.__loader__ = self.kept
        warnings.warn(message(self.old), DeprecationWarning, stacklevel=2)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in OLD:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(fullname))


def install() -> None:
    """Puts the old paths on ``sys.meta_path`` once (after the real finders)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
