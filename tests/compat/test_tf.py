"""Tests for globalstep.compat.tf: TF 1's decays and global-step functions, TF's numbers.

Parity is against tensorflow's own ``tf.compat.v1.train`` functions, eager, called with a
scalar global step as a training loop calls them, and must be bit for bit. TF's vectorised
kernels (a tensor of steps) differ from its own scalar kernels by up to 2 float32 ulps on
pow and exp (Eigen's packet approximations); test_vector_kernels_differ_from_scalar_ones
documents that case and allows exactly that much there.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from globalstep import Clock, ConfigError, StepError
from globalstep._guards import FrozenStepWarning
from globalstep.compat import tf as ctf
from globalstep.compat._common import CompatDifferenceWarning

from .parity import max_ulp, parity_steps

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported once for the module."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("tensorflow")


def _reference(tf, fn, steps, *args, **kwargs):
    """TF's value at each step, one scalar int64 global step at a time."""
    return np.array([fn(*args, tf.constant(int(s), tf.int64), **kwargs)().numpy() for s in steps])


def _ours(fn, steps, *args, **kwargs):
    schedule = fn(*args, 0, **kwargs).schedule
    return schedule.values(steps)


CASES = [
    ("exponential", "exponential_decay", (0.1,), {"decay_steps": 1000, "decay_rate": 0.96}, 1),
    (
        "exponential staircase",
        "exponential_decay",
        (0.1,),
        {"decay_steps": 1000, "decay_rate": 0.5, "staircase": True},
        1,
    ),
    ("natural exp", "natural_exp_decay", (0.1,), {"decay_steps": 100, "decay_rate": 0.5}, 1),
    ("inverse time", "inverse_time_decay", (0.1,), {"decay_steps": 100, "decay_rate": 0.5}, 0),
    (
        "inverse time staircase",
        "inverse_time_decay",
        (0.1,),
        {"decay_steps": 100, "decay_rate": 0.5, "staircase": True},
        0,
    ),
    ("polynomial linear", "polynomial_decay", (0.1,), {"decay_steps": 1000}, 1),
    (
        "polynomial cycle",
        "polynomial_decay",
        (0.1,),
        {"decay_steps": 100, "end_learning_rate": 0.01, "power": 2.0, "cycle": True},
        1,
    ),
    ("cosine", "cosine_decay", (0.1,), {"decay_steps": 1000, "alpha": 0.1}, 1),
    (
        "restarts t_mul 1",
        "cosine_decay_restarts",
        (0.1,),
        {"first_decay_steps": 100, "t_mul": 1.0, "m_mul": 0.9, "alpha": 0.01},
        1,
    ),
    (
        "linear cosine",
        "linear_cosine_decay",
        (0.1,),
        {"decay_steps": 1000, "num_periods": 2.0, "alpha": 0.1},
        1,
    ),
]


def _period(kwargs):
    return kwargs.get("decay_steps") or kwargs.get("first_decay_steps")


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "allowed"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_parity_with_tensorflow(tf, name, args, kwargs, allowed):
    """Each decay equals TF's bit for bit at dense, boundary and large steps."""
    steps = parity_steps([_period(kwargs)])
    reference = _reference(tf, getattr(tf.compat.v1.train, name), steps, *args, **kwargs)
    ours = _ours(getattr(ctf, name), steps, *args, **kwargs)
    assert ours.dtype == np.float32
    assert max_ulp(ours, reference) == 0


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "allowed"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_vector_kernels_differ_from_scalar_ones(tf, name, args, kwargs, allowed):
    """On a tensor of steps TF's own results move by at most 2 ulps where pow/exp/cos apply."""
    steps = parity_steps([_period(kwargs)])
    vector = np.asarray(getattr(tf.compat.v1.train, name)(*args, tf.constant(steps), **kwargs)())
    ours = _ours(getattr(ctf, name), steps, *args, **kwargs)
    assert max_ulp(ours, vector) <= 2 * allowed


def test_restarts_geometric_parity(tf):
    """SGDR with t_mul=2 equals TF's bit for bit, the restart steps included."""
    kwargs = {"first_decay_steps": 100, "t_mul": 2.0, "m_mul": 0.5}
    steps = parity_steps([100, *(100 * (2**k - 1) for k in range(1, 12))], multiples=1)
    reference = _reference(tf, tf.compat.v1.train.cosine_decay_restarts, steps, 0.1, **kwargs)
    ours = _ours(ctf.cosine_decay_restarts, steps, 0.1, **kwargs)
    assert max_ulp(ours, reference) == 0


def test_noisy_without_noise_matches_linear_cosine(tf):
    """With zero variance the noisy decay equals TF's (noiseless) numbers."""
    steps = parity_steps([1000])
    kwargs = {"decay_steps": 1000, "initial_variance": 0.0}
    reference = _reference(tf, tf.compat.v1.train.noisy_linear_cosine_decay, steps, 0.1, **kwargs)
    with pytest.warns(CompatDifferenceWarning, match="unseeded noise"):
        ours = _ours(ctf.noisy_linear_cosine_decay, steps, 0.1, **kwargs)
    assert max_ulp(ours, reference) == 0


def test_piecewise_parity(tf):
    """piecewise_constant equals TF's at every step, the step after each boundary included."""
    boundaries, values = [100, 200, 3000], [1.0, 0.5, 0.1, 0.01]
    steps = parity_steps([100])
    reference = [
        float(
            tf.compat.v1.train.piecewise_constant(
                tf.constant(int(s), tf.int64), boundaries, values
            )()
        )
        for s in steps
    ]
    ours = ctf.piecewise_constant(0, boundaries, values).schedule.values(steps)
    assert max_ulp(ours, np.array(reference)) == 0


def test_seed_exponential_decay_step_zero_is_one():
    """The TF-compat exponential decay is exactly 1.0 at step 0."""
    assert ctf.exponential_decay(1.0, 0, decay_steps=100_000, decay_rate=0.96)() == 1.0


def test_seed_exponential_decay_step_one_is_tfs_float32(tf):
    """At step 1 the TF-compat exponential decay gives exactly TF's float32 value."""
    clock = Clock()
    ours = ctf.exponential_decay(1.0, clock, decay_steps=100_000, decay_rate=0.96)
    clock.tick()
    step = tf.Variable(1, dtype=tf.int64)
    theirs = tf.compat.v1.train.exponential_decay(1.0, step, 100_000, 0.96)()
    assert ours() == float(theirs.numpy())
    assert ours() == float(np.float32(0.9999995827674866))


def test_scalar_steps_match_tf_scalar_path(tf):
    """Called with one step at a time, the exponential decay matches TF's scalar kernel."""
    ours = ctf.exponential_decay(0.1, 0, 1000, 0.96).schedule
    for step in (1, 2, 7, 999, 1000, 1001, 54321):
        theirs = tf.compat.v1.train.exponential_decay(0.1, tf.constant(step), 1000, 0.96)()
        assert ours(step) == float(theirs.numpy())


def test_callable_follows_the_clock():
    """The callable reads the clock at every call."""
    clock = Clock()
    lr = ctf.exponential_decay(1.0, clock, decay_steps=1, decay_rate=0.5)
    clock.tick(2)
    assert lr() == 0.25


def test_int_global_step_is_fixed():
    """With an int global step the value is fixed, as in TF eager mode."""
    assert ctf.exponential_decay(1.0, 1, decay_steps=1, decay_rate=0.5)() == 0.5


def test_repr_shows_the_schedule_and_the_step():
    """repr() of the callable names the Keras-named schedule and the global step."""
    text = repr(ctf.exponential_decay(1.0, 3, decay_steps=10, decay_rate=0.5))
    assert text.startswith("DecayedLearningRate(ExponentialDecay(initial_learning_rate=1.0")
    assert text.endswith(", global_step=3)")


def test_frozen_step_warns():
    """Reading the rate many times at one clock step warns once, naming the clock."""
    clock = Clock("generator")
    lr = ctf.exponential_decay(0.1, clock, 1000, 0.96)
    for _ in range(999):
        lr()
    with pytest.warns(FrozenStepWarning, match="clock 'generator'"):
        lr()


def test_advancing_clock_does_not_warn():
    """Reading the rate once per tick never warns."""
    clock = Clock()
    lr = ctf.exponential_decay(0.1, clock, 1000, 0.96)
    for _ in range(2000):
        lr()
        clock.tick()


def test_create_global_step_raises_if_it_exists():
    """create_global_step raises when the graph has one already, as TF does."""
    graph = object()
    ctf.create_global_step(graph)
    with pytest.raises(ConfigError, match="`global_step` already exists"):
        ctf.create_global_step(graph)


def test_get_or_create_reuses():
    """get_or_create_global_step returns the same clock twice."""
    graph = object()
    assert ctf.get_or_create_global_step(graph) is ctf.get_global_step(graph)


def test_global_step_reads_the_clock():
    """global_step(sess, clock) returns the clock's step."""
    clock = ctf.create_global_step(object())
    clock.tick(3)
    assert ctf.global_step(None, clock) == 3


def test_global_step_refuses_negative():
    """global_step(sess, -1) is refused."""
    with pytest.raises(StepError, match="step=-1"):
        ctf.global_step(None, -1)


def test_missing_global_step():
    """A decay without a global step is refused, as TF does."""
    with pytest.raises(ConfigError, match="`global_step` is required"):
        ctf.exponential_decay(0.1, None, 10, 0.9)


def test_global_step_of_wrong_type():
    """A global step that is neither a Clock nor a number is refused."""
    with pytest.raises(ConfigError, match="`global_step` must be a globalstep Clock"):
        ctf.cosine_decay(0.1, "1.5", 10)


def test_negative_and_float_global_steps_give_tfs_values(tf):
    """A negative or float global step is taken, as TF takes it, with TF's value."""
    train = tf.compat.v1.train
    for step in (-2, -999, 2.5, -0.5):
        for ours, theirs in (
            (ctf.cosine_decay(0.1, step, 10), train.cosine_decay(0.1, step, 10)),
            (
                ctf.exponential_decay(0.1, step, 10, 0.5),
                train.exponential_decay(0.1, step, 10, 0.5),
            ),
        ):
            assert ours() == float(theirs().numpy())


def test_piecewise_before_the_first_boundary_is_the_first_value():
    """piecewise_constant at step -999 gives its first value, as TF does."""
    assert ctf.piecewise_constant(-999, [10, 20], [1.0, 2.0, 3.0])() == 1.0


@pytest.mark.parametrize(
    ("call", "parameter", "value"),
    [
        (lambda: ctf.exponential_decay(0.1, 0, 0, 0.9), "decay_steps", "0"),
        (lambda: ctf.polynomial_decay(0.1, 0, -1), "decay_steps", "-1"),
        (lambda: ctf.natural_exp_decay(0.1, 0, 10, float("nan")), "decay_rate", "nan"),
        (lambda: ctf.piecewise_constant(0, [1, 2], [1.0]), "boundaries", r"\[1, 2\]"),
        (lambda: ctf.piecewise_constant(0, [2, 1], [1.0, 2.0, 3.0]), "boundaries", r"\[2, 1\]"),
        (lambda: ctf.linear_cosine_decay(float("inf"), 0, 10), "learning_rate", "inf"),
        (lambda: ctf.noisy_linear_cosine_decay(0.1, 0, 10, seed=-1), "seed", "-1"),
        (lambda: ctf.cosine_decay_restarts(0.1, 0, 10, t_mul=0.0), "t_mul", "0.0"),
    ],
    ids=["zero decay", "negative decay", "NaN rate", "count", "unsorted", "inf", "seed", "t_mul"],
)
def test_invalid_parameter(call, parameter, value):
    """An invalid argument raises ConfigError naming it and the value received."""
    with pytest.raises(ConfigError, match=rf"`{parameter}` .*; got {parameter}={value}"):
        call()


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("exponential_decay", {"decay_steps": 1000, "decay_rate": 0.96}),
        ("polynomial_decay", {"decay_steps": 1000, "end_learning_rate": 0.01, "power": 0.5}),
        ("inverse_time_decay", {"decay_steps": 100, "decay_rate": 0.3, "staircase": True}),
    ],
    ids=["exponential", "polynomial", "inverse time"],
)
def test_float64_parity_with_python_floats_through_float32(tf, name, kwargs):
    """With a float64 rate TF passes Python hyper-parameters through float32; so do we."""
    steps = parity_steps([100])
    lr = np.float64(0.1)
    reference = _reference(tf, getattr(tf.compat.v1.train, name), steps, lr, **kwargs)
    ours = _ours(getattr(ctf, name), steps, lr, **kwargs)
    assert ours.dtype == reference.dtype == np.float64
    assert ours.tolist() == reference.tolist()
    if "decay_rate" in kwargs:
        # The same rate given as float64 skips the float32 pass, and the values move.
        wide = {**kwargs, "decay_rate": np.float64(kwargs["decay_rate"])}
        assert _ours(getattr(ctf, name), steps, lr, **wide).tolist() != ours.tolist()


def test_core_float32_exponential_decay_equals_tfs(tf):
    """The core ExponentialDecay with dtype='float32' gives TF's numbers bit for bit."""
    from globalstep.schedules import ExponentialDecay

    steps = parity_steps([1000])
    for staircase in (False, True):
        core = ExponentialDecay(0.1, 1000, 0.96, staircase=staircase, dtype="float32")
        kwargs = {"decay_steps": 1000, "decay_rate": 0.96, "staircase": staircase}
        reference = _reference(tf, tf.compat.v1.train.exponential_decay, steps, 0.1, **kwargs)
        assert max_ulp(core.values(steps), reference) == 0


@pytest.mark.parametrize("rate_type", [float, np.float64], ids=["float rate", "float64 rate"])
@pytest.mark.parametrize("lr_type", [float, np.float64], ids=["float lr", "float64 lr"])
def test_natural_exp_factor_dtype_follows_tf(tf, lr_type, rate_type):
    """natural_exp_decay computes exp(-decay_rate) in the rate's own dtype, as TF does, then
    in the learning rate's: bit for bit with TF for each mix of Python and float64."""
    steps = parity_steps([100], multiples=5)
    kwargs = {"decay_steps": 100, "decay_rate": rate_type(0.3)}
    lr = lr_type(0.1)
    reference = _reference(tf, tf.compat.v1.train.natural_exp_decay, steps, lr, **kwargs)
    ours = _ours(ctf.natural_exp_decay, steps, lr, **kwargs)
    assert ours.dtype == reference.dtype
    assert ours.tolist() == reference.tolist()
