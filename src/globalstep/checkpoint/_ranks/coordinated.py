"""Checkpoints of runs on several ranks: one commit, all-or-nothing, sharded state included.

A :class:`~globalstep.checkpoint._manager.CheckpointManager` opened with
``distributed=True`` (or a :class:`DistributedOptions`) on every rank of an initialised
process group (``torch.distributed``, ``jax.distributed``'s processes, or a TensorFlow
multi-worker run: see :mod:`globalstep._group`) saves collectively: every rank calls
``save`` with the same step.

- Replicated state (plain arrays, tensors, modules under DDP, clocks, ...) is written by one
  rank, the *writer* (``writer_rank``, default 0), which alone holds the directory's lock.
- Sharded state (``DTensor`` leaves: the parameters and optimizer state of FSDP2's
  ``fully_shard``) is written by every rank: torch.distributed.checkpoint's planner
  (``DefaultSavePlanner``) says which chunk of which tensor a rank holds, and the rank
  writes the chunks it owns (a replicated mesh dimension is written by its coordinate 0)
  into ``sharded/rank-NNNNN.bin`` inside the writer's temporary directory, each chunk
  with its own XXH3-64 checksum.
- Per-rank state (each rank's random generators, its sampler's position: see
  :mod:`globalstep.checkpoint._ranks.perrank`) is written by every rank into its own
  ``per_rank/rank-NNNNN.safetensors`` inside the same temporary directory, checksummed,
  and recorded by the writer in ``state.json``; on a restore with the same world size each
  rank gets its own back (see :mod:`globalstep.checkpoint._ranks.leaves`).
- Each rank reports to the writer through the process group's key-value store (see
  :mod:`globalstep._group`: torch.distributed's Store or TensorFlow's coordination
  service, under this manager's own keys);
  the writer writes ``state.json`` (which then describes every chunk) and the commit
  marker only after every rank reported success. A rank that fails makes the save fail
  on every surviving rank at once, one that dies within seconds (the group's
  :meth:`~globalstep._group.ProcessGroup.lost`: on torch.distributed each rank's heartbeat
  on the Store, 5 s without one), one that hangs within ``timeout_seconds``, with a
  :class:`DistributedCheckpointError` naming it; nothing is committed and the previous
  checkpoint stays the newest.

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
import time
from dataclasses import dataclass
from typing import Any

from globalstep._errors import ConfigError, DistributedCheckpointError
from globalstep._group import (
    ProcessGroup,
    active,
    check_writer_rank,
    how_to_initialise,
    initialised,
)
from globalstep.checkpoint._files.document import Document
from globalstep.checkpoint._ranks._jax_shards import chunks as jax_chunks
from globalstep.checkpoint._ranks._jax_shards import describe as describe_jax
from globalstep.checkpoint._ranks._jax_shards import is_jax
from globalstep.checkpoint._ranks.leaves import write_rank_leaves
from globalstep.checkpoint._ranks.shards import (
    SHARDED_DIR,
    Chunk,
    load_sharded,
    verify_sharded,
    write_chunks,
)
from globalstep.storage import Storage

__all__ = [
    "SHARDED_DIR",
    "DistributedCheckpointError",
    "DistributedOptions",
    "load_sharded",
    "verify_sharded",
]

_KEY_ROOT = "globalstep/ckpt"
_MAX_PAUSE = 0.01
"""The longest pause, in seconds, between two looks at the Store for the other ranks."""
_LIVENESS_SECONDS = 0.5
"""How often, in seconds, a rank waiting for another's key asks the group whether it died."""
_RELEASE_SECONDS = 10.0
"""The longest rank 0 waits, in seconds, for the other ranks to be done with a save's keys."""


@dataclass(frozen=True)
class DistributedOptions:
    """How a CheckpointManager saves on several ranks.

    Attributes:
        writer_rank: the rank that writes replicated state, takes the lock and commits.
        timeout_seconds: how long a rank waits for another's part of a save before the
            save fails naming the ranks that did not answer (a hung rank). A rank whose
            process died (killed, out of memory, a crash) is noticed sooner: on
            torch.distributed each rank of a distributed manager keeps a heartbeat on the
            Store (a daemon thread, every 0.5 s), and a rank waiting inside a save fails
            it within about 6 s of the other's last beat, naming it. A rank that is
            merely slow (a long update before it calls ``save``) beats on.
        group: the process group: None is the one engine initialised (torch.distributed,
            jax.distributed, a TensorFlow multi-worker strategy), an engine's name
            (``"torch"``, ``"jax"``, ``"tensorflow"``) picks one, or a torch subgroup
            handle, or a ``globalstep._group.ProcessGroup``.
        store: the key-value store the ranks report through (a torch.distributed
            Store); None takes the group's (under JAX, its coordination service's).
    """

    writer_rank: int = 0
    timeout_seconds: float = 600.0
    group: Any = None
    store: Any = None

    def __post_init__(self) -> None:
        check_writer_rank(self.writer_rank)
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


class Coordinator:
    """One manager's side of the save protocol, on one rank."""

    def __init__(self, options: DistributedOptions, storage: Storage) -> None:
        if not (initialised() or isinstance(options.group, ProcessGroup | str)):
            raise ConfigError(
                "distributed",
                "needs a process group initialised on every rank",
                True,
                hint=f"Call one of {how_to_initialise()} before opening the manager.",
            )
        self.options = options
        self.group = group = active(options.group)
        self.rank, self.world = group.rank, group.world_size
        self.writer = check_writer_rank(options.writer_rank, self.world)
        self.store = options.store if options.store is not None else group.store()
        where = str(getattr(storage, "url", None) or storage.root)
        # Every rank opens its managers of a directory in the same order: the how-many-th
        # tells this manager's keys from an earlier one's (whose keys the Store still holds).
        digest = hashlib.sha1(where.encode()).hexdigest()[:16]
        self.prefix = group.scope(f"{_KEY_ROOT}/{digest}")
        self.storage = storage
        group.keep_alive()  # the peers waiting for this rank inside a save read it
        self._seq = 0

    @property
    def is_writer(self) -> bool:
        """True on the rank that writes replicated state and commits."""
        return self.rank == self.writer

    def begin(self, step: int) -> SaveRound:
        """Starts the next save (every rank calls ``save`` in the same order)."""
        self._seq += 1
        if self.is_writer and self._seq > 2:
            # Every rank reported for the previous save, so all are past the one before it.
            old = f"{self.prefix}/{self._seq - 2}"
            ranks = range(self.world)
            for key in [
                "dir",
                "outcome",
                *[f"{n}{r}" for n in ("rank", "released") for r in ranks],
            ]:
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


def snapshot(sharded: dict[str, Any], *, copy: bool) -> list[Chunk]:
    """The chunks of ``sharded`` this rank writes, found by DCP's save planner.

    Args:
        sharded: flat name -> DTensor, or jax.Array of several processes.
        copy: copy each chunk to host memory now (an async save).
    """
    if not sharded:
        return []
    chunks: list[Chunk] = []
    for key, value in list(sharded.items()):
        if is_jax(value):  # a jax.Array of several processes: its shards of replica 0
            chunks.extend(Chunk(key, *chunk) for chunk in jax_chunks(value, copy=copy))
    sharded = {key: value for key, value in sharded.items() if not is_jax(value)}
    if not sharded:
        return chunks
    from torch.distributed.checkpoint import DefaultSavePlanner
    from torch.distributed.checkpoint.planner import WriteItemType

    owned = {key: value for key, value in sharded.items() if _owned(value)}
    planner = DefaultSavePlanner(flatten_state_dict=False, flatten_sharded_tensors=False)
    planner.set_up_planner(owned, storage_meta=None, is_coordinator=False)
    plan = planner.create_local_plan()
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
            Chunk(item.index.fqn, [int(o) for o in chunk.offsets], list(chunk.sizes), data)
        )
    return chunks


class SaveRound:
    """One save, on one rank: the writer's commit hooks, or a participant's part."""

    def __init__(self, coordinator: Coordinator, seq: int, step: int) -> None:
        self.c = coordinator
        self.seq = seq
        self.step = step
        self.chunks: list[Chunk] = []
        self.described: dict[str, Any] = {}
        self.rank_tree: dict[str, Any] | None = None
        self.rank_arrays: dict[str, Any] = {}
        self._start = time.monotonic()
        self._dir_sent = False
        self._done = False
        self._absent: list[int] = []
        self._reported = False  # this rank's report (a participant's) was sent

    def _key(self, name: str) -> str:
        return f"{self.c.prefix}/{self.seq}/{name}"

    def _store(self, method: str, *args: Any) -> Any:
        """Calls the Store; a Store that stopped answering is a failed save, not a crash."""
        try:
            return getattr(self.c.store, method)(*args)
        except Exception as err:  # the Store's errors are RuntimeError or DistStoreError
            group = self.c.group
            raise self._fail(
                f"{group.store_name} stopped answering ({type(err).__name__}: {err}); the "
                f"rank that hosts it ({group.store_host}) has probably died",
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
        looked = time.monotonic()
        while missing:
            for name in list(missing):
                if self._store("check", [self._key(name)]):
                    if "error" in self._get(name):
                        return [name]
                    missing.remove(name)
            now = time.monotonic()
            if not missing or now - since >= self._timeout():
                return missing
            if now - looked >= _LIVENESS_SECONDS:
                looked = now
                self._raise_if_lost([self._rank_of(name) for name in missing])
            time.sleep(pause)
            pause = min(pause * 1.5, _MAX_PAUSE)
        return []

    def _rank_of(self, name: str) -> int:
        """The rank that writes the key ``name`` (``rank3``: 3; the writer's others)."""
        return int(name[4:]) if name.startswith("rank") else self.c.writer

    def _raise_if_lost(self, ranks: list[int]) -> None:
        """Fails the save where the engine knows one of ``ranks`` died."""
        lost = self.c.group.lost(sorted(set(ranks)))
        if lost:
            self._absent = lost
            raise self._fail(
                f"rank(s) {lost} died during the save (the process group lost them)", lost
            )

    # ------------------------------------------------------------ the writer (CommitHooks)

    def started(self, staging: str) -> None:
        """Tells the other ranks where to write, then writes this rank's own chunks."""
        self._set("dir", {"staging": staging})
        self._dir_sent = True
        self.own = self._write(staging)

    def _write(self, staging: str) -> dict[str, Any]:
        """Writes this rank's chunks and per-rank leaves into ``staging``; their report."""
        report = write_chunks(self.c.storage, staging, self.c.rank, self.chunks)
        leaves = write_rank_leaves(
            self.c.storage, staging, self.c.rank, self.rank_tree, self.rank_arrays
        )
        if leaves is not None:
            report["per_rank"] = leaves
        return report

    def finishing(self, staging: str, document: Document) -> None:
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
        reports = {self.c.rank: self.own}
        for r in others:
            report = self._get(f"rank{r}")
            chunks = report.get("chunks") if isinstance(report, dict) else None
            if not isinstance(chunks, list):
                raise self._fail(f"rank {r} sent a malformed report", [r])
            entries.extend(chunks)
            reports[r] = report
        self._record_rank_leaves(reports, document)
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
            document.sharded = {"world_size": self.c.world, "tensors": tensors}

    def _record_rank_leaves(self, reports: dict[int, Any], document: Document) -> None:
        """Records every rank's per-rank leaves in ``document``; each rank must have the
        same leaves as the writer (every rank passes a tree of the same shape)."""
        names = sorted(self.rank_tree or {})
        if not names:
            extra = [r for r, report in reports.items() if report.get("per_rank") is not None]
            if extra:
                raise self._fail(
                    f"rank(s) {extra} saved per-rank leaves where the writer (rank "
                    f"{self.c.rank}) has none (did every rank pass the same state?)",
                    extra,
                )
            return
        ranks = []
        for r in range(self.c.world):
            leaves = reports[r].get("per_rank")
            tree = leaves.get("tree") if isinstance(leaves, dict) else None
            if not isinstance(tree, dict) or sorted(tree) != names:
                raise self._fail(
                    f"rank {r}'s per-rank leaves {sorted(tree or {})} are not the writer's "
                    f"{names} (did every rank pass the same state?)",
                    [r],
                )
            ranks.append(leaves)
        document.per_rank = {"world_size": self.c.world, "ranks": ranks}

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
        acknowledgement (its own key), and rank 0 returns only once all of them have made
        it, or the group lost the others (a rank that died does not hold the save up), or
        ``_RELEASE_SECONDS`` passed (live ranks poll every 10 ms at most). Ranks that
        never reported are not waited for.
        """
        try:
            if self.c.rank != 0:
                self._store("set", self._key(f"released{self.c.rank}"), "1")
                return
            waiting = [r for r in range(1, self.c.world) if r not in self._absent]
            since = looked = time.monotonic()
            pause = 0.001
            while waiting and not self._store(
                "check", [self._key(f"released{r}") for r in waiting]
            ):
                now = time.monotonic()
                if now - since >= min(self._timeout(), _RELEASE_SECONDS):
                    return
                if now - looked >= _LIVENESS_SECONDS:
                    looked = now
                    gone = set(self.c.group.lost(waiting))
                    waiting = [r for r in waiting if r not in gone]
                time.sleep(pause)
                pause = min(pause * 1.5, _MAX_PAUSE)
        except DistributedCheckpointError:
            return  # the Store is gone already: nothing is left to protect

    def abort(self, error: BaseException) -> None:
        """Tells the other ranks this save failed (idempotent): the writer through the
        save's own keys (``dir``, ``outcome``), another rank through its report, where it
        made none yet (it failed before its part: the writer then fails the save at once,
        naming it, instead of waiting for it until ``timeout_seconds``)."""
        if self._done:
            return
        self._done = True
        message = f"{type(error).__name__}: {error}"
        if not self.c.is_writer:
            if not self._reported:
                with contextlib.suppress(DistributedCheckpointError):
                    self._report({"error": message})
            self._release_store()
            return
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
        writer = self.c.writer
        told = self._from_writer("dir", "did not start the save within timeout_seconds={}")
        if "error" in told:
            self._release_store()
            raise self._fail(str(told["error"]), [writer])
        try:
            report = self._write(str(told["staging"]))
        except BaseException as err:
            with contextlib.suppress(DistributedCheckpointError):
                self._report({"error": f"{type(err).__name__}: {err}"})
            self._release_store()
            raise
        self._report(report)
        outcome = self._from_writer(
            "outcome",
            "did not commit within timeout_seconds={} (dead, hung, or waiting for another rank)",
        )
        self._release_store()
        if "error" in outcome:
            raise self._fail(str(outcome["error"]), [writer])

    def _report(self, report: dict[str, Any]) -> None:
        """Sends this rank's report (its part, or its error) to the writer, once."""
        self._reported = True
        self._set(f"rank{self.c.rank}", report)

    def _from_writer(self, name: str, late: str) -> Any:
        """Waits for the writer's key ``name`` and returns its value; raises where it did not
        come within the timeout (``late``: the message's end, ``{}`` the timeout)."""
        writer = self.c.writer
        if self._wait_for([name], time.monotonic()) and not self._store("check", [self._key(name)]):
            raise self._fail(
                f"the writer (rank {writer}) " + late.format(f"{self._timeout():g}"), [writer]
            )
        return self._get(name)


def prepare(
    round_: SaveRound,
    sharded: dict[str, Any],
    *,
    copy: bool,
    rank_tree: dict[str, Any] | None = None,
    rank_arrays: dict[str, Any] | None = None,
) -> None:
    """Takes the chunks this rank writes, and (on the writer) what each tensor is; and
    this rank's per-rank leaves (their nodes and arrays, as ``flatten`` took them)."""
    round_.chunks = snapshot(sharded, copy=copy)
    round_.described = {key: _describe(value) for key, value in sharded.items()}
    round_.rank_tree = rank_tree
    round_.rank_arrays = dict(rank_arrays or {})


def _describe(value: Any) -> dict[str, Any]:
    """A DTensor's dtype, global shape, and placements (to rebuild it without a template);
    a jax.Array's dtype and global shape."""
    if is_jax(value):
        return describe_jax(value)
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
