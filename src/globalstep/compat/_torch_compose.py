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
from typing import Any, ClassVar

from globalstep.compat._torch_base import TorchSchedule
from globalstep.compat._torch_plateau import ReduceLROnPlateau
from globalstep.errors import ConfigError
from globalstep.schedules._base import Schedule

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
    bases = {p.base_lr for p in parts if "base_lr" in p.__dataclass_fields__ and p._rate_base}
    if len(bases) > 1:
        raise ConfigError(
            "schedulers",
            "must share one base_lr (the optimizer's rate)",
            sorted(bases),
            "Give every part the optimizer's lr as base_lr.",
        )
    return parts


def _last_momentum(parts: Sequence[TorchSchedule], k: int) -> float | None:
    for part in reversed(parts):
        if part.has_momentum:
            return part._momentum(k)
    return None


@dataclasses.dataclass(frozen=True)
class ChainedScheduler(TorchSchedule):
    """Several schedulers stepped on one optimizer: each step applies every part's update,
    in order, to the rate the previous part left (PyTorch's chaining: the factors multiply).

    Every part's ``base_lr`` is the optimizer's rate, so the parts must agree on it.

    Example:
        >>> from globalstep.compat.torch import ConstantLR, ExponentialLR
        >>> warm = ConstantLR(base_lr=1.0, factor=0.5, total_iters=2)
        >>> decay = ExponentialLR(base_lr=1.0, gamma=0.5)
        >>> ChainedScheduler([warm, decay]).values([0, 1, 2, 3]).tolist()
        [0.5, 0.25, 0.25, 0.125]
    """

    schedulers: Sequence[TorchSchedule]

    def _check(self) -> None:
        parts = _check_parts("ChainedScheduler", self.schedulers, composite_ok=True)
        object.__setattr__(self, "schedulers", parts)

    def parts(self) -> tuple[Schedule, ...]:
        """The chained schedulers."""
        return tuple(self.schedulers)

    @property
    def _base_lr(self) -> float:
        return self.schedulers[0]._base_lr

    def _first(self, lr: float) -> float:
        for part in self.schedulers:
            lr = part._first(lr)
        return lr

    def _next(self, lr: float, k: int) -> float:
        for part in self.schedulers:
            lr = part._next(lr, k)
        return lr

    def _closed(self, k: int) -> float:
        # Past the kept steps: the parts' closed forms, multiplied as factors of the base.
        lr = self._base_lr
        for part in self.schedulers:
            base = part._base_lr
            lr = part._closed(k) if part._absolute or base == 0 else (lr * (part._closed(k) / base))
        return lr

    def _momentum(self, k: int) -> float | None:
        return _last_momentum(self.schedulers, k)

    @property
    def has_momentum(self) -> bool:
        """True when a part cycles momentum."""
        return any(p.has_momentum for p in self.schedulers)


@dataclasses.dataclass(frozen=True)
class SequentialLR(TorchSchedule):
    """Runs ``schedulers[i]`` from ``milestones[i - 1]`` on, each restarted at its milestone
    (from its closed form at 0, as torch's ``_update_lr(0)``), then stepped on from there.

    Example:
        >>> from globalstep.compat.torch import ExponentialLR, LinearLR
        >>> warm = LinearLR(base_lr=1.0, start_factor=0.5, total_iters=2)
        >>> decay = ExponentialLR(base_lr=1.0, gamma=0.5)
        >>> SequentialLR((warm, decay), milestones=(2,)).values([0, 1, 2, 3]).tolist()
        [0.5, 0.75, 1.0, 0.5]
    """

    schedulers: Sequence[TorchSchedule]
    milestones: Sequence[int | str]

    _lengths: ClassVar[dict[str, int]] = {"milestones": 0}
    _sequences: ClassVar[frozenset[str]] = frozenset({"milestones"})
    _ms: ClassVar[tuple[int, ...]]  # per instance: the milestones in steps

    def _check(self) -> None:
        parts = _check_parts("SequentialLR", self.schedulers, composite_ok=False)
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
        object.__setattr__(self, "_ms", ms)

    def parts(self) -> tuple[Schedule, ...]:
        """The schedulers, in order."""
        return tuple(self.schedulers)

    @property
    def _base_lr(self) -> float:
        return self.schedulers[0]._base_lr

    def _first(self, lr: float) -> float:
        return self.schedulers[bisect.bisect_right(self._ms, 0)]._first(self._base_lr)

    def _where(self, k: int) -> tuple[int, int]:
        """(the active part, its own step count) at step ``k``."""
        index = bisect.bisect_right(self._ms, k)
        return index, k - (self._ms[index - 1] if index else 0)

    def _next(self, lr: float, k: int) -> float:
        index, local = self._where(k)
        part = self.schedulers[index]
        return part._restart(lr) if index and local == 0 else part._next(lr, local)

    def _closed(self, k: int) -> float:
        index, local = self._where(k)
        return self.schedulers[index]._closed(local)

    def _momentum(self, k: int) -> float | None:
        index, local = self._where(k)
        parts = self.schedulers
        if parts[index].has_momentum:
            return parts[index]._momentum(local)
        for j in range(index - 1, -1, -1):  # the last part that wrote it, at its last step
            last = self._ms[j] - (self._ms[j - 1] if j else 0) - 1
            if parts[j].has_momentum and last >= 0:
                return parts[j]._momentum(last)
        # Only the constructors wrote it: the last one constructed wins.
        return _last_momentum(parts, 0)

    @property
    def has_momentum(self) -> bool:
        """True when a part cycles momentum."""
        return any(p.has_momentum for p in self.schedulers)
