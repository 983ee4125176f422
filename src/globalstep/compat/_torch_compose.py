"""``ChainedScheduler`` and ``SequentialLR``: several compat torch schedulers on one optimizer.

``ChainedScheduler`` applies every part's update in turn to the rate the previous part left,
each step, as PyTorch does when several schedulers step one optimizer (their factors
multiply); ``SequentialLR`` hands over at milestones. Both replay torch's recursion, so
they equal it bit for bit (see :mod:`globalstep.compat._torch_base`).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar, TypeGuard

from globalstep._errors import ConfigError
from globalstep.compat._torch_base import TorchSchedule, call_reached
from globalstep.compat._torch_cyclic import SWALR, CyclicLR, OneCycleLR
from globalstep.compat._torch_plateau import ReduceLROnPlateau
from globalstep.schedules import Schedule

__all__ = ["ChainedScheduler", "SequentialLR"]


def _check_parts(name: str, schedulers: Any, composite_ok: bool) -> tuple[TorchSchedule, ...]:
    if isinstance(schedulers, ReduceLROnPlateau) or (
        isinstance(schedulers, Sequence)
        and any(isinstance(s, ReduceLROnPlateau) for s in schedulers)
    ):
        raise ConfigError(
            "schedulers",
            f"must not hold a ReduceLROnPlateau ({name} cannot pass it a metric; torch "
            "raises ValueError too)",
            schedulers,
            "Step the ReduceLROnPlateau on its own and multiply the two rates.",
        )
    parts = tuple(schedulers) if isinstance(schedulers, Sequence) else ()
    if not parts or not all(isinstance(s, TorchSchedule) for s in parts):
        raise ConfigError(
            "schedulers", "must be a non-empty list of compat.torch schedulers", schedulers
        )
    for s in parts:
        if s.interval not in (1, "step"):
            raise ConfigError(
                "schedulers",
                f"must step with the {name} (interval=1); got a part with interval={s.interval!r}",
                schedulers,
                f"Set interval on the {name} itself.",
            )
        if not composite_ok and isinstance(s, ChainedScheduler | SequentialLR):
            raise ConfigError(
                "schedulers",
                f"must not hold a ChainedScheduler or SequentialLR (torch raises "
                f"NotImplementedError when a {name} hands over to one)",
                schedulers,
            )
    # Every base_lr is the optimizer's rate (CyclicLR's is its cycle's floor instead).
    bases = {p.base_lr for p in parts if "base_lr" in p.__dataclass_fields__ and p.base_is_rate}
    if len(bases) > 1:
        raise ConfigError(
            "schedulers",
            "must share one base_lr (the optimizer's rate)",
            sorted(bases),
            "Give every part the optimizer's lr as base_lr.",
        )
    return parts


@dataclasses.dataclass(frozen=True, repr=False)
class _SWALRAhead(SWALR):
    """A SWALR one step ahead of its chain: SWALR counts its steps in ``_step_count``,
    which torch's SequentialLR does not undo, so in a ChainedScheduler first in a
    SequentialLR its step ``k`` computes what its step ``k + 1`` would."""

    def zero_rate(self, lr: float) -> float:
        return SWALR.next_rate(self, lr, 1)

    def next_rate(self, lr: float, k: int) -> float:
        return SWALR.next_rate(self, lr, k + 1)

    def closed_form(self, k: int) -> float:
        return SWALR.closed_form(self, k + 1)


def _ahead(chain: ChainedScheduler) -> ChainedScheduler:
    """``chain`` with its SWALR parts one step ahead (see :class:`_SWALRAhead`)."""
    parts = chain.schedulers
    if not any(type(p) is SWALR for p in parts):
        return chain
    moved = [_SWALRAhead(**_fields(p)) if type(p) is SWALR else p for p in parts]
    return ChainedScheduler(moved, interval=chain.interval)


def _fields(part: TorchSchedule) -> dict[str, Any]:
    return {f.name: getattr(part, f.name) for f in dataclasses.fields(part)}


def _is_chain(part: TorchSchedule) -> TypeGuard[ChainedScheduler]:
    return isinstance(part, ChainedScheduler)


def _holds_sequential(part: Schedule) -> bool:
    return isinstance(part, SequentialLR) or any(_holds_sequential(p) for p in part.parts())


def _rate_based(part: TorchSchedule) -> bool:
    return "base_lr" in part.__dataclass_fields__ and part.base_is_rate


def _as_constructed(
    parts: tuple[TorchSchedule, ...],
) -> tuple[tuple[TorchSchedule, ...], tuple[float | None, ...], float | None]:
    """The parts as torch computes them once all are constructed on one optimizer.

    Torch constructs the parts one after the other on the same param group, and some write
    into it: ``OneCycleLR`` sets ``group["initial_lr"]`` (the base every scheduler
    constructed after it reads) and ``max_lr``/``min_lr``/momentum bounds (which every
    ``OneCycleLR`` reads back at each step, so the last one constructed wins); ``CyclicLR``
    sets the rate, and its first step still uses the ``initial_lr`` an earlier part set.

    Returns:
        (the parts with those values substituted, each part's first rate where it is not its
        own ``first_rate`` (else None), the group's ``initial_lr`` after all constructions).
    """
    group: dict[str, Any] = {}
    for part in parts:
        if isinstance(part, OneCycleLR):
            group.update(
                max_lr=part.max_lr,
                div_factor=part.div_factor,
                final_div_factor=part.final_div_factor,
            )
        if isinstance(part, OneCycleLR | CyclicLR) and part.cycle_momentum:
            group.update(base_momentum=part.base_momentum, max_momentum=part.max_momentum)
    initial: float | None = None
    out: list[TorchSchedule] = []
    firsts: list[float | None] = []
    for part in parts:
        first: float | None = None
        if isinstance(part, OneCycleLR):
            initial = part.max_lr / part.div_factor
            changes = {k: v for k, v in group.items() if getattr(part, k) != v}
            if changes and not part.cycle_momentum:
                changes.pop("base_momentum", None)
                changes.pop("max_momentum", None)
            if changes:
                part = dataclasses.replace(part, **changes)
        elif isinstance(part, CyclicLR):
            if initial is None:
                initial = part.base_lr
            else:  # its first step runs before it records its own base_lr
                first = initial + (part.max_lr - initial) * 0.0
        elif _rate_based(part):
            if initial is None:
                initial = part.initial_lr
            elif part.initial_lr != initial:
                rebased: dict[str, Any] = {"base_lr": initial}
                part = dataclasses.replace(part, **rebased)
        out.append(part)
        firsts.append(first)
    return tuple(out), tuple(firsts), initial


def _last_momentum(parts: Sequence[TorchSchedule], k: int) -> float | None:
    for part in reversed(parts):
        if part.has_momentum:
            return part.momentum_at(k)
    return None


@dataclasses.dataclass(frozen=True)
class ChainedScheduler(TorchSchedule):
    """Several schedulers stepped on one optimizer: each step applies every part's update,
    in order, to the rate the previous part left (PyTorch's chaining: the factors multiply).

    Every part's ``base_lr`` is the optimizer's rate, so the parts must agree on it. What
    torch's constructors write into the shared param group is replayed too: a part after a
    ``OneCycleLR`` takes ``max_lr / div_factor`` as its base, as in torch.

    Example:
        >>> from globalstep.compat.torch import ConstantLR, ExponentialLR
        >>> warm = ConstantLR(base_lr=1.0, factor=0.5, total_iters=2)
        >>> decay = ExponentialLR(base_lr=1.0, gamma=0.5)
        >>> ChainedScheduler([warm, decay]).values([0, 1, 2, 3]).tolist()
        [0.5, 0.25, 0.25, 0.125]
    """

    __call__ = call_reached  # computes no step ahead where it calls user code

    schedulers: Sequence[TorchSchedule]

    _parts: ClassVar[tuple[TorchSchedule, ...]]  # per instance: as torch computes them
    _firsts: ClassVar[tuple[float | None, ...]]

    def _check(self) -> None:
        parts = _check_parts("ChainedScheduler", self.schedulers, composite_ok=True)
        object.__setattr__(self, "schedulers", parts)

    def _prepare(self) -> None:
        parts, firsts, _ = _as_constructed(tuple(self.schedulers))
        object.__setattr__(self, "_parts", parts)
        object.__setattr__(self, "_firsts", firsts)

    def parts(self) -> tuple[Schedule, ...]:
        """The chained schedulers."""
        return tuple(self.schedulers)

    @property
    def initial_lr(self) -> float:
        """The optimizer's rate: the parts' shared base_lr."""
        parts = self.schedulers
        return next((p.initial_lr for p in parts if _rate_based(p)), parts[0].initial_lr)

    def first_rate(self, lr: float) -> float:
        for part, first in zip(self._parts, self._firsts, strict=True):
            lr = part.first_rate(lr) if first is None else first
        return lr

    def next_rate(self, lr: float, k: int) -> float:
        for part in self._parts:
            lr = part.next_rate(lr, k)
        return lr

    def zero_rate(self, lr: float) -> float:
        for part in self._parts:
            lr = part.zero_rate(lr)
        return lr

    def closed_form(self, k: int) -> float:
        # Past the kept steps: the parts' closed forms, multiplied as factors of the base.
        lr = self.initial_lr
        for part in self._parts:
            base = part.initial_lr
            lr = (
                part.closed_form(k)
                if part.absolute_rate or base == 0
                else (lr * (part.closed_form(k) / base))
            )
        return lr

    def momentum_at(self, k: int) -> float | None:
        return _last_momentum(self._parts, k)

    @property
    def has_momentum(self) -> bool:
        """True when a part cycles momentum."""
        return any(p.has_momentum for p in self.schedulers)


@dataclasses.dataclass(frozen=True)
class SequentialLR(TorchSchedule):
    """Runs ``schedulers[i]`` from ``milestones[i - 1]`` on, each restarted at its milestone
    (from its closed form at 0, as torch's ``_update_lr(0)``), then stepped on from there.

    A ``ChainedScheduler`` may come first (or after a milestone at step 0), as in torch:
    its parts start from the reset rate with a plain step each. Torch cannot restart one
    at a later milestone (``NotImplementedError``), so that is refused here when built.

    The first scheduler starts from ``group["initial_lr"]`` as torch resets it, which a
    ``OneCycleLR`` anywhere in the list has set to its ``max_lr / div_factor``.

    Example:
        >>> from globalstep.compat.torch import ExponentialLR, LinearLR
        >>> warm = LinearLR(base_lr=1.0, start_factor=0.5, total_iters=2)
        >>> decay = ExponentialLR(base_lr=1.0, gamma=0.5)
        >>> SequentialLR((warm, decay), milestones=(2,)).values([0, 1, 2, 3]).tolist()
        [0.5, 0.75, 1.0, 0.5]
    """

    __call__ = call_reached  # computes no step ahead where it calls user code

    schedulers: Sequence[TorchSchedule]
    milestones: Sequence[int | str]

    _lengths: ClassVar[dict[str, int]] = {"milestones": 0}
    _sequences: ClassVar[frozenset[str]] = frozenset({"milestones"})
    _ms: ClassVar[tuple[int, ...]]  # per instance: the milestones in steps
    _parts: ClassVar[tuple[TorchSchedule, ...]]  # per instance: as torch computes them
    _start: ClassVar[float]  # the rate torch resets to: group["initial_lr"]

    def _check(self) -> None:
        parts = _check_parts("SequentialLR", self.schedulers, composite_ok=True)
        for part in parts:
            if _holds_sequential(part):
                raise ConfigError(
                    "schedulers",
                    "must not hold a SequentialLR (torch's SequentialLR does not undo a "
                    "nested one's first step, so its milestones move by one step; torch "
                    "raises NotImplementedError where one takes over at a milestone)",
                    self.schedulers,
                    "Flatten the two into one SequentialLR with all the milestones.",
                )
        ms = self.milestones
        if not isinstance(ms, Sequence) or isinstance(ms, str) or len(ms) != len(parts) - 1:
            raise ConfigError(
                "milestones",
                f"must hold len(schedulers) - 1 = {len(parts) - 1} steps (torch raises "
                "ValueError too)",
                ms,
            )
        object.__setattr__(self, "schedulers", parts)
        object.__setattr__(self, "milestones", tuple(ms))

    def _prepare(self) -> None:
        ms = self._n["milestones"]
        if list(ms) != sorted(ms):
            raise ConfigError(
                "milestones",
                "must be in increasing order (torch bisects them as a sorted list)",
                self.milestones,
            )
        for index, part in enumerate(self.schedulers):
            if index and _is_chain(part) and ms[index - 1] > 0:
                raise ConfigError(
                    "schedulers",
                    f"must not hold a ChainedScheduler after a milestone (torch raises "
                    f"NotImplementedError when SequentialLR hands over to one, here at step "
                    f"{ms[index - 1]})",
                    self.schedulers,
                    "Put the ChainedScheduler first, or chain the SequentialLR instead.",
                )
        object.__setattr__(self, "_ms", ms)
        # Torch constructs a chain's parts on the optimizer before the chain: what they
        # write into the param group (OneCycleLR's initial_lr) is what later parts read.
        flat = tuple(p for s in self.schedulers for p in (s.schedulers if _is_chain(s) else (s,)))
        built, _, initial = _as_constructed(flat)
        parts: list[TorchSchedule] = []
        for s in self.schedulers:
            size = len(s.schedulers) if _is_chain(s) else 1
            parts.append(_ahead(s) if _is_chain(s) else built[0])
            built = built[size:]
        object.__setattr__(self, "_parts", tuple(parts))
        object.__setattr__(self, "_start", self.initial_lr if initial is None else initial)

    def parts(self) -> tuple[Schedule, ...]:
        """The schedulers, in order."""
        return tuple(self.schedulers)

    @property
    def initial_lr(self) -> float:
        return self.schedulers[0].initial_lr

    def first_rate(self, lr: float) -> float:
        # torch resets the rate to group["initial_lr"], as the constructors left it, undoes
        # every part's first step and takes the first step of the part active at step 0;
        # a ChainedScheduler's parts then take theirs as a plain step() (not in the
        # constructor's mode), each from the rate the one before it left.
        part = self._parts[bisect.bisect_right(self._ms, 0)]
        if isinstance(part, ChainedScheduler):
            return part.zero_rate(self._start)
        return part.first_rate(self._start)

    def _where(self, k: int) -> tuple[int, int]:
        """(the active part, its own step count) at step ``k``."""
        index = bisect.bisect_right(self._ms, k)
        return index, k - (self._ms[index - 1] if index else 0)

    def next_rate(self, lr: float, k: int) -> float:
        index, local = self._where(k)
        part = self._parts[index]
        return part.restart_rate(lr) if index and local == 0 else part.next_rate(lr, local)

    def closed_form(self, k: int) -> float:
        index, local = self._where(k)
        return self._parts[index].closed_form(local)

    def momentum_at(self, k: int) -> float | None:
        index, local = self._where(k)
        parts = self._parts
        if parts[index].has_momentum:
            return parts[index].momentum_at(local)
        for j in range(index - 1, -1, -1):  # the last part that wrote it, at its last step
            last = self._ms[j] - (self._ms[j - 1] if j else 0) - 1
            if parts[j].has_momentum and last >= 0:
                return parts[j].momentum_at(last)
        # Only the constructors wrote it: the last one constructed wins.
        return _last_momentum(parts, 0)

    @property
    def has_momentum(self) -> bool:
        """True when a part cycles momentum."""
        return any(p.has_momentum for p in self.schedulers)
