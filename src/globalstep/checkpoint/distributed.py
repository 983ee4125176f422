"""Checkpoints of runs on several ranks: one commit, all-or-nothing, sharded state included.

A :class:`~globalstep.checkpoint.manager.CheckpointManager` opened with
``distributed=True`` (or a :class:`DistributedOptions`) on every rank of an initialised
``torch.distributed`` group saves collectively: every rank calls ``save`` with the same step.

- Replicated state (plain arrays, tensors, modules under DDP, clocks, ...) is written by one
  rank, the *writer* (``writer_rank``, default 0), which alone holds the directory's lock.
- Sharded state (``DTensor`` leaves: the parameters and optimizer state of FSDP2's
  ``fully_shard``) is written by every rank: torch.distributed.checkpoint's planner
  (``DefaultSavePlanner``) says which chunk of which tensor a rank holds, and the rank
  writes the chunks it owns (a replicated mesh dimension is written by its coordinate 0)
  into ``sharded/rank-NNNNN.bin`` inside the writer's temporary directory, each chunk
  with its own XXH3-64 checksum.
- Each rank reports to the writer through the torch.distributed Store; the writer writes
  ``state.json`` (which then describes every chunk) and the commit marker only after every
  rank reported success. A rank that fails or dies makes the save fail on every surviving
  rank within ``timeout_seconds`` with a :class:`DistributedCheckpointError` naming it;
  nothing is committed and the previous checkpoint stays the newest.

Restoring needs no coordination: each rank reads the replicated state, and each sharded
tensor of the template is filled through torch.distributed.checkpoint's ``load`` (its
``DefaultLoadPlanner`` computes which saved chunks overlap the rank's shard), so a
checkpoint saved by 4 ranks restores on 2, or on 1. Without a ``DTensor`` in the template
(a plain module on one process, or no template) a sharded tensor is read whole.

No pickle: DCP's own ``.metadata`` file is a pickle and its tensor files are read with
``torch.load``; here the metadata is JSON inside ``state.json`` (checked by the marker's
checksum) and the chunks are raw bytes, so loading never runs code from the checkpoint.

Example:
    >>> options = DistributedOptions(writer_rank=0, timeout_seconds=60)
    >>> options.timeout_seconds
    60
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import time
import warnings
from dataclasses import dataclass
from typing import Any

import xxhash

from globalstep.errors import (
    ConfigError,
    CorruptCheckpointError,
    DistributedCheckpointError,
)
from globalstep.storage import Storage, wrap_os_errors

__all__ = [
    "SHARDED_DIR",
    "DistributedCheckpointError",
    "DistributedOptions",
    "load_sharded",
    "verify_sharded",
]

SHARDED_DIR = "sharded"
"""The folder of a checkpoint that holds the ranks' chunk files."""
_FILE_NAME = re.compile(r"rank-\d{5,}\.bin")
_KEY_ROOT = "globalstep/ckpt"
_OPENED: dict[str, int] = {}
"""How many distributed managers this process opened per directory."""
_MAX_PAUSE = 0.01
"""The longest pause, in seconds, between two looks at the Store for the other ranks."""
_RELEASE_SECONDS = 10.0
"""The longest rank 0 waits, in seconds, for the other ranks to be done with a save's keys."""


@dataclass(frozen=True)
class DistributedOptions:
    """How a CheckpointManager saves on several ranks.

    Attributes:
        writer_rank: the rank that writes replicated state, takes the lock and commits.
        timeout_seconds: how long a rank waits for another's part of a save before the
            save fails naming the ranks that did not answer.
        group: the torch.distributed process group; None is the default group.
        store: the torch.distributed Store the ranks report through; None takes the
            default group's store.
    """

    writer_rank: int = 0
    timeout_seconds: float = 600.0
    group: Any = None
    store: Any = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.writer_rank, bool)
            or not isinstance(self.writer_rank, int)
            or self.writer_rank < 0
        ):
            raise ConfigError("writer_rank", "must be an int >= 0", self.writer_rank)
        if (
            isinstance(self.timeout_seconds, bool)
            or not isinstance(self.timeout_seconds, int | float)
            or not math.isfinite(self.timeout_seconds)
            or self.timeout_seconds <= 0
        ):
            raise ConfigError(
                "timeout_seconds", "must be a finite number of seconds > 0", self.timeout_seconds
            )


def options_from(value: Any) -> DistributedOptions | None:
    """The manager's ``distributed`` argument as options (None: not distributed)."""
    if value is False or value is None:
        return None
    if value is True:
        return DistributedOptions()
    if isinstance(value, DistributedOptions):
        return value
    raise ConfigError("distributed", "must be a bool or a DistributedOptions", value)


# ------------------------------------------------------------------ rank helpers (private)


def _torch_dist() -> Any:
    from globalstep._optional import require

    require("torch", "torch", "distributed checkpoints")
    import torch.distributed as dist

    return dist


def _default_store(dist: Any) -> Any:
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError) as err:  # pragma: no cover - torch drift
        raise ConfigError(
            "distributed",
            "needs the torch.distributed Store, which this torch does not expose",
            None,
            hint="Pass DistributedOptions(store=...) with the store the group was made with.",
        ) from err


class Coordinator:
    """One manager's side of the save protocol, on one rank."""

    def __init__(self, options: DistributedOptions, storage: Storage) -> None:
        dist = _torch_dist()
        if not (dist.is_available() and dist.is_initialized()):
            raise ConfigError(
                "distributed",
                "needs torch.distributed to be initialised on every rank",
                True,
                hint="Call torch.distributed.init_process_group(...) before opening the manager.",
            )
        self.options = options
        self.rank = int(dist.get_rank(options.group))
        self.world = int(dist.get_world_size(options.group))
        if options.writer_rank >= self.world:
            raise ConfigError(
                "writer_rank",
                f"must be a rank of the group (0..{self.world - 1})",
                options.writer_rank,
            )
        self.store = options.store if options.store is not None else _default_store(dist)
        where = str(getattr(storage, "url", None) or storage.root)
        # Every rank opens its managers of a directory in the same order: the how-many-th
        # tells this manager's keys from an earlier one's (whose keys the Store still holds).
        _OPENED[where] = opened = _OPENED.get(where, 0) + 1
        digest = hashlib.sha1(where.encode()).hexdigest()[:16]
        self.prefix = f"{_KEY_ROOT}/{digest}/{opened}"
        self.storage = storage
        self._seq = 0

    @property
    def is_writer(self) -> bool:
        """True on the rank that writes replicated state and commits."""
        return self.rank == self.options.writer_rank

    def begin(self, step: int) -> SaveRound:
        """Starts the next save (every rank calls ``save`` in the same order)."""
        self._seq += 1
        if self.is_writer and self._seq > 2:
            # Every rank reported for the previous save, so all are past the one before it.
            old = f"{self.prefix}/{self._seq - 2}"
            for key in ["dir", "outcome", *[f"rank{r}" for r in range(self.world)]]:
                try:
                    self.store.delete_key(f"{old}/{key}")
                except Exception:
                    break
        return SaveRound(self, self._seq, step)


def _owned(obj: Any) -> bool:
    """Whether this rank writes its shard of a DTensor: for each replicated mesh dimension
    only the ranks at coordinate 0 do, so each chunk is written once."""
    from torch.distributed.tensor import Replicate, Shard

    coordinate = obj.device_mesh.get_coordinate()
    if coordinate is None:
        return False
    for dim, placement in enumerate(obj.placements):
        if isinstance(placement, Replicate):
            if coordinate[dim] != 0:
                return False
        elif not isinstance(placement, Shard) and type(placement).__name__ != "_StridedShard":
            raise ConfigError(
                "state",
                "sharded tensors must be sharded or replicated, not partial",
                str(obj.placements),
                hint="Redistribute it (dtensor.redistribute(placements=[Replicate()])) first.",
            )
    return True


@dataclass
class _Chunk:
    key: str
    offsets: list[int]
    sizes: list[int]
    data: Any  # a contiguous CPU tensor


def snapshot(sharded: dict[str, Any], *, copy: bool) -> list[_Chunk]:
    """The chunks of ``sharded`` this rank writes, found by DCP's save planner.

    Args:
        sharded: flat name -> DTensor.
        copy: copy each chunk to host memory now (an async save).
    """
    if not sharded:
        return []
    from torch.distributed.checkpoint import DefaultSavePlanner
    from torch.distributed.checkpoint.planner import WriteItemType

    owned = {key: value for key, value in sharded.items() if _owned(value)}
    planner = DefaultSavePlanner(flatten_state_dict=False, flatten_sharded_tensors=False)
    planner.set_up_planner(owned, storage_meta=None, is_coordinator=False)
    plan = planner.create_local_plan()
    chunks = []
    for item in plan.items:
        if item.type == WriteItemType.BYTE_IO or item.tensor_data is None:
            continue  # pragma: no cover - only tensors are handed to the planner
        tensor = planner.resolve_data(item)
        data = tensor.detach()
        if data.device.type != "cpu":
            data = data.cpu()
        data = data.contiguous()
        if copy and data.data_ptr() == tensor.data_ptr():
            data = data.clone()
        chunk = item.tensor_data.chunk
        chunks.append(
            _Chunk(item.index.fqn, [int(o) for o in chunk.offsets], list(chunk.sizes), data)
        )
    return chunks


def _chunk_bytes(data: Any) -> memoryview:
    import torch

    flat = data.reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


def write_chunks(storage: Storage, staging: str, rank: int, chunks: list[_Chunk]) -> dict[str, Any]:
    """Writes this rank's chunks into ``staging/sharded/``; returns their index."""
    name = f"rank-{rank:05d}.bin"
    folder = f"{staging}/{SHARDED_DIR}"
    path = f"{folder}/{name}"
    entries = []
    with wrap_os_errors(f"writing rank {rank}'s shards", path):
        storage.makedirs(folder)
        writer = storage.open_writer(path)
        offset = 0
        try:
            for chunk in chunks:
                view = _chunk_bytes(chunk.data)
                writer.write(view)
                entries.append(
                    {
                        "key": chunk.key,
                        "offsets": chunk.offsets,
                        "sizes": chunk.sizes,
                        "file": name,
                        "offset": offset,
                        "length": len(view),
                        "xxh3_64": xxhash.xxh3_64_hexdigest(view),
                    }
                )
                offset += len(view)
        except BaseException:
            writer.abort()
            raise
        writer.close()
    return {"ok": True, "chunks": entries}


class SaveRound:
    """One save, on one rank: the writer's commit hooks, or a participant's part."""

    def __init__(self, coordinator: Coordinator, seq: int, step: int) -> None:
        self.c = coordinator
        self.seq = seq
        self.step = step
        self.chunks: list[_Chunk] = []
        self.described: dict[str, Any] = {}
        self._start = time.monotonic()
        self._dir_sent = False
        self._done = False
        self._absent: list[int] = []

    def _key(self, name: str) -> str:
        return f"{self.c.prefix}/{self.seq}/{name}"

    def _store(self, method: str, *args: Any) -> Any:
        """Calls the Store; a Store that stopped answering is a failed save, not a crash."""
        try:
            return getattr(self.c.store, method)(*args)
        except Exception as err:  # the Store's errors are RuntimeError or DistStoreError
            raise self._fail(
                f"the torch.distributed Store stopped answering ({type(err).__name__}: "
                f"{err}); the rank that hosts it (rank 0 for tcp:// and env:// "
                "initialisation) has probably died",
                [0],
            ) from err

    def _set(self, name: str, value: Any) -> None:
        self._store("set", self._key(name), json.dumps(value))

    def _get(self, name: str) -> Any:
        raw = self._store("get", self._key(name))
        try:
            return json.loads(bytes(raw).decode())
        except (UnicodeDecodeError, ValueError):
            return {"error": f"unreadable report {bytes(raw)[:80]!r}"}

    def _timeout(self) -> float:
        return float(self.c.options.timeout_seconds)

    def _fail(self, message: str, ranks: list[int]) -> DistributedCheckpointError:
        return DistributedCheckpointError(
            f"the distributed save of step {self.step} failed: {message}; nothing was "
            "committed, the previous checkpoint stays the newest",
            self.c.storage.root,
            ranks,
            self._timeout(),
        )

    def _wait_for(self, names: list[str], since: float) -> list[str]:
        """Waits until every key exists or the timeout passes; returns the missing ones.

        Polls with ``check`` (1 ms, growing to 10 ms between looks; the Store's blocking
        ``wait`` logs a warning at every timed-out slice); a key holding an error ends the
        wait at once.
        """
        missing = list(names)
        pause = 0.001
        while missing:
            for name in list(missing):
                if self._store("check", [self._key(name)]):
                    if "error" in self._get(name):
                        return [name]
                    missing.remove(name)
            if not missing or time.monotonic() - since >= self._timeout():
                return missing
            time.sleep(pause)
            pause = min(pause * 1.5, _MAX_PAUSE)
        return []

    # ------------------------------------------------------------ the writer (CommitHooks)

    def started(self, staging: str) -> None:
        """Tells the other ranks where to write, then writes this rank's own chunks."""
        self._set("dir", {"staging": staging})
        self._dir_sent = True
        self.own = write_chunks(self.c.storage, staging, self.c.rank, self.chunks)

    def finishing(self, staging: str, document: dict[str, Any]) -> None:
        """Waits for every rank's report; adds the chunks' index to ``document``."""
        del staging
        others = [r for r in range(self.c.world) if r != self.c.rank]
        since = time.monotonic()
        missing = self._wait_for([f"rank{r}" for r in others], since)
        failed = [int(n[4:]) for n in missing if self._store("check", [self._key(n)])]
        if failed:
            report = self._get(f"rank{failed[0]}")
            raise self._fail(f"rank {failed[0]} failed: {report.get('error')}", failed)
        if missing:
            ranks = [int(n[4:]) for n in missing]
            self._absent = ranks  # perhaps dead: abort() does not wait for them to leave
            raise self._fail(
                f"rank(s) {ranks} did not report within timeout_seconds="
                f"{self._timeout():g} (dead, hung, or not calling save)",
                ranks,
            )
        entries = list(self.own["chunks"])
        for r in others:
            report = self._get(f"rank{r}")
            chunks = report.get("chunks") if isinstance(report, dict) else None
            if not isinstance(chunks, list):
                raise self._fail(f"rank {r} sent a malformed report", [r])
            entries.extend(chunks)
        if self.described or entries:
            tensors: dict[str, Any] = {
                key: {**described, "chunks": []} for key, described in self.described.items()
            }
            for entry in entries:
                tensor = tensors.get(entry.get("key"))
                if tensor is None:
                    raise self._fail(f"a rank wrote a tensor not in the state: {entry!r}", [])
                tensor["chunks"].append({k: v for k, v in entry.items() if k != "key"})
            for key, tensor in tensors.items():
                covered = sum(math.prod(c["sizes"]) for c in tensor["chunks"])
                if covered != math.prod(tensor["shape"]):
                    raise self._fail(
                        f"the ranks' chunks of {key!r} cover {covered} of "
                        f"{math.prod(tensor['shape'])} elements (did every rank pass the "
                        "same state?)",
                        [],
                    )
            document["sharded"] = {"world_size": self.c.world, "tensors": tensors}

    def committed(self) -> None:
        """Tells the other ranks the checkpoint is committed."""
        self._done = True
        self._set("outcome", {"ok": True})
        self._release_store()

    def _release_store(self) -> None:
        """Ends this rank's use of the save's Store keys.

        Rank 0 hosts the Store under tcp:// and env:// initialisation, and a process that
        exits takes the Store with it: a rank still polling for the outcome would then
        fail a save that was committed. So every other rank's last Store call is this
        acknowledgement, and rank 0 returns only once all of them have made it (or
        ``_RELEASE_SECONDS`` passed: a rank that died does not hold the save up, and
        live ranks poll every 10 ms at most). Ranks that never reported are not waited for.
        """
        key = self._key("released")
        try:
            if self.c.rank != 0:
                self._store("add", key, 1)
                return
            others = len({r for r in range(1, self.c.world) if r not in self._absent})
            since, pause = time.monotonic(), 0.001
            while self._store("add", key, 0) < others:
                if time.monotonic() - since >= min(self._timeout(), _RELEASE_SECONDS):
                    return
                time.sleep(pause)
                pause = min(pause * 1.5, _MAX_PAUSE)
        except DistributedCheckpointError:
            return  # the Store is gone already: nothing is left to protect

    def abort(self, error: BaseException) -> None:
        """Tells the other ranks this save failed (idempotent)."""
        if self._done:
            return
        self._done = True
        message = f"{type(error).__name__}: {error}"
        try:
            if not self._dir_sent:
                self._set("dir", {"error": f"the writer (rank {self.c.rank}) failed: {message}"})
            self._set("outcome", {"error": f"the writer (rank {self.c.rank}) failed: {message}"})
        except DistributedCheckpointError:
            return  # the Store is gone: the others fail on it too
        self._release_store()

    # ------------------------------------------------------------ the other ranks

    def participate(self) -> None:
        """Writes this rank's chunks where the writer says, reports, and waits for the commit.

        Raises:
            DistributedCheckpointError: the writer failed or did not answer in time.
        """
        writer = self.c.options.writer_rank
        since = time.monotonic()
        if self._wait_for(["dir"], since) and not self._store("check", [self._key("dir")]):
            raise self._fail(
                f"the writer (rank {writer}) did not start the save within timeout_seconds="
                f"{self._timeout():g}",
                [writer],
            )
        told = self._get("dir")
        if "error" in told:
            self._release_store()
            raise self._fail(str(told["error"]), [writer])
        try:
            report = write_chunks(self.c.storage, str(told["staging"]), self.c.rank, self.chunks)
        except BaseException as err:
            with contextlib.suppress(DistributedCheckpointError):
                self._set(f"rank{self.c.rank}", {"error": f"{type(err).__name__}: {err}"})
            self._release_store()
            raise
        self._set(f"rank{self.c.rank}", report)
        since = time.monotonic()
        if self._wait_for(["outcome"], since) and not self._store("check", [self._key("outcome")]):
            raise self._fail(
                f"the writer (rank {writer}) did not commit within timeout_seconds="
                f"{self._timeout():g} (dead, hung, or waiting for another rank)",
                [writer],
            )
        outcome = self._get("outcome")
        self._release_store()
        if "error" in outcome:
            raise self._fail(str(outcome["error"]), [writer])


def prepare(round_: SaveRound, sharded: dict[str, Any], *, copy: bool) -> None:
    """Takes the chunks this rank writes, and (on the writer) what each tensor is."""
    round_.chunks = snapshot(sharded, copy=copy)
    round_.described = {key: _describe(value) for key, value in sharded.items()}


def _describe(value: Any) -> dict[str, Any]:
    """A DTensor's dtype, global shape, and placements (to rebuild it without a template)."""
    placements = []
    for placement in value.placements:
        kind = type(placement).__name__
        if kind == "Shard":
            placements.append(f"S{placement.dim}")
        elif kind == "Replicate":
            placements.append("R")
        else:
            placements.append(kind)
    return {
        "dtype": str(value.dtype).removeprefix("torch."),
        "shape": [int(d) for d in value.shape],
        "placements": placements,
        "device_type": str(value.device_mesh.device_type),
    }


# ------------------------------------------------------------------ reading


def _tensors(state: dict[str, Any], where: str) -> dict[str, Any]:
    section = state.get("sharded")
    tensors = section.get("tensors") if isinstance(section, dict) else None
    if not isinstance(tensors, dict):
        raise CorruptCheckpointError(f"{where}: malformed sharded section", where)
    return tensors


def _check_chunk(chunk: Any, shape: list[int], itemsize: int, where: str) -> None:
    ok = (
        isinstance(chunk, dict)
        and isinstance(chunk.get("file"), str)
        and _FILE_NAME.fullmatch(chunk["file"]) is not None
        and all(
            type(chunk.get(k)) is list and all(type(v) is int and v >= 0 for v in chunk[k])
            for k in ("offsets", "sizes")
        )
        and len(chunk["offsets"]) == len(shape) == len(chunk["sizes"])
        and all(o + s <= d for o, s, d in zip(chunk["offsets"], chunk["sizes"], shape, strict=True))
        and type(chunk.get("offset")) is int
        and chunk["offset"] >= 0
        and chunk.get("length") == math.prod(chunk["sizes"]) * itemsize
        and isinstance(chunk.get("xxh3_64"), str)
    )
    if not ok:
        raise CorruptCheckpointError(f"{where}: malformed chunk {chunk!r}", where)


def _dtype(name: Any, where: str) -> Any:
    import torch

    dtype = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise CorruptCheckpointError(f"{where}: unknown torch dtype {name!r}", where)
    return dtype


def _described(state: dict[str, Any], where: str) -> dict[str, tuple[Any, list[int], list[Any]]]:
    """Checked key -> (dtype, shape, chunks) of a checkpoint's sharded section."""
    out = {}
    for key, (dtype, shape, chunks, _) in _described_full(state, where).items():
        out[key] = (dtype, shape, chunks)
    return out


def _described_full(state: dict[str, Any], where: str) -> dict[str, tuple[Any, ...]]:
    """Checked key -> (dtype, shape, chunks, the saved tensor's entry) of a checkpoint's
    sharded section."""
    out = {}
    for key, tensor in _tensors(state, where).items():
        if not isinstance(tensor, dict):
            raise CorruptCheckpointError(f"{where}: malformed sharded tensor {key!r}", where)
        dtype = _dtype(tensor.get("dtype"), where)
        shape = tensor.get("shape")
        chunks = tensor.get("chunks")
        if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
            raise CorruptCheckpointError(f"{where}: bad shape of {key!r}", where)
        if not isinstance(chunks, list):
            raise CorruptCheckpointError(f"{where}: bad chunks of {key!r}", where)
        itemsize = dtype.itemsize
        for chunk in chunks:
            _check_chunk(chunk, shape, itemsize, where)
        if sum(math.prod(c["sizes"]) for c in chunks) != math.prod(shape):
            raise CorruptCheckpointError(f"{where}: the chunks of {key!r} do not cover it", where)
        out[key] = (dtype, shape, chunks, tensor)
    return out


def _placements(saved: Any) -> list[Any] | None:
    """The DTensor placements a saved tensor had, where they can be rebuilt (else None)."""
    from torch.distributed.tensor import Replicate, Shard

    if not isinstance(saved, list) or not saved:
        return None
    out: list[Any] = []
    for text in saved:
        if text == "R":
            out.append(Replicate())
        elif isinstance(text, str) and re.fullmatch(r"S\d{1,3}", text):
            out.append(Shard(int(text[1:])))
        else:
            return None
    return out


def _rebuilt(entry: dict[str, Any], dtype: Any, shape: list[int], meshes: list[Any]) -> Any:
    """An empty DTensor laid out as the saved one was, on a mesh of the running group (that
    of a template DTensor of the same rank count, else the whole group), or None."""
    dist = _torch_dist()
    if not (dist.is_available() and dist.is_initialized()):
        return None
    placements = _placements(entry.get("placements"))
    if placements is None:
        return None
    mesh = next((m for m in meshes if m.ndim == len(placements)), None)
    if mesh is None:
        if len(placements) != 1:
            return None
        from torch.distributed.device_mesh import init_device_mesh

        device_type = entry.get("device_type")
        if device_type not in ("cpu", "cuda", "xpu", "hpu", "mps", "npu"):
            return None
        mesh = init_device_mesh(device_type, (dist.get_world_size(),))
        meshes.append(mesh)
    import torch.distributed.tensor as dtensor

    if any(getattr(p, "dim", 0) >= len(shape) for p in placements):
        return None
    return dtensor.empty(shape, dtype=dtype, device_mesh=mesh, placements=placements)


class _ChunkReader:
    """Reads and verifies chunks of one checkpoint, each file opened once."""

    def __init__(self, storage: Storage, name: str) -> None:
        self.storage = storage
        self.folder = storage.join(name, SHARDED_DIR)
        self._files: dict[str, Any] = {}

    def read(self, chunk: dict[str, Any], dtype: Any) -> Any:
        import torch

        path = f"{self.folder}/{chunk['file']}"
        handle: Any = self._files.get(path)
        if handle is None:
            try:
                handle = self._files[path] = self.storage.open_reader(path)
            except FileNotFoundError as err:
                raise CorruptCheckpointError(f"{path} is missing", path) from err
        buffer = bytearray(chunk["length"])
        handle.seek(chunk["offset"])
        view = memoryview(buffer)
        while view:
            n = handle.readinto(view)
            if not n:
                raise CorruptCheckpointError(f"{path} is truncated", path)
            view = view[n:]
        digest = xxhash.xxh3_64_hexdigest(buffer)
        if digest != chunk["xxh3_64"]:
            raise CorruptCheckpointError(
                f"{path} fails its checksum at offset {chunk['offset']} (XXH3-64 {digest}, "
                f"state.json says {chunk['xxh3_64']})",
                path,
            )
        if not buffer:
            return torch.empty(chunk["sizes"], dtype=dtype)
        return torch.frombuffer(buffer, dtype=torch.uint8).view(dtype).reshape(chunk["sizes"])

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()


def _storage_reader(described: dict[str, Any], reader: _ChunkReader) -> Any:
    """A DCP StorageReader over the checkpoint's chunks, with metadata from state.json."""
    import torch
    from torch.distributed.checkpoint import StorageReader
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    entries: dict[Any, tuple[dict[str, Any], Any]] = {}
    state_dict_metadata: dict[str, Any] = {}
    for key, (dtype, shape, chunks) in described.items():
        state_dict_metadata[key] = TensorStorageMetadata(
            TensorProperties(dtype=dtype),
            torch.Size(shape),
            [
                ChunkStorageMetadata(torch.Size(c["offsets"]), torch.Size(c["sizes"]))
                for c in chunks
            ],
        )
        for chunk in chunks:
            entries[MetadataIndex(key, torch.Size(chunk["offsets"]))] = (chunk, dtype)
    metadata = Metadata(state_dict_metadata=state_dict_metadata)

    class _Reader(StorageReader):  # type: ignore[misc]
        def reset(self, checkpoint_id: Any = None) -> None:
            del checkpoint_id

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            return metadata

        def set_up_storage_reader(
            self, metadata: Any, is_coordinator: bool, *args: Any, **kwargs: Any
        ) -> None:
            del metadata, is_coordinator

        def prepare_local_plan(self, plan: Any) -> Any:
            return plan

        def prepare_global_plan(self, plans: Any) -> Any:
            return plans

        def read_data(self, plan: Any, planner: Any) -> Any:
            cache: dict[Any, Any] = {}
            for item in plan.items:
                index = MetadataIndex(item.storage_index.fqn, item.storage_index.offset)
                chunk, dtype = entries[index]
                source = cache.get(index)
                if source is None:
                    source = cache[index] = reader.read(chunk, dtype)
                part = source
                for dim, (start, length) in enumerate(
                    zip(item.storage_offsets, item.lengths, strict=True)
                ):
                    part = part.narrow(dim, start, length)
                target = planner.resolve_tensor(item).detach()
                target.copy_(part)
                planner.commit_tensor(item, target)
            future: Any = torch.futures.Future()
            future.set_result(None)
            return future

        @classmethod
        def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
            del checkpoint_id
            return True

    return _Reader()


def load_sharded(
    storage: Storage,
    name: str,
    state: dict[str, Any],
    targets: dict[str, Any],
    *,
    rebuild: bool = False,
) -> dict[str, Any]:
    """Reads a checkpoint's sharded tensors: into the template's DTensors where given
    (through DCP's load planner: any world size), else whole.

    Args:
        storage: where the checkpoint lives.
        name: its directory name.
        state: its checked state.json.
        targets: flat name -> the template's DTensor for it, or None where the template
            holds something else there (then it is read whole).
        rebuild: where the template has no DTensor for a sharded tensor (an optimizer's
            state, which a fresh optimizer lacks), make one laid out as saved on the
            running group's mesh (that of the template's DTensors) instead of reading it
            whole.

    Returns:
        Flat name -> the filled DTensor, or a whole CPU tensor.

    Raises:
        CorruptCheckpointError: a chunk is missing, truncated or fails its checksum.
    """
    import torch

    where = storage.join(name, "state.json")
    full = _described_full(state, where)
    described = {key: value[:3] for key, value in full.items()}
    reader = _ChunkReader(storage, name)
    out: dict[str, Any] = {}
    try:
        into = {
            key: target
            for key, target in targets.items()
            if key in described
            and target is not None
            and target.dtype == described[key][0]
            and list(target.shape) == described[key][1]
        }
        if rebuild:
            meshes = [t.device_mesh for t in into.values()]
            for key, (dtype, shape, _, entry) in full.items():
                if key not in targets:
                    made = _rebuilt(entry, dtype, shape, meshes)
                    if made is not None:
                        into[key] = made
        if into:
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint import DefaultLoadPlanner

            with (
                wrap_os_errors(f"reading {name}'s shards", reader.folder),
                warnings.catch_warnings(),
            ):
                # no_dist: each rank reads its own part; DCP warns that it assumes so.
                warnings.simplefilter("ignore", UserWarning)
                dcp.load(
                    dict(into),
                    storage_reader=_storage_reader({k: described[k] for k in into}, reader),
                    planner=DefaultLoadPlanner(flatten_state_dict=False),
                    no_dist=True,
                )
            out.update(into)
        for key, (dtype, shape, chunks) in described.items():
            if key in out:
                continue
            whole = torch.empty(shape, dtype=dtype)
            for chunk in chunks:
                part = whole
                for dim, (start, length) in enumerate(
                    zip(chunk["offsets"], chunk["sizes"], strict=True)
                ):
                    part = part.narrow(dim, start, length)
                with wrap_os_errors(f"reading {name}'s shards", reader.folder):
                    part.copy_(reader.read(chunk, dtype))
            out[key] = whole
    finally:
        reader.close()
    return out


def verify_sharded(storage: Storage, name: str, state: dict[str, Any]) -> None:
    """Checks every chunk's checksum of a checkpoint's sharded section.

    Raises:
        CorruptCheckpointError: a chunk is missing, truncated or fails its checksum.
    """
    where = storage.join(name, "state.json")
    reader = _ChunkReader(storage, name)
    try:
        for dtype, _, chunks in _described(state, where).values():
            for chunk in chunks:
                with wrap_os_errors(f"reading {name}'s shards", reader.folder):
                    reader.read(chunk, dtype)
    finally:
        reader.close()
