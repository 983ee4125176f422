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
import warnings

import numpy as np
import pytest

from globalstep import ConfigError, StepError
from globalstep.compat import tf as ctf

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
    with pytest.raises(StepError, match="-1"):
        ctf.global_step(None, tf.Variable(-1))


def test_global_step_inside_tf_function_raises(tf):
    """global_step(sess, variable) inside a traced function cannot give a number."""
    step = tf.Variable(1, dtype=tf.int64)
    with pytest.raises(ConfigError, match=r"cannot be read as a number inside a tf\.function"):
        tf.function(lambda: ctf.global_step(None, step))()
