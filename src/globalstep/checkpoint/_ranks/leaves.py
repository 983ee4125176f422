"""The per-rank section of a distributed checkpoint: each rank's own leaves, written by that
rank, and given back to the same rank (or remapped across a change of world size).

Saving: every rank flattens its per-rank leaves (:mod:`~globalstep.checkpoint._ranks.perrank`)
into one safetensors file, ``per_rank/rank-NNNNN.safetensors`` inside the writer's
temporary directory (checksummed as it is written), and reports the file's size,
checksum and the leaves' JSON nodes to the writer through the Store (as the sharded chunks
are reported); the writer records every rank's report in ``state.json`` under
``"per_rank": {"world_size": N, "ranks": [...]}``; the main tree holds a
``{"per_rank": name}`` node where each such leaf sits.

Restoring on rank ``r`` of ``M``: with ``M == N`` the per-rank nodes are replaced by rank
``r``'s own and its file is read (verified) beside the main one, so the restore is the
ordinary one. With ``M != N``, for each per-rank leaf of the template:

- an object with ``load_state_from_ranks(states, *, rank, world_size, step)`` is called
  with every old rank's state (index = old rank; each what its ``state_dict()`` gave);
- a random generator is re-seeded from a seed derived from the saved states' checksums,
  the leaf's name, the new rank and the step (`perrank.derived_seed`),
  and one :class:`~globalstep._errors.WorldSizeWarning` names them;
- anything else raises :class:`~globalstep._errors.WorldSizeError` before anything is
  touched. Without a template a per-rank leaf comes back as the list of every old rank's
  value.

A checkpoint without a per-rank section restored on several ranks holds one copy of each
per-rank leaf: the template's are restored as from a checkpoint of one rank (``1 -> M``).

Example:
    >>> rank_file(3)
    'per_rank/rank-00003.safetensors'
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import xxhash

from globalstep._callers import user_stacklevel
from globalstep._errors import CorruptCheckpointError, WorldSizeError, WorldSizeWarning
from globalstep.checkpoint._files.arrays import read_arrays, write_arrays
from globalstep.checkpoint._files.document import ARRAYS_FILE, Document
from globalstep.checkpoint._ranks.perrank import derived_seed, reseed, reseedable
from globalstep.checkpoint._tree.build import unflatten
from globalstep.checkpoint._tree.flatten import array_nodes, node_kind, per_rank_nodes
from globalstep.checkpoint._tree.templates import template_marked, template_per_rank
from globalstep.storage import Storage, wrap_os_errors

__all__ = ["PER_RANK_DIR", "RankLeaves", "rank_file", "verify_rank_leaves", "write_rank_leaves"]

PER_RANK_DIR = "per_rank"
"""The folder of a checkpoint that holds each rank's file of per-rank leaves."""
_FILE = re.compile(r"per_rank/rank-\d{5,}\.safetensors")


def rank_file(rank: int) -> str:
    """The path, inside a checkpoint, of ``rank``'s per-rank leaves."""
    return f"{PER_RANK_DIR}/rank-{rank:05d}.safetensors"


def write_rank_leaves(
    storage: Storage,
    staging: str,
    rank: int,
    tree: Mapping[str, Any] | None,
    arrays: Mapping[str, np.ndarray[Any, Any]],
) -> dict[str, Any] | None:
    """Writes ``rank``'s per-rank leaves into ``staging``; returns its report (None: none).

    Args:
        storage: the directory's storage.
        staging: the save's temporary directory (the writer's).
        rank: this rank.
        tree: name -> JSON node of each per-rank leaf (``Flattened.per_rank``).
        arrays: their arrays (``Flattened.rank_arrays``).
    """
    if not tree:
        return None
    file = rank_file(rank)
    path = f"{staging}/{file}"
    with wrap_os_errors(f"writing rank {rank}'s per-rank leaves", path):
        storage.makedirs(f"{staging}/{PER_RANK_DIR}")
        written = write_arrays(storage, path, arrays)
    return {"file": file, "size": written["size"], "xxh3_64": written["xxh3_64"], "tree": tree}


def _entries(state: Document, where: str) -> tuple[int, list[dict[str, Any]]] | None:
    """The checked per-rank section of ``state``: (saved world size, each rank's entry)."""
    section = state.per_rank
    if section is None:
        return None
    world = section.get("world_size") if isinstance(section, dict) else None
    ranks = section.get("ranks") if isinstance(section, dict) else None
    if type(world) is not int or world < 1 or not isinstance(ranks, list) or len(ranks) != world:
        raise CorruptCheckpointError(f"{where}: malformed per-rank section", where)
    names = set(per_rank_nodes(state.tree))
    for rank, entry in enumerate(ranks):
        ok = (
            isinstance(entry, dict)
            and entry.get("file") == rank_file(rank)
            and _FILE.fullmatch(entry["file"]) is not None
            and type(entry.get("size")) is int
            and isinstance(entry.get("xxh3_64"), str)
            and isinstance(entry.get("tree"), dict)
            and set(entry["tree"]) == names
        )
        if not ok:
            raise CorruptCheckpointError(
                f"{where}: malformed per-rank entry of rank {rank} (its leaves must be "
                f"{sorted(names)})",
                where,
            )
    return world, ranks


def _read(
    storage: Storage,
    name: str,
    entry: dict[str, Any],
    into: Mapping[str, np.ndarray[Any, Any]] | None = None,
    *,
    keep: bool = True,
) -> dict[str, np.ndarray[Any, Any]]:
    """Reads (or, without ``keep``, verifies) one rank's file of per-rank leaves."""
    file = entry["file"]
    checked = Document(files={file: {"size": entry["size"], "xxh3_64": entry["xxh3_64"]}})
    nodes = array_nodes({"dict": entry["tree"]})
    return read_arrays(storage, name, checked, into, keep=keep, nodes=nodes, file=file)


def verify_rank_leaves(storage: Storage, name: str, state: Document) -> None:
    """Checks every rank's file of per-rank leaves of checkpoint ``name``.

    Raises:
        CorruptCheckpointError: a file is missing, truncated or fails its checksum.
    """
    found = _entries(state, storage.join(name))
    for entry in found[1] if found else []:
        _read(storage, name, entry, keep=False)


def _rewritten(node: Any, replace: Callable[[str, dict[str, Any]], Any], path: str = "") -> Any:
    """``node`` with each node for which ``replace(flat name, node)`` is not None replaced."""
    kind = node_kind(node, path or "<root>")
    replaced = replace(path or "_", node)
    if replaced is not None:
        return replaced
    prefix = f"{path}/" if path else ""
    if kind == "dict" and isinstance(node["dict"], dict):
        children = node["dict"]
        return {"dict": {k: _rewritten(v, replace, prefix + k) for k, v in children.items()}}
    if kind in ("list", "tuple") and isinstance(node[kind], list):
        return {kind: [_rewritten(v, replace, f"{prefix}{i}") for i, v in enumerate(node[kind])]}
    if kind == "stateful":
        return {"stateful": _rewritten(node["stateful"], replace, path)}
    if kind == "adapted":
        return {**node, "state": _rewritten(node["state"], replace, path)}
    return node


def _ranks(count: int) -> str:
    return f"{count} rank" if count == 1 else f"{count} ranks"


class RankLeaves:
    """One restore's per-rank leaves, on rank ``rank`` of ``world_size``.

    A checkpoint without a per-rank section (saved by one process, or before per-rank
    leaves were saved per rank) restored on several ranks holds one copy of each: the
    template's per-rank leaves are then restored as from a checkpoint of one rank
    (``1 -> M``), so that no two ranks silently share a generator's stream.

    Args:
        storage: the directory's storage.
        name: the checkpoint's directory name.
        state: its checked state.json.
        rank: this process's rank (0 without a process group).
        world_size: the number of ranks restoring (1 without a process group).
    """

    def __init__(
        self,
        storage: Storage,
        name: str,
        state: Document,
        rank: int,
        world_size: int,
    ) -> None:
        self.storage = storage
        self.name = name
        self.step = int(state.step or 0)  # Reading.load checked it is the step's
        self.rank = rank
        self.world_size = world_size
        found = _entries(state, storage.join(name))
        self.saved_world, self.entries = found if found else (world_size, [])
        self.present = bool(found) and bool(self.entries[0]["tree"])
        self.same = self.saved_world == world_size
        self._main = state.files[ARRAYS_FILE].get("xxh3_64")  # checked by load_state
        self._single = False  # one copy of each leaf, in the main tree and arrays
        self._targets: dict[str, Any] = {}
        self._read: dict[int, dict[str, Any]] = {}

    def structure(self, structure: Any, template: Any) -> Any:
        """The tree to restore, checked before anything is read: with the same world size,
        this rank's own leaves in it; with another, the per-rank nodes left for
        :meth:`remap`, each template leaf's way of restoring found.

        Raises:
            WorldSizeError: with another world size, a leaf is neither remappable nor a
                random generator.
        """
        if self.present and self.same:
            tree = self.entries[self.rank]["tree"]
            return _rewritten(
                structure, lambda _, n: tree[n["per_rank"]] if "per_rank" in n else None
            )
        if template is None:
            return structure
        if self.present:
            self._targets = template_per_rank(structure, template)
        elif self.world_size > 1:
            self._targets = template_marked(structure, template)
            if not self._targets:
                return structure
            saved: dict[str, Any] = {}

            def single(path: str, node: dict[str, Any]) -> Any:
                if path not in self._targets:
                    return None
                saved[path] = node
                return {"per_rank": path}

            structure = _rewritten(structure, single)
            self._single, self.saved_world = True, 1
            self.entries = [{"tree": saved, "xxh3_64": self._main}]
        for key, obj in self._targets.items():
            if not (callable(getattr(obj, "load_state_from_ranks", None)) or reseedable(obj)):
                raise self._error(key, obj)
        return structure

    def _error(self, key: str, obj: Any) -> WorldSizeError:
        return WorldSizeError(
            f"the per-rank leaf {key!r} ({type(obj).__name__}) of checkpoint step "
            f"{self.step} was saved {self._saved_on()} and is restored on "
            f"{_ranks(self.world_size)}: globalstep cannot tell which rank's value this "
            f"rank should get. Restore on {_ranks(self.saved_world)}, give the object a "
            "load_state_from_ranks(states, *, rank, world_size, step) method (states "
            "indexed by the old rank), or leave the leaf out of the template and pass "
            "partial=True (restore() then returns (tree, report))",
            key=key,
            saved_world_size=self.saved_world,
            world_size=self.world_size,
        )

    def _saved_on(self) -> str:
        if self._single:
            return "as one copy (by one process, or before globalstep saved it per rank)"
        return f"on {_ranks(self.saved_world)}"

    def read(self, into: Mapping[str, np.ndarray[Any, Any]] | None) -> dict[str, Any]:
        """With the same world size: this rank's arrays, read into ``into`` where it fits."""
        if not (self.present and self.same):
            return {}
        return _read(self.storage, self.name, self.entries[self.rank], into)

    def states(self, key: str) -> list[Any]:
        """Every old rank's value of per-rank leaf ``key``, plain (index = old rank)."""
        out = []
        for rank, entry in enumerate(self.entries):
            arrays = self._read.get(rank)
            if arrays is None:  # each rank's file read once, for all its leaves
                arrays = self._read[rank] = _read(self.storage, self.name, entry)
            out.append(unflatten(entry["tree"][key], arrays)[0])
        return out

    def without_template(self) -> dict[str, Any]:
        """With another world size and no template: each leaf's list of old ranks' values."""
        if not self.present or self.same:
            return {}
        return {key: self.states(key) for key in self.entries[0]["tree"]}

    def remap(self, arrays: Mapping[str, Any]) -> None:
        """After the rest is restored, with another world size: restores each template
        leaf found by :meth:`structure` from every old rank's state, or re-seeds it; warns
        once for the generators re-seeded. ``arrays``: the main file's, as read."""
        if not self._targets:
            return
        if self._single:
            self._read[0] = dict(arrays)
        reseeded = []
        for key, obj in self._targets.items():
            remap = getattr(obj, "load_state_from_ranks", None)
            if callable(remap):
                remap(self.states(key), rank=self.rank, world_size=self.world_size, step=self.step)
                continue
            digest = xxhash.xxh3_64_intdigest(
                "\0".join([key, *(str(e["xxh3_64"]) for e in self.entries)]).encode()
            )
            reseed(obj, derived_seed([digest], rank=self.rank, step=self.step))
            reseeded.append(key)
        if reseeded:
            warnings.warn(
                WorldSizeWarning(
                    f"checkpoint step {self.step} was saved {self._saved_on()} and is "
                    f"restored on {_ranks(self.world_size)} ({self.saved_world} -> "
                    f"{self.world_size}): exactness cannot hold across a change of world "
                    f"size. The random generators {', '.join(reseeded)} were re-seeded "
                    "deterministically from the saved states, this rank and the step"
                ),
                stacklevel=user_stacklevel(),  # the caller of CheckpointManager.restore
            )
