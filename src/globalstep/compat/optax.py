"""optax's schedules, with optax's names, arguments, defaults, errors and float32 numbers.

Migrating is renaming an import: ``optax.warmup_cosine_decay_schedule(...)`` becomes
``globalstep.compat.optax.warmup_cosine_decay_schedule(...)``, and the schedule goes to
``optax.adamw(...)`` (or ``optax.inject_hyperparams``) as optax's own would. Each returns a
schedule called with a count (optax's name for the step: optimizer updates applied, see
:mod:`globalstep._clock`).

What a schedule returns depends on what it is called with, as in optax:

- **A Python int** (as a person calls it): a Python float, exactly optax's float32 value for
  that int, computed with NumPy, operation for operation in optax's order, with the C
  library's float32 pow and cos and flush-to-zero, as XLA's eager kernels (see
  :mod:`globalstep.compat._common`), and an int power or exponent as JAX's
  ``integer_pow`` (square and multiply, each product rounded); ``values(counts)`` is the
  vectorised form, bit for bit the same. No framework is imported.
- **Anything else optax takes** (a ``jax.Array``, a tracer inside ``jax.jit``, a NumPy scalar
  or array, a float): the schedule runs optax's own sequence of ``jax.numpy`` operations on
  it and returns what optax returns (a ``jax.Array``, or a tracer). Eagerly this is optax's
  eager value bit for bit; under ``jax.jit`` it is optax's jitted value bit for bit (the same
  program, so XLA compiles and fuses it the same way).

Parity therefore has two meanings, both tested against optax itself: *eager parity* (a
count given as a Python int or a concrete array gives optax's eager result, which is also
what ``values()`` gives) and *jitted parity* (inside ``jax.jit`` the result is optax's
jitted result). The two differ from each other by a few ulps at some counts, because XLA
fuses float32 kernels under jit (and optax's eager values for an int32 array differ from
those for a Python int where optax does its division in Python); neither is "more right".
The NumPy path reproduces XLA's CPU kernels; on a GPU, optax's eager values for a Python
int come from the GPU's kernels and may differ from it in the last bits, while a
``jax.Array`` or traced count still gives the GPU's own optax values (the same program).

Deliberate differences from optax, each warned about or documented:

- A degenerate schedule that optax turns into a constant with an INFO log line
  (``transition_steps <= 0``, ``decay_rate == 0``) or corrects (a negative
  ``transition_begin`` falls back to 0), and ``join_schedules`` whose boundaries are not one
  fewer than the schedules or not increasing (optax ignores the extra ones), behave as in
  optax and also emit :class:`OptaxScheduleWarning` at construction.
- Hyper-parameters are numbers (optax also takes arrays, for a schedule per element);
  ``*_steps`` and ``transition_begin`` are ints; ``join_schedules`` and ``sgdr_schedule``
  refuse an empty list at construction (optax fails at the first call with IndexError).
- A Python-int count returns a Python float (optax: a 0-d ``jax.Array`` of the same value),
  so that no framework is needed; counts beyond int32 (where optax raises or overflows)
  are computed in int64.

The code lives in one module a concept: the :class:`OptaxSchedule` class and its ``jax``
form (``_optax_schedule``), the formulas in NumPy and ``jax.numpy`` (``_optax_formulas``),
the single schedules (``_optax_simple``), and those built from others: warm-ups, joins and
one cycles (``_optax_joins``). This module names them all.

Example:
    >>> lr = warmup_cosine_decay_schedule(0.0, 1.0, warmup_steps=10, decay_steps=110)
    >>> lr(0), lr(10), lr(110)
    (0.0, 1.0, 0.0)
"""

from __future__ import annotations

from globalstep._errors import OptaxScheduleWarning
from globalstep.compat._optax_joins import (
    cosine_onecycle_schedule,
    join_schedules,
    linear_onecycle_schedule,
    sgdr_schedule,
    warmup_cosine_decay_schedule,
    warmup_exponential_decay_schedule,
)
from globalstep.compat._optax_schedule import OptaxSchedule
from globalstep.compat._optax_simple import (
    constant_schedule,
    cosine_decay_schedule,
    exponential_decay,
    linear_schedule,
    piecewise_constant_schedule,
    piecewise_interpolate_schedule,
    polynomial_schedule,
    warmup_constant_schedule,
)

__all__ = [
    "OptaxSchedule",
    "OptaxScheduleWarning",
    "constant_schedule",
    "cosine_decay_schedule",
    "cosine_onecycle_schedule",
    "exponential_decay",
    "join_schedules",
    "linear_onecycle_schedule",
    "linear_schedule",
    "piecewise_constant_schedule",
    "piecewise_interpolate_schedule",
    "polynomial_schedule",
    "sgdr_schedule",
    "warmup_constant_schedule",
    "warmup_cosine_decay_schedule",
    "warmup_exponential_decay_schedule",
]
