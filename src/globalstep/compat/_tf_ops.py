"""The decays of :mod:`globalstep.compat.tf` computed with TensorFlow ops from a TF step.

Given a ``tf.Variable`` (``get_or_create_global_step(variable=True)``, a seed's own
``tf.Variable(0, trainable=False)``), a Keras variable on the TensorFlow backend
(``optimizer.iterations``) or a tensor as ``global_step``, a decay computes its rate here,
with TensorFlow's own ops in the order TensorFlow's ``learning_rate_schedule`` classes
(which ``tf.compat.v1.train.*_decay`` build) apply them, from the step read at the call. So
the rate is a tensor that follows the variable: eagerly, the value now; inside a
``tf.function``, an op of the graph that reads the variable at each run. The kernels are
TensorFlow's, so the values are TensorFlow's bit for bit in both modes.

One difference, the noisy decay's (as on a Clock): TensorFlow draws unseeded noise at each
call; here the draw at a step is the Clock's, a pure function of ``(seed, step)``
(:func:`globalstep.schedules._cosine.standard_normal`), drawn on the host (through
``tf.numpy_function`` in a graph, so that decay alone cannot be compiled with XLA), and
the rest is TensorFlow's ops. Eagerly the rate is the Clock's bit for bit; in a graph,
TensorFlow's graph optimizer (Grappler) rewrites the arithmetic around the draw, which can
move the last bits (as it does for TensorFlow's own decay, whose graph this one is).

This module imports TensorFlow: :mod:`globalstep.compat.tf` imports it only once it is
given a TensorFlow object, which means TensorFlow is imported already.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from globalstep._errors import ConfigError
from globalstep.compat import _tf_schedules as _tfs
from globalstep.schedules import standard_normal

__all__ = [
    "eager_step",
    "is_step",
    "is_variable",
    "passes_through",
    "rate_fn",
    "read_step",
    "step_dtype",
]


def passes_through(err: ConfigError) -> ConfigError:
    """``err``, marked so that AutoGraph lets it out of a ``tf.function`` as it is (it
    rewrites an error raised inside into a StagingError otherwise)."""
    setattr(err, "ag_pass_through", True)  # noqa: B010 (an attribute ConfigError lacks)
    return err


def is_step(value: Any) -> bool:
    """Whether ``value`` is a TensorFlow tensor or variable (a Keras variable on the
    TensorFlow backend is one)."""
    return bool(tf.is_tensor(value))


def is_variable(value: Any) -> bool:
    """Whether ``value`` is a variable (TF's or Keras'), which a loop advances."""
    return isinstance(value, tf.Variable) or callable(getattr(value, "assign_add", None))


def eager_step(value: Any) -> int | None:
    """The int step of a variable now, eagerly; None in a graph (where it cannot be read)."""
    if not tf.executing_eagerly():
        return None
    return int(value.numpy())


def step_dtype(value: Any) -> np.dtype[Any]:
    """The NumPy dtype of a TF step; raises ConfigError unless it is a real scalar."""
    dtype = tf.as_dtype(value.dtype).base_dtype
    shape = tf.TensorShape(value.shape)
    if not (dtype.is_integer or dtype.is_floating) or dtype.is_quantized:
        raise ConfigError(
            "global_step",
            "must be a tensor or variable of an int or float dtype",
            value,
            "Pass an int64 step: globalstep.compat.tf.get_or_create_global_step("
            "variable=True) or optimizer.iterations.",
        )
    if shape.rank != 0:
        raise ConfigError(
            "global_step",
            f"must be a scalar (shape ()); has shape {shape}",
            value,
            "Pass one step, a scalar variable or tensor.",
        )
    numpy_dtype: np.dtype[Any] = np.dtype(dtype.as_numpy_dtype)
    return numpy_dtype


def read_step(value: Any) -> Any:
    """The step of a TF variable or tensor now, as a Python int (or float)."""
    if not tf.executing_eagerly():
        raise passes_through(
            ConfigError(
                "global_step_tensor",
                "cannot be read as a number inside a tf.function being traced",
                value,
                "Read it outside the traced function, or use the variable itself in it.",
            )
        )
    step_dtype(value)
    return tf.convert_to_tensor(value).numpy().item()


def rate_fn(schedule: Any) -> Callable[[Any], Any]:
    """The function of a TF step that computes ``schedule``'s rate with TensorFlow's ops,
    in TensorFlow's name scope (the schedule's ``name``, else TensorFlow's default)."""
    for kind, scope, formula in _FORMULAS:
        if type(schedule) is kind:
            if kind is _tfs.LinearCosineDecay and schedule.initial_variance is not None:
                scope = "Noisy" + scope
            return _scoped(schedule, scope, formula)
    raise ConfigError("schedule", "has no TensorFlow form", schedule)  # no compat.tf decay


def _scoped(s: Any, scope: str, formula: _Formula) -> Callable[[Any], Any]:
    """``formula(s, step, name)`` at each call, inside ``tf.name_scope`` as TF's
    ``__call__`` opens it (``name``: the scope's, for the op that returns the rate)."""

    def rate(step: Any) -> Any:
        with tf.name_scope(s.name or scope) as name:
            return formula(s, step, name)

    return rate


def _terms(s: Any, *fields: str) -> tuple[Any, ...]:
    """``initial_learning_rate`` as a tensor, then each of ``fields`` cast to its dtype, in
    order, as TensorFlow's schedules convert and cast them."""
    initial_learning_rate = tf.convert_to_tensor(
        s.initial_learning_rate, name="initial_learning_rate"
    )
    dtype = initial_learning_rate.dtype
    return (initial_learning_rate, *(tf.cast(getattr(s, f), dtype) for f in fields))


def _decay_terms(s: Any, step: Any) -> tuple[Any, Any, Any]:
    """The initial rate, the decay rate and ``step / decay_steps`` (floored for a
    staircase), cast as TensorFlow's exponential and inverse-time decays cast them."""
    initial_learning_rate, decay_steps, decay_rate = _terms(s, "decay_steps", "decay_rate")
    p = tf.cast(step, initial_learning_rate.dtype) / decay_steps
    if s.staircase:
        p = tf.floor(p)
    return initial_learning_rate, decay_rate, p


def _exponential(s: Any, step: Any, name: str) -> Any:
    initial_learning_rate, decay_rate, p = _decay_terms(s, step)
    return tf.multiply(initial_learning_rate, tf.pow(decay_rate, p), name=name)


def _inverse_time(s: Any, step: Any, name: str) -> Any:
    initial_learning_rate, decay_rate, p = _decay_terms(s, step)
    const = tf.cast(tf.constant(1), initial_learning_rate.dtype)
    denom = tf.add(const, tf.multiply(decay_rate, p))
    return tf.divide(initial_learning_rate, denom, name=name)


def _polynomial(s: Any, step: Any, name: str) -> Any:
    initial_learning_rate, end_learning_rate, power = _terms(s, "end_learning_rate", "power")
    dtype = initial_learning_rate.dtype
    global_step_recomp = tf.cast(step, dtype)
    decay_steps_recomp = tf.cast(s.decay_steps, dtype)
    if s.cycle:
        multiplier = tf.where(
            tf.equal(global_step_recomp, 0),
            tf.constant(1.0, dtype),
            tf.math.ceil(global_step_recomp / s.decay_steps),
        )
        decay_steps_recomp = tf.multiply(decay_steps_recomp, multiplier)
    else:
        global_step_recomp = tf.minimum(global_step_recomp, decay_steps_recomp)
    p = tf.divide(global_step_recomp, decay_steps_recomp)
    return tf.add(
        tf.multiply(initial_learning_rate - end_learning_rate, tf.pow(1 - p, power)),
        end_learning_rate,
        name=name,
    )


def _cosine(s: Any, step: Any, name: str) -> Any:
    initial_learning_rate, decay_steps = _terms(s, "decay_steps")
    global_step_recomp = tf.minimum(tf.cast(step, initial_learning_rate.dtype), decay_steps)
    completed_fraction = global_step_recomp / decay_steps
    cosine_decayed = 0.5 * (1.0 + tf.cos(tf.constant(math.pi) * completed_fraction))
    decayed = (1 - s.alpha) * cosine_decayed + s.alpha
    return tf.multiply(initial_learning_rate, decayed)  # TF names no op here


def _cosine_restarts(s: Any, step: Any, name: str) -> Any:
    initial_learning_rate, first_decay_steps, alpha, t_mul, m_mul = _terms(
        s, "first_decay_steps", "alpha", "t_mul", "m_mul"
    )
    completed_fraction = tf.cast(step, initial_learning_rate.dtype) / first_decay_steps

    def compute_step(fraction: Any, geometric: bool) -> tuple[Any, Any]:
        if geometric:
            i_restart = tf.floor(tf.math.log(1.0 - fraction * (1.0 - t_mul)) / tf.math.log(t_mul))
            sum_r = (1.0 - t_mul**i_restart) / (1.0 - t_mul)
            fraction = (fraction - sum_r) / t_mul**i_restart
        else:
            i_restart = tf.floor(fraction)
            fraction -= i_restart
        return i_restart, fraction

    i_restart, completed_fraction = tf.cond(
        tf.equal(t_mul, 1.0),
        lambda: compute_step(completed_fraction, geometric=False),
        lambda: compute_step(completed_fraction, geometric=True),
    )
    m_fac = m_mul**i_restart
    cosine_decayed = 0.5 * m_fac * (1.0 + tf.cos(tf.constant(math.pi) * completed_fraction))
    decayed = (1 - alpha) * cosine_decayed + alpha
    return tf.multiply(initial_learning_rate, decayed, name=name)


def _linear_cosine(s: Any, step: Any, name: str) -> Any:
    initial_learning_rate, decay_steps, num_periods, alpha, beta = _terms(
        s, "decay_steps", "num_periods", "alpha", "beta"
    )
    dtype = initial_learning_rate.dtype
    global_step_recomp = tf.minimum(tf.cast(step, dtype), decay_steps)
    linear_decayed = (decay_steps - global_step_recomp) / decay_steps
    if s.initial_variance is not None:
        initial_variance = tf.cast(s.initial_variance, dtype)
        variance_decay = tf.cast(s.variance_decay, dtype)
        variance = initial_variance / tf.pow(1.0 + global_step_recomp, variance_decay)
        noise = _seeded_noise(s.seed or 0, step, dtype)
        linear_decayed = linear_decayed + noise * tf.sqrt(variance)
    completed_fraction = global_step_recomp / decay_steps
    fraction = 2.0 * num_periods * completed_fraction
    cosine_decayed = 0.5 * (1.0 + tf.cos(tf.constant(math.pi) * fraction))
    linear_cosine_decayed = (alpha + linear_decayed) * cosine_decayed + beta
    return tf.multiply(initial_learning_rate, linear_cosine_decayed, name=name)


def _seeded_noise(seed: int, step: Any, dtype: Any) -> Any:
    """The standard normal draw at ``step``, as on a Clock: ``(seed, int64 step)`` alone,
    drawn on the host."""
    numpy_dtype = dtype.as_numpy_dtype

    def draw(s: Any) -> Any:
        steps = np.asarray(s, dtype=np.int64).reshape(1)
        return np.asarray(standard_normal(seed, steps)[0], dtype=numpy_dtype)

    steps = tf.cast(step, tf.int64)
    if tf.executing_eagerly():
        return tf.constant(draw(steps.numpy()), dtype)
    return tf.ensure_shape(tf.numpy_function(draw, [steps], dtype, stateful=False), ())


def _piecewise(s: Any, step: Any, name: str) -> Any:
    values = [tf.convert_to_tensor(v) for v in s.values_]
    x_recomp = tf.convert_to_tensor(step)
    boundaries = [tf.cast(tf.convert_to_tensor(b), x_recomp.dtype) for b in s.boundaries]
    # TF's tf.case over the intervals, with the boundaries strictly increasing (as the
    # schedule checks): the interval that holds x is the count of boundaries below it, and
    # no interval holds NaN (values[0], TF's default).
    index = tf.add_n([tf.cast(x_recomp > b, tf.int32) for b in boundaries])
    return tf.gather(tf.stack(values), index)


_Formula = Callable[[Any, Any, str], Any]
# (the schedule class, TensorFlow's default name scope, the formula in TensorFlow's ops)
_FORMULAS: tuple[tuple[type[Any], str, _Formula], ...] = (
    (_tfs.ExponentialDecay, "ExponentialDecay", _exponential),
    (_tfs.InverseTimeDecay, "InverseTimeDecay", _inverse_time),
    (_tfs.PolynomialDecay, "PolynomialDecay", _polynomial),
    (_tfs.CosineDecay, "CosineDecay", _cosine),
    (_tfs.CosineDecayRestarts, "SGDRDecay", _cosine_restarts),
    (_tfs.LinearCosineDecay, "LinearCosineDecay", _linear_cosine),
    (_tfs.PiecewiseConstantDecay, "PiecewiseConstant", _piecewise),
)
