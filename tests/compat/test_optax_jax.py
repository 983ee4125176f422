"""compat.optax under JAX: the two meanings of parity with optax, over a sweep of configurations.

*Eager parity*: a count given as a concrete ``jax.Array`` (int32, as optax's optimizers hold
it), a NumPy array or a float gives optax's eager value bit for bit. *Jitted parity*: inside
``jax.jit`` (and ``jax.vmap``), a traced count gives optax's jitted value bit for bit. The two
are not the same numbers (XLA fuses float32 kernels under jit), which one test shows.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from globalstep.compat import optax as co

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
optax = pytest.importorskip("optax")

KW = {"init_value": 0.0, "peak_value": 0.1, "warmup_steps": 10, "decay_steps": 100}
SWEEP = [
    ("constant_schedule", (0.1,), {}),
    ("linear_schedule", (0.1, 0.001, 1000), {"transition_begin": 10}),
    ("linear_schedule", (0.1, 0.001, 0), {}),
    ("polynomial_schedule", (0.1, 0.001, 2, 1000), {}),
    ("polynomial_schedule", (0.3, 0.01, 0.5, 77), {"transition_begin": 5}),
    ("exponential_decay", (0.1, 1000, 0.96), {}),
    ("exponential_decay", (0.1, 7, 0.5), {"transition_begin": 7, "staircase": True}),
    ("exponential_decay", (0.1, 13, 1.5), {"end_value": 0.5}),
    ("exponential_decay", (0.1, 13, 0.0), {}),
    ("piecewise_constant_schedule", (0.1, {100: 0.5, 300: 0.1}), {}),
    ("piecewise_constant_schedule", (-0.3, None), {}),
    ("piecewise_interpolate_schedule", ("linear", 200.0, {5: 1.5, 10: 0.25}), {}),
    ("piecewise_interpolate_schedule", ("cosine", 0.4, {0: 2.0, 30: 0.1, 90: 0.5}), {}),
    ("cosine_decay_schedule", (0.1, 1000), {"alpha": 0.1}),
    ("cosine_decay_schedule", (0.1, 333), {"exponent": 2.0}),
    ("warmup_constant_schedule", (0.0, 0.1, 25), {}),
    ("warmup_cosine_decay_schedule", (0.0, 0.1, 10, 1000), {}),
    ("warmup_cosine_decay_schedule", (1e-6, 3e-4, 0, 301), {"end_value": 1e-5, "exponent": 1.5}),
    ("warmup_exponential_decay_schedule", (0.0, 0.1, 10, 100, 0.9), {"staircase": True}),
    ("sgdr_schedule", ([KW, {**KW, "peak_value": 0.05}],), {}),
    ("cosine_onecycle_schedule", (1000, 0.1), {}),
    ("linear_onecycle_schedule", (997, 0.1), {"pct_start": 0.25}),
]
IDS = [f"{i}-{name}" for i, (name, _, _) in enumerate(SWEEP)]
COUNTS = np.array(
    [*range(0, 40), 99, 100, 101, 299, 300, 301, 333, 500, 997, 999, 1000, 1001, 12345, 2**24 + 1],
    dtype=np.int32,
)


def build(name, args, kwargs):
    """The optax schedule and ours, for one configuration."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(optax, name)(*args, **kwargs), getattr(co, name)(*args, **kwargs)


def bits(values):
    """The values as float32 bit patterns, for a bit-for-bit comparison."""
    return np.asarray(values, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize(("name", "args", "kwargs"), SWEEP, ids=IDS)
def test_jitted_parity(name, args, kwargs):
    """Under jax.jit (a traced int32 count, vmapped), each schedule equals optax's jitted
    values bit for bit."""
    theirs, ours = build(name, args, kwargs)
    counts = jnp.asarray(COUNTS)
    expected = jax.jit(jax.vmap(lambda c: jnp.asarray(theirs(c), jnp.float32)))(counts)
    got = jax.jit(jax.vmap(lambda c: jnp.asarray(ours(c), jnp.float32)))(counts)
    np.testing.assert_array_equal(bits(got), bits(expected))


@pytest.mark.parametrize(("name", "args", "kwargs"), SWEEP, ids=IDS)
def test_jitted_scalar_parity(name, args, kwargs):
    """jax.jit of the schedule itself, called with one count at a time as optax's tests do,
    equals optax's bit for bit."""
    theirs, ours = build(name, args, kwargs)
    for count in (0, 9, 10, 11, 100, 301, 1000):
        np.testing.assert_array_equal(
            bits(jax.jit(ours)(count)), bits(jax.jit(theirs)(count)), err_msg=str(count)
        )


@pytest.mark.parametrize(("name", "args", "kwargs"), SWEEP, ids=IDS)
def test_eager_parity_with_jax_counts(name, args, kwargs):
    """Called eagerly with an int32 jax.Array count (as optax's optimizers hold it), each
    schedule equals optax's eager value bit for bit, and returns a jax.Array as optax does."""
    theirs, ours = build(name, args, kwargs)
    for count in COUNTS[::3]:
        c = jnp.asarray(count)
        got, expected = ours(c), theirs(c)
        assert type(got) is type(expected)
        np.testing.assert_array_equal(bits(got), bits(expected), err_msg=str(count))


@pytest.mark.parametrize(("name", "args", "kwargs"), SWEEP, ids=IDS)
def test_eager_parity_with_python_ints(name, args, kwargs):
    """Called with Python ints, and through values(), each schedule equals optax's eager
    value bit for bit."""
    theirs, ours = build(name, args, kwargs)
    expected = np.array([np.asarray(theirs(int(c)), dtype=np.float32) for c in COUNTS])
    np.testing.assert_array_equal(bits([ours(int(c)) for c in COUNTS]), bits(expected))
    np.testing.assert_array_equal(bits(ours.values(COUNTS)), bits(expected))


@pytest.mark.parametrize(
    "count",
    [np.arange(5), np.int64(7), 2.5, np.float32(3.5), jnp.arange(3.0)],
    ids=["numpy array", "numpy int", "float", "numpy float", "jax float array"],
)
def test_arrays_and_floats_in_give_optax_out(count):
    """NumPy arrays and scalars and float counts give what optax gives, same shape, same
    dtype, same bits."""
    theirs, ours = build("warmup_cosine_decay_schedule", (0.0, 0.1, 2, 10), {})
    got, expected = ours(count), theirs(count)
    assert np.shape(got) == np.shape(expected)
    assert np.asarray(got).dtype == np.asarray(expected).dtype
    np.testing.assert_array_equal(bits(got), bits(expected))


def test_jitted_and_eager_are_two_meanings():
    """optax's own jitted values differ from its eager ones at some counts of a warm-up
    cosine schedule, and ours follow each."""
    theirs, ours = build("warmup_cosine_decay_schedule", (0.0, 3e-4, 10, 301), {})
    counts = jnp.arange(301, dtype=jnp.int32)
    jitted = jax.jit(jax.vmap(theirs))(counts)
    eager = np.array([np.asarray(theirs(int(c))) for c in range(301)])
    differ = bits(jitted) != bits(eager)
    assert differ.any()
    np.testing.assert_array_equal(bits(jax.jit(jax.vmap(ours))(counts)), bits(jitted))
    np.testing.assert_array_equal(bits(ours.values(np.arange(301))), bits(eager))


def test_schedule_as_optax_learning_rate_under_jit():
    """optax.adamw with a compat schedule, jitted, updates parameters bit for bit as with
    optax's own schedule."""
    params = {"w": jnp.linspace(-1.0, 1.0, 8)}

    def run(schedule):
        opt = optax.adamw(schedule, weight_decay=1e-2)

        @jax.jit
        def step(p, s):
            grads = jax.grad(lambda q: jnp.sum(jnp.sin(q["w"]) ** 2))(p)
            updates, s = opt.update(grads, s, p)
            return optax.apply_updates(p, updates), s

        p, s = params, opt.init(params)
        for _ in range(30):
            p, s = step(p, s)
        return p

    theirs, ours = build("warmup_cosine_decay_schedule", (0.0, 0.1, 5, 25), {})
    np.testing.assert_array_equal(bits(run(ours)["w"]), bits(run(theirs)["w"]))


def test_inject_hyperparams_takes_a_compat_schedule():
    """optax.inject_hyperparams records the compat schedule's rate at each count, as with
    optax's own schedule."""
    theirs, ours = build("exponential_decay", (0.1, 3, 0.5), {"staircase": True})
    rates = []
    for schedule in (theirs, ours):
        opt = optax.inject_hyperparams(optax.sgd)(learning_rate=schedule)
        params = jnp.zeros(2)
        state = opt.init(params)
        seen = []
        for _ in range(8):
            _, state = jax.jit(opt.update)(jnp.ones(2), state, params)
            seen.append(np.asarray(state.hyperparams["learning_rate"]))
        rates.append(bits(seen))
    np.testing.assert_array_equal(rates[1], rates[0])
