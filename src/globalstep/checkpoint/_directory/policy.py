"""Which checkpoints to keep: small, composable retention policies.

Each policy looks at the committed checkpoints (their step, creation time and metrics, as
:class:`CheckpointInfo`) and says which it keeps, and why. :func:`retained` combines them: a
checkpoint is kept when any policy keeps it, and the newest checkpoint is always kept. The
decision depends only on what is stored in the checkpoints, so a restarted run continues
the same retention. When to *save* is a trigger (:mod:`globalstep._triggers`).

Example:
    >>> infos = [CheckpointInfo(step, 0.0, {"loss": 5.0 - step}) for step in range(1, 6)]
    >>> sorted(retained(KeepAny((KeepLatest(2), KeepBest("loss", k=1, mode="max"))), infos))
    [1, 4, 5]
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from globalstep._errors import ConfigError

__all__ = [
    "CheckpointInfo",
    "KeepAny",
    "KeepBest",
    "KeepEveryNHours",
    "KeepEveryNSteps",
    "KeepLatest",
    "KeepPolicy",
    "policy_from_config",
    "retained",
    "unkept_steps",
]


@dataclass(frozen=True)
class CheckpointInfo:
    """What retention knows of one committed checkpoint.

    Attributes:
        step: the checkpoint's step.
        created_unix: its creation time, seconds since the epoch.
        metrics: the metrics saved with it.
    """

    step: int
    created_unix: float
    metrics: Mapping[str, float] = field(default_factory=dict)


def _positive_int(parameter: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(parameter, "must be an int >= 1", value)


class KeepPolicy(ABC):
    """A retention rule: which checkpoints it keeps, and why."""

    @abstractmethod
    def keep(self, infos: Sequence[CheckpointInfo]) -> dict[int, str]:
        """Returns step -> reason for each checkpoint this policy keeps.

        Args:
            infos: the committed checkpoints, oldest first.
        """

    @abstractmethod
    def to_config(self) -> dict[str, Any]:
        """Returns a JSON-ready description, read back by :func:`policy_from_config`."""

    @property
    def needs_metadata(self) -> bool:
        """Whether the policy reads creation times or metrics (else steps are enough)."""
        return True


@dataclass(frozen=True)
class _CountPolicy(KeepPolicy):
    """A policy of the steps alone and one count ``n``, an int >= 1 (the keep option
    ``_option`` of CheckpointManager), described as ``{"policy": _kind, "n": n}``."""

    n: int
    _kind: ClassVar[str]
    _option: ClassVar[str]

    def __post_init__(self) -> None:
        _positive_int(self._option, self.n)

    @property
    def needs_metadata(self) -> bool:
        return False

    def to_config(self) -> dict[str, Any]:
        return {"policy": self._kind, "n": self.n}


@dataclass(frozen=True)
class KeepLatest(_CountPolicy):
    """Keeps the ``n`` newest checkpoints."""

    _kind = "latest"
    _option = "max_to_keep"

    def keep(self, infos: Sequence[CheckpointInfo]) -> dict[int, str]:
        return {i.step: f"latest {self.n}" for i in infos[-self.n :]}


@dataclass(frozen=True)
class KeepEveryNSteps(_CountPolicy):
    """Keeps every checkpoint whose step is a multiple of ``n``."""

    _kind = "every_n_steps"
    _option = "keep_every_n_steps"

    def keep(self, infos: Sequence[CheckpointInfo]) -> dict[int, str]:
        return {i.step: f"every {self.n} steps" for i in infos if i.step % self.n == 0}


@dataclass(frozen=True)
class KeepEveryNHours(KeepPolicy):
    """Keeps the oldest checkpoint, then each one created >= ``hours`` after the last kept."""

    hours: float

    def __post_init__(self) -> None:
        if (
            isinstance(self.hours, bool)
            or not isinstance(self.hours, int | float)
            or not math.isfinite(self.hours)
            or self.hours <= 0
        ):
            raise ConfigError("keep_every_n_hours", "must be a finite number > 0", self.hours)

    def keep(self, infos: Sequence[CheckpointInfo]) -> dict[int, str]:
        kept: dict[int, str] = {}
        last: float | None = None
        for info in sorted(infos, key=lambda i: (i.created_unix, i.step)):
            if last is None or info.created_unix - last >= self.hours * 3600:
                kept[info.step] = f"every {self.hours:g} h"
                last = info.created_unix
        return kept

    def to_config(self) -> dict[str, Any]:
        return {"policy": "every_n_hours", "hours": self.hours}


@dataclass(frozen=True)
class KeepBest(KeepPolicy):
    """Keeps the ``k`` checkpoints with the best value of ``metric``.

    Args:
        metric: the metric's name, as passed to ``save(..., metrics=...)``.
        k: how many to keep, >= 1.
        mode: ``"min"`` (lower is better, e.g. a loss) or ``"max"`` (e.g. an accuracy).

    Checkpoints without the metric, or with a NaN, are never among the best; ties go to
    the newer checkpoint.
    """

    metric: str
    k: int = 1
    mode: str = "min"

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric:
            raise ConfigError("metric", "must be a non-empty string", self.metric)
        _positive_int("k", self.k)
        if self.mode not in ("min", "max"):
            raise ConfigError("mode", "must be 'min' or 'max'", self.mode)

    def keep(self, infos: Sequence[CheckpointInfo]) -> dict[int, str]:
        scored = [
            (float(i.metrics[self.metric]), i.step)
            for i in infos
            if isinstance(i.metrics.get(self.metric), int | float)
            and not math.isnan(float(i.metrics[self.metric]))
        ]
        sign = 1.0 if self.mode == "min" else -1.0
        scored.sort(key=lambda s: (sign * s[0], -s[1]))
        return {
            step: f"best {self.k} by {self.metric} ({self.mode})" for _, step in scored[: self.k]
        }

    def to_config(self) -> dict[str, Any]:
        return {"policy": "best", "metric": self.metric, "k": self.k, "mode": self.mode}


@dataclass(frozen=True)
class KeepAny(KeepPolicy):
    """Keeps what any of ``policies`` keeps; with no policy, keeps everything."""

    policies: tuple[KeepPolicy, ...] = ()

    def __post_init__(self) -> None:
        for p in self.policies:
            if not isinstance(p, KeepPolicy):
                raise ConfigError("policies", "must all be KeepPolicy objects", p)

    def keep(self, infos: Sequence[CheckpointInfo]) -> dict[int, str]:
        if not self.policies:
            return {i.step: "all kept" for i in infos}
        kept: dict[int, list[str]] = {}
        for policy in self.policies:
            for step, reason in policy.keep(infos).items():
                kept.setdefault(step, []).append(reason)
        return {step: ", ".join(reasons) for step, reasons in kept.items()}

    @property
    def needs_metadata(self) -> bool:
        return any(p.needs_metadata for p in self.policies)

    def to_config(self) -> dict[str, Any]:
        return {"policy": "any", "policies": [p.to_config() for p in self.policies]}


def policy_from_options(
    max_to_keep: int | None,
    keep_every_n_hours: float | None,
    keep_every_n_steps: int | None,
    keep_best: KeepBest | None,
) -> KeepPolicy:
    """Returns the policy of ``CheckpointManager``'s keep options (see its Args).

    Raises:
        ConfigError: an option is out of range.
    """
    if keep_best is not None and not isinstance(keep_best, KeepBest):
        raise ConfigError("keep_best", "must be a KeepBest(metric, k, mode)", keep_best)
    if max_to_keep is None:
        return KeepAny(())
    policies: list[KeepPolicy] = [KeepLatest(max_to_keep)]
    if keep_every_n_hours is not None:
        policies.append(KeepEveryNHours(keep_every_n_hours))
    if keep_every_n_steps is not None:
        policies.append(KeepEveryNSteps(keep_every_n_steps))
    if keep_best is not None:
        policies.append(keep_best)
    return KeepAny(tuple(policies))


def policy_from_config(config: Any) -> KeepPolicy:
    """Rebuilds a policy from :meth:`KeepPolicy.to_config`'s output.

    Raises:
        ConfigError: the description is not a known policy.

    Example:
        >>> policy_from_config(KeepBest("loss", 2).to_config())
        KeepBest(metric='loss', k=2, mode='min')
    """
    if not isinstance(config, Mapping):
        raise ConfigError("config", "must be a mapping from to_config()", config)
    kind = config.get("policy")
    try:
        if kind == "latest":
            return KeepLatest(config["n"])
        if kind == "every_n_steps":
            return KeepEveryNSteps(config["n"])
        if kind == "every_n_hours":
            return KeepEveryNHours(config["hours"])
        if kind == "best":
            return KeepBest(config["metric"], config["k"], config["mode"])
        if kind == "any":
            return KeepAny(tuple(policy_from_config(p) for p in config["policies"]))
    except (KeyError, TypeError) as err:
        raise ConfigError("config", "must hold the policy's fields", config) from err
    raise ConfigError("config['policy']", "must name a known policy", kind)


def retained(policy: KeepPolicy, infos: Sequence[CheckpointInfo]) -> dict[int, str]:
    """Returns step -> reason for every checkpoint to keep.

    The newest checkpoint (highest step) is always kept, and so is the one saved last (a
    run resumed from an older checkpoint saves steps below the newest: its saves are its
    only progress, so retention must not delete them on the newest one's account).

    Args:
        policy: the retention policy.
        infos: the committed checkpoints, in any order.
    """
    ordered = sorted(infos, key=lambda i: i.step)
    kept = dict(policy.keep(ordered))

    def always(step: int, reason: str) -> None:
        kept[step] = f"{reason}, {kept[step]}" if step in kept else reason

    if ordered:
        newest = ordered[-1].step
        last_saved = max(ordered, key=lambda i: (i.created_unix, i.step)).step
        if last_saved != newest:
            always(last_saved, "saved last")
        always(newest, "newest")
    return kept


def _step_rules(policy: KeepPolicy) -> tuple[int, list[int]] | None:
    """(latest n, every-n-steps moduli) of a policy of step-only rules, else None."""
    if isinstance(policy, KeepLatest):
        return policy.n, []
    if isinstance(policy, KeepEveryNSteps):
        return 0, [policy.n]
    if isinstance(policy, KeepAny) and policy.policies:
        latest, every = 0, list[int]()
        for part in policy.policies:
            rules = _step_rules(part)
            if rules is None:
                return None
            latest, every = max(latest, rules[0]), every + rules[1]
        return latest, every
    return None


def unkept_steps(
    policy: KeepPolicy, steps: Sequence[int], last_saved: int | None = None
) -> list[int] | None:
    """What :func:`retained` would not keep, for policies that look at steps alone.

    A fast path for directories of thousands of checkpoints: only the steps older than the
    newest ``n`` are looked at, and no :class:`CheckpointInfo` is built.

    Args:
        policy: the retention policy.
        steps: the committed steps, sorted.
        last_saved: the step saved last, kept like the newest.

    Returns:
        The steps not kept, oldest first; None where the policy reads creation times or
        metrics (use :func:`retained`).

    Example:
        >>> unkept_steps(KeepAny((KeepLatest(2), KeepEveryNSteps(10))), [5, 10, 15, 20, 25])
        [5, 15]
    """
    if isinstance(policy, KeepAny) and not policy.policies:
        return []  # keeps everything
    rules = _step_rules(policy)
    if rules is None:
        return None
    latest, every = rules
    older = steps[: max(0, len(steps) - max(latest, 1))]
    return [s for s in older if s != last_saved and not any(s % n == 0 for n in every)]
