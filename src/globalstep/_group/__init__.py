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
  the last's, ``TORCHELASTIC_RUN_ID.TORCHELASTIC_RESTART_COUNT``).
- its implementations: :class:`TorchGroup` (torch.distributed, imported only inside its
  calls) and :class:`SingleProcess` (no process group: the launcher's ``RANK`` and
  ``WORLD_SIZE``, collectives of this process alone, a store in this process);
  TensorFlow's multi-worker run (its coordination service) is ``_group/tensorflow.py``'s
  ``TFGroup``, imported only once TensorFlow's eager context is loaded.
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
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from globalstep._errors import ConfigError
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

REDUCE_OPS = ("max", "min", "sum")
"""The operations :meth:`ProcessGroup.all_reduce_floats` knows."""


class KeyValueStore(Protocol):
    """The key-value store every rank of a group reaches: torch.distributed's ``Store``
    as it is (``TCPStore``, ``HashStore``, ``PrefixStore``), or a coordination service's
    keys behind these six calls. Values are read back as bytes."""

    def set(self, key: str, value: str | bytes) -> None:
        """Sets ``key``."""

    def get(self, key: str) -> bytes:
        """Returns ``key``'s value (waiting for it to be set, up to the store's timeout)."""

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        """Sets ``desired`` where the value is ``expected`` (``""``: the key is missing);
        returns the value in force after the call."""

    def check(self, keys: list[str]) -> bool:
        """Returns whether every key exists, without waiting."""

    def add(self, key: str, amount: int) -> int:
        """Adds ``amount`` to the integer under ``key`` (0 where missing); returns it."""

    def delete_key(self, key: str) -> bool:
        """Deletes ``key``; returns whether it existed."""


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


def check_writer_rank(value: Any, world_size: int | None = None, name: str = "writer_rank") -> int:
    """Returns ``value``, the rank that writes (summaries, progress, commits), checked: an
    int >= 0, and below ``world_size`` where it is known. The one check of the writer rank.

    Args:
        value: the writer rank given.
        world_size: the group's size, or None where no group is known yet.
        name: the parameter as the caller's API spells it (``writer_rank``; a Run's
            ``Ranks(writer=...)``).

    Raises:
        ConfigError: ``value`` is not an int >= 0, or not below ``world_size``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(name, "must be an int >= 0", value)
    if world_size is not None and value >= world_size:
        raise ConfigError(
            name,
            f"must be a rank below the world size, {world_size}",
            value,
            hint=f"The writer must be a rank of the group (0..{world_size - 1}).",
        )
    return value


class ProcessGroup(ABC):
    """The ranks of a run, as globalstep uses them; see the module's docstring.

    Every rank of the group calls a collective at the same point of its program, with as
    many values; a group that is not ``connected`` reaches this process alone (its
    collectives return its own values). Subclasses give ``rank``, ``world_size``, the
    collectives and ``store``; the writer rank, the store's key scopes and the restart tag
    are here, once.

    Args:
        scopes: the counts of :meth:`scope`, shared by every group object of one store
            (None: this object's own).
    """

    connected = True
    """Whether the collectives and the store reach the other ranks."""

    store_name = "the process group's store"
    store_host = "rank 0"
    """What the store is, and which rank hosts it, as an error that lost it says."""

    def __init__(self, scopes: dict[str, int] | None = None) -> None:
        self._scopes: dict[str, int] = {} if scopes is None else scopes

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's rank in the group, in ``[0, world_size)``."""

    @property
    @abstractmethod
    def world_size(self) -> int:
        """The number of ranks in the group, >= 1."""

    @abstractmethod
    def all_gather_ints(self, values: Sequence[int]) -> list[list[int]]:
        """Every rank's int64 ``values`` (as many on each), indexed by rank."""

    @abstractmethod
    def all_gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        """Every rank's float64 ``values`` (as many on each), indexed by rank, bit for bit."""

    @abstractmethod
    def all_reduce_floats(self, values: Sequence[float], op: str) -> list[float]:
        """The element-wise ``op`` (one of :data:`REDUCE_OPS`) of every rank's float64
        ``values``, the same on every rank."""

    @abstractmethod
    def broadcast_int(self, value: int, src: int) -> int:
        """Rank ``src``'s int64 ``value``, on every rank."""

    @abstractmethod
    def barrier(self) -> None:
        """Returns once every rank called it."""

    @abstractmethod
    def store(self) -> KeyValueStore:
        """The key-value store every rank of the group reaches."""

    def lost(self, ranks: Sequence[int]) -> list[int]:
        """The ranks of ``ranks`` known to have died (their process is gone, or gave no
        sign of life for the engine's liveness interval), without waiting: what a rank
        waiting for another's key asks, so that a dead peer is noticed in seconds, not
        at the wait's timeout. Empty where the engine cannot tell (then the timeout
        alone ends the wait)."""
        del ranks
        return []

    @property
    def restart_tag(self) -> str:
        """The part of every key that tells this start of the ranks from a restart's, where
        the store outlives the ranks (empty where it does not)."""
        return ""

    def scope(self, root: str) -> str:
        """A key prefix under ``root`` for one agreement between the ranks: the restart
        tag, then how many scopes this process opened under ``root`` (every rank opens its
        agreements in the same order, so the same on every rank, and never a name an
        earlier agreement, whose keys the store still holds, used)."""
        where = f"{root}{self.restart_tag}"
        self._scopes[where] = opened = self._scopes.get(where, 0) + 1
        return f"{where}/{opened}"

    def is_writer(self, writer_rank: int = 0, name: str = "writer_rank") -> bool:
        """Returns whether this process is rank ``writer_rank`` (checked against the
        group's size: :func:`check_writer_rank`)."""
        return self.rank == check_writer_rank(writer_rank, self.world_size, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, world_size={self.world_size})"


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


def _tf_initialised() -> bool:
    """Whether this process is a worker of a multi-worker TensorFlow run (a
    ``MultiWorkerMirroredStrategy`` with a ``TF_CONFIG`` of several tasks): without
    TensorFlow's eager context loaded none can be, so nothing is imported to ask."""
    if "tensorflow.python.eager.context" not in sys.modules:
        return False
    from globalstep._group.tensorflow import tf_initialised

    return tf_initialised()


def _tf_group(handle: Any) -> ProcessGroup:
    from globalstep._group.tensorflow import group

    return group(handle)


ENGINES: list[Engine] = [
    Engine(
        "torch",
        _torch_initialised,
        _torch_group,
        "torch.distributed.init_process_group(...)",
    ),
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
