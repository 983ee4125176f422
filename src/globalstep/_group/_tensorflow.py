"""TensorFlow's multi-worker runs as a :class:`~globalstep._group.ProcessGroup`.

A ``tf.distribute.MultiWorkerMirroredStrategy`` made with a ``TF_CONFIG`` naming several
tasks starts, in every worker, TensorFlow's collective server and its *coordination
service* (hosted by the leader, the chief or else worker 0): a key-value store and
barriers every task reaches, and heartbeats through which the service notices a task that
stopped. :class:`TFGroup` is that run as globalstep's process group:

- **rank and world size**: TensorFlow's own id of the task among the chief and the
  workers (``multi_worker_util.id_in_cluster``: the chief 0, worker ``i`` then ``i + 1``;
  with no chief, worker ``i`` is rank ``i``), read from the server definition the strategy
  started the worker with; rank 0 is TensorFlow's chief, the one that writes.
- **the store** (:class:`CoordinationStore`): the coordination service's keys. TensorFlow
  has three key calls, all kept: insert (which refuses a key that exists:
  ``AlreadyExistsError``, atomically, on the service), a blocking get with a timeout in
  milliseconds (``0`` waits for ever), and delete. ``compare_set(key, "", v)`` is that
  insert (the first writer wins, a later one reads the winner's value); ``set`` deletes
  then inserts; ``add`` appends an immutable *claim* (``key#n``: the n-th addition and
  its amount) by inserting the first free ``key#n``, so two ranks adding at once never
  take the same one, and the value is the key's own plus every claim's amount (no lock a
  dead rank could leave held; a ``set`` of a counted key voids the claims made so far,
  ``value@claims``, which ``get`` returns as it is: ``add(key, 0)`` reads the count);
  ``check`` asks without waiting (TensorFlow's get has no "try"), through one background
  thread per key that waits for it: the first ``check`` of a key starts it and asks once
  (a get of at most ``_VERIFY_MS``), a later one answers False from the thread with no
  round trip (``Preemption`` checks once per update) and, once the thread saw the key,
  verifies it still exists with a get that answers in one round trip; a compare-set of an
  existing value takes a per-key claim (``key.lock``, an insert) around its read and
  write (none of globalstep's agreements makes one).
- **the collectives**: rounds of keys on the same service, each rank writing its value
  under ``globalstep/collective/<round>/<rank>`` and reading the others' (floats as
  ``float.hex``: bit for bit), its key of the round before deleted once every rank has
  written the next; the barrier is a round with no value. Not TensorFlow's collectives:
  those are ops the strategy keys itself (group and instance keys in the order its own
  ``strategy.run`` calls them), so an extra all-gather of ours between two of the user's
  would have to take keys from the strategy's private ``CollectiveKeys``; the keys cost a
  round trip on the loopback per rank, made only at a save, an agreement or a reduce.
- **liveness** (:meth:`TFGroup.lost`): the probe TensorFlow's own health check uses
  (``check_collective_ops_peer_health``, a ``GetStatus`` call to the peer's server): a
  dead worker's port refuses at once (``UnavailableError``), a restarted one is another
  incarnation (``FailedPreconditionError``): a dead peer is noticed in well under a
  second, where the coordination service's heartbeats take their timeout (10 s unless
  the strategy's ``configure_coordination_service`` says otherwise) to mark it.

What this relies on of TensorFlow's private API is looked up in one place
(:func:`_context`) and named in the :class:`ConfigError` where it is missing; the tests
pin it (``tests/distributed/test_tf_group.py``).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from globalstep._errors import ConfigError, PeerLostError
from globalstep._group._interface import REDUCE_OPS, KeyValueStore, ProcessGroup

__all__ = ["CoordinationStore", "TFGroup", "server_def", "tf_initialised"]

_CONTEXT_CALLS = (
    "set_config_key_value",
    "get_config_key_value",
    "delete_config_key_value",
    "check_collective_ops_peer_health",
)
"""The private calls of TensorFlow's eager context this module makes."""

_JOBS = ("chief", "worker")
"""The jobs whose tasks are ranks (TensorFlow's ``id_in_cluster`` order)."""

_SLICE_MS = 500
"""The longest blocking get, in milliseconds, between two looks at the peers' liveness."""

_PROBE_MS = 2000
"""How long a liveness probe waits for a peer's answer, in milliseconds (a dead peer's
refused connection answers at once)."""

_TIMEOUT_SECONDS = 1800.0
"""How long a collective or a get waits for a live peer's key (a dead one fails at once)."""

_VERIFY_MS = 50
"""How long a check waits for a key it saw before, in milliseconds (it answers at once
where the key still exists)."""

_WATCH_IDLE_SECONDS = 600.0
"""A check's background thread stops after this long without a check of its key."""


def server_def() -> Any:
    """The server definition TensorFlow's multi-worker collectives were enabled with in
    this process (``MultiWorkerMirroredStrategy`` with a ``TF_CONFIG``), or None. Looks in
    ``sys.modules`` only: TensorFlow is never imported to ask."""
    module = sys.modules.get("tensorflow.python.eager.context")
    context = getattr(module, "_context", None)
    return getattr(context, "_collective_ops_server_def", None)


def tf_initialised() -> bool:
    """Whether this process is a chief or worker of a multi-worker TensorFlow run (a
    one-process TensorFlow user, or a parameter-server cluster, is not)."""
    found = server_def()
    if found is None or found.job_name not in _JOBS:
        return False
    return not any(job.name == "ps" for job in found.cluster.job)


def _context() -> Any:
    """TensorFlow's eager context, checked to have the calls this module makes.

    Raises:
        ConfigError: no multi-worker run, or a TensorFlow without one of the calls.
    """
    module = sys.modules.get("tensorflow.python.eager.context")
    if module is None or not tf_initialised():
        raise ConfigError(
            "group",
            "'tensorflow' needs a tf.distribute.MultiWorkerMirroredStrategy made with a "
            "TF_CONFIG of several tasks",
            None,
        )
    context = module.context()
    missing = [name for name in _CONTEXT_CALLS if not callable(getattr(context, name, None))]
    if missing or getattr(context, "coordination_service", None) is None:
        version = getattr(sys.modules.get("tensorflow"), "__version__", "unknown")
        raise ConfigError(
            "group",
            "'tensorflow' needs TensorFlow's coordination service and its key-value calls "
            f"({', '.join(missing) or 'coordination_service'} missing in TensorFlow {version})",
            version,
            hint="Use a TensorFlow release this globalstep supports (2.16 to 2.21 tested), "
            "with the strategy's coordination service on (the default).",
        )
    return context


def _errors() -> Any:
    from tensorflow.python.framework import errors_impl

    return errors_impl


class CoordinationStore:
    """A :class:`~globalstep._group.KeyValueStore` on TensorFlow's coordination service
    (see the module's docstring for how each call maps onto its three key calls).

    Args:
        context: TensorFlow's eager context (:func:`_context`).
        timeout_seconds: how long :meth:`get` waits for a missing key.
    """

    def __init__(self, context: Any, timeout_seconds: float = _TIMEOUT_SECONDS) -> None:
        self._context = context
        self._timeout = timeout_seconds
        self._errors = _errors()
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._watched: dict[str, float] = {}
        self._claims: dict[str, list[int]] = {}

    @staticmethod
    def _text(value: str | bytes) -> str:
        return value if isinstance(value, str) else bytes(value).decode()

    def _insert(self, key: str, value: str | bytes) -> bool:
        """Inserts ``key``; False where it exists already (the service refuses it)."""
        try:
            self._context.set_config_key_value(key, self._text(value))
        except self._errors.AlreadyExistsError:
            return False
        return True

    def try_get(self, key: str, timeout_ms: int) -> str | None:
        """``key``'s value, or None where it is not set within ``timeout_ms`` (>= 1)."""
        try:
            return str(self._context.get_config_key_value(key, timeout_ms))
        except self._errors.DeadlineExceededError:
            return None

    def set(self, key: str, value: str | bytes) -> None:
        claims = self._claims.get(key)
        if claims is not None:  # a counted key: the claims so far no longer count
            self._read_claims(key, None)
            value = f"{self._text(value)}@{len(claims)}"
        while not self._insert(key, value):
            self.delete_key(key, claims=False)

    def get(self, key: str) -> bytes:
        since = time.monotonic()
        while True:
            found = self.try_get(key, _SLICE_MS)
            if found is not None:
                return found.encode()
            if time.monotonic() - since >= self._timeout:
                raise TimeoutError(
                    f"the key {key!r} was not set within {self._timeout:g} s on TensorFlow's "
                    "coordination service"
                )

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        if not self._text(expected):
            if self._insert(key, desired):
                return self._text(desired).encode()
            return self.get(key)
        lock = f"{key}.lock"
        while not self._insert(lock, "1"):
            time.sleep(0.001)
        try:
            now = self.try_get(key, 1)
            if now == self._text(expected):
                self.set(key, desired)
                return self._text(desired).encode()
            return (now if now is not None else self._text(expected)).encode()
        finally:
            self.delete_key(lock)

    def check(self, keys: list[str]) -> bool:
        now = time.monotonic()
        missing, seen = [], []
        with self._lock:
            for key in keys:
                if key in self._seen:
                    seen.append(key)
                    continue
                started = key in self._watched
                self._watched[key] = now
                if not started:
                    threading.Thread(target=self._watch, args=(key,), daemon=True).start()
                    seen.append(key)  # not watched yet: asked below, as a seen one is
                else:
                    missing.append(key)
        if missing:
            return False
        # A key seen once may have been deleted since, and one not watched before may be
        # there already: a get of one that exists answers in a round trip (one that does
        # not waits _VERIFY_MS, once).
        gone = [key for key in seen if self.try_get(key, _VERIFY_MS) is None]
        if gone:
            with self._lock:
                self._seen.difference_update(gone)
        return not gone

    def _watch(self, key: str) -> None:
        """Waits for ``key`` and records it as seen; stops when no one asks any more."""
        try:
            while True:
                if self.try_get(key, _SLICE_MS) is not None:
                    with self._lock:
                        self._seen.add(key)
                        self._watched.pop(key, None)
                    return
                with self._lock:
                    if time.monotonic() - self._watched.get(key, 0.0) > _WATCH_IDLE_SECONDS:
                        self._watched.pop(key, None)
                        return
        except Exception:  # the service is gone (its host died): the key never comes
            with self._lock:
                self._watched.pop(key, None)

    def _read_claims(self, key: str, upto: int | None) -> list[int]:
        """The amounts of ``key``'s claims 1 to ``upto`` (which exist: each read answers in
        a round trip), or, with None, of every claim there is now."""
        claims = self._claims.setdefault(key, [])
        while upto is None or len(claims) < upto:
            name = f"{key}#{len(claims) + 1}"
            amount = self.try_get(name, _VERIFY_MS) if upto is None else self.get(name).decode()
            if amount is None:
                break
            claims.append(int(amount))
        return claims

    def _total(self, key: str, count: int) -> int:
        """``key``'s value after its first ``count`` claims: its own (``value`` or
        ``value@claims``: a set after claims voids those), plus the later claims' amounts."""
        value, _, void = self.get(key).decode().partition("@")
        return int(value) + sum(self._claims[key][int(void or 0) : count])

    def add(self, key: str, amount: int) -> int:
        self._insert(key, "0")  # the key's own value, where it has none yet
        claims = self._read_claims(key, None if amount == 0 else len(self._claims.get(key, [])))
        if amount == 0:
            return self._total(key, len(claims))
        while True:
            n = len(claims) + 1
            if self._insert(f"{key}#{n}", str(int(amount))):
                claims.append(int(amount))
                return self._total(key, n)
            self._read_claims(key, n)  # someone else's claim n: read it, try the next

    def delete_key(self, key: str, *, claims: bool = True) -> bool:
        existed = self.try_get(key, 1) is not None
        self._context.delete_config_key_value(key)
        with self._lock:
            self._seen.discard(key)
        known = self._claims.pop(key, None) if claims else None
        if known is not None:
            n = 1
            while n <= len(known) or self.try_get(f"{key}#{n}", 1) is not None:
                self._context.delete_config_key_value(f"{key}#{n}")
                n += 1
        return existed


_SCOPES: dict[str, int] = {}
_ROUNDS = [0]
"""The key scopes and the collective rounds of this process (every TFGroup's)."""


class TFGroup(ProcessGroup):
    """The chief and workers of a TensorFlow multi-worker run (see the module's docstring).

    Args:
        handle: the ``MultiWorkerMirroredStrategy`` (or None): the group is the run's,
            the same for every strategy of the process.

    Raises:
        ConfigError: this process is not a task of a multi-worker run, or TensorFlow lacks
            a call the group makes.
    """

    store_name = "TensorFlow's coordination service"
    store_host = "rank 0, the chief or else worker 0"

    def __init__(self, handle: Any = None) -> None:
        super().__init__(_SCOPES)
        del handle
        self._context = _context()
        found = server_def()
        tasks = {job.name: sorted(job.tasks) for job in found.cluster.job}
        self._tasks: list[str] = [
            f"/job:{job}/replica:0/task:{index}" for job in _JOBS for index in tasks.get(job, [])
        ]
        self._rank = self._tasks.index(f"/job:{found.job_name}/replica:0/task:{found.task_index}")
        self._store = CoordinationStore(self._context)
        self._lost: set[int] = set()

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return len(self._tasks)

    def store(self) -> KeyValueStore:
        return self._store

    def lost(self, ranks: Sequence[int]) -> list[int]:
        errors = _errors()
        for rank in ranks:
            if rank == self._rank or rank in self._lost:
                continue
            try:
                self._context.check_collective_ops_peer_health(self._tasks[rank], _PROBE_MS)
            except (errors.UnavailableError, errors.FailedPreconditionError):
                self._lost.add(rank)
            except errors.DeadlineExceededError:
                pass  # alive but slow to answer: not known dead
        return sorted(set(ranks) & self._lost)

    def _read(self, key: str, rank: int) -> str:
        """Rank ``rank``'s ``key``, waited for; its death is noticed at the next slice."""
        since = time.monotonic()
        while True:
            found = self._store.try_get(key, _SLICE_MS)
            if found is not None:
                return found
            if self.lost([rank]):
                raise PeerLostError(
                    f"rank {rank} of the TensorFlow run ({self._tasks[rank]}) died: its "
                    f"server refuses connections; rank {self._rank} cannot go on",
                    [rank],
                )
            if time.monotonic() - since >= _TIMEOUT_SECONDS:
                raise TimeoutError(f"rank {rank} did not set {key!r} within {_TIMEOUT_SECONDS} s")

    def _exchange(self, value: Any) -> list[Any]:
        """One collective round: every rank's ``value`` (JSON), indexed by rank."""
        _ROUNDS[0] += 1
        round_ = _ROUNDS[0]
        root = "globalstep/collective"
        mine = json.dumps(value)
        self._store.set(f"{root}/{round_}/{self._rank}", mine)
        values = [
            json.loads(mine if r == self._rank else self._read(f"{root}/{round_}/{r}", r))
            for r in range(self.world_size)
        ]
        # Every rank wrote this round's key, so every rank is past reading the last one's.
        if round_ > 1:
            self._context.delete_config_key_value(f"{root}/{round_ - 1}/{self._rank}")
        return values

    def all_gather_ints(self, values: Sequence[int]) -> list[list[int]]:
        return [[int(v) for v in row] for row in self._exchange([int(v) for v in values])]

    def all_gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        rows = self._exchange([float(v).hex() for v in values])
        return [[float.fromhex(v) for v in row] for row in rows]

    def all_reduce_floats(self, values: Sequence[float], op: str) -> list[float]:
        if op not in REDUCE_OPS:
            raise ConfigError("op", f"must be one of {REDUCE_OPS}", op)
        rows = self.all_gather_floats(values)
        out = []
        for column in zip(*rows, strict=True):
            total = column[0]
            for value in column[1:]:
                total = (
                    total + value if op == "sum" else (max if op == "max" else min)(total, value)
                )
            out.append(float(total))
        return out

    def broadcast_int(self, value: int, src: int) -> int:
        return int(self._exchange(int(value))[src])

    def barrier(self) -> None:
        self._exchange(None)


_DEFAULT: list[TFGroup] = []


def group(handle: Any = None) -> ProcessGroup:
    """The run's :class:`TFGroup` (one per process: the engine's ``group``)."""
    if not _DEFAULT:
        _DEFAULT.append(TFGroup(handle))
    return _DEFAULT[0]
