"""Several processes: steps that agree across ranks, one writer rank, reduced metrics, and
a shared step counter on the torch.distributed store.

With data parallelism (DDP, FSDP) every rank applies the same updates, so every rank's
:class:`~globalstep._clock.Clock` must show the same step; a rank that skips a tick (an
update skipped on one rank only, a rank restored from another checkpoint) drifts silently
until its schedules, checkpoints and curves disagree with the others'.
:func:`assert_steps_agree` gathers every rank's step in one small collective and raises
:class:`~globalstep._errors.StepMismatchError` naming the ranks that differ;
:class:`StepAgreement` runs it every N calls. :func:`rank`, :func:`world_size` and
:func:`is_writer` pick the one rank that logs and commits; :func:`reduce_metrics` averages
(or sums, ...) scalars across ranks before that rank writes them. :class:`Preemption`
(from :mod:`globalstep.distributed`) stops every rank at one common update when any rank
receives a stop signal.

With asynchronous workers the ranks do not share updates; each takes the next step index
from a :class:`SharedStepCounter` on a store every worker reaches (:func:`store`:
torch.distributed's, or TensorFlow's coordination service), so that each index is handed
to exactly one worker.

Everything here works, as a no-op where that is the meaning, without a process group (one
process: rank 0 of 1). The group itself (who this rank is, the collectives, the store) is
:mod:`globalstep._group`'s: every ``group`` argument here is a torch.distributed group
(None: the default one) or a ``globalstep._group.ProcessGroup``. torch is imported only by
the calls that need it, and only when a process group is initialised; ``import globalstep``
never imports it.

Example:
    One process in a gloo group of one (a run under ``torchrun`` has several):

    >>> import torch.distributed as dist
    >>> from globalstep import Clock
    >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    >>> clock = Clock()
    >>> clock.tick(5)
    >>> assert_steps_agree(clock)
    5
    >>> rank(), world_size(), is_writer()
    (0, 1, True)
    >>> reduce_metrics({"loss": 0.5, "correct": 3}, op="sum")
    {'loss': 0.5, 'correct': 3.0}
    >>> dist.destroy_process_group()
"""

from __future__ import annotations

import collections
import sys
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, cast

from globalstep import _group
from globalstep._clock import MAX_STEP, Clock
from globalstep._errors import ConfigError, StepMismatchError
from globalstep.distributed._preemption import Preemption

__all__ = [
    "REDUCE_OPS",
    "Preemption",
    "SharedStepCounter",
    "StepAgreement",
    "assert_steps_agree",
    "broadcast_int",
    "gather_floats",
    "is_writer",
    "rank",
    "reduce_metrics",
    "world_size",
]

REDUCE_OPS = ("max", "mean", "min", "sum")
"""The operations :func:`reduce_metrics` knows."""


def initialised() -> bool:
    """Returns whether a process group exists in this process: torch.distributed's
    default group, or a TensorFlow multi-worker run (its ``MultiWorkerMirroredStrategy``).

    Cheap and safe without torch or TensorFlow: where a framework has not been imported
    no group of it can exist, so nothing is imported to ask. :class:`~globalstep.run.Run`
    asks it once, to choose between every rank saving (a group exists) and the writer rank
    alone saving (ranks known only from torchrun's environment variables).
    """
    return _group.initialised()


def store(group: Any = None) -> Any:
    """Returns the key-value store every rank of ``group`` (default: the whole run)
    reaches: torch.distributed's default Store, jax.distributed's coordination service,
    or TensorFlow's on a multi-worker run; this process's own where no group is
    initialised. What a
    :class:`SharedStepCounter` takes.

    Example:
        >>> counter = SharedStepCounter(store(), "doctest/steps")
        >>> counter.next(), counter.next()
        (0, 1)
    """
    return _group.active(group).store()


def rank(group: Any = None) -> int:
    """Returns this process's rank: in ``group`` (default: the whole run) once a process
    group is initialised, else the ``RANK`` that torchrun sets, else 0.

    Raises:
        ConfigError: ``RANK`` is set but is not an int >= 0.

    Example:
        >>> rank()
        0
    """
    return _group.active(group).rank


def world_size(group: Any = None) -> int:
    """Returns the number of processes: in ``group`` (default: the whole run) once a
    process group is initialised, else the ``WORLD_SIZE`` that torchrun sets, else 1.

    Raises:
        ConfigError: ``WORLD_SIZE`` is set but is not an int >= 1.

    Example:
        >>> world_size()
        1
    """
    return _group.active(group).world_size


def is_writer(writer_rank: int = 0, group: Any = None) -> bool:
    """Returns whether this process is the one that writes (summaries, progress, commits).

    Args:
        writer_rank: the rank that writes, in ``[0, world_size)``.
        group: the process group; default the whole run.

    Raises:
        ConfigError: ``writer_rank`` is not an int in ``[0, world_size)``.

    Example:
        >>> is_writer(), is_writer(0)
        (True, True)
    """
    return _group.active(group).is_writer(writer_rank)


def _ranks_text(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def assert_steps_agree(clock: Clock | int, group: Any = None) -> int:
    """Raises unless every rank's step equals this rank's; returns the step.

    Every rank of ``group`` must call it at the same point of the loop (it is a
    collective: one ``all_gather`` of one int64 per rank). Call it after the same number
    of updates on every rank, not from a trigger of steps: a rank whose step lags fires
    such a trigger one update late, where its collective would meet the others' next one.
    :class:`StepAgreement` counts the calls for you. Without a process group it returns the
    step at once.

    Args:
        clock: this rank's clock, or its step as an int.
        group: the process group; default the whole run.

    Returns:
        The step, the same on every rank.

    Raises:
        StepMismatchError: the steps differ; raised on every rank, naming each rank whose
            step differs from the most common one (ties: rank 0's side), with its step.
        ConfigError: ``clock`` is neither a Clock nor an int step.

    Example:
        >>> assert_steps_agree(7)  # no process group: one process agrees with itself
        7
    """
    if isinstance(clock, Clock):
        step = clock.step
    elif isinstance(clock, int) and not isinstance(clock, bool) and 0 <= clock <= MAX_STEP:
        step = clock
    else:
        raise ConfigError("clock", "must be a globalstep Clock or an int step >= 0", clock)
    ranks = _group.active(group)
    if not ranks.connected:
        return step
    steps = [row[0] for row in ranks.all_gather_ints([step])]
    counts = collections.Counter(steps)
    common = counts.most_common(1)[0][0]  # ties: the step seen first, i.e. at the lowest rank
    if len(counts) == 1:
        return step
    odd = [r for r, s in enumerate(steps) if s != common]
    agreeing = [r for r, s in enumerate(steps) if s == common]
    parts = [f"rank {r} is at step {steps[r]}" for r in odd]
    raise StepMismatchError(
        f"the ranks' steps disagree: {', '.join(parts)}, while {_ranks_text(agreeing)} "
        f"{'is' if len(agreeing) == 1 else 'are'} at step {common} (steps by rank: {steps}). "
        "Every rank must tick its clock once per update: look for an update skipped or "
        "repeated on one rank only, or a rank restored from another checkpoint.",
        steps,
        odd,
        common,
    )


class StepAgreement:
    """Runs :func:`assert_steps_agree` every ``every`` calls: call it once per update.

    It counts its calls rather than reading the step, so that every rank checks at the
    same update even when one rank's step lags (a trigger of steps would let the lagging
    rank check one update late, meeting the others' next collective).

    Args:
        every: calls between checks, >= 1; the first check is at call number ``every``.
        group: the process group; default the whole run.

    Raises:
        ConfigError: ``every`` is not an int >= 1.

    Example:
        >>> from globalstep import Clock
        >>> clock, check = Clock(), StepAgreement(every=2)
        >>> checked = []
        >>> for _ in range(4):
        ...     clock.tick()
        ...     checked.append(check(clock))
        >>> checked
        [False, True, False, True]
    """

    def __init__(self, every: int = 100, *, group: Any = None) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigError("every", "must be an int >= 1 (calls between checks)", every)
        self.every = every
        self.group = group
        self.calls = 0

    def __call__(self, clock: Clock | int) -> bool:
        """Counts one call; on every ``every``-th checks the steps. Returns whether it did.

        Raises:
            StepMismatchError: the ranks' steps differ.
        """
        self.calls += 1
        if self.calls % self.every:
            return False
        assert_steps_agree(clock, self.group)
        return True

    def __repr__(self) -> str:
        return f"StepAgreement(every={self.every})"


def _number(tag: str, value: Any) -> float:
    raw = value.item() if hasattr(value, "item") else value
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ConfigError(
            f"metrics[{tag!r}]", "must be a number, NumPy scalar or one-element tensor", value
        )
    return float(raw)


def reduce_metrics(
    metrics: Mapping[str, Any], op: str = "mean", group: Any = None
) -> dict[str, float]:
    """Reduces each scalar across the ranks in one collective; returns them as floats.

    Every rank of ``group`` must call it at the same point with the same tags (in any
    order). Different tags of the same number are caught and raise on every rank; a
    different number of tags is a collective of mismatched sizes, which torch reports (or,
    on some backends, waits on until the process group's timeout). Without a process group
    it returns the values as floats.

    Args:
        metrics: tag to value: numbers, NumPy scalars or one-element tensors.
        op: ``"mean"`` (the default), ``"sum"``, ``"max"`` or ``"min"``.
        group: the process group; default the whole run.

    Returns:
        Tag to reduced value, in the order given.

    Raises:
        ConfigError: ``op`` is unknown, a value is not a number, or the ranks' tags differ.

    Example:
        >>> reduce_metrics({"loss": 0.25}, op="max")
        {'loss': 0.25}
    """
    if op not in REDUCE_OPS:
        raise ConfigError("op", f"must be one of {', '.join(map(repr, REDUCE_OPS))}", op)
    if not isinstance(metrics, Mapping):
        raise ConfigError("metrics", "must be a mapping of tags to numbers", metrics)
    values = {tag: _number(tag, value) for tag, value in metrics.items()}
    ranks = _group.active(group)
    if not ranks.connected:
        return values
    tags = sorted(values)
    # Two extra entries find ranks with other tags in the same collective: a 20-bit hash h
    # of the tags, and h**2 (or -h for max and min). Summed over n ranks, sum(h) == n*h and
    # sum(h**2) == n*h**2 hold only when every rank's h is this rank's (zero variance);
    # max(h) == h and max(-h) == -h likewise. The sums stay exact in float64.
    signature = float(zlib.crc32("\x00".join(tags).encode()) & 0xFFFFF)
    check = -signature if op in ("max", "min") else signature * signature
    reduced = ranks.all_reduce_floats(
        [values[tag] for tag in tags] + [signature, check], "sum" if op == "mean" else op
    )
    size = ranks.world_size
    scale = size if op in ("mean", "sum") else 1
    if reduced[-2] != scale * signature or reduced[-1] != scale * check:
        raise ConfigError(
            "metrics",
            "must have the same tags on every rank",
            tags,
            hint=f"Rank {ranks.rank} has these; another rank has others. Reduce "
            "the same tags everywhere (log rank-specific values without reducing them).",
        )
    out = dict(zip(tags, reduced, strict=False))
    if op == "mean":
        out = {tag: value / size for tag, value in out.items()}
    return {tag: out[tag] for tag in values}


def gather_floats(values: Sequence[float], group: Any = None) -> list[list[float]]:
    """Returns every rank's ``values``, indexed by rank, in one collective.

    Every rank of ``group`` must call it at the same point with as many values (one
    ``all_gather`` of float64; NaN and infinities pass unchanged). The result is the same,
    bit for bit, on every rank, so that a decision taken from it (the rollback of
    :class:`~globalstep.run.Run` on several ranks) is the same everywhere. Without a
    process group it returns ``[values]``.

    Args:
        values: this rank's numbers (floats, ints; the same count on every rank).
        group: the process group; default the whole run.

    Returns:
        One list of floats per rank, rank 0's first.

    Raises:
        ConfigError: ``values`` is not a sequence of numbers.

    Example:
        >>> gather_floats([1.0, float("nan")])
        [[1.0, nan]]
    """
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise ConfigError("values", "must be a sequence of numbers", values)
    mine = []
    for i, value in enumerate(values):
        raw = value.item() if hasattr(value, "item") else value
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise ConfigError(f"values[{i}]", "must be a number (int or float)", value)
        mine.append(float(raw))
    ranks = _group.active(group)
    if not ranks.connected:
        return [mine]
    return ranks.all_gather_floats(mine)


def broadcast_int(value: int, src: int = 0, group: Any = None) -> int:
    """Returns rank ``src``'s ``value`` on every rank, in one collective.

    Every rank of ``group`` must call it at the same point (one ``broadcast`` of one
    int64); what the other ranks pass is ignored. Without a process group it returns
    ``value``.

    Args:
        value: an int in the int64 range (rank ``src``'s is the one returned).
        src: the rank whose value every rank gets (a rank of the whole run).
        group: the process group; default the whole run.

    Raises:
        ConfigError: ``value`` is not an int of the int64 range, or ``src`` is not a rank.

    Example:
        >>> broadcast_int(42)
        42
    """
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise ConfigError("value", "must be an int in the int64 range", value)
    size = world_size()
    if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < size:
        raise ConfigError("src", f"must be a rank, an int in [0, {size})", src)
    ranks = _group.active(group)
    if not ranks.connected:
        return value
    return ranks.broadcast_int(value, src)


_COUNT_LIMIT = 2**62
"""The limit handed to ``ResourceCountUpTo`` (no counter reaches it)."""


class _VariableStore:
    """A counter variable on a parameter server (a ``tf.Variable`` made in
    ``ParameterServerStrategy.scope()``) as the three calls :class:`SharedStepCounter`
    makes. Taking an index is TensorFlow's ``ResourceCountUpTo`` (TF 1's
    ``Variable.count_up_to``): one kernel that increments the variable under its lock and
    returns the value before, on the variable's device, so each index goes to one caller,
    whichever worker's function takes it (``assign_add`` then a read would be two ops,
    between which another function's ``assign_add`` can run: two callers, one index)."""

    def __init__(self, variable: Any) -> None:
        self.variable = variable
        self._count_up: Any = None

    def add(self, key: str, amount: int) -> Any:
        del key
        if amount == 0:
            return self.variable.read_value()
        if amount != 1:  # pragma: no cover - SharedStepCounter adds 0 or 1
            raise ConfigError("amount", "must be 0 or 1 on a variable", amount)
        if self._count_up is None:  # a function of its own: eager calls need one too
            tf = sys.modules["tensorflow"]
            variable = self.variable

            def count_up() -> Any:
                return tf.raw_ops.ResourceCountUpTo(
                    resource=variable.handle, limit=_COUNT_LIMIT, T=variable.dtype
                )

            self._count_up = tf.function(count_up)
        return self._count_up() + 1

    def set(self, key: str, value: str) -> None:
        del key
        self.variable.assign(int(value))

    def compare_set(self, key: str, expected: str, desired: str) -> None:
        del key, expected, desired  # the variable was made with its first value


def _counter_store(store: Any) -> Any:
    """The store a :class:`SharedStepCounter` adds to, for each form ``store`` takes."""
    if isinstance(store, _group.ProcessGroup | str):
        return _group.active(store).store()
    if callable(getattr(store, "assign_add", None)) and callable(getattr(store, "assign", None)):
        dtype = str(getattr(getattr(store, "dtype", None), "name", ""))
        if dtype not in {"int64", "int32"}:
            raise ConfigError(
                "store",
                "must be an integer variable (tf.int64) where it is a tf.Variable",
                dtype or store,
                hint="Make it with tf.Variable(0, dtype=tf.int64, trainable=False) in "
                "strategy.scope().",
            )
        return _VariableStore(store)
    for method in ("add", "set", "compare_set"):
        if not callable(getattr(store, method, None)):
            raise ConfigError(
                "store",
                "must be a key-value store (a torch.distributed Store: TCPStore, FileStore, "
                'HashStore, ...), a process group or its engine\'s name ("jax", '
                '"tensorflow", "torch"), or a tf.Variable on a parameter server',
                store,
            )
    return store


class SharedStepCounter:
    """Unique step indices for asynchronous workers, from a key-value store every worker
    reaches, or a variable on a parameter server.

    Each :meth:`next` is one atomic ``add`` on the store: across every process connected
    to it, each index is handed to exactly one caller, in increasing order: TensorFlow's
    parameter-server semantics, where each step index happens on exactly one worker. A
    worker that dies loses only the indices it took and had not finished; the others never
    see them again and go on with the rest.

    The counter is state: put it in a checkpoint tree (its state is one int in
    state.json, the next index to hand out). Restoring sets the store's value, so restore
    before any worker takes an index (all workers restoring the same checkpoint set the
    same value), or restore on one worker and let the others wait at a barrier. Indices
    taken after the checkpoint was saved are handed out again after a restore, as the
    updates they stood for are lost with it; indices taken before it but not finished
    then are lost, never repeated.

    Args:
        store: where the count lives, one of: a ``torch.distributed.Store``
            (``TCPStore``, ``FileStore``, ``HashStore``, ``PrefixStore``) every worker
            connects to; a process group, or its engine's name (``"jax"``,
            ``"tensorflow"``, ``"torch"``), whose key-value store every process reaches
            (jax.distributed's and TensorFlow's coordination services: no torch); or an
            integer ``tf.Variable`` made in a ``ParameterServerStrategy``'s scope (it lives
            on a parameter server; inside a function the coordinator schedules on a
            worker, :meth:`next` is then a scalar tensor, the index that function took).
        key: the store key that holds the count; one per counter (unused for a variable).
        start: the first index, used only by the worker that creates the key (a
            variable starts at its own value).

    Raises:
        ConfigError: ``key`` is empty, ``start`` is not an int >= 0, or ``store`` is none
            of the above.

    Example:
        >>> import torch.distributed as dist
        >>> counter = SharedStepCounter(dist.HashStore(), "steps")
        >>> [counter.next() for _ in range(3)], counter.value
        ([0, 1, 2], 3)
        >>> counter.state_dict()
        {'next': 3}
    """

    def __init__(self, store: Any, key: str, *, start: int = 0) -> None:
        if not isinstance(key, str) or not key:
            raise ConfigError("key", "must be a non-empty string", key)
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < MAX_STEP:
            raise ConfigError("start", "must be an int >= 0", start)
        store = _counter_store(store)
        self.store = store
        self.key = key
        self.start = start
        # Set only where the key is missing: workers made later keep the count.
        store.compare_set(key, "", str(start))

    def next(self) -> int:
        """Takes the next step index: no other worker ever gets the same one (inside a
        ``tf.function`` on a variable: the index as a scalar tensor)."""
        taken = self.store.add(self.key, 1)
        try:
            return int(taken) - 1
        except TypeError:  # a symbolic tensor: the function's own index, when it runs
            return cast(int, taken - 1)

    @property
    def value(self) -> int:
        """The next index to be handed out (every index below it has been taken)."""
        return int(self.store.add(self.key, 0))

    def state_dict(self) -> dict[str, int]:
        """Returns ``{"next": value}``, for a checkpoint."""
        return {"next": self.value}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Sets the store's count from :meth:`state_dict`'s output.

        Raises:
            ConfigError: the state is not ``{"next": int >= 0}``.
        """
        value = state.get("next") if isinstance(state, Mapping) else None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_STEP:
            raise ConfigError("state", "must be {'next': int >= 0}, as state_dict() returns", state)
        self.store.set(self.key, str(value))

    def __repr__(self) -> str:
        return f"SharedStepCounter(key={self.key!r}, value={self.value})"
