"""PyTorch: the step advanced by ``optimizer.step()`` itself, and torch state in checkpoints.

:func:`attach` hooks an optimizer so that each update it really applies first writes the
rate of update number ``clock.step`` (see :mod:`globalstep._clock`) into every param group,
and then ticks the clock. An update that a ``GradScaler`` skips (inf or NaN gradients) never
reaches the optimizer's ``step()``, so it neither ticks the clock nor moves the schedule;
gradient accumulation ticks once per ``optimizer.step()``. Each optimizer gets its own clock
(a GAN's generator and critic), and :meth:`Attachment.detach` undoes everything. The
attachment lives as long as the optimizer's hooks, so ``attach(...)`` written as a statement
keeps its hold on the clock; :meth:`Attachment.of` finds it again. After
``optimizer.step()`` each group's ``"lr"`` is still the rate that update used: log it with
the loss there, at the clock's step after the update (the convention of
:mod:`globalstep._clock`).

Torch objects go into checkpoint trees as they are: tensors of every dtype, modules (also
``torch.compile``'d or DDP-wrapped ones, whose ``_orig_mod.`` / ``module.`` prefixes are
dropped both ways), optimizers, schedulers, ``GradScaler``, ``torch.Generator`` and the
process RNG (:class:`RNGState`); see :mod:`globalstep.integrations._torch_state`. The data
position lives in a :class:`ResumableSampler`, apart from the clock, because skipped updates
consume batches without advancing the step; see :mod:`globalstep.integrations._torch_data`.

This module imports torch; ``import globalstep`` does not import it.

Example:
    >>> import torch
    >>> from globalstep import Clock
    >>> from globalstep.compat.torch import StepLR
    >>> model = torch.nn.Linear(2, 1)
    >>> opt = torch.optim.SGD(model.parameters(), lr=1.0)
    >>> clock = Clock()
    >>> attachment = attach(opt, clock, StepLR(base_lr=0.1, step_size=2, gamma=0.5))
    >>> rates = []
    >>> for _ in range(4):
    ...     model(torch.ones(1, 2)).sum().backward()
    ...     opt.step()
    ...     rates.append(opt.param_groups[0]["lr"])
    >>> clock.step, rates
    (4, [0.1, 0.1, 0.05, 0.05])
    >>> attachment.detach()
    >>> opt.param_groups[0]["lr"]
    1.0
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from globalstep._clock import Clock, check_step, release_claim
from globalstep._errors import ConfigError
from globalstep._memo import MEMO_BITS, MEMO_MASK, memo_of
from globalstep.integrations._held import refuse_held
from globalstep.integrations._torch_data import ResumableSampler, skip_ahead
from globalstep.integrations._torch_state import RNGState
from globalstep.schedules import Schedule

__all__ = [
    "Attachment",
    "OneCycleMomentum",
    "RNGState",
    "ResumableSampler",
    "attach",
    "skip_ahead",
]


def _floats(fn: Callable[[int], Any]) -> Callable[[int], float]:
    """``fn`` itself for a globalstep schedule (Python floats, from its memo of ``values()``,
    see :func:`globalstep._memo.memo_fill`); other callables wrapped in float()."""
    if isinstance(fn, Schedule):
        return fn
    return lambda step: float(fn(step))


@dataclasses.dataclass(frozen=True)
class OneCycleMomentum:
    """The momentum PyTorch's ``OneCycleLR`` cycles, opposite to the rate, as a schedule.

    ``OneCycleLR(cycle_momentum=True)`` moves momentum (``betas[0]`` for Adam-style
    optimizers) from ``max_momentum`` down to ``base_momentum`` while the rate rises, and
    back while it falls (a third phase holds it at ``max_momentum``). Pass it as
    ``attach(..., momentum=OneCycleMomentum(schedule))``; :func:`attach` builds it itself
    for a one-cycle schedule that carries ``base_momentum`` / ``max_momentum``.

    Args:
        schedule: the ``globalstep.compat.torch.OneCycleLR`` whose phases it follows.
        base_momentum: the momentum at the rate's peak.
        max_momentum: the momentum at the cycle's start and end.

    Raises:
        ConfigError: ``schedule`` is not a one-cycle schedule, or a momentum is not a
            finite number in [0, 1].

    Example:
        >>> from globalstep.compat.torch import OneCycleLR
        >>> m = OneCycleMomentum(OneCycleLR(max_lr=1.0, total_steps=10, anneal_strategy="linear"))
        >>> [round(m(k), 6) for k in (0, 2, 9)]
        [0.95, 0.85, 0.95]
    """

    schedule: Any
    base_momentum: float = 0.85
    max_momentum: float = 0.95

    def __post_init__(self) -> None:
        for name in ("steps_total", "pct_start", "three_phase", "anneal_strategy"):
            if not hasattr(self.schedule, name):
                raise ConfigError(
                    "schedule",
                    "must be a one-cycle schedule (globalstep.compat.torch.OneCycleLR)",
                    self.schedule,
                )
        for name in ("base_momentum", "max_momentum"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ConfigError(name, "must be a number in [0, 1]", value)

    def __call__(self, step: int) -> float:
        """Returns the momentum update number ``step`` uses."""
        step = check_step(step)
        s = self.schedule
        total, pct_start = s.steps_total, s.pct_start
        top, low = self.max_momentum, self.base_momentum
        phases = [(float(pct_start * total) - 1, top, low)]
        if s.three_phase:
            phases.append((float(2 * pct_start * total) - 2, low, top))
            phases.append((total - 1, top, top))
        else:
            phases.append((total - 1, low, top))
        start = 0.0
        for i, (end, first, last) in enumerate(phases):
            if step <= end or i == len(phases) - 1:
                pct = (step - start) / (end - start)
                if s.anneal_strategy == "cos":
                    return float(last + (first - last) / 2.0 * (math.cos(math.pi * pct) + 1))
                return float((last - first) * pct + first)
            start = end
        raise AssertionError("unreachable")  # pragma: no cover


# Attachments by id(optimizer), so that one optimizer is not hooked twice and one clock is
# not ticked by two optimizers. An attachment lives as long as its optimizer's hooks (or the
# caller) hold it, and it holds the optimizer, so an id here is never a reused one.
_ATTACHED: weakref.WeakValueDictionary[int, Attachment] = weakref.WeakValueDictionary()


class Attachment:
    """The hooks :func:`attach` put on one optimizer; :meth:`detach` removes them.

    The hooks hold the attachment, and with it the claim on the clock's ticks: both last
    until :meth:`detach`, or until the optimizer itself is dropped, whether or not the caller
    keeps the attachment. :meth:`of` finds it again from the optimizer or the clock.
    """

    def __init__(
        self,
        optimizer: Any,
        clock: Clock,
        lr: list[Callable[[int], float] | None],
        momentum: list[Callable[[int], float] | None],
        scheduler: Any,
    ) -> None:
        self.optimizer = optimizer
        self.clock = clock
        self.scheduler = scheduler
        self.tick_owner = ""  # what attach() claimed the clock's ticks as
        # Groups by index: optimizer.load_state_dict() (a restore) replaces the group dicts.
        groups = optimizer.param_groups
        # (group index, schedule, the schedule's memo or None): the hook reads a memo hit
        # itself and calls the schedule on a miss (see memo_of).
        self._lr = [(i, t, memo_of(t)) for i, t in enumerate(lr) if t is not None]
        self._momentum = [
            (i, t, memo_of(t), "betas" if "betas" in groups[i] else "momentum")
            for i, t in enumerate(momentum)
            if t is not None
        ]
        # Schedules that call the user's code (compat.torch's LambdaLR...): read at each step
        # as it is reached, right after the update before it, where torch's
        # scheduler.step() calls lr_lambda (and now, as torch's constructor does).
        self._reached = [t for t in [*lr, *momentum] if t is not None and _calls_user_code(t)]
        for t in self._reached:
            t(clock.step)
        keys = ("lr", "momentum", "betas")
        self._saved = [{k: g[k] for k in keys if k in g} for g in groups]
        self._class_found_inf = hasattr(type(optimizer), "found_inf")
        pre, post = self._pre_hook(), self._post_hook()
        # Each hook holds the attachment (an attribute, so the hot path reads nothing more):
        # the optimizer holds its hooks, so the claim on the clock's ticks, which the
        # attachment's finalizer ends, cannot be freed while a hook still ticks the clock.
        pre.__dict__["attachment"] = post.__dict__["attachment"] = self
        self._handles = [
            optimizer.register_step_pre_hook(pre),
            optimizer.register_step_post_hook(post),
        ]

    def __repr__(self) -> str:
        state = "detached" if not self._handles else "attached"
        return f"Attachment({_named(self.optimizer)}, {self.clock!r}, {state})"

    @classmethod
    def of(cls, target: Any) -> Attachment | None:
        """The live attachment of ``target``: the one that hooks it (an optimizer) or
        ticks it (a :class:`~globalstep._clock.Clock`); None if there is none.

        ``attach(...)`` written as a statement needs nothing kept: this finds its result
        again, to :meth:`detach` it (a notebook cell run a second time, for instance).

        Example:
            >>> import torch
            >>> from globalstep import Clock
            >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
            >>> clock = Clock()
            >>> _ = attach(opt, clock)
            >>> Attachment.of(clock) is Attachment.of(opt)
            True
            >>> Attachment.of(opt).detach()
            >>> Attachment.of(opt) is None
            True
        """
        if isinstance(target, Clock):
            return next((a for a in list(_ATTACHED.values()) if a.clock is target), None)
        return _ATTACHED.get(id(target))

    @property
    def attached(self) -> bool:
        """True until :meth:`detach`."""
        return bool(self._handles)

    def _pre_hook(self) -> Callable[[Any, Any, Any], None]:
        """The step pre-hook: sets each group's rate (and momentum) for ``clock.step``.

        A closure over what it reads, because it runs once per update right after the
        backward pass, where every attribute lookup is a cold one: one schedule on one
        group (the common case) takes a path of its own.
        """
        clock, lr, momentum = self.clock, self._lr, self._momentum
        set_momentum = self._set_momentum
        memo = lr[0][2] if len(lr) == 1 and not momentum else None
        if memo is not None:
            index, table, _ = lr[0]

            def one_rate(optimizer: Any, args: Any, kwargs: Any) -> None:
                step = clock.step
                group = optimizer.param_groups[index]
                try:
                    value = memo[step >> MEMO_BITS][step & MEMO_MASK]
                except KeyError:  # a block not computed yet
                    value = table(step)
                current = group["lr"]
                if type(current) is float or not isinstance(current, torch.Tensor):
                    group["lr"] = value
                else:
                    current.fill_(value)

            return one_rate

        def rates(optimizer: Any, args: Any, kwargs: Any) -> None:
            step = clock.step
            groups = optimizer.param_groups
            for i, table, memo in lr:
                group = groups[i]
                if memo is None:
                    value = table(step)
                else:
                    try:
                        value = memo[step >> MEMO_BITS][step & MEMO_MASK]
                    except KeyError:
                        value = table(step)
                current = group["lr"]
                if type(current) is not float and isinstance(current, torch.Tensor):
                    current.fill_(value)
                else:
                    group["lr"] = value
            if momentum:
                set_momentum(groups, step)

        return rates

    def _set_momentum(self, groups: Any, step: int) -> None:
        block, offset = step >> MEMO_BITS, step & MEMO_MASK
        for i, table, memo, key in self._momentum:
            group = groups[i]
            if memo is None:
                value = table(step)
            else:
                try:
                    value = memo[block][offset]
                except KeyError:
                    value = table(step)
            if key == "betas":
                betas = group["betas"]
                if isinstance(betas[0], torch.Tensor):
                    betas[0].fill_(value)
                else:
                    group["betas"] = (value, *betas[1:])
            else:
                group["momentum"] = value

    def _post_hook(self) -> Callable[[Any, Any, Any], None]:
        """The step post-hook: ticks the clock (and steps an adopted scheduler), unless
        the update was skipped."""
        scheduler = self.scheduler
        advance = self._advance_and_read() if self._reached else self.clock.advance
        class_found_inf = self._class_found_inf
        if scheduler is None and not (
            class_found_inf or getattr(self.optimizer, "_step_supports_amp_scaling", False)
        ):
            # A GradScaler calls step() only for an update it applies, unless the
            # optimizer skips inf updates itself (fused ones say so, and are read below).

            def tick(optimizer: Any, args: Any, kwargs: Any) -> None:
                advance()

            return tick

        def ticked(optimizer: Any, args: Any, kwargs: Any) -> None:
            # A fused optimizer stepped by a GradScaler skips the update itself when the
            # scaler found inf or NaN gradients; the scaler then leaves ``found_inf`` on
            # the optimizer. (An instance attribute, which GradScaler sets: looked up
            # without getattr's AttributeError when there is none, the common case.)
            found_inf = optimizer.__dict__.get("found_inf")
            if found_inf is None and class_found_inf:
                found_inf = getattr(optimizer, "found_inf", None)
            if found_inf is not None and isinstance(found_inf, torch.Tensor) and found_inf.item():
                return
            advance()
            if scheduler is not None:
                scheduler.step()

        return ticked

    def _advance_and_read(self) -> Callable[[], Any]:
        """The clock's ``advance``, then each schedule that calls user code read at the new
        step."""
        clock, reached = self.clock, self._reached
        advance = clock.advance

        def advance_and_read() -> None:
            advance()
            step = clock.step
            for t in reached:
                t(step)

        return advance_and_read

    def detach(self) -> None:
        """Removes the hooks and puts back each group's rate and momentum as they were.

        Raises:
            ConfigError: already detached.
        """
        if not self._handles:
            raise ConfigError(
                "attachment", "is already detached", self, hint="detach() once per attach()."
            )
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for group, saved in zip(self.optimizer.param_groups, self._saved, strict=False):
            group.update(saved)
        _ATTACHED.pop(id(self.optimizer), None)
        release_claim(weakref.ref(self.clock), self.tick_owner)


def _calls_user_code(fn: Any) -> bool:
    """Whether ``fn`` (or the schedule a multiplier scales) calls the user's code at each
    step (:attr:`globalstep.compat.torch.TorchSchedule.calls_user_code`)."""
    inner = fn.schedule if isinstance(fn, _Scaled) else fn
    return getattr(inner, "calls_user_code", False) is True


def _per_group(name: str, value: Any, n: int) -> list[Any]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != n:
            raise ConfigError(
                name,
                f"must hold one entry per param group ({n})",
                value,
                hint="Pass one schedule, or a list as long as optimizer.param_groups.",
            )
        return list(value)
    return [value] * n


def _check_schedule(name: str, fn: Any, clock: Clock) -> Any:
    if fn is None:
        return None
    if not callable(fn):
        raise ConfigError(name, "must be a schedule (a callable of the step) or None", fn)
    if hasattr(fn, "global_step") and hasattr(fn, "schedule"):
        fn = fn.schedule  # compat.tf's decayed rate (a callable of nothing): its schedule
    if getattr(fn, "resolved", True) is False and callable(getattr(fn, "resolve", None)):
        fn = fn.resolve(clock)  # durations such as "3ep" become steps with the clock's sizes
    return fn


def _momentum_of(schedule: Any) -> Any:
    """The momentum schedule a learning-rate schedule carries, if it has one."""
    if getattr(schedule, "has_momentum", True) is False:
        return None  # compat.torch: momentum() is None for schedulers that cycle none
    own = getattr(schedule, "momentum", None)
    if callable(own):
        return own
    if getattr(schedule, "cycle_momentum", False) and hasattr(schedule, "base_momentum"):
        return OneCycleMomentum(schedule, schedule.base_momentum, schedule.max_momentum)
    return None


def attach(
    optimizer: Any,
    clock: Clock,
    schedule: Any = None,
    *,
    multipliers: Sequence[float] | None = None,
    momentum: Any = None,
    scheduler: Any = None,
) -> Attachment:
    """Makes ``optimizer.step()`` set each group's rate from the clock, then tick the clock.

    Before each update the optimizer really applies, every param group gets
    ``schedule(clock.step) * multiplier`` as its ``lr`` (and ``momentum`` as its momentum,
    or as ``betas[0]`` for Adam-style optimizers); after it, ``clock.tick()``. Skipped
    updates (a ``GradScaler`` that found inf or NaN gradients does not call
    ``optimizer.step()``) change nothing, so the clock, the schedule position and
    ``optimizer.state[p]["step"]`` stay equal.

    The optimizer owns the clock's ticks (:meth:`Clock.claim_ticks
    <globalstep._clock.Clock.claim_ticks>`) until ``detach()``: ``Run.update`` beside it
    logs and saves at the step the optimizer reached and does not tick again.

    Args:
        optimizer: a ``torch.optim.Optimizer``.
        clock: the clock this optimizer advances; one clock per optimizer.
        schedule: None (the clock only ticks), a schedule (any callable of the step; a
            globalstep schedule is read a block of steps at a time; a ``compat.tf`` decayed
            rate gives its schedule), or a list with one schedule (or None, to leave that
            group alone) per param group.
        multipliers: per param group factors for one shared ``schedule`` (e.g. a smaller
            rate for a backbone); default 1 for every group.
        momentum: a momentum (beta1) schedule, or one per group; by default the one
            ``schedule`` carries, as a one-cycle schedule with ``cycle_momentum``.
        scheduler: a torch ``LRScheduler`` you already have, adopted instead of
            ``schedule``: it is stepped after each applied update and never after a
            skipped one, so existing code keeps its scheduler.

    Returns:
        The :class:`Attachment`; ``detach()`` removes the hooks. Keeping it is optional:
        the hooks hold it (and the claim) until ``detach()`` or until the optimizer is
        dropped, and :meth:`Attachment.of` finds it again.

    Raises:
        ConfigError: the optimizer is already attached, the clock is already advanced by
            another optimizer (both name the first attachment) or claimed by another owner,
            a per-group list has the wrong length, a schedule is not callable, or both
            ``schedule`` and ``scheduler`` are given.

    Example:
        >>> import torch
        >>> from globalstep import Clock
        >>> w = torch.nn.Parameter(torch.zeros(1))
        >>> opt = torch.optim.SGD([w], lr=0.5)
        >>> clock = Clock()
        >>> a = attach(opt, clock)      # no schedule: the update ticks the clock
        >>> w.grad = torch.ones(1)
        >>> opt.step()
        >>> clock.step
        1
    """
    _check_free(optimizer, clock)
    if scheduler is not None:
        _check_scheduler(scheduler, optimizer, schedule, multipliers, momentum)
    schedules = _group_schedules(optimizer, clock, schedule, multipliers)
    if momentum is None and schedule is not None and not isinstance(schedule, Sequence):
        momentum = _momentum_of(schedules[0] if multipliers is None else schedule)
    moments = _group_momenta(optimizer, clock, momentum)
    return _hook(optimizer, clock, schedules, moments, scheduler)


def _check_free(optimizer: Any, clock: Clock) -> None:
    """Raises unless ``optimizer`` is a torch optimizer and both are free to attach."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ConfigError("optimizer", "must be a torch.optim.Optimizer", optimizer)
    if not isinstance(clock, Clock):
        raise ConfigError("clock", "must be a globalstep.Clock", clock)
    refuse_held(
        Attachment.of,
        optimizer,
        "optimizer",
        _named(optimizer),
        "is already attached",
        "One attach() per optimizer: keep using the first attachment (it lasts as long as "
        "the optimizer), or detach it first "
        "(globalstep.integrations.torch.Attachment.of(optimizer).detach()) and attach again.",
    )
    refuse_held(
        Attachment.of,
        clock,
        "clock",
        clock,
        "is already advanced by another optimizer",
        "Give each optimizer its own Clock (e.g. Clock('generator'), Clock('critic')), or "
        "detach the first (globalstep.integrations.torch.Attachment.of(clock).detach()) and "
        "attach again.",
    )


def _named(optimizer: Any) -> str:
    """An optimizer as messages name it: its class and id (its repr lists every group)."""
    return f"{type(optimizer).__name__} at {id(optimizer):#x}"


def _check_scheduler(
    scheduler: Any, optimizer: Any, schedule: Any, multipliers: Any, momentum: Any
) -> None:
    """Raises unless an adopted ``scheduler`` comes alone, built on ``optimizer``."""
    if schedule is not None or multipliers is not None or momentum is not None:
        raise ConfigError(
            "scheduler",
            "must come alone: the adopted scheduler sets the rates itself",
            type(scheduler).__name__,
            hint="Pass either scheduler= or schedule=, not both.",
        )
    if (
        not callable(getattr(scheduler, "step", None))
        or getattr(scheduler, "optimizer", None) is not optimizer
    ):
        raise ConfigError(
            "scheduler",
            "must be a torch LRScheduler built on this optimizer",
            type(scheduler).__name__,
        )


def _group_schedules(optimizer: Any, clock: Clock, schedule: Any, multipliers: Any) -> list[Any]:
    """The rate schedule of each param group (None: left alone), ``multipliers`` applied."""
    n = len(optimizer.param_groups)
    schedules = [_check_schedule("schedule", s, clock) for s in _per_group("schedule", schedule, n)]
    if multipliers is None:
        return schedules
    if schedule is None or isinstance(schedule, Sequence):
        raise ConfigError(
            "multipliers",
            "needs one shared schedule",
            multipliers,
            hint="Pass schedule=<one schedule>, or a schedule per group without multipliers.",
        )
    factors = _per_group("multipliers", multipliers, n)
    for f in factors:
        if isinstance(f, bool) or not isinstance(f, int | float) or not math.isfinite(f):
            raise ConfigError("multipliers", "must be finite numbers", multipliers)
    return [_Scaled(schedules[0], float(f)) for f in factors]


def _group_momenta(optimizer: Any, clock: Clock, momentum: Any) -> list[Any]:
    """The momentum schedule of each param group (None: left alone)."""
    n = len(optimizer.param_groups)
    moments = [_check_schedule("momentum", m, clock) for m in _per_group("momentum", momentum, n)]
    for group, m in zip(optimizer.param_groups, moments, strict=True):
        if m is not None and "momentum" not in group and "betas" not in group:
            raise ConfigError(
                "momentum",
                "needs param groups with 'momentum' or 'betas'",
                type(optimizer).__name__,
            )
    return moments


def _hook(
    optimizer: Any, clock: Clock, schedules: list[Any], moments: list[Any], scheduler: Any
) -> Attachment:
    """Claims the clock's ticks for ``optimizer`` and puts the hooks on it."""
    # The clock's one tick per update is this optimizer's: a Run.update beside it leaves
    # the tick to it (see Clock.claim_ticks).
    owner = f"torch optimizer {_named(optimizer)}, via attach()"
    clock.claim_ticks(owner)
    try:
        attachment = Attachment(
            optimizer,
            clock,
            [_floats(s) if s is not None else None for s in schedules],
            [_floats(m) if m is not None else None for m in moments],
            scheduler,
        )
    except BaseException:
        clock.release_ticks(owner)
        raise
    attachment.tick_owner = owner
    # The hooks hold the attachment and the optimizer holds the hooks: the claim lasts as
    # long as the hooks, and a dropped optimizer frees its clock for another owner.
    weakref.finalize(attachment, release_claim, weakref.ref(clock), owner)
    _ATTACHED[id(optimizer)] = attachment
    return attachment


@dataclasses.dataclass(frozen=True)
class _Scaled:
    """``schedule(step) * factor``, still read a block at a time."""

    schedule: Any
    factor: float

    def __call__(self, step: int) -> float:
        return float(self.schedule(step)) * self.factor

    def values(self, steps: Any) -> Any:
        if not callable(getattr(self.schedule, "values", None)):
            return np.array([self(int(s)) for s in np.asarray(steps).reshape(-1)])
        return np.asarray(self.schedule.values(steps), dtype=np.float64) * self.factor
