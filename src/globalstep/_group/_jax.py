"""JAX's multi-process runtime (``jax.distributed.initialize``) as a :class:`ProcessGroup`.

Everything goes through the coordination service that ``jax.distributed.initialize``
starts on process 0 and that every process's client reaches
(``jax._src.distributed.global_state.client``: a private attribute of JAX, pinned by
``tests/distributed/test_jax_group.py`` and checked here at the first call, where its
absence is a :class:`~globalstep.ConfigError`, not an ``AttributeError``):

- the rank and the world size are the ones ``initialize`` was given (``process_id``,
  ``num_processes``: what ``jax.process_index()`` and ``jax.process_count()`` answer),
  read without starting XLA's backends;
- the store (:class:`CoordinationStore`) is the service's key-value store;
- the collectives are rounds of keys in that store (each process sets its own key of the
  round, reads every other's with a blocking get, and deletes its key of the round
  before last, which every process has read by then) and the service's barrier. Not
  ``jax.experimental.multihost_utils``: its ``process_allgather`` compiles and runs an XLA
  computation (seconds at the first call of each shape, on the loop's devices), and
  without ``jax_enable_x64`` it would carry the step agreement's int64 and float64 values
  as 32-bit ones. Keys cost one round trip to process 0 each, need no device, compile
  nothing, and are exact: floats travel as ``float.hex``.

A process that dies is noticed by JAX itself: the service declares a process dead once it
sent no heartbeat for ``heartbeat_timeout_seconds`` (an argument of
``jax.distributed.initialize``; 100 by default) and then terminates every other process
(``SIGABRT``, "Terminating process because the JAX distributed service detected fatal
errors"); where process 0, which hosts the service, dies, the others are terminated at
once. Inside a save, globalstep notices sooner, whatever that timeout: each process of a
distributed manager keeps a heartbeat on the service (:meth:`JaxGroup.keep_alive`, the
one torch.distributed's ranks keep on their Store: :mod:`globalstep._group._heartbeat`),
and a process waiting for another's part of a save fails it within about 6 s of the
other's last beat, naming it (:meth:`JaxGroup.lost`; the service's ``get_live_nodes``
cannot serve: it returns only once every live process called it, an agreement, not a
look). The survivor's exit then still waits in JAX's shutdown barrier for its heartbeat
timeout: pass ``heartbeat_timeout_seconds=10`` (or less) to ``initialize`` for that too.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from globalstep._errors import ConfigError
from globalstep._group._heartbeat import HEARTBEAT, silent_ranks
from globalstep._group._interface import KeyValueStore, ProcessGroup

__all__ = ["CLIENT_METHODS", "CoordinationStore", "JaxGroup", "client", "jax_group"]

CLIENT_METHODS = (
    "blocking_key_value_get_bytes",
    "key_value_set_bytes",
    "key_value_try_get_bytes",
    "key_value_increment",
    "key_value_delete",
    "wait_at_barrier",
)
"""The coordination client's methods globalstep calls (pinned by the tests)."""

_KEY_ROOT = "globalstep/jax"
_TIMEOUT_SECONDS = 600.0
"""How long a blocking get or a barrier waits for the other processes, by default."""


def _state() -> Any:
    """``jax._src.distributed.global_state``, where jax's distributed module is imported."""
    module = sys.modules.get("jax._src.distributed")
    return getattr(module, "global_state", None)


def _initialised() -> bool:
    """Whether this process's coordination client exists (jax.distributed initialised)."""
    return getattr(_state(), "client", None) is not None


_ALIVE_ROOT = f"{_KEY_ROOT}/alive"
"""The heartbeat counters' keys: ``globalstep/jax/alive/<process>``."""


def client() -> Any:
    """The coordination service's client of this process, checked.

    Raises:
        ConfigError: ``jax.distributed.initialize`` did not run, or this JAX keeps its
            client elsewhere or without the methods globalstep calls.
    """
    import jax._src.distributed as distributed

    found = getattr(getattr(distributed, "global_state", None), "client", None)
    if found is None:
        raise ConfigError(
            "group",
            "needs jax.distributed.initialize(...) to have run in this process",
            "jax",
            hint="Call jax.distributed.initialize(coordinator_address, num_processes, "
            "process_id) before making the Run or the CheckpointManager.",
        )
    missing = [name for name in CLIENT_METHODS if not callable(getattr(found, name, None))]
    if missing:
        import jax

        raise ConfigError(
            "group",
            "needs JAX's coordination client (jax._src.distributed.global_state.client) "
            f"with {', '.join(missing)}, which this JAX does not have",
            jax.__version__,
            hint="Install a JAX globalstep supports (tested with jax 0.10).",
        )
    return found


def _status(err: BaseException) -> str:
    """The status word a ``JaxRuntimeError`` starts with (``NOT_FOUND``, ...)."""
    return str(err).split(":", 1)[0].strip()


class CoordinationStore:
    """JAX's coordination service's key-value store, as a :class:`KeyValueStore`.

    ``compare_set`` is atomic where ``expected`` is ``""`` (the service refuses to set a
    key twice without ``allow_overwrite``: insert-if-absent), the only form globalstep
    uses; another ``expected`` is refused. ``add`` is the service's own increment (the
    value is kept as decimal text, as torch's Store keeps it).

    Args:
        coordination: the coordination client.
        timeout_seconds: how long ``get`` waits for a key.
    """

    def __init__(self, coordination: Any, timeout_seconds: float = _TIMEOUT_SECONDS) -> None:
        self.client = coordination
        self._timeout_ms = max(1, int(timeout_seconds * 1000))

    @staticmethod
    def _bytes(value: str | bytes) -> bytes:
        return value.encode() if isinstance(value, str) else bytes(value)

    def set(self, key: str, value: str | bytes) -> None:
        self.client.key_value_set_bytes(key, self._bytes(value), allow_overwrite=True)

    def get(self, key: str) -> bytes:
        return bytes(self.client.blocking_key_value_get_bytes(key, self._timeout_ms))

    def _try_get(self, key: str) -> bytes | None:
        try:
            return bytes(self.client.key_value_try_get_bytes(key))
        except Exception as err:
            if _status(err) == "NOT_FOUND":
                return None
            raise

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        if self._bytes(expected):
            raise ConfigError(
                "expected",
                "must be '' on JAX's coordination service (insert-if-absent is its only "
                "atomic compare-and-set)",
                expected,
            )
        try:
            self.client.key_value_set_bytes(key, self._bytes(desired), allow_overwrite=False)
        except Exception as err:
            if _status(err) != "ALREADY_EXISTS":
                raise
        return self.get(key)

    def check(self, keys: list[str]) -> bool:
        return all(self._try_get(key) is not None for key in keys)

    def add(self, key: str, amount: int) -> int:
        return int(self.client.key_value_increment(key, int(amount)))

    def delete_key(self, key: str) -> bool:
        existed = self._try_get(key) is not None
        if existed:
            self.client.key_value_delete(key)
        return existed


_JAX_SCOPES: dict[str, int] = {}
"""The key scopes opened on the coordination service, by every JaxGroup of this process."""
_ROUNDS = {"round": 0, "barrier": 0}
"""The collectives' rounds and barriers of this process (every JaxGroup shares them: one
sequence each, the same on every process)."""
_SERVICE: list[Any] = [None]
"""The client the counts above are of: a new ``jax.distributed.initialize`` (after a
``shutdown``) is a new service, without keys, whose counts start again."""


def _current() -> Any:
    """This process's client; the counts started afresh where it is a new one."""
    found = client()
    if found is not _SERVICE[0]:
        _SERVICE[0] = found
        _ROUNDS.update(round=0, barrier=0)
        _JAX_SCOPES.clear()
    return found


class JaxGroup(ProcessGroup):
    """The processes of ``jax.distributed.initialize``; see the module's docstring.

    Args:
        timeout_seconds: how long a collective, a barrier or the store's ``get`` waits
            for the other processes.
    """

    store_name = "jax.distributed's coordination service"
    store_host = "process 0, which hosts the service"

    def __init__(self, timeout_seconds: float = _TIMEOUT_SECONDS) -> None:
        super().__init__(_JAX_SCOPES)
        self.timeout_seconds = timeout_seconds
        self._store: CoordinationStore | None = None

    def _client(self) -> Any:
        return _current()

    @property
    def rank(self) -> int:
        self._client()
        return int(_state().process_id)

    @property
    def world_size(self) -> int:
        self._client()
        return int(_state().num_processes)

    def scope(self, root: str) -> str:
        self._client()  # a new service's scopes count from 1 again
        return super().scope(root)

    def store(self) -> KeyValueStore:
        found = self._client()
        if self._store is None or self._store.client is not found:
            self._store = CoordinationStore(found, self.timeout_seconds)
        return self._store

    def keep_alive(self) -> None:
        """Starts this process's heartbeat on the coordination service (see
        :mod:`globalstep._group._heartbeat`: a daemon thread adding 1 to its counter every
        half second, until the process exits or ``jax.distributed.shutdown``), so that a
        peer waiting inside a save notices this process died within about 6 s, whatever
        ``heartbeat_timeout_seconds`` JAX was given. Nothing on one process."""
        if not _initialised() or self.world_size < 2:
            return
        HEARTBEAT.start(f"{_ALIVE_ROOT}/{self.rank}", self.store, _initialised)

    def lost(self, ranks: Sequence[int]) -> list[int]:
        """The processes of ``ranks`` whose heartbeat stood still for 5 s of this
        process's clock (see :meth:`keep_alive`); none that never beat."""
        wanted = [int(r) for r in ranks]
        if not wanted or not _initialised():
            return []
        self.keep_alive()
        return silent_ranks(self.store(), {r: f"{_ALIVE_ROOT}/{r}" for r in wanted})

    def _exchange(self, value: Any) -> list[Any]:
        """One round of keys: every process's ``value`` (JSON), indexed by rank."""
        store = self.store()
        _ROUNDS["round"] += 1
        done = _ROUNDS["round"]
        rank, world = self.rank, self.world_size
        where = f"{_KEY_ROOT}/round"
        store.set(f"{where}/{done}/{rank}", json.dumps(value))
        values = [
            value if r == rank else json.loads(store.get(f"{where}/{done}/{r}").decode())
            for r in range(world)
        ]
        if done > 2:  # every process set this round's key, so it read the one before last
            self._client().key_value_delete(f"{where}/{done - 2}/{rank}")
        return values

    def all_gather_ints(self, values: Sequence[int]) -> list[list[int]]:
        rows = self._exchange([str(int(v)) for v in values])
        return [[int(v) for v in row] for row in rows]

    def all_gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        rows = self._exchange([float(v).hex() for v in values])
        return [[float.fromhex(v) for v in row] for row in rows]

    def all_reduce_floats(self, values: Sequence[float], op: str) -> list[float]:
        columns = zip(*self.all_gather_floats(values), strict=True)
        return [_reduce(list(column), op) for column in columns]

    def broadcast_int(self, value: int, src: int) -> int:
        return int(self._exchange(str(int(value)))[src])

    def barrier(self) -> None:
        _ROUNDS["barrier"] += 1
        self._client().wait_at_barrier(
            f"{_KEY_ROOT}/barrier/{_ROUNDS['barrier']}", max(1, int(self.timeout_seconds * 1000))
        )


def _reduce(column: list[float], op: str) -> float:
    """``op`` of one column, in rank order (the same on every process); NaN wins."""
    if any(math.isnan(v) for v in column):
        return math.nan
    if op == "sum":
        total = 0.0
        for v in column:
            total += v
        return total
    return float(max(column) if op == "max" else min(column))


_JAX_DEFAULT = JaxGroup()


def jax_group(handle: Any) -> ProcessGroup:
    """The group of ``jax.distributed`` (``handle``: None, or a :class:`JaxGroup`)."""
    if handle is None:
        return _JAX_DEFAULT
    if isinstance(handle, JaxGroup):
        return handle
    raise ConfigError(
        "group",
        "must be None or a JaxGroup where jax.distributed is the engine (JAX has no "
        "subgroups of processes)",
        handle,
    )
