"""A randomised differential test of compat.optax against optax, bit for bit.

Hypothesis draws a schedule and its arguments over each argument's domain optax accepts
(ints of any sign for the lengths, so optax's constant and fallback cases too; fractions
and ints for values and powers; empty, single and many boundaries, zero scales; rates of
zero, below and above one) and counts at and around every boundary, negative ones, and up
to 2**31 - 1 (the largest int32 count); int and float powers and exponents (an int one is
JAX's ``integer_pow``, products rounded one by one, not ``powf``). Every schedule is
compared with optax's three ways: called with Python ints (and ``values()``), eagerly with
an int32 ``jax.Array``, and under ``jax.jit``; values must be the same float32 bits (NaN
equal to NaN). In CI the seed is fixed (derandomize) and the budget small; the slow mark
runs it at length (GLOBALSTEP_OPTAX_DIFF_EXAMPLES=N for longer). The number of
configurations and counts compared is printed.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from globalstep.compat import optax as co


def _floats(low: float, high: float, **kwargs: object) -> st.SearchStrategy[float]:
    """Floats in [low, high], none of them within 1e-30 of zero but zero itself: the peer's
    XLA and TF CPU kernels flush subnormal intermediates of plain arithmetic to zero, which
    compat deliberately does not (see globalstep.compat._common; the subnormal
    hyper-parameters and results it does flush are tested on their own), so such inputs
    would compare the kernels' flushing rather than the schedules."""
    return st.floats(low, high, **kwargs).filter(lambda v: v == 0 or abs(v) >= 1e-30)  # type: ignore[arg-type]


hypothesis = pytest.importorskip("hypothesis")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
optax = pytest.importorskip("optax")
st = hypothesis.strategies

values = st.one_of(
    _floats(-10.0, 10.0, allow_nan=False),
    st.sampled_from([0.0, 1.0, 0.1, 1e-4, 3e-4, -0.5]),
    st.integers(-5, 5),
)
positive = st.one_of(_floats(1e-6, 10.0), st.sampled_from([0.1, 1.0, 1e-3]))
lengths = st.one_of(st.integers(-3, 20), st.integers(21, 5000))
begins = st.integers(-3, 300)
scales = st.dictionaries(st.integers(-5, 3000), _floats(0.0, 3.0), max_size=4)


@st.composite
def configurations(draw):
    """A schedule name and arguments optax accepts."""
    name = draw(
        st.sampled_from(
            [
                "constant_schedule",
                "linear_schedule",
                "polynomial_schedule",
                "exponential_decay",
                "piecewise_constant_schedule",
                "piecewise_interpolate_schedule",
                "cosine_decay_schedule",
                "warmup_constant_schedule",
                "warmup_cosine_decay_schedule",
                "warmup_exponential_decay_schedule",
                "cosine_onecycle_schedule",
                "linear_onecycle_schedule",
                "sgdr_schedule",
            ]
        )
    )
    v = draw(values)
    if name == "constant_schedule":
        return name, {"value": v}
    if name == "linear_schedule":
        return name, {
            "init_value": v,
            "end_value": draw(values),
            "transition_steps": draw(lengths),
            "transition_begin": draw(begins),
        }
    if name == "polynomial_schedule":
        return name, {
            "init_value": v,
            "end_value": draw(values),
            "power": draw(st.one_of(st.integers(-2, 5), _floats(0.1, 4.0))),
            "transition_steps": draw(lengths),
            "transition_begin": draw(begins),
        }
    if name in ("exponential_decay", "warmup_exponential_decay_schedule"):
        kwargs = {
            "transition_steps": draw(lengths),
            "decay_rate": draw(st.one_of(_floats(0.0, 2.0), st.just(0.0))),
            "transition_begin": draw(begins),
            "staircase": draw(st.booleans()),
            "end_value": draw(st.one_of(st.none(), positive)),
        }
        if name == "exponential_decay":
            return name, {"init_value": v, **kwargs}
        return name, {
            "init_value": v,
            "peak_value": draw(values),
            "warmup_steps": draw(lengths),
            **kwargs,
        }
    if name == "piecewise_constant_schedule":
        return name, {"init_value": v, "boundaries_and_scales": draw(st.none() | scales)}
    if name == "piecewise_interpolate_schedule":
        return name, {
            "interpolate_type": draw(st.sampled_from(["linear", "cosine"])),
            "init_value": v,
            "boundaries_and_scales": draw(st.none() | scales),
        }
    if name == "cosine_decay_schedule":
        return name, {
            "init_value": v,
            "decay_steps": draw(st.integers(1, 5000)),
            "alpha": draw(_floats(0.0, 1.0)),
            "exponent": draw(st.sampled_from([1.0, 2.0, 0.5, 1.5, 3, 4, -1])),
        }
    if name == "warmup_constant_schedule":
        return name, {"init_value": v, "peak_value": draw(values), "warmup_steps": draw(lengths)}
    if name in ("warmup_cosine_decay_schedule", "sgdr_schedule"):
        warmup = draw(st.integers(-3, 200))
        kwargs = {
            "init_value": v,
            "peak_value": draw(values),
            "warmup_steps": warmup,
            "decay_steps": warmup + draw(st.integers(1, 2000)),
            "end_value": draw(values),
            "exponent": draw(st.sampled_from([1.0, 2.0, 0.5, 3])),
        }
        if name == "sgdr_schedule":
            return name, {"cosine_kwargs": [kwargs] * draw(st.integers(1, 3))}
        return name, kwargs
    kwargs = {
        "transition_steps": draw(st.integers(1, 5000)),
        "peak_value": v,
        "pct_start": draw(_floats(0.0, 0.5)),
        "div_factor": draw(_floats(1.0, 100.0)),
        "final_div_factor": draw(_floats(1.0, 1e4)),
    }
    if name == "linear_onecycle_schedule":
        kwargs["pct_final"] = draw(_floats(0.5, 1.0))
    return name, kwargs


def edges(kwargs):
    """Counts at and around every number among the arguments (boundaries, lengths)."""
    found = {0, 2**31 - 1, 10**6, 123457}
    stack = [kwargs]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            found.update({item - 1, item, item + 1, 2 * item, 2 * item + 1})
    return sorted(c for c in found if -10 <= c <= 2**31 - 1)


def bits(x):
    """float32 bits, with every NaN the same."""
    a = np.asarray(x, dtype=np.float32).reshape(-1)
    return np.where(np.isnan(a), np.float32(np.nan), a).view(np.uint32)


TALLY = {"configurations": 0, "counts": 0}
# The slow search's budget; GLOBALSTEP_OPTAX_DIFF_EXAMPLES=N searches longer.
LONG_EXAMPLES = int(os.environ.get("GLOBALSTEP_OPTAX_DIFF_EXAMPLES", "150"))


def check(config, extra):
    """Compares one configuration with optax three ways."""
    name, kwargs = config
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = getattr(optax, name)(**kwargs)
        ours = getattr(co, name)(**kwargs)
    counts = sorted(set(edges(kwargs)) | set(extra))
    expected = np.array([np.asarray(theirs(c), dtype=np.float32) for c in counts])
    np.testing.assert_array_equal(bits([ours(c) for c in counts]), bits(expected))
    nonnegative = [c for c in counts if c >= 0]
    expected_nonnegative = expected[[i for i, c in enumerate(counts) if c >= 0]]
    np.testing.assert_array_equal(bits(ours.values(nonnegative)), bits(expected_nonnegative))
    as_jax = jnp.asarray(counts, dtype=jnp.int32)
    for c in as_jax[:8]:
        np.testing.assert_array_equal(bits(ours(c)), bits(theirs(c)))
    jitted = jax.jit(jax.vmap(lambda c: jnp.asarray(theirs(c), jnp.float32)))(as_jax)
    got = jax.jit(jax.vmap(lambda c: jnp.asarray(ours(c), jnp.float32)))(as_jax)
    np.testing.assert_array_equal(bits(got), bits(jitted))
    TALLY["configurations"] += 1
    TALLY["counts"] += len(counts)


def run(capsys, examples, derandomize):
    """Runs the property with a budget and prints what was compared."""
    TALLY.update(configurations=0, counts=0)

    @hypothesis.settings(
        max_examples=examples,
        derandomize=derandomize,
        deadline=None,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(configurations(), st.lists(st.integers(-10, 2**31 - 1), max_size=5))
    @hypothesis.example(  # found at length: 0 ** negative before the decay begins
        config=(
            "exponential_decay",
            {"init_value": 0.0, "transition_steps": 1, "decay_rate": 3.6e-160},
        ),
        extra=[-3],
    )
    @hypothesis.example(  # found at length: an int power is JAX's integer_pow, not powf
        config=(
            "polynomial_schedule",
            {
                "init_value": 0.0,
                "end_value": 1.0,
                "power": 3,
                "transition_steps": 21,
                "transition_begin": 0,
            },
        ),
        extra=[1],
    )
    @hypothesis.example(  # found at length: no boundaries return the value itself
        config=("piecewise_constant_schedule", {"init_value": 1.4e-45}), extra=[]
    )
    @hypothesis.example(  # found at length: a subnormal end value is read as zero
        config=(
            "warmup_cosine_decay_schedule",
            {
                "init_value": 0.0,
                "peak_value": 1.0,
                "warmup_steps": 0,
                "decay_steps": 1,
                "end_value": -2.05e-45,
            },
        ),
        extra=[],
    )
    def prop(config, extra):
        check(config, extra)

    prop()
    with capsys.disabled():
        print(
            f"\ncompat.optax vs optax: {TALLY['configurations']} configurations, "
            f"{TALLY['counts']} counts, each as Python int, jax.Array eager and jitted: "
            "0 mismatches"
        )
        print("deliberate differences from optax:\n  - " + "\n  - ".join(DELIBERATE))
    assert TALLY["configurations"] > 0


DELIBERATE = [
    "degenerate arguments optax turns into a constant or corrects (transition_steps <= 0, "
    "decay_rate == 0, negative transition_begin, join_schedules boundaries) behave as in "
    "optax and also warn OptaxScheduleWarning",
    "hyper-parameters are numbers (optax: also arrays); lengths are ints; an empty "
    "join_schedules/sgdr_schedule list raises at construction (optax: at the first call)",
    "a Python-int count returns a Python float (optax: a 0-d jax.Array of the same value); "
    "counts past int32 are computed in int64 (optax raises or overflows)",
    "a Python-int count is computed as XLA's CPU kernels compute it (on a GPU optax's own "
    "eager value may differ in the last bits; arrays and tracers run optax's program)",
]


def test_differential_against_optax(capsys):
    """Drawn configurations equal optax bit for bit (fixed seed, CI budget)."""
    run(capsys, 20, derandomize=True)


@pytest.mark.slow
def test_differential_against_optax_at_length(capsys):
    """Drawn configurations equal optax bit for bit (fixed seed, long budget: about 45 s)."""
    run(capsys, LONG_EXAMPLES, derandomize=True)
