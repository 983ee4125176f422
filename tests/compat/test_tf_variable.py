"""globalstep.compat.tf with TensorFlow's own global step: a ``tf.Variable`` (or a Keras
variable, ``optimizer.iterations``) wherever a decay takes ``global_step``.

Every decay, given a TF step, is compared with TensorFlow's own ``tf.compat.v1.train``
decay on the same variable, update by update, eagerly and inside ``tf.function`` (the
decay called in the traced step, and a Keras optimizer whose ``learning_rate`` is the
decay, advanced by ``apply_gradients``), over a few hundred steps: the float32 bits must be
equal. With a Clock, a decay read inside ``tf.function`` must refuse, never freeze.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from globalstep import Clock, ConfigError, StepError, TracingError
from globalstep._guards import FrozenStepWarning
from globalstep.compat import tf as ctf
from globalstep.compat._common import CompatDifferenceWarning

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

STEPS = 300


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported once for the module."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def keras(tf):
    """Keras 3 on the TensorFlow backend (skips elsewhere)."""
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("Keras runs on another backend")
    return keras


@pytest.fixture
def default_graph():
    """A fresh default graph's global step before and after the test."""
    ctf.reset_default_graph()
    yield
    ctf.reset_default_graph()


def run_pairs(train_step):
    """``train_step()`` STEPS times: its first and its second outputs, as two lists."""
    pairs = [train_step() for _ in range(STEPS)]
    return [a.numpy() for a, _ in pairs], [b.numpy() for _, b in pairs]


def bits(values):
    """The float32 bit patterns of ``values``."""
    return np.asarray(values, dtype=np.float32).view(np.uint32)


# ---------------------------------------------------------------------------------------
# The global-step functions


def test_get_or_create_gives_tfs_global_step_variable(tf, default_graph):
    """variable=True gives TF's eager global step: int64, non-trainable, global_step:0."""
    ours = ctf.get_or_create_global_step(variable=True)
    theirs = tf.compat.v1.train.get_or_create_global_step()
    assert isinstance(ours, tf.Variable)
    assert (ours.dtype, ours.shape, ours.trainable) == (theirs.dtype, theirs.shape, False)
    assert ours.name == theirs.name == "global_step:0"
    assert ours.aggregation == theirs.aggregation
    assert int(ours.numpy()) == 0
    assert ctf.get_or_create_global_step(variable=True) is ours
    assert ctf.get_global_step() is ours


def test_create_global_step_variable_raises_if_it_exists(tf, default_graph):
    """create_global_step(variable=True) twice raises, as TF's does."""
    ctf.create_global_step(variable=True)
    with pytest.raises(ConfigError, match="`global_step` already exists"):
        ctf.create_global_step(variable=True)


def test_reset_default_graph_forgets_the_global_step(tf, default_graph):
    """After reset_default_graph() a new global step starts at 0; other graphs keep theirs."""
    graph = object()
    kept = ctf.create_global_step(graph)
    first = ctf.get_or_create_global_step(variable=True)
    first.assign_add(5)
    ctf.reset_default_graph()
    assert ctf.get_global_step() is None
    second = ctf.get_or_create_global_step(variable=True)
    assert second is not first
    assert int(second.numpy()) == 0
    assert ctf.get_global_step(graph) is kept


def test_get_or_create_of_the_other_kind_raises(tf, default_graph):
    """Asking for a variable where a Clock exists (or the reverse) raises, naming both."""
    ctf.get_or_create_global_step()
    with pytest.raises(ConfigError, match=r"asks for a TF variable, but .* is a Clock"):
        ctf.get_or_create_global_step(variable=True)
    ctf.reset_default_graph()
    ctf.get_or_create_global_step(variable=True)
    with pytest.raises(ConfigError, match=r"asks for a Clock, but .* is a TF variable"):
        ctf.get_or_create_global_step()


def test_variable_flag_must_be_a_bool(default_graph):
    """variable='yes' is refused."""
    with pytest.raises(ConfigError, match="`variable` must be a bool"):
        ctf.create_global_step(variable="yes")


def test_global_step_created_inside_tf_function(tf, default_graph):
    """Created at the first trace of a tf.function, it is one variable outside the graph."""

    @tf.function
    def train_step():
        step = ctf.get_or_create_global_step(variable=True)
        step.assign_add(1)

    for _ in range(3):
        train_step()
    assert int(ctf.get_global_step().numpy()) == 3


def test_global_step_reads_a_variable(tf, keras):
    """global_step(sess, variable) is its value as an int; a Keras variable too."""
    step = tf.Variable(7, dtype=tf.int64)
    assert ctf.global_step(None, step) == 7
    assert ctf.global_step(None, keras.Variable(4, dtype="int64")) == 4
    assert tf.compat.v1.train.global_step(None, step) == 7


def test_global_step_refuses_a_negative_variable(tf):
    """A variable at -1 is not a step."""
    with pytest.raises(StepError, match=r"got step=-1\.$"):
        ctf.global_step(None, tf.Variable(-1))


def test_global_step_inside_tf_function_raises(tf):
    """global_step(sess, variable) inside a traced function cannot give a number."""
    step = tf.Variable(1, dtype=tf.int64)
    with pytest.raises(ConfigError, match=r"cannot be read as a number inside a tf\.function"):
        tf.function(lambda: ctf.global_step(None, step))()


# ---------------------------------------------------------------------------------------
# Every decay on a TF step: TensorFlow's own values, update by update, bit for bit

CASES = [
    ("exponential", "exponential_decay", (0.1, 37, 0.96), {}),
    ("exponential staircase", "exponential_decay", (0.1, 37, 0.5), {"staircase": True}),
    ("natural exp", "natural_exp_decay", (0.1, 30, 0.5), {}),
    ("natural exp staircase", "natural_exp_decay", (0.1, 30, 0.5), {"staircase": True}),
    ("inverse time", "inverse_time_decay", (0.1, 30, 0.5), {}),
    ("inverse time staircase", "inverse_time_decay", (0.1, 30, 0.5), {"staircase": True}),
    ("polynomial", "polynomial_decay", (0.1, 250), {"end_learning_rate": 0.01, "power": 2.0}),
    ("polynomial cycle", "polynomial_decay", (0.1, 70), {"power": 0.5, "cycle": True}),
    ("cosine", "cosine_decay", (0.1, 250), {"alpha": 0.1}),
    ("restarts", "cosine_decay_restarts", (0.1, 40), {"t_mul": 2.0, "m_mul": 0.5}),
    ("restarts t_mul 1", "cosine_decay_restarts", (0.1, 40), {"t_mul": 1.0, "alpha": 0.01}),
    ("linear cosine", "linear_cosine_decay", (0.1, 250), {"num_periods": 2.0, "alpha": 0.1}),
    ("noisy, no noise", "noisy_linear_cosine_decay", (0.1, 250), {"initial_variance": 0.0}),
    ("piecewise", "piecewise_constant", ([50, 120, 200], [1.0, 0.5, 0.1, 0.01]), {}),
]
IDS = [c[0] for c in CASES]


def decay(module, name, step, args, kwargs):
    """``module``'s decay ``name`` (compat.tf's or tf.compat.v1.train's) of ``step``."""
    fn = getattr(module, name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompatDifferenceWarning)  # the noisy decay's notice
        if name == "piecewise_constant":
            return fn(step, *args)
        return fn(args[0], step, *args[1:], **kwargs)


def decay_pair(tf, name, step, args, kwargs):
    """(ours, TensorFlow's) decay of ``step``: the same arguments, the same variable."""
    return decay(ctf, name, step, args, kwargs), decay(tf.compat.v1.train, name, step, args, kwargs)


@pytest.mark.parametrize(("name", "args", "kwargs"), [c[1:] for c in CASES], ids=IDS)
def test_eager_loop_gives_tfs_rates(tf, name, args, kwargs):
    """Eagerly, the rate at each step of an assign_add loop is TF's, bit for bit."""
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    ours, theirs = decay_pair(tf, name, step, args, kwargs)
    got, want = [], []
    for _ in range(STEPS):
        rate = ours()
        assert tf.is_tensor(rate)
        got.append(rate.numpy())
        want.append(theirs().numpy())
        step.assign_add(1)
    assert len(set(want)) > 3  # the decay moves over the run
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize(("name", "args", "kwargs"), [c[1:] for c in CASES], ids=IDS)
def test_tf_function_loop_gives_tfs_rates(tf, name, args, kwargs):
    """Called inside one traced tf.function, the rate follows the variable: TF's, bit for bit."""
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    ours, theirs = decay_pair(tf, name, step, args, kwargs)

    @tf.function
    def train_step():
        rates = ours(), theirs()
        step.assign_add(1)
        return rates

    got, want = run_pairs(train_step)
    assert train_step.experimental_get_tracing_count() == 1
    assert len(set(want)) > 3
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize(("name", "args", "kwargs"), [c[1:] for c in CASES], ids=IDS)
def test_optimizer_learning_rate_in_tf_function(tf, keras, name, args, kwargs):
    """A Keras SGD whose learning_rate is the decay of its own iterations, applied in a
    tf.function: each update uses TF's rate (its own decay on the twin optimizer), bit for
    bit. The weight starts each update at 0 with gradient -1, so after it the weight is the
    rate the update used, exactly."""

    def make(decay_fn):
        weight = tf.Variable(0.0)
        optimizer = keras.optimizers.SGD(learning_rate=0.0)
        optimizer.learning_rate = decay_fn(optimizer.iterations)
        optimizer.build([weight])
        return optimizer, weight

    (opt_a, w_a) = make(lambda step: decay(ctf, name, step, args, kwargs))
    (opt_b, w_b) = make(lambda step: decay(tf.compat.v1.train, name, step, args, kwargs))
    minus_one = tf.constant(-1.0)

    @tf.function
    def train_step():
        w_a.assign(0.0)
        w_b.assign(0.0)
        opt_a.apply_gradients([(minus_one, w_a)])
        opt_b.apply_gradients([(minus_one, w_b)])
        return tf.identity(w_a), tf.identity(w_b)

    got, want = run_pairs(train_step)
    assert int(opt_a.iterations.numpy()) == STEPS
    assert len(set(want)) > 3
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_other_step_dtypes_give_tfs_rates(tf, dtype):
    """An int32 step (seed 001's tf.Variable(0, dtype=tf.int32)) or a float32 one: TF's."""
    step = tf.Variable(0, dtype=dtype, trainable=False)
    ours = ctf.cosine_decay_restarts(0.1, step, 40, m_mul=0.5)
    theirs = tf.compat.v1.train.cosine_decay_restarts(0.1, step, 40, m_mul=0.5)

    @tf.function
    def train_step():
        rates = ours(), theirs()
        step.assign_add(tf.cast(1, dtype))
        return rates

    got, want = run_pairs(train_step)
    np.testing.assert_array_equal(bits(got), bits(want))


def test_float64_learning_rate_gives_tfs_float64_rates(tf):
    """A float64 learning rate computes in float64, as TF's does, the bits equal."""
    step = tf.Variable(0, dtype=tf.int64)
    ours = ctf.polynomial_decay(np.float64(0.1), step, 250, power=0.5)
    theirs = tf.compat.v1.train.polynomial_decay(np.float64(0.1), step, 250, power=0.5)
    got, want = [], []
    for _ in range(STEPS):
        got.append(ours().numpy())
        want.append(theirs().numpy())
        step.assign_add(1)
    assert ours().dtype == tf.float64
    np.testing.assert_array_equal(np.array(got).view(np.uint64), np.array(want).view(np.uint64))


def test_noisy_decay_on_a_variable_draws_the_clocks_noise(tf):
    """The noisy decay on a variable draws the Clock's seeded noise: eagerly its rates are
    the Clock's bit for bit; in tf.function TensorFlow's graph optimizer rewrites the
    arithmetic around the draw (as in its own decay's graph), within float32 rounding."""
    step = tf.Variable(0, dtype=tf.int64)
    with pytest.warns(CompatDifferenceWarning, match="unseeded noise"):
        on_variable = ctf.noisy_linear_cosine_decay(0.1, step, 250, seed=3)
    with pytest.warns(CompatDifferenceWarning, match="unseeded noise"):
        on_clock = ctf.noisy_linear_cosine_decay(0.1, Clock(), 250, seed=3)
    want = on_clock.schedule.values(np.arange(STEPS))

    @tf.function
    def traced():
        rate = on_variable()
        step.assign_add(1)
        return rate

    traced_rates = [traced().numpy() for _ in range(STEPS)]
    step.assign(0)
    eager_rates = []
    for _ in range(STEPS):
        eager_rates.append(on_variable().numpy())
        step.assign_add(1)
    np.testing.assert_array_equal(bits(eager_rates), bits(want))
    np.testing.assert_allclose(traced_rates, want, rtol=0, atol=3e-8)  # 4 ulps of 0.1
    assert len(set(want[:250])) == 250  # noisy indeed: no two steps alike


def test_decay_of_a_tensor_step(tf):
    """A tensor (not a variable) is a fixed step, as in TF: its value, TF's bits."""
    ours = ctf.exponential_decay(0.1, tf.constant(55, tf.int64), 37, 0.96)()
    theirs = tf.compat.v1.train.exponential_decay(0.1, tf.constant(55, tf.int64), 37, 0.96)()
    assert bits(ours.numpy()) == bits(theirs.numpy())


# ---------------------------------------------------------------------------------------
# A Clock inside tf.function: the same values eagerly, a clear error when traced


def test_clock_decay_inside_tf_function_raises(tf):
    """A Clock decay read while tf.function traces raises, saying what to pass."""
    clock = Clock()
    lr = ctf.exponential_decay(1.0, clock, 2, 0.5, staircase=True)
    with pytest.raises(
        TracingError,
        match=r"is a globalstep Clock, read in Python inside tf\.function .* frozen learning rate"
        r".*get_or_create_global_step\(variable=True\).* or optimizer\.iterations",
    ):
        tf.function(lambda: lr())()


def test_clock_decay_as_optimizer_rate_in_tf_function_raises(tf, keras):
    """The issue's trap: a Clock decay as a Keras optimizer's learning_rate inside a
    @tf.function train step raises at the first traced call (it gave [1.0] * 8), while
    the same decay on optimizer.iterations follows the updates: 1, 1, 0.5, 0.5, 0.25..."""

    def train(step_of):
        weight = tf.Variable(0.0)
        optimizer = keras.optimizers.SGD(learning_rate=0.0)
        optimizer.learning_rate = ctf.exponential_decay(
            1.0, step_of(optimizer), 2, 0.5, staircase=True
        )

        @tf.function
        def train_step():
            weight.assign(0.0)
            optimizer.apply_gradients([(tf.constant(-1.0), weight)])
            return tf.identity(weight)

        return [float(train_step().numpy()) for _ in range(8)]

    clock = Clock()
    with pytest.raises(TracingError, match=r"globalstep Clock, read in Python inside tf\.function"):
        train(lambda optimizer: clock)
    rates = train(lambda optimizer: optimizer.iterations)
    assert rates == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.125, 0.125]


@pytest.mark.parametrize(("name", "args", "kwargs"), [c[1:] for c in CASES], ids=IDS)
def test_clock_decay_gives_tfs_rates_eagerly_and_refuses_when_traced(tf, keras, name, args, kwargs):
    """With a Clock, never a constant: eagerly a Keras optimizer whose rate is the decay of
    a Clock ticked after each update uses TF's rates (its own decay on the twin optimizer's
    iterations), bit for bit; read inside tf.function, the decay raises."""
    clock = Clock()
    ours = decay(ctf, name, clock, args, kwargs)
    weight, twin_weight = tf.Variable(0.0), tf.Variable(0.0)
    optimizer = keras.optimizers.SGD(learning_rate=ours)
    twin = keras.optimizers.SGD(learning_rate=0.0)
    twin.learning_rate = decay(tf.compat.v1.train, name, twin.iterations, args, kwargs)
    got, want = [], []
    for _ in range(STEPS):
        weight.assign(0.0)
        twin_weight.assign(0.0)
        optimizer.apply_gradients([(tf.constant(-1.0), weight)])
        twin.apply_gradients([(tf.constant(-1.0), twin_weight)])
        clock.tick()
        got.append(weight.numpy())
        want.append(twin_weight.numpy())
    assert len(set(want)) > 3
    np.testing.assert_array_equal(bits(got), bits(want))
    with pytest.raises(TracingError, match=r"is a globalstep Clock, read in Python inside tf\."):
        tf.function(lambda: ours())()


# ---------------------------------------------------------------------------------------
# TF steps that are not steps


def test_non_scalar_step_is_refused(tf):
    """A step of shape (2,) is refused at construction."""
    with pytest.raises(ConfigError, match=r"must be a scalar \(shape \(\)\); has shape \(2,\)"):
        ctf.exponential_decay(0.1, tf.Variable([0, 1]), 10, 0.9)


def test_string_step_is_refused(tf):
    """A string tensor is not a step."""
    with pytest.raises(ConfigError, match="must be a tensor or variable of an int or float"):
        ctf.cosine_decay(0.1, tf.constant("7"), 10)


def test_tf_object_that_is_not_a_tensor_is_refused(tf):
    """A tf.Module is a TF object but not a step."""
    with pytest.raises(ConfigError, match="neither a tensor nor a variable"):
        ctf.exponential_decay(0.1, tf.Module(), 10, 0.9)


def test_piecewise_boundaries_of_another_dtype_than_the_variable(tf):
    """Float boundaries with an int64 variable are refused, as TF 1 refuses them."""
    step = tf.Variable(0, dtype=tf.int64)
    with pytest.raises(ConfigError, match=r"must have the dtype of x .*'float32'.*'int64'"):
        ctf.piecewise_constant(step, [10.0], [1.0, 0.5])
    with pytest.raises(ValueError, match="must have the same dtype as x"):
        tf.compat.v1.train.piecewise_constant(step, [10.0], [1.0, 0.5])


def test_no_tensorflow_import_without_a_tf_step():
    """Decays of a Clock and of a number, called, import no TensorFlow."""
    code = (
        "import sys\n"
        "from globalstep import Clock\n"
        "from globalstep.compat import tf as ctf\n"
        "ctf.exponential_decay(0.1, Clock(), 10, 0.9)()\n"
        "ctf.piecewise_constant(5, [3], [1.0, 0.5])()\n"
        "ctf.get_or_create_global_step()\n"
        "print('tensorflow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_clock_decay_inside_jax_jit_raises():
    """A compat.tf decay of a Clock read inside jax.jit raises, saying what to do."""
    jax = pytest.importorskip("jax")
    lr = ctf.exponential_decay(1.0, Clock(), 2, 0.5)
    with pytest.raises(
        TracingError,
        match=r"globalstep Clock, read in Python inside jax\.jit .* pass it in as an argument",
    ):
        jax.jit(lambda: lr())()


def test_frozen_variable_step_warns_eagerly(tf):
    """Seed 001's second program (the assign_add removed): read again and again at step 0,
    the rate stays 1.0; eagerly the decay warns once, saying to advance the variable."""
    step = tf.Variable(0, trainable=False, dtype=tf.int32)
    lr = ctf.exponential_decay(1.0, step, 100000, 0.96)
    for _ in range(999):
        lr()
    with pytest.warns(FrozenStepWarning, match="exponential_decay was read 1000 times") as caught:
        lr()
    message = str(caught[0].message)
    assert "at step 0" in message
    assert "global_step.assign_add(1) after apply_gradients" in message
    assert "clock.tick()" not in message


def test_advancing_variable_step_does_not_warn(tf):
    """A variable advanced after each read never warns (warnings are errors here)."""
    step = tf.Variable(0, dtype=tf.int64)
    lr = ctf.exponential_decay(1.0, step, 100000, 0.96)
    for _ in range(1100):
        lr()
        step.assign_add(1)
    assert int(step.numpy()) == 1100
