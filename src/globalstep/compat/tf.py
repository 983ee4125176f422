"""TensorFlow's ``tf.compat.v1.train`` decays and global-step functions, with TF's names.

Also here under TF's names: ``log_every_n`` and ``log_first_n`` (``tf.compat.v1.logging``),
and ``Checkpoint`` and ``CheckpointManager`` (``tf.train``), built on globalstep's
crash-safe checkpoint storage, and ``summary`` (``tf.summary``'s ``create_file_writer`` and
``scalar``, see :mod:`globalstep.compat._tf_summary`), built on its restart-clean writer
(both imported on first use, as they sit a layer above).

Migrating is renaming an import: ``tf.compat.v1.train.exponential_decay(lr, global_step,
...)`` becomes ``globalstep.compat.tf.exponential_decay(lr, global_step, ...)``. As in TF 2's
eager mode each decay returns a zero-argument callable, which reads the global step at
every call, so the rate follows training. The global step may be:

- TensorFlow's own: a ``tf.Variable`` (``get_or_create_global_step(variable=True)``, or a
  seed's ``tf.Variable(0, trainable=False)``), a Keras variable on the TensorFlow backend
  (``optimizer.iterations``, which ``apply_gradients`` advances) or a tensor. The rate is
  then a float tensor computed with TensorFlow's ops from the variable, as TensorFlow's
  decay computes it (:mod:`globalstep.compat._tf_ops`): eagerly the value now, and inside
  a ``tf.function`` an op of the graph that follows the variable at every run, TensorFlow's
  values bit for bit in both. TensorFlow is imported only once such an object is given.
- A :class:`~globalstep._clock.Clock` (the step is the number of optimizer updates
  applied, see :mod:`globalstep._clock`): the rate is a Python float, and each read is
  reported to a :class:`~globalstep._guards.StaleStepDetector`, which warns when the step
  stops advancing (the classic frozen-learning-rate bug of a ``minimize()`` without
  ``global_step=``). A Clock is read in Python, so a read inside a function that
  ``tf.function`` or ``jax.jit`` traces would be one rate for the whole run: it raises
  there, saying what to pass instead (a TF variable step).
- A number: a fixed step, as in TensorFlow.

On a Clock or a number the values are TF's: float32 for a Python-float rate, operation for
operation, with the C library's pow, exp, log and cos and flush-to-zero, as TF's kernels
on one step (see :mod:`globalstep.compat._common`). Deliberate differences: the noisy
decay's seeded noise (:func:`noisy_linear_cosine_decay`), the refusals at construction that
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
import sys
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from globalstep._clock import Clock, check_step
from globalstep._errors import ConfigError, TracingError
from globalstep._guards import StaleStepDetector
from globalstep._optional import require
from globalstep._tracing import traced_by
from globalstep.compat import _tf_schedules as _tfs
from globalstep.compat._common import F32Ops, PeerSchedule, step_array
from globalstep.compat._tf_logging import log_every_n, log_first_n
from globalstep.schedules import check_number

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
    "reset_default_graph",
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


_GLOBAL_STEPS: dict[Any, Any] = {}
"""One global step (a Clock or a TF variable) per graph key, as TF keeps one per graph."""


class DecayedLearningRate:
    """The zero-argument callable a decay returns: the schedule at the global step now.

    Given a Clock or a number it returns a Python float; given a TensorFlow variable or
    tensor (a ``tf.Variable``, ``optimizer.iterations``) it returns a float tensor computed
    with TensorFlow's ops from the step read at the call (see
    :mod:`globalstep.compat._tf_ops`), as TensorFlow's decay returns one: inside a
    ``tf.function`` the rate is an op of the graph and follows the variable at every run.

    Each eager read of a Clock or of an int variable is reported to a
    :class:`~globalstep._guards.StaleStepDetector`, which warns when the step stops
    advancing while the rate is read again and again (the seed's loop without its
    ``assign_add``); a read inside a graph cannot be observed.

    A Clock is read in Python, so a call inside a function being traced (``tf.function``,
    ``jax.jit``) would give one rate, the step's at tracing, for every run of the graph:
    that call raises :class:`~globalstep._errors.TracingError` instead, saying what to pass.

    Attributes:
        schedule: the schedule (TF's ``learning_rate_schedule`` class), callable with a step.
        global_step: the Clock, TF variable or tensor read at each call, or the fixed step
            (any real number, as TF takes: a float, a negative int).
    """

    __slots__ = ("_detector", "_tf_rate", "global_step", "schedule")

    # AutoGraph (tf.function's Python converter) calls an object that has this attribute
    # as it is, unconverted: the call computes with TF ops or raises, and has no Python
    # control flow on tensors to convert.
    autograph_info__: ClassVar[MappingProxyType[str, Any]] = MappingProxyType({})

    def __init__(self, schedule: PeerSchedule, global_step: Any, what: str) -> None:
        self._tf_rate: Any = None
        self._detector: StaleStepDetector | None = None
        if isinstance(global_step, Clock):
            self._detector = StaleStepDetector(what)
        elif _tf_step(global_step):
            ops = _tf_ops()
            dtype = ops.step_dtype(global_step)  # a real scalar, or ConfigError now
            self._tf_rate = ops.rate_fn(schedule)
            if dtype.kind in "iu" and ops.is_variable(global_step):
                self._detector = StaleStepDetector(what, fix=_VARIABLE_FIX)
        else:
            step_array(global_step)  # a number TF takes, or StepError now
        self.schedule = schedule
        self.global_step = global_step

    def __call__(self) -> Any:
        """Returns the rate at the global step now (a float tensor for a TF step)."""
        clock = self.global_step
        if isinstance(clock, Clock):
            tracer = traced_by()
            if tracer is not None:
                raise _traced_clock_error(clock, tracer)
            step = clock.step
            self._detector.observe(step, clock.name)  # type: ignore[union-attr]
            return self.schedule(step)
        if self._tf_rate is not None:
            if self._detector is not None:
                step = _tf_ops().eager_step(clock)  # None in a graph: it follows the variable
                if step is not None:
                    self._detector.observe(step, None)
            return self._tf_rate(clock)
        return self.schedule(clock)

    def __repr__(self) -> str:
        return f"DecayedLearningRate({self.schedule!r}, global_step={self.global_step!r})"


_TF_MODULE = "tensorflow"
_VARIABLE_FIX = (
    "Advance the variable once per optimizer update (global_step.assign_add(1) after "
    "apply_gradients), or pass optimizer.iterations, which apply_gradients advances."
)


def _traced_clock_error(clock: Clock, tracer: str) -> TracingError:
    """The refusal of a Clock read while ``tracer`` traces: the rate would be frozen."""
    if tracer == "tf.function":
        hint = (
            "Pass a tf.Variable step instead: globalstep.compat.tf."
            "get_or_create_global_step(variable=True) advanced with assign_add(1), or "
            "optimizer.iterations; the decay then computes the rate from the variable in "
            "the graph. Or read the rate outside the traced function and pass it in."
        )
    else:
        hint = (
            "Read the rate outside the jitted function and pass it in as an argument, or "
            "use a globalstep.compat.optax schedule of the optimizer's own count, which "
            "traces."
        )
    return TracingError(
        f"`global_step` is a globalstep Clock, read in Python inside {tracer} while it "
        f"traces: the rate would be the one of step {clock.step}, at tracing, for every "
        f"later run of the traced function (a frozen learning rate); got global_step="
        f"{clock!r}. {hint}",
        "a compat.tf decay of a Clock",
        tracer,
    )


def _tf_step(value: Any) -> bool:
    """Whether ``value`` is a TensorFlow object, without importing TensorFlow: one whose
    class comes from TensorFlow (a Keras variable on its backend is one), which means
    TensorFlow is imported already; then whether it is a tensor or a variable."""
    if _TF_MODULE not in sys.modules or isinstance(value, int | float | np.generic):
        return False
    if not any(k.__module__.startswith("tensorflow.") for k in type(value).__mro__):
        return False
    if not _tf_ops().is_step(value):
        raise ConfigError(
            "global_step",
            "must be a globalstep Clock, a TF variable or tensor, or a number; a TF object "
            "that is neither a tensor nor a variable cannot be read as a step",
            value,
            _STEP_HINT,
        )
    return True


_STEP_HINT = (
    "Pass a globalstep Clock, or a TF step: globalstep.compat.tf.get_or_create_global_step("
    "variable=True), tf.Variable(0, trainable=False) or optimizer.iterations."
)


def _tf_ops() -> Any:
    """:mod:`globalstep.compat._tf_ops`, which imports TensorFlow (imported already)."""
    from globalstep.compat import _tf_ops

    return _tf_ops


def _decayed(schedule: PeerSchedule, global_step: Any, what: str) -> DecayedLearningRate:
    if global_step is None:
        raise ConfigError(
            "global_step",
            "is required for decay (TF raises ValueError at the first call without it)",
            global_step,
            _STEP_HINT,
        )
    if isinstance(global_step, Clock | int | float | np.integer | np.floating):
        return DecayedLearningRate(schedule, global_step, what)
    if not _tf_step(global_step):
        raise ConfigError(
            "global_step",
            "must be a globalstep Clock, a TF variable or tensor, or a number",
            global_step,
            _STEP_HINT,
        )
    return DecayedLearningRate(schedule, global_step, what)


def exponential_decay(
    learning_rate: float,
    global_step: Any,
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
    x: Any, boundaries: Sequence[Any], values: Sequence[Any], name: str | None = None
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
    if isinstance(x, Clock):
        _tfs.check_piecewise_dtypes(np.int64(0), boundaries)
    elif _tf_step(x):
        _tfs.check_piecewise_dtypes(_tf_ops().step_dtype(x).type(0), boundaries)
    elif x is not None:
        _tfs.check_piecewise_dtypes(x, boundaries)
    schedule = _tfs.PiecewiseConstantDecay(boundaries, values, name)
    return _decayed(schedule, x, name or "piecewise_constant")


def polynomial_decay(
    learning_rate: float,
    global_step: Any,
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
    global_step: Any,
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
    global_step: Any,
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
    global_step: Any,
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
    global_step: Any,
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
    global_step: Any,
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
    global_step: Any,
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


def _graph_step(graph: Any) -> Any:
    """The global step of ``graph`` (a Clock or a TF variable), or None."""
    return _GLOBAL_STEPS.get(graph)


def get_global_step(graph: Any = None) -> Any:
    """Returns the global step of ``graph`` (the default one for None), or None.

    The step is what :func:`create_global_step` made: a Clock, or TF's ``global_step``
    variable (``variable=True``).

    Example:
        >>> get_global_step(graph="a graph with no global step") is None
        True
    """
    return _graph_step(graph)


def create_global_step(graph: Any = None, *, variable: bool = False) -> Any:
    """Creates the global step of ``graph`` (the default one for None): a Clock, or with
    ``variable=True`` TensorFlow's own.

    ``variable=True`` gives what ``tf.compat.v1.train.create_global_step()`` gives in eager
    TensorFlow 2: a non-trainable scalar int64 ``tf.Variable`` named ``global_step``, at 0,
    aggregated ``ONLY_FIRST_REPLICA``, on the CPU (TensorFlow is imported by this call
    alone). It is created outside any ``tf.function`` being traced (``tf.init_scope``), so
    a traced call may create it too. Advance it with ``assign_add(1)`` after each update, or
    pass ``optimizer.iterations`` to the decays instead. The global steps live per process,
    one per ``graph`` key, as TensorFlow's eager default graph keeps one:
    :func:`reset_default_graph` forgets the default one.

    Raises:
        ConfigError: it exists already (as TF raises "'global_step' already exists.").
        MissingDependencyError: ``variable=True`` without TensorFlow installed.

    Example:
        >>> marker = object()
        >>> create_global_step(marker).step
        0
    """
    if not isinstance(variable, bool):
        raise ConfigError("variable", "must be a bool", variable)
    key = graph
    if key in _GLOBAL_STEPS:
        raise ConfigError(
            "global_step",
            "already exists; use get_or_create_global_step() to reuse it",
            _GLOBAL_STEPS[key],
        )
    step: Any = _new_variable() if variable else Clock("global_step")
    _GLOBAL_STEPS[key] = step
    return step


def _new_variable() -> Any:
    """TensorFlow's eager ``global_step`` variable."""
    tf = require("tensorflow", "tf", "globalstep.compat.tf.create_global_step(variable=True)")
    with tf.init_scope(), tf.device("cpu:0"):
        return tf.Variable(
            0,
            dtype=tf.int64,
            trainable=False,
            name="global_step",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )


def get_or_create_global_step(graph: Any = None, *, variable: bool = False) -> Any:
    """Returns the global step of ``graph``, creating it first if needed (see
    :func:`create_global_step`: a Clock, or TF's ``global_step`` variable with
    ``variable=True``).

    Raises:
        ConfigError: the existing global step is of the other kind (a Clock where
            ``variable=True`` asks for a TF variable, or the reverse).

    Example:
        >>> marker = object()
        >>> get_or_create_global_step(marker) is get_or_create_global_step(marker)
        True
    """
    step = _graph_step(graph)
    if step is None:
        return create_global_step(graph, variable=variable)
    if isinstance(step, Clock) == variable:
        have, want = ("a Clock", "a TF variable") if variable else ("a TF variable", "a Clock")
        raise ConfigError(
            "variable",
            f"asks for {want}, but the global step of this graph is {have} already",
            variable,
            f"Pass variable={not variable!r}, or reset_default_graph() (a test) first.",
        )
    return step


def reset_default_graph() -> None:
    """Forgets the default graph's global step, as ``tf.compat.v1.reset_default_graph()``
    does: the next :func:`get_or_create_global_step` creates a new one at 0 (a test's
    fresh start). Global steps of other ``graph`` keys are kept.

    Example:
        >>> reset_default_graph()
        >>> get_global_step() is None
        True
    """
    _GLOBAL_STEPS.pop(None, None)


def global_step(sess: Any, global_step_tensor: Any) -> int:
    """Returns the step of ``global_step_tensor`` (a Clock, a TF variable or tensor, or an
    int) as a Python int; ``sess`` is unused (eager TensorFlow 2 has no session).

    Raises:
        StepError: a step that is not an int >= 0.

    Example:
        >>> global_step(None, 7)
        7
    """
    if isinstance(global_step_tensor, Clock):
        return global_step_tensor.step
    if _tf_step(global_step_tensor):
        return check_step(_tf_ops().read_step(global_step_tensor))
    return check_step(global_step_tensor)
