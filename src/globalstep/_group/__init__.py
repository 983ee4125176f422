"""The process group: which rank this process is, of how many, the one writer rank, the
collectives between the ranks and their key-value store, behind one interface.

Owns (nothing else in globalstep asks a framework these questions):

- :class:`ProcessGroup`, the interface: ``rank`` and ``world_size``; the writer rank,
  checked in one place (:func:`check_writer_rank`, :meth:`ProcessGroup.is_writer`); the
  collectives the library uses, on small lists of numbers (``all_gather_ints``,
  ``all_gather_floats``, ``all_reduce_floats``, ``broadcast_int``, ``barrier``); the
  key-value store every rank reaches (:class:`KeyValueStore`: ``set``, ``get``,
  ``compare_set``, ``check``, ``add``, ``delete_key``), and the key namespace of each
  agreement on it (:meth:`ProcessGroup.scope`: a torchrun restart's keys kept apart from
  the last's, ``TORCHELASTIC_RUN_ID.TORCHELASTIC_RESTART_COUNT``); which ranks died
  (:meth:`ProcessGroup.lost`, read from the sign of life each rank keeps:
  :meth:`ProcessGroup.keep_alive`, on torch.distributed a heartbeat on the store, see
  :mod:`globalstep._group._heartbeat`).
- its implementations: :class:`TorchGroup` (torch.distributed, imported only inside its
  calls) and :class:`SingleProcess` (no process group: the launcher's ``RANK`` and
  ``WORLD_SIZE``, collectives of this process alone, a store in this process). JAX's and
  TensorFlow's coordination services are two more implementations of the same interface
  (JAX's: ``_group/_jax.py``, imported once ``jax.distributed`` is initialised;
  TensorFlow's multi-worker run: ``_group/_tensorflow.py``'s ``TFGroup``, imported only
  once TensorFlow's eager context is loaded).
- :func:`active`: the group in force (torch.distributed's once initialised, else the
  single process), and :func:`initialised`, the cheap "is there a process group?".

Every ``group`` argument of globalstep (``distributed``'s functions, ``Preemption``,
``DistributedOptions``) takes a framework's group handle (a torch subgroup) or a
:class:`ProcessGroup` itself: that is the seam a new engine plugs into. It stands on
``errors`` and ``_optional`` only: ``distributed``, ``preemption``, ``checkpoint/`` and
``run/`` import it, never the reverse.

Example:
    >>> group = active()
    >>> group.rank, group.world_size, group.connected, group.is_writer()
    (0, 1, False, True)
    >>> group.all_gather_floats([0.5]), group.broadcast_int(7, src=0)
    ([[0.5]], 7)
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from globalstep._errors import ConfigError
from globalstep._group._heartbeat import HEARTBEAT, silent_ranks
from globalstep._group._interface import (
    REDUCE_OPS,
    KeyValueStore,
    ProcessGroup,
    check_writer_rank,
)
from globalstep._optional import require

__all__ = [
    "ENGINES",
    "REDUCE_OPS",
    "DictStore",
    "Engine",
    "KeyValueStore",
    "ProcessGroup",
    "SingleProcess",
    "TorchGroup",
    "active",
    "check_writer_rank",
    "engine_names",
    "how_to_initialise",
    "initialised",
]


class DictStore:
    """A :class:`KeyValueStore` in this process's memory, safe across threads: the store
    of :class:`SingleProcess`, and of any group whose ranks are threads of one process.

    Example:
        >>> store = DictStore()
        >>> store.compare_set("k", "", "1"), store.compare_set("k", "", "2"), store.add("n", 2)
        (b'1', b'1', 2)
    """

    def __init__(self) -> None:
        self._values: dict[str, bytes] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _bytes(value: str | bytes) -> bytes:
        return value.encode() if isinstance(value, str) else bytes(value)

    def set(self, key: str, value: str | bytes) -> None:
        with self._lock:
            self._values[key] = self._bytes(value)

    def get(self, key: str) -> bytes:
        with self._lock:
            if key not in self._values:
                raise KeyError(key)
            return self._values[key]

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        with self._lock:
            now = self._values.get(key)
            if (now is None and not self._bytes(expected)) or now == self._bytes(expected):
                now = self._values[key] = self._bytes(desired)
            return now if now is not None else self._bytes(expected)

    def check(self, keys: list[str]) -> bool:
        with self._lock:
            return all(key in self._values for key in keys)

    def add(self, key: str, amount: int) -> int:
        with self._lock:
            value = int(self._values.get(key, b"0")) + amount
            self._values[key] = str(value).encode()
            return value

    def delete_key(self, key: str) -> bool:
        with self._lock:
            return self._values.pop(key, None) is not None


def _from_environment(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(
            name, "must be an int >= 0 (the environment variable torchrun sets)", text
        )
    return value


_LOCAL_STORE = DictStore()
_LOCAL_SCOPES: dict[str, int] = {}
"""The store and key scopes of :class:`SingleProcess`: this process's own."""


class SingleProcess(ProcessGroup):
    """No process group: this process alone.

    Its rank and world size are the launcher's where it set them (torchrun's ``RANK`` and
    ``WORLD_SIZE``, read at each call, before the group is made), else 0 of 1; its
    collectives return this process's own values, and its store lives in this process.

    Raises:
        ConfigError: ``RANK`` or ``WORLD_SIZE`` is set but malformed (on reading them).
    """

    connected = False

    def __init__(self) -> None:
        super().__init__(_LOCAL_SCOPES)

    @property
    def rank(self) -> int:
        return _from_environment("RANK", 0)

    @property
    def world_size(self) -> int:
        size = _from_environment("WORLD_SIZE", 1)
        if size < 1:
            raise ConfigError("WORLD_SIZE", "must be an int >= 1", size)
        return size

    def all_gather_ints(self, values: Sequence[int]) -> list[list[int]]:
        return [[int(v) for v in values]]

    def all_gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        return [[float(v) for v in values]]

    def all_reduce_floats(self, values: Sequence[float], op: str) -> list[float]:
        return [float(v) for v in values]

    def broadcast_int(self, value: int, src: int) -> int:
        return int(value)

    def barrier(self) -> None:
        """Nothing to wait for."""

    def store(self) -> KeyValueStore:
        return _LOCAL_STORE


_TORCH_SCOPES: dict[str, int] = {}
"""The key scopes opened on torch.distributed's default store, by every TorchGroup."""


class TorchGroup(ProcessGroup):
    """torch.distributed's process group (the default one, or the subgroup ``handle``).

    torch is imported only inside its calls; its store is the default group's (the one
    the group was made with), which every subgroup shares.

    Args:
        handle: a torch.distributed ``ProcessGroup``; None is the default group.
    """

    store_name = "the torch.distributed Store"
    store_host = "rank 0 for tcp:// and env:// initialisation"

    def __init__(self, handle: Any = None) -> None:
        super().__init__(_TORCH_SCOPES)
        self.handle = handle
        self._module: Any = sys.modules.get("torch.distributed")

    def _dist(self) -> Any:
        """torch.distributed (imported by whoever made the group: looked up, not imported)."""
        if self._module is None:
            require("torch", "torch", "globalstep's process group")
            import torch.distributed

            self._module = torch.distributed
        return self._module

    @property
    def rank(self) -> int:
        return int(self._dist().get_rank(self.handle))

    @property
    def world_size(self) -> int:
        return int(self._dist().get_world_size(self.handle))

    def _tensor(self, values: Sequence[Any], dtype: str) -> Any:
        """``values`` as a tensor on the device collectives need (the GPU for NCCL)."""
        import torch

        dist = self._dist()
        if dist.get_backend(self.handle) == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        else:
            device = torch.device("cpu")
        return torch.tensor(list(values), dtype=getattr(torch, dtype), device=device)

    def _all_gather(self, values: Sequence[Any], dtype: str) -> list[Any]:
        import torch

        dist = self._dist()
        mine = self._tensor(values, dtype)
        gathered = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(gathered, mine, group=self.handle)
        return [t.tolist() for t in gathered]

    def all_gather_ints(self, values: Sequence[int]) -> list[list[int]]:
        return [[int(x) for x in row] for row in self._all_gather(values, "int64")]

    def all_gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        return [[float(x) for x in row] for row in self._all_gather(values, "float64")]

    def all_reduce_floats(self, values: Sequence[float], op: str) -> list[float]:
        dist = self._dist()
        buffer = self._tensor(values, "float64")
        dist.all_reduce(buffer, op=getattr(dist.ReduceOp, op.upper()), group=self.handle)
        return [float(x) for x in buffer.tolist()]

    def broadcast_int(self, value: int, src: int) -> int:
        tensor = self._tensor([value], "int64")
        self._dist().broadcast(tensor, src=src, group=self.handle)
        return int(tensor.item())

    def barrier(self) -> None:
        self._dist().barrier(group=self.handle)

    def store(self) -> KeyValueStore:
        dist = self._dist()
        try:
            store: KeyValueStore = dist.distributed_c10d._get_default_store()
        except (AttributeError, RuntimeError, ValueError) as err:  # pragma: no cover - drift
            raise ConfigError(
                "distributed",
                "needs the torch.distributed Store, which this torch does not expose",
                None,
                hint="Pass DistributedOptions(store=...) with the store the group was made with.",
            ) from err
        return store

    @property
    def restart_tag(self) -> str:
        """torchrun (torch >= 2.5, c10d rendezvous) hands its workers the agent's own
        TCPStore (``TORCHELASTIC_USE_AGENT_STORE=True``), which outlives them: after a
        restart the store still holds the previous workers' keys, under the same names a
        fresh process counts to (a save's rank would take the old writer's directory and
        "committed" for its own). The restart count, the same on every worker an agent
        starts, keeps each restart's keys apart. Empty where the store is the group's own.
        """
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
            return ""
        run = os.environ.get("TORCHELASTIC_RUN_ID", "")
        return f"/{run}.{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"

    def _alive_key(self, global_rank: int) -> str:
        """The heartbeat counter of ``global_rank`` (a rank of the default group), this
        start's own (the restart tag)."""
        return f"{_ALIVE_ROOT}{self.restart_tag}/{global_rank}"

    def keep_alive(self) -> None:
        """Starts this rank's heartbeat (see :mod:`globalstep._group._heartbeat`): a daemon
        thread adding 1 to its counter on the default group's store every half second, on
        a connection of its own (``Store.clone()``), until the process exits or the group
        is destroyed. Nothing where the group has one rank."""
        if not _torch_initialised():
            return
        dist = self._dist()
        if dist.get_world_size() < 2:
            return
        try:
            store = self.store()
        except ConfigError:  # pragma: no cover - drift: no heartbeat, the timeout ends waits
            return
        HEARTBEAT.start(
            self._alive_key(dist.get_rank()), lambda: _connection(store), _torch_initialised
        )

    def lost(self, ranks: Sequence[int]) -> list[int]:
        """The ranks of ``ranks`` whose heartbeat stood still for ``SILENT_SECONDS`` (5 s)
        of this process's clock since it first read it: their process exited, was killed
        or stopped. A rank that never started its heartbeat is not lost, nor is any where
        the store does not answer (the caller's own look at the store says so)."""
        wanted = [int(r) for r in ranks]
        if not wanted or not _torch_initialised():
            return []
        self.keep_alive()
        dist = self._dist()
        try:
            store = self.store()
        except ConfigError:  # pragma: no cover - drift
            return []
        keys = {
            r: self._alive_key(r if self.handle is None else dist.get_global_rank(self.handle, r))
            for r in wanted
        }
        found = silent_ranks(store, keys)
        return found


_ALIVE_ROOT = "globalstep/alive"
"""The store keys of the ranks' heartbeats: ``globalstep/alive<restart tag>/<rank>``."""


def _connection(store: Any) -> Any:
    """A connection of its own to ``store`` (``Store.clone()``), where the store makes
    one; else ``store`` itself."""
    try:
        return store.clone()
    except (AttributeError, NotImplementedError):
        return store


_TORCH_DEFAULT = TorchGroup()
_SINGLE_PROCESS = SingleProcess()
"""The groups :func:`active` returns without a ``group`` (they hold no state of a run:
the handle, torch.distributed's module once looked up)."""


def _torch_initialised() -> bool:
    """Whether torch.distributed has a default process group. Without torch imported none
    can exist, so torch is not imported to ask."""
    dist = sys.modules.get("torch.distributed")
    return dist is not None and bool(dist.is_available()) and bool(dist.is_initialized())


def _torch_group(handle: Any) -> ProcessGroup:
    return _TORCH_DEFAULT if handle is None else TorchGroup(handle)


@dataclass(frozen=True)
class Engine:
    """One framework's process group, as :func:`active` finds it.

    Attributes:
        name: what a ``group`` argument names it by (``"torch"``, ``"jax"``,
            ``"tensorflow"``).
        initialised: whether the user initialised it in this process (cheap: it imports
            nothing, it looks in ``sys.modules``).
        group: the :class:`ProcessGroup` on it, given the ``group`` argument (a framework's
            own handle, or None).
        how: what the user calls to initialise it (for the error where none is).
    """

    name: str
    initialised: Callable[[], bool]
    group: Callable[[Any], ProcessGroup]
    how: str


def _jax_initialised() -> bool:
    """Whether ``jax.distributed.initialize`` ran in this process (its client exists).
    Without JAX's distributed module imported it cannot have, so nothing is imported."""
    module = sys.modules.get("jax._src.distributed")
    return getattr(getattr(module, "global_state", None), "client", None) is not None


def _jax_group(handle: Any) -> ProcessGroup:
    from globalstep._group._jax import jax_group

    return jax_group(handle)


def _tf_initialised() -> bool:
    """Whether this process is a worker of a multi-worker TensorFlow run (a
    ``MultiWorkerMirroredStrategy`` with a ``TF_CONFIG`` of several tasks): without
    TensorFlow's eager context loaded none can be, so nothing is imported to ask."""
    if "tensorflow.python.eager.context" not in sys.modules:
        return False
    from globalstep._group._tensorflow import tf_initialised

    return tf_initialised()


def _tf_group(handle: Any) -> ProcessGroup:
    from globalstep._group._tensorflow import group

    return group(handle)


ENGINES: list[Engine] = [
    Engine(
        "torch",
        _torch_initialised,
        _torch_group,
        "torch.distributed.init_process_group(...)",
    ),
    Engine("jax", _jax_initialised, _jax_group, "jax.distributed.initialize(...)"),
    Engine(
        "tensorflow",
        _tf_initialised,
        _tf_group,
        "tf.distribute.MultiWorkerMirroredStrategy() with a TF_CONFIG",
    ),
]
"""The engines :func:`active` looks for, in this order; one module per engine adds its own."""


def engine_names() -> tuple[str, ...]:
    """The names a ``group`` argument may give."""
    return tuple(engine.name for engine in ENGINES)


def initialised() -> bool:
    """Returns whether a process group exists in this process (cheap: imports nothing)."""
    return any(engine.initialised() for engine in ENGINES)


def how_to_initialise() -> str:
    """The calls that make a process group, one per engine (for the errors that need one)."""
    return ", ".join(engine.how for engine in ENGINES)


def active(group: Any = None) -> ProcessGroup:
    """Returns the process group in force.

    ``group`` itself where it is a :class:`ProcessGroup`; the engine it names where it is
    a string (``"torch"``, ``"jax"``, ``"tensorflow"``: the one to use where several are
    initialised); else the one engine the user initialised (``group``: that engine's own
    handle, a torch subgroup; None its default group); else :class:`SingleProcess`
    (``group`` ignored).

    Raises:
        ConfigError: ``group`` names no engine, or one not initialised; or several engines
            are initialised and ``group`` does not say which.
    """
    if isinstance(group, ProcessGroup):
        return group
    if isinstance(group, str):
        for engine in ENGINES:
            if engine.name == group:
                if not engine.initialised():
                    raise ConfigError(
                        "group",
                        "names an engine that is not initialised in this process",
                        group,
                        hint=f"Call {engine.how} first, or pass group=None.",
                    )
                return engine.group(None)
        raise ConfigError("group", f"must be a process group or one of {engine_names()}", group)
    found = [engine for engine in ENGINES if engine.initialised()]
    if not found:
        return _SINGLE_PROCESS
    if len(found) > 1:
        names = [engine.name for engine in found]
        raise ConfigError(
            "group",
            f"must name the engine to use where several are initialised ({', '.join(names)})",
            group,
            hint=f"Pass group={names[0]!r} (or another of {names}) where the Run or the "
            "CheckpointManager takes one.",
        )
    return found[0].group(group)
