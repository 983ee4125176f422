"""TensorFlow's ``tf.compat.v1.train`` decays and global-step functions, with TF's names.

Also here under TF's names: ``log_every_n`` and ``log_first_n`` (``tf.compat.v1.logging``),
and ``Checkpoint`` and ``CheckpointManager`` (``tf.train``), built on globalstep's
crash-safe checkpoint storage, and ``summary`` (``tf.summary``'s ``create_file_writer`` and
``scalar``, see :mod:`globalstep.compat._tf_summary`), built on its restart-clean writer
(both imported on first use, as they sit a layer above).

Migrating is renaming an import: ``tf.compat.v1.train.exponential_decay(lr, global_step,
...)`` becomes ``globalstep.compat.tf.exponential_decay(lr, clock, ...)``. As in TF 2's
eager mode each decay returns a zero-argument callable; given a
:class:`~globalstep.clock.Clock` as ``global_step`` it reads the clock's step at every call
(the step is the number of optimizer updates applied, see :mod:`globalstep.clock`), so the
rate follows training. Each read is reported to a
:class:`~globalstep.guards.StaleStepDetector`, which warns when the step stops advancing:
the classic frozen-learning-rate bug of a ``minimize()`` without ``global_step=``.

Values are TF's: float32 for a Python-float rate, operation for operation, with the C
library's pow, exp, log and cos and flush-to-zero, as TF's kernels on one step (see
:mod:`globalstep.compat._common`). Deliberate differences: the noisy decay's seeded noise
(:func:`noisy_linear_cosine_decay`), the refusals at construction that
:mod:`globalstep.compat._tf_schedules` lists, and a subnormal intermediate of plain
arithmetic, which TF flushes to zero and this does not (only where two rates differ by
less than 1.2e-38; see :mod:`globalstep.compat._common`).

Example:
    >>> from globalstep import Clock
    >>> clock = Clock()
    >>> lr = exponential_decay(1.0, clock, decay_steps=100_000, decay_rate=0.96)
    >>> lr()
    1.0
    >>> clock.tick()
    >>> lr() < 1.0
    True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from globalstep.clock import Clock
from globalstep.compat import _tf_schedules as _tfs
from globalstep.compat._common import F32Ops, PeerSchedule, step_array
from globalstep.compat._tf_logging import log_every_n, log_first_n
from globalstep.errors import ConfigError
from globalstep.guards import StaleStepDetector
from globalstep.schedules._base import check_number, check_step

__all__ = [
    "Checkpoint",  # noqa: F822 (module __getattr__)
    "CheckpointLoadStatus",  # noqa: F822 (module __getattr__)
    "CheckpointManager",  # noqa: F822 (module __getattr__)
    "DecayedLearningRate",
    "cosine_decay",
    "cosine_decay_restarts",
    "create_global_step",
    "exponential_decay",
    "get_global_step",
    "get_or_create_global_step",
    "global_step",
    "inverse_time_decay",
    "latest_checkpoint",  # noqa: F822 (module __getattr__)
    "linear_cosine_decay",
    "log_every_n",
    "log_first_n",
    "natural_exp_decay",
    "noisy_linear_cosine_decay",
    "piecewise_constant",
    "polynomial_decay",
    "summary",  # noqa: F822 (module __getattr__)
]

_CHECKPOINT_NAMES = ("Checkpoint", "CheckpointLoadStatus", "CheckpointManager", "latest_checkpoint")


def __getattr__(name: str) -> Any:
    """Imports TF's checkpoint classes and ``summary`` on first use (they belong to the
    checkpoint and summary layers)."""
    if name in _CHECKPOINT_NAMES:
        from globalstep.compat import _tf_checkpoint

        return getattr(_tf_checkpoint, name)
    if name == "summary":
        from globalstep.compat import _tf_summary

        return _tf_summary
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_GLOBAL_STEPS: dict[Any, Clock] = {}
"""One global-step clock per graph key, as TF keeps one ``global_step`` per graph."""


class DecayedLearningRate:
    """The zero-argument callable a decay returns: the schedule at the global step now.

    Attributes:
        schedule: the schedule (TF's ``learning_rate_schedule`` class), callable with a step.
        global_step: the Clock read at each call, or the fixed step (any real number, as TF
            takes: a float, a negative int).
    """

    __slots__ = ("_detector", "global_step", "schedule")

    def __init__(self, schedule: PeerSchedule, global_step: Clock | float, what: str) -> None:
        if isinstance(global_step, Clock):
            self._detector: StaleStepDetector | None = StaleStepDetector(what)
        else:
            step_array(global_step)  # a number TF takes, or StepError now
            self._detector = None
        self.schedule = schedule
        self.global_step = global_step

    def __call__(self) -> float:
        """Returns the rate at the global step now."""
        clock = self.global_step
        if isinstance(clock, Clock):
            step = clock.step
            self._detector.observe(step, clock.name)  # type: ignore[union-attr]
            return self.schedule(step)
        return self.schedule(clock)  # type: ignore[arg-type]  # TF takes any real step

    def __repr__(self) -> str:
        return f"DecayedLearningRate({self.schedule!r}, global_step={self.global_step!r})"


def _decayed(schedule: PeerSchedule, global_step: Clock | float, what: str) -> DecayedLearningRate:
    if global_step is None:
        raise ConfigError(
            "global_step",
            "is required for decay (TF raises ValueError at the first call without it)",
            global_step,
            "Pass a globalstep Clock (or a number of steps).",
        )
    if not isinstance(global_step, Clock | int | float | np.integer | np.floating):
        raise ConfigError("global_step", "must be a globalstep Clock or a number", global_step)
    return DecayedLearningRate(schedule, global_step, what)


def exponential_decay(
    learning_rate: float,
    global_step: Clock | float,
    decay_steps: float,
    decay_rate: float,
    staircase: bool = False,
    name: str | None = None,
) -> DecayedLearningRate:
    """``learning_rate * decay_rate ** (global_step / decay_steps)`` (floored if staircase).

    Example:
        >>> exponential_decay(0.1, 0, decay_steps=100_000, decay_rate=0.96)()
        0.10000000149011612
    """
    _tfs.check_rate(learning_rate, "learning_rate", float64=True)
    schedule = _tfs.ExponentialDecay(learning_rate, decay_steps, decay_rate, staircase, name)
    return _decayed(schedule, global_step, name or "exponential_decay")


def piecewise_constant(
    x: Clock | float, boundaries: Sequence[Any], values: Sequence[Any], name: str | None = None
) -> DecayedLearningRate:
    """``values[i]`` for ``boundaries[i-1] < x <= boundaries[i]`` (the change comes at b + 1).

    As in TF, each boundary must have the dtype of ``x`` (a Clock's step is int64, as TF's
    global-step variable; a Python int is int32, a float float32), an int32 boundary may
    meet an int64 ``x``, and the values must share one dtype (int values give ints).

    Raises:
        ConfigError: (a ValueError, as TF raises) a boundary of another dtype than ``x``,
            values of two dtypes, or one boundary too many or too few.

    Example:
        >>> piecewise_constant(101, [100], [1.0, 0.5])()
        0.5
        >>> piecewise_constant(-999, [100], [1.0, 0.5])()
        1.0
    """
    boundaries, values = list(boundaries), list(values)
    if not isinstance(x, Clock) and x is not None:
        _tfs.check_piecewise_dtypes(x, boundaries)
    elif isinstance(x, Clock):
        _tfs.check_piecewise_dtypes(np.int64(0), boundaries)
    schedule = _tfs.PiecewiseConstantDecay(boundaries, values, name)
    return _decayed(schedule, x, name or "piecewise_constant")


def polynomial_decay(
    learning_rate: float,
    global_step: Clock | float,
    decay_steps: float,
    end_learning_rate: float = 0.0001,
    power: float = 1.0,
    cycle: bool = False,
    name: str | None = None,
) -> DecayedLearningRate:
    """``(learning_rate - end) * (1 - step / decay_steps) ** power + end``.

    Example:
        >>> polynomial_decay(1.0, 10, 10, end_learning_rate=0.0)()
        0.0
    """
    _tfs.check_rate(learning_rate, "learning_rate", float64=True)
    schedule = _tfs.PolynomialDecay(
        learning_rate, decay_steps, end_learning_rate, power, cycle, name
    )
    return _decayed(schedule, global_step, name or "polynomial_decay")


def natural_exp_decay(
    learning_rate: float,
    global_step: Clock | float,
    decay_steps: float,
    decay_rate: float,
    staircase: bool = False,
    name: str | None = None,
) -> DecayedLearningRate:
    """``learning_rate * exp(-decay_rate * step / decay_steps)``; TF computes the factor
    ``exp(-decay_rate)`` once, in float32 (in float64 for a float64 ``decay_rate``), casts
    it to the dtype of ``learning_rate`` and raises it to the power, and so does this.

    Raises:
        ConfigError: an int ``decay_rate`` (TF fails at the first call: no int exp).

    Example:
        >>> natural_exp_decay(1.0, 0, 10, 0.5)()
        1.0
    """
    check_number("decay_rate", decay_rate)
    if isinstance(decay_rate, int | np.integer):
        raise ConfigError(
            "decay_rate",
            "must be a float: TF takes exp(-decay_rate) in the int dtype of an int and fails",
            decay_rate,
            f"Write decay_rate={float(decay_rate)!r}.",
        )
    rate: Any
    if isinstance(decay_rate, np.float64):
        rate = np.float64(math.exp(-decay_rate))
    else:
        rate = np.float32(F32Ops(np.float32).exp(-np.float32(decay_rate)))
    _tfs.check_rate(learning_rate, "learning_rate", float64=True)
    schedule = _tfs.ExponentialDecay(learning_rate, decay_steps, rate, staircase, name)
    return _decayed(schedule, global_step, name or "natural_exp_decay")


def inverse_time_decay(
    learning_rate: float,
    global_step: Clock | float,
    decay_steps: float,
    decay_rate: float,
    staircase: bool = False,
    name: str | None = None,
) -> DecayedLearningRate:
    """``learning_rate / (1 + decay_rate * step / decay_steps)``.

    Example:
        >>> inverse_time_decay(1.0, 10, 10, 1.0)()
        0.5
    """
    _tfs.check_rate(learning_rate, "learning_rate", float64=True)
    schedule = _tfs.InverseTimeDecay(learning_rate, decay_steps, decay_rate, staircase, name)
    return _decayed(schedule, global_step, name or "inverse_time_decay")


def cosine_decay(
    learning_rate: float,
    global_step: Clock | float,
    decay_steps: float,
    alpha: float = 0.0,
    name: str | None = None,
) -> DecayedLearningRate:
    """``learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, d) / d)) + alpha)``.

    Raises:
        ConfigError: a float64 or int ``learning_rate`` (TF fails at the first call: its
            ``pi`` is a float32 constant).

    Example:
        >>> cosine_decay(1.0, 100, 100)()
        0.0
    """
    _tfs.check_rate(learning_rate, "learning_rate", float64=False)
    schedule = _tfs.CosineDecay(learning_rate, decay_steps, alpha, name)
    return _decayed(schedule, global_step, name or "cosine_decay")


def cosine_decay_restarts(
    learning_rate: float,
    global_step: Clock | float,
    first_decay_steps: float,
    t_mul: float = 2.0,
    m_mul: float = 1.0,
    alpha: float = 0.0,
    name: str | None = None,
) -> DecayedLearningRate:
    """SGDR: cosine decays restarting after ``first_decay_steps * t_mul ** i`` steps.

    Example:
        >>> cosine_decay_restarts(1.0, 0, 10)()
        1.0
    """
    _tfs.check_rate(learning_rate, "learning_rate", float64=False)
    schedule = _tfs.CosineDecayRestarts(learning_rate, first_decay_steps, t_mul, m_mul, alpha, name)
    return _decayed(schedule, global_step, name or "cosine_decay_restarts")


def linear_cosine_decay(
    learning_rate: float,
    global_step: Clock | float,
    decay_steps: float,
    num_periods: float = 0.5,
    alpha: float = 0.0,
    beta: float = 0.001,
    name: str | None = None,
) -> DecayedLearningRate:
    """``learning_rate * ((alpha + linear) * cosine + beta)`` (Bello et al., 2017).

    Example:
        >>> linear_cosine_decay(1.0, 100, 100, beta=0.0)()
        0.0
    """
    _tfs.check_rate(learning_rate, "learning_rate", float64=False)
    schedule = _tfs.LinearCosineDecay(learning_rate, decay_steps, num_periods, alpha, beta, name)
    return _decayed(schedule, global_step, name or "linear_cosine_decay")


def noisy_linear_cosine_decay(
    learning_rate: float,
    global_step: Clock | float,
    decay_steps: float,
    initial_variance: float = 1.0,
    variance_decay: float = 0.55,
    num_periods: float = 0.5,
    alpha: float = 0.0,
    beta: float = 0.001,
    name: str | None = None,
    *,
    seed: int = 0,
) -> DecayedLearningRate:
    """:func:`linear_cosine_decay` with Gaussian noise on the linear part.

    A deliberate difference, warned at construction (CompatDifferenceWarning): TF draws
    unseeded noise at every call; here the draw at a step is a pure function of
    ``(seed, step)``, so a run is reproducible and resumes with the same noise.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     lr = noisy_linear_cosine_decay(1.0, 5, 100, seed=1)
        >>> lr() == lr()
        True
    """
    _tfs.check_rate(learning_rate, "learning_rate", float64=False)
    schedule = _tfs.LinearCosineDecay(
        learning_rate,
        decay_steps,
        num_periods,
        alpha,
        beta,
        name,
        initial_variance=initial_variance,
        variance_decay=variance_decay,
        seed=seed,
    )
    _tfs.warn_unseeded_noise("noisy_linear_cosine_decay")
    return _decayed(schedule, global_step, name or "noisy_linear_cosine_decay")


def get_global_step(graph: Any = None) -> Clock | None:
    """Returns the global-step clock of ``graph`` (the default one for None), or None.

    Example:
        >>> get_global_step(graph="a graph with no global step") is None
        True
    """
    return _GLOBAL_STEPS.get(graph)


def create_global_step(graph: Any = None) -> Clock:
    """Creates the global-step clock of ``graph``.

    Raises:
        ConfigError: it exists already (as TF raises "'global_step' already exists.").

    Example:
        >>> marker = object()
        >>> create_global_step(marker).step
        0
    """
    key = graph
    if key in _GLOBAL_STEPS:
        raise ConfigError(
            "global_step",
            "already exists; use get_or_create_global_step() to reuse it",
            _GLOBAL_STEPS[key],
        )
    clock = Clock("global_step")
    _GLOBAL_STEPS[key] = clock
    return clock


def get_or_create_global_step(graph: Any = None) -> Clock:
    """Returns the global-step clock of ``graph``, creating it first if needed.

    Example:
        >>> marker = object()
        >>> get_or_create_global_step(marker) is get_or_create_global_step(marker)
        True
    """
    return get_global_step(graph) or create_global_step(graph)


def global_step(sess: Any, global_step_tensor: Clock | int) -> int:
    """Returns the step of ``global_step_tensor`` (a Clock or an int); ``sess`` is unused.

    Example:
        >>> global_step(None, 7)
        7
    """
    if isinstance(global_step_tensor, Clock):
        return global_step_tensor.step
    return check_step(global_step_tensor)
