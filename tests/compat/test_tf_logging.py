"""Tests for globalstep.compat._tf_logging: TensorFlow's log_every_n and log_first_n."""

import logging

import pytest

from globalstep import ConfigError
from globalstep.compat import _tf_logging
from globalstep.compat._tf_logging import log_every_n, log_first_n


def _messages(caplog):
    """Returns the messages the 'tensorflow' logger emitted."""
    return [r.getMessage() for r in caplog.records if r.name == "tensorflow"]


def test_log_every_n_logs_calls_1_n_plus_1_2n_plus_1(caplog):
    """log_every_n(n=3) logs calls 1, 4, 7 and 10 out of 10."""
    caplog.set_level(logging.INFO, logger="tensorflow")
    for i in range(1, 11):
        log_every_n(logging.INFO, "call %d", 3, i)
    assert _messages(caplog) == ["call 1", "call 4", "call 7", "call 10"]


def test_log_first_n_logs_the_first_n_calls(caplog):
    """log_first_n(n=2) logs calls 1 and 2 only."""
    caplog.set_level(logging.INFO, logger="tensorflow")
    for i in range(1, 6):
        log_first_n(logging.INFO, "call %d", 2, i)
    assert _messages(caplog) == ["call 1", "call 2"]


def test_each_call_site_counts_alone(caplog):
    """Two call sites in one loop keep separate counts."""
    caplog.set_level(logging.INFO, logger="tensorflow")
    for i in range(1, 5):
        log_every_n(logging.INFO, "a%d", 2, i)
        log_every_n(logging.INFO, "b%d", 4, i)
    assert _messages(caplog) == ["a1", "b1", "a3"]


@pytest.mark.parametrize(("name", "n"), [("log_every_n", 4), ("log_first_n", 3)])
def test_matches_tensorflow_for_one_call_site(caplog, name, n):
    """One call site logs the same calls as tf.compat.v1.logging's function of that name.

    TensorFlow keys its counts by the first frame outside the caller's file, so every call
    site of a file shares one count there; one call site per loop compares the semantics.
    """
    pytest.importorskip("tensorflow")
    from tensorflow.python.platform import tf_logging

    caplog.set_level(logging.INFO, logger="tensorflow")
    ours = {"log_every_n": log_every_n, "log_first_n": log_first_n}[name]
    _tf_logging._counts.clear()
    for i in range(1, 12):
        ours(logging.INFO, "call %d", n, i)
    mine = _messages(caplog)
    caplog.clear()
    tf_logging._log_counter_per_token.clear()
    theirs = getattr(tf_logging, name)
    for i in range(1, 12):
        theirs(logging.INFO, "call %d", n, i)
    assert mine == _messages(caplog)
    assert mine[0] == "call 1"


@pytest.mark.parametrize("n", [0, -1, 1.5, True])
def test_bad_n(n):
    """n must be an int >= 1."""
    with pytest.raises(ConfigError, match="`n` must be an int >= 1"):
        log_every_n(logging.INFO, "x", n)


def test_exported_by_compat_tf():
    """globalstep.compat.tf offers both under TF's names, for a renamed import."""
    from globalstep.compat import tf

    assert (tf.log_every_n, tf.log_first_n) == (log_every_n, log_first_n)
    assert {"log_every_n", "log_first_n"} <= set(tf.__all__)
