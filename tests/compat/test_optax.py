"""Tests for globalstep.compat.optax: optax's schedules, optax's names and numbers.

Parity is against optax's own schedules called eagerly (un-jitted) with one Python int
count at a time, JAX's default 32-bit types; counts stop at 2**31 - 1, the largest JAX's
int32 count accepts, except where optax takes 10**12 too (constant, exponential and cosine
decay), which are checked there. Every case is bit for bit at these counts, and on random
arguments too (the C library's float32 pow and cos, as XLA's eager kernels call them; see
globalstep.compat._common).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from globalstep import ConfigError, StepError
from globalstep.compat import optax as co

from .parity import max_ulp, parity_steps


@pytest.fixture(scope="module")
def optax():
    """optax, imported once for the module."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("optax")


KW = {"init_value": 0.0, "peak_value": 0.1, "warmup_steps": 10, "decay_steps": 100}
# (id, optax function, args, kwargs, period, parity_steps' other arguments: where else the
# schedule changes course, and the largest count optax takes).
CASES = [
    ("constant", "constant_schedule", (0.1,), {}, 10, {"largest": 10**12}),
    (
        "linear",
        "linear_schedule",
        (0.1, 0.001, 1000),
        {"transition_begin": 10},
        1000,
        {"boundaries": (10, 1010)},
    ),
    ("polynomial int power", "polynomial_schedule", (0.1, 0.001, 2, 1000), {}, 1000, {}),
    ("polynomial float power", "polynomial_schedule", (0.1, 0.001, 0.5, 100), {}, 100, {}),
    ("exponential", "exponential_decay", (0.1, 1000, 0.96), {}, 1000, {"largest": 10**12}),
    (
        "exponential staircase",
        "exponential_decay",
        (0.1, 100, 0.5),
        {"transition_begin": 7, "staircase": True, "end_value": 1e-4},
        100,
        {"begin": 7, "largest": 10**12},
    ),
    ("piecewise", "piecewise_constant_schedule", (0.1, {100: 0.5, 300: 0.1}), {}, 100, {}),
    ("cosine", "cosine_decay_schedule", (0.1, 1000), {"alpha": 0.1}, 1000, {"largest": 10**12}),
    (
        "cosine exponent",
        "cosine_decay_schedule",
        (0.1, 1000),
        {"exponent": 2.0},
        1000,
        {"largest": 10**12},
    ),
    (
        "warmup cosine",
        "warmup_cosine_decay_schedule",
        (0.0, 0.1, 10, 1000),
        {},
        10,
        {"boundaries": (1000,)},
    ),
    (
        "warmup exponential",
        "warmup_exponential_decay_schedule",
        (0.0, 0.1, 10, 100, 0.9),
        {},
        100,
        {"begin": 10},
    ),
    ("sgdr", "sgdr_schedule", ([KW, KW],), {}, 100, {"boundaries": (110,)}),
    (
        "cosine onecycle",
        "cosine_onecycle_schedule",
        (1000, 0.1),
        {},
        100,
        {"boundaries": (300, 1000)},
    ),
    (
        "linear onecycle",
        "linear_onecycle_schedule",
        (1000, 0.1),
        {},
        100,
        {"boundaries": (300, 850, 1000)},
    ),
]


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "period", "edges"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_parity_with_optax(optax, name, args, kwargs, period, edges):
    """Each schedule equals optax's eager values bit for bit at the parity counts, every
    count where it changes course (minus one, exact, plus one) included."""
    theirs = getattr(optax, name)(*args, **kwargs)
    ours = getattr(co, name)(*args, **kwargs)
    steps = parity_steps([period], **{"largest": 2**31 - 1, "multiples": 12, **edges})
    reference = np.array([np.asarray(theirs(int(s))) for s in steps])
    assert max_ulp(ours.values(steps), reference) == 0


def test_join_schedules_parity(optax):
    """join_schedules equals optax's, each later part restarting its count."""
    theirs = optax.join_schedules(
        [optax.linear_schedule(0.0, 0.1, 10), optax.exponential_decay(0.1, 10, 0.5)], [10]
    )
    ours = co.join_schedules(
        [co.linear_schedule(0.0, 0.1, 10), co.exponential_decay(0.1, 10, 0.5)], [10]
    )
    steps = parity_steps([10], largest=2**31 - 1, multiples=12)
    reference = np.array([np.asarray(theirs(int(s))) for s in steps])
    assert max_ulp(ours.values(steps), reference) == 0


def test_constant_returns_the_value_itself():
    """constant_schedule returns the Python value, as optax does."""
    assert co.constant_schedule(0.1)(7) == 0.1


def test_values_equal_call():
    """values() equals calling one count at a time."""
    lr = co.cosine_onecycle_schedule(100, 1.0)
    steps = np.arange(120)
    assert lr.values(steps).tolist() == [lr(int(s)) for s in steps]


@pytest.mark.parametrize(
    ("name", "args", "kwargs"), [c[1:4] for c in CASES], ids=[c[0] for c in CASES]
)
def test_config_round_trip(name, args, kwargs):
    """from_config(get_config()) builds an equal schedule, with the same values."""
    lr = getattr(co, name)(*args, **kwargs)
    again = co.OptaxSchedule.from_config(lr.get_config())
    assert again == lr
    assert hash(again) == hash(lr)
    assert again.values(np.arange(50)).tolist() == lr.values(np.arange(50)).tolist()


def test_config_names_the_function():
    """Schedules from different functions never compare equal."""
    assert co.constant_schedule(0.5).get_config() == {"fn_name": "constant_schedule", "value": 0.5}
    assert co.linear_schedule(1.0, 0.0, 10) != co.polynomial_schedule(1.0, 0.0, 1, 10)


def test_from_config_of_an_unknown_function():
    """A config naming no optax schedule is refused, naming the key and the value."""
    with pytest.raises(ConfigError, match=r"`config\['fn_name'\]` must be one of .*; got .*'adam'"):
        co.OptaxSchedule.from_config({"fn_name": "adam", "learning_rate": 0.1})


def test_repr_names_the_function():
    """repr shows optax's function and its arguments."""
    assert repr(co.cosine_decay_schedule(0.1, 10)).startswith(
        "cosine_decay_schedule(init_value=0.1"
    )


@pytest.mark.parametrize("count", ["3", None, b"3"], ids=["str", "None", "bytes"])
def test_invalid_count(count):
    """A count that is no number is refused, showing the count received."""
    with pytest.raises(StepError, match=r"`count` must be an int, a float or an array"):
        co.linear_schedule(0.0, 1.0, 10)(count)


def test_negative_count_as_optax(optax):
    """A negative Python-int count gives optax's value (optax takes it), bit for bit."""
    for name, args in [
        ("linear_schedule", (0.1, 0.0, 10)),
        ("exponential_decay", (0.1, 10, 0.5)),
        ("cosine_decay_schedule", (0.1, 10)),
        ("piecewise_interpolate_schedule", ("cosine", 0.1, {5: 0.5})),
    ]:
        ours = getattr(co, name)(*args)(-3)
        assert ours == np.asarray(getattr(optax, name)(*args)(-3)).item(), name


@pytest.mark.parametrize(
    ("call", "parameter", "value"),
    [
        (lambda: co.polynomial_schedule(float("nan"), 0.0, 1, 5), "init_value", "nan"),
        (lambda: co.cosine_decay_schedule(0.1, 0), "decay_steps", "0"),
        (lambda: co.piecewise_constant_schedule(0.1, {5: -1.0}), "boundaries_and_scales", "-1.0"),
        (lambda: co.warmup_cosine_decay_schedule(0.0, 1.0, 10, 10), "decay_steps", "10"),
        (lambda: co.join_schedules([], []), "schedules", r"\[\]"),
        (lambda: co.sgdr_schedule([]), "cosine_kwargs", r"\[\]"),
        (lambda: co.cosine_onecycle_schedule(0, 1.0), "transition_steps", "0"),
        (lambda: co.linear_onecycle_schedule(10, 1.0, div_factor=0.0), "div_factor", "0.0"),
        (lambda: co.linear_schedule(0.0, 1.0, 2.5), "transition_steps", "2.5"),
        (lambda: co.cosine_decay_schedule(float("inf"), 10), "init_value", "inf"),
        (lambda: co.join_schedules([lambda c: 1.0], []), "schedules", ".*"),
        (lambda: co.piecewise_interpolate_schedule("linar", 1.0), "interpolate_type", "'linar'"),
        (
            lambda: co.piecewise_interpolate_schedule("linear", 1.0, {5: -3}),
            "boundaries_and_scales",
            "-3",
        ),
    ],
    ids=[
        "NaN",
        "zero decay",
        "negative scale",
        "decay not past warmup",
        "empty join",
        "empty sgdr",
        "zero onecycle",
        "zero div",
        "float steps",
        "inf",
        "join of a foreign callable",
        "interpolate type",
        "interpolate scale",
    ],
)
def test_invalid_parameter(call, parameter, value):
    """An invalid argument raises ConfigError naming it and the value received."""
    with pytest.raises(ConfigError, match=rf"`{parameter}` .*; got {parameter}={value}"):
        call()


@pytest.mark.parametrize(
    ("args", "count"),
    [((0.1, 1000, 0.5), 125452), ((0.0003, 100, 0.999), 9113345)],
    ids=["continuous", "0.999 per 100"],
)
def test_subnormal_rates_flush_to_zero_as_in_optax(optax, args, count):
    """A float32 rate below the smallest normal number is 0, as XLA flushes it."""
    assert np.asarray(optax.exponential_decay(*args)(count)).item() == 0.0
    ours = co.exponential_decay(*args)
    assert (ours(count), ours.values([count]).tolist()) == (0.0, [0.0])


def test_constant_schedule_keeps_a_tiny_value():
    """constant_schedule returns its Python value itself, a subnormal one included."""
    assert co.constant_schedule(1e-310)(3) == 1e-310


@pytest.mark.parametrize(
    ("name", "args", "count"),
    [
        ("warmup_cosine_decay_schedule", (0.0, 0.0003, 10, 300), 121),
        ("cosine_onecycle_schedule", (12355, 0.0003), 10183),
    ],
    ids=["warmup cosine", "cosine onecycle"],
)
def test_parity_where_rounding_from_float64_differs(optax, name, args, count):
    """Where cos rounded once from float64 is not XLA's (found by random search, 2 ulps
    apart in the result), the schedule still equals optax's bit for bit."""
    theirs = np.asarray(getattr(optax, name)(*args)(count)).item()
    assert getattr(co, name)(*args)(count) == theirs


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: co.linear_schedule(0.1, 1.0, 0), "non-positive `transition_steps`"),
        (lambda: co.polynomial_schedule(0.1, 1.0, 2, -5), "non-positive `transition_steps`"),
        (lambda: co.exponential_decay(0.1, -5, 0.5), "non-positive `transition_steps`"),
        (lambda: co.exponential_decay(0.1, 5, 0.0), "zero `decay_rate`"),
        (lambda: co.warmup_constant_schedule(0.1, 1.0, 0), "non-positive `transition_steps`"),
    ],
    ids=["linear", "polynomial", "exponential steps", "exponential rate", "warmup constant"],
)
def test_degenerate_schedule_is_optax_constant_and_warns(optax, call, match):
    """A schedule optax turns into a constant init_value is that constant here too, with a
    warning that names the argument."""
    with pytest.warns(co.OptaxScheduleWarning, match=match):
        lr = call()
    assert [lr(c) for c in (0, 5, 100)] == [0.1, 0.1, 0.1]
    assert lr.values([0, 5]).tolist() == [0.1, 0.1]


@pytest.mark.parametrize(
    "name", ["linear_schedule", "exponential_decay"], ids=["polynomial", "exponential"]
)
def test_negative_transition_begin_falls_back_to_zero(optax, name):
    """A negative transition_begin is taken as 0, as in optax, and warned about."""
    args = (0.1, 0.0, 10) if name == "linear_schedule" else (0.1, 10, 0.5)
    with pytest.warns(co.OptaxScheduleWarning, match="negative `transition_begin`"):
        ours = getattr(co, name)(*args, transition_begin=-3)
    theirs = getattr(optax, name)(*args, transition_begin=-3)
    assert [ours(c) for c in range(15)] == [np.asarray(theirs(c)).item() for c in range(15)]


@pytest.mark.parametrize(
    ("n", "boundaries", "match"),
    [(2, [5, 10], "one fewer element"), (3, [10, 5], "strictly increasing")],
    ids=["surplus", "unsorted"],
)
def test_join_with_optax_boundaries_warns(optax, n, boundaries, match):
    """join_schedules takes boundaries optax takes (surplus, unsorted) with its values and
    a warning."""
    parts = [co.constant_schedule(1.0), co.linear_schedule(2.0, 0.0, 4), co.constant_schedule(3.0)]
    theirs_parts = [
        optax.constant_schedule(1.0),
        optax.linear_schedule(2.0, 0.0, 4),
        optax.constant_schedule(3.0),
    ]
    with pytest.warns(co.OptaxScheduleWarning, match=match):
        ours = co.join_schedules(parts[:n], boundaries)
    theirs = optax.join_schedules(theirs_parts[:n], boundaries)
    assert [ours(c) for c in range(15)] == [np.asarray(theirs(c)).item() for c in range(15)]


def test_numpy_fn_and_jax_maker_are_the_forms_a_join_runs():
    """A schedule's public parts: its NumPy formula (before flush-to-zero) and the maker of
    its jax.numpy form, which join_schedules and the warm-ups combine."""
    lr = co.exponential_decay(0.1, 10, 0.5, transition_begin=3)
    counts = np.arange(0, 200, dtype=np.int64)
    assert np.asarray(lr.numpy_fn(counts)).tobytes() == lr.values(counts).tobytes()
    joined = co.join_schedules([co.constant_schedule(1.0), lr], [5])
    assert joined.numpy_fn(counts)[7] == lr.numpy_fn(counts)[2]
    jnp = pytest.importorskip("jax.numpy")
    form = lr.jax_maker(jnp)
    assert np.asarray(form(jnp.int32(17))).tobytes() == np.asarray(lr(jnp.int32(17))).tobytes()


def test_schedules_keep_their_public_module():
    """The Keras integration records a compat schedule's module in the model's config and
    imports it back: ``globalstep.compat.optax``, wherever the class's code lives (issue
    34: its door exports it; no ``__module__`` is rewritten)."""
    pytest.importorskip("keras")
    from globalstep.integrations._keras_schedule import _compat_module

    schedule_class = type(co.linear_schedule(1.0, 0.0, 10))
    assert schedule_class.__module__ != "globalstep.compat.optax"  # the code lives elsewhere
    assert _compat_module(schedule_class) == "globalstep.compat.optax"
    assert co.OptaxSchedule.from_config(co.sgdr_schedule([KW]).get_config()) == co.sgdr_schedule(
        [KW]
    )
