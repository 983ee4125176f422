"""Tests for globalstep.integrations.tensorflow and TensorFlow/Keras objects in checkpoints.

tf.Variable and tf.Module leaves, Keras models, optimizers and metrics (TensorFlow's
backend) in globalstep.CheckpointManager trees and in compat.tf's Checkpoint: restored in
place, dtype and shape checked, and an optimizer restored before its first update taking
its slots' values when it creates them (deferred restoration), with TensorFlow's status
assertions.
"""

from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")

from globalstep import ConfigError, RestoreMismatchError
from globalstep.checkpoint import CheckpointManager
from globalstep.checkpoint import flatten_tree as flatten
from globalstep.compat import tf as ctf

if keras.backend.backend() != "tensorflow":  # pragma: no cover - the default backend here
    pytest.skip("these tests use Keras' TensorFlow backend", allow_module_level=True)


class Net(tf.Module):
    """A tf.Module of the user's own, with nested modules and a list."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        self.w = tf.Variable(rng.normal(size=(2, 3)).astype("float32"))
        self.layers = [tf.Variable(rng.normal(size=3)), tf.Variable([1, 2], dtype=tf.int64)]
        self.inner = tf.Module()
        self.inner.b = tf.Variable(rng.normal(size=4).astype("float32"))


def _values(variables):
    return [np.array(v.numpy()) for v in variables]


def _same(a, b):
    return len(a) == len(b) and all(
        x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b, strict=True)
    )


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    return (
        tf.constant(rng.normal(size=(8, 5)).astype("float32")),
        tf.constant(rng.normal(size=(8, 3)).astype("float32")),
    )


def _model(seed: int = 0, built: bool = True):
    keras.utils.set_random_seed(seed)
    layers = [keras.layers.Dense(4, activation="relu"), keras.layers.Dense(3)]
    return keras.Sequential(([keras.Input((5,))] if built else []) + layers)


def _train(model, optimizer, updates: int, x, y, function: bool = False):
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    run = tf.function(step) if function else step
    for _ in range(updates):
        run()


# --------------------------------------------------------------------------- variables


def test_variable_round_trips_in_place_on_its_device(tmp_path):
    """A tf.Variable step and a float variable restore into the same objects, in place."""
    step = tf.Variable(0, trainable=False, name="global_step")
    w = tf.Variable(np.arange(6, dtype="float32").reshape(2, 3))
    handle, device = step.handle, w.device
    with CheckpointManager(tmp_path) as manager:
        step.assign_add(7)
        manager.save(7, {"step": step, "w": w})
        step.assign(0)
        w.assign(tf.zeros((2, 3)))
        tree = manager.restore({"step": step, "w": w})
    assert tree["step"] is step
    assert tree["w"] is w
    assert step.handle is handle
    assert w.device == device
    assert int(step.numpy()) == 7
    assert step.dtype == tf.int32
    assert w.numpy().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_module_variables_by_path_round_trip(tmp_path):
    """A tf.Module's variables are saved by attribute path and restored in place."""
    net = Net(seed=1)
    assert sorted(flatten({"net": net}).arrays) == [
        "net/inner.b",
        "net/layers.0",
        "net/layers.1",
        "net/w",
    ]
    saved = _values(net.variables)
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"net": net})
        fresh = Net(seed=2)
        variables = list(fresh.variables)
        assert not _same(_values(variables), saved)
        manager.restore({"net": fresh})
    assert _same(_values(fresh.variables), saved)
    assert all(a is b for a, b in zip(fresh.variables, variables, strict=True))


def test_module_variables_whose_paths_collide_are_refused():
    """Two variables whose paths read alike once '/' is '.' raise ConfigError naming it."""
    from globalstep.integrations import tensorflow as gtf

    module = tf.Module()
    module.a = {"b/c": tf.Variable(1.0), "b.c": tf.Variable(2.0)}
    with pytest.raises(
        ConfigError, match=r"`module` variables must have distinct .*got module=.a\.b\.c."
    ):
        gtf.module_variables(module)


def test_string_variable_is_refused(tmp_path):
    """A tf.string variable would need pickle: ConfigError names it."""
    with (
        CheckpointManager(tmp_path) as manager,
        pytest.raises(ConfigError, match=r"`variable` must hold numbers.*dtype=string"),
    ):
        manager.save(0, {"s": tf.Variable("text")})


def test_dtype_and_shape_mismatches_name_the_key(tmp_path):
    """A saved value of another dtype or shape raises RestoreMismatchError naming the key,
    the variable's dtype and shape and the checkpoint's; nothing is assigned."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(0, {"step": tf.Variable(5, dtype=tf.int64), "w": tf.Variable([1.0, 2.0])})
        step, w = tf.Variable(0), tf.Variable([0.0, 0.0])
        with pytest.raises(RestoreMismatchError, match=r"step: expected int32\[\], got int64\[\]"):
            manager.restore({"step": step, "w": w})
        w3 = tf.Variable([0.0, 0.0, 0.0])
        with pytest.raises(
            RestoreMismatchError, match=r"w: expected float32\[3\], got float32\[2\]"
        ):
            manager.restore({"step": tf.Variable(0, dtype=tf.int64), "w": w3})
    assert int(step.numpy()) == 0
    assert w.numpy().tolist() == [0.0, 0.0]


def test_compat_checkpoint_raises_for_another_dtype_as_tensorflow_does(tmp_path):
    """compat.tf's Checkpoint refuses a value of another dtype at restore(), as TF's does."""
    path = ctf.Checkpoint(step=tf.Variable(3, dtype=tf.int64)).save(str(tmp_path / "ckpt"))
    step = tf.Variable(0)
    with pytest.raises(
        RestoreMismatchError, match=r"holds objects/step as int64, but .* is int32"
    ) as info:
        ctf.Checkpoint(step=step).restore(path)
    assert isinstance(info.value, ValueError)
    assert int(step.numpy()) == 0
    theirs = tf.train.Checkpoint(step=tf.Variable(3, dtype=tf.int64)).save(str(tmp_path / "tf"))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
        tf.train.Checkpoint(step=tf.Variable(0)).restore(theirs)


# --------------------------------------------------------------------------- keras


def test_keras_model_optimizer_and_metric_round_trip(tmp_path):
    """A trained model, its Adam and a metric restore in place into fresh ones."""
    x, y = _data()
    model, optimizer = _model(seed=1), keras.optimizers.Adam(0.01)
    _train(model, optimizer, 3, x, y)
    metric = keras.metrics.Mean()
    metric.update_state([1.0, 2.0, 6.0])
    with CheckpointManager(tmp_path) as manager:
        manager.save(3, {"model": model, "optimizer": optimizer, "metric": metric})
        model2, optimizer2 = _model(seed=2), keras.optimizers.Adam(0.01)
        _train(model2, optimizer2, 1, x, y)
        metric2 = keras.metrics.Mean()
        manager.restore({"model": model2, "optimizer": optimizer2, "metric": metric2})
    assert _same(_values(model2.variables), _values(model.variables))
    assert _same(_values(optimizer2.variables), _values(optimizer.variables))
    assert float(metric2.result()) == 3.0
    _train(model, optimizer, 2, x, y)
    _train(model2, optimizer2, 2, x, y)
    assert _same(_values(model2.variables), _values(model.variables))


@pytest.mark.parametrize("function", [False, True], ids=["eager", "tf.function"])
def test_slots_restored_before_the_optimizer_builds_are_assigned_when_it_does(tmp_path, function):
    """Restored into an unbuilt Adam (and an unbuilt model), the weights arrive at the
    model's first call and the slots at the first update, eagerly and inside a
    tf.function's first trace (assigned once, not at every call): the run continues as
    the uninterrupted one does, bit for bit."""
    x, y = _data()
    model, optimizer = _model(seed=1, built=False), keras.optimizers.Adam(0.01)
    _train(model, optimizer, 3, x, y, function)
    with CheckpointManager(tmp_path) as manager:
        manager.save(3, {"model": model, "optimizer": optimizer})
        model2, optimizer2 = _model(seed=2, built=False), keras.optimizers.Adam(0.01)
        _, report = manager.restore({"model": model2, "optimizer": optimizer2}, partial=True)
    assert report.ok
    assert not model2.built
    assert not optimizer2.built
    assert int(optimizer2.iterations.numpy()) == 3  # existing variables: assigned at once
    slots = [f"optimizer/{i:04d}" for i in range(2, 10)]  # m and v of 4 variables
    assert report.pending() == [
        "model/variables/0000.kernel",
        "model/variables/0001.bias",
        "model/variables/0002.kernel",
        "model/variables/0003.bias",
        *slots,
    ]
    _train(model, optimizer, 4, x, y, function)
    _train(model2, optimizer2, 4, x, y, function)
    assert report.pending() == []
    assert _same(_values(model2.variables), _values(model.variables))
    assert _same(_values(optimizer2.variables), _values(optimizer.variables))


def test_loss_scale_optimizer_restored_before_it_builds(tmp_path):
    """A LossScaleOptimizer (whose build puts its loss-scale variables before its inner
    optimizer's) restored unbuilt takes every variable at its own position: bit for bit."""
    x, y = _data()

    def make(seed):
        return _model(seed), keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01))

    def train(model, optimizer, updates):
        for _ in range(updates):
            with tf.GradientTape() as tape:
                loss = optimizer.scale_loss(tf.reduce_mean(tf.square(model(x) - y)))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    model, optimizer = make(1)
    train(model, optimizer, 3)
    with CheckpointManager(tmp_path) as manager:
        manager.save(3, {"model": model, "optimizer": optimizer})
        model2, optimizer2 = make(2)
        _, report = manager.restore({"model": model2, "optimizer": optimizer2}, partial=True)
    assert report.ok
    assert report.pending() == [f"optimizer/{i:04d}" for i in range(2, 14)]
    train(model, optimizer, 2)
    train(model2, optimizer2, 2)
    assert report.pending() == []
    assert _same(_values(optimizer2.variables), _values(optimizer.variables))
    assert _same(_values(model2.variables), _values(model.variables))


def test_a_save_before_the_first_update_keeps_the_pending_slots(tmp_path):
    """Saved again before it builds, a restored optimizer writes the slots it still keeps."""
    x, y = _data()
    model, optimizer = _model(seed=1), keras.optimizers.Adam(0.01)
    _train(model, optimizer, 2, x, y)
    with CheckpointManager(tmp_path) as manager:
        manager.save(2, {"optimizer": optimizer})
        fresh = keras.optimizers.Adam(0.01)
        manager.restore({"optimizer": fresh})
        manager.save(3, {"optimizer": fresh})
        later = keras.optimizers.Adam(0.01)
        manager.restore({"optimizer": later}, step=3)
    later.build(model.trainable_variables)
    assert _same(_values(later.variables), _values(optimizer.variables))


def test_a_slot_created_with_another_shape_raises_when_it_is_created(tmp_path):
    """Slots the optimizer creates with another shape than the restored values raise
    RestoreMismatchError at its build, naming the slot, both shapes and what to do."""
    x, y = _data()
    model, optimizer = _model(seed=1), keras.optimizers.Adam(0.01)
    _train(model, optimizer, 1, x, y)
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"optimizer": optimizer})
        fresh = keras.optimizers.Adam(0.01)
        manager.restore({"optimizer": fresh})
    other = keras.Sequential([keras.Input((7,)), keras.layers.Dense(4), keras.layers.Dense(3)])
    with pytest.raises(
        RestoreMismatchError,
        match=r"variable 0002 .* created as float32\[7, 4\], but the checkpoint .* holds "
        r"float32\[5, 4\]: build the optimizer as it was",
    ):
        fresh.build(other.trainable_variables)


# --------------------------------------------------------------------------- status


def test_status_assertions_with_deferred_slots(tmp_path):
    """Before the first update assert_existing_objects_matched passes and assert_consumed
    fails naming the slots still waiting; after it, assert_consumed passes (TF's meaning)."""
    x, y = _data()
    model, optimizer = _model(seed=1), keras.optimizers.Adam(0.01)
    _train(model, optimizer, 2, x, y)
    step = tf.Variable(2)
    path = ctf.Checkpoint(optimizer=optimizer, model=model, step=step).save(str(tmp_path / "c"))
    model2, optimizer2 = _model(seed=2), keras.optimizers.Adam(0.01)
    status = ctf.Checkpoint(optimizer=optimizer2, model=model2, step=tf.Variable(0)).restore(path)
    assert status.assert_existing_objects_matched() is status
    with pytest.raises(
        AssertionError,
        match=r"values kept for variables not created yet: objects/optimizer/0002, .*"
        r"objects/optimizer/0009 \(they are assigned when their object builds",
    ):
        status.assert_consumed()
    assert status.expect_partial() is status
    _train(model2, optimizer2, 1, x, y)
    assert status.assert_consumed() is status
    _train(model, optimizer, 1, x, y)
    assert _same(_values(optimizer2.variables), _values(optimizer.variables))


def test_status_assertions_fail_for_unmatched_objects_and_values(tmp_path):
    """An object with no saved value fails both assertions; a saved value no object takes
    fails only assert_consumed."""
    path = ctf.Checkpoint(step=tf.Variable(1), w=tf.Variable([1.0])).save(str(tmp_path / "c"))
    status = ctf.Checkpoint(step=tf.Variable(0), extra=tf.Variable(0.0)).restore(path)
    with pytest.raises(AssertionError, match=r"no matching value .*missing \['objects/extra'\]"):
        status.assert_existing_objects_matched()
    with pytest.raises(AssertionError, match=r"Unresolved .*unexpected: objects/w"):
        status.assert_consumed()
    partial = ctf.Checkpoint(step=tf.Variable(0)).restore(path)
    assert partial.assert_existing_objects_matched() is partial
    with pytest.raises(AssertionError, match=r"unexpected: objects/w"):
        partial.assert_consumed()


# --------------------------------------------------------------------------- laziness


def test_tensorflow_is_imported_only_for_a_tensorflow_object(tmp_path):
    """Saving NumPy state imports neither TensorFlow nor the TF adapters; a tf.Variable does."""
    code = (
        "import sys, numpy as np\n"
        "from globalstep.checkpoint import CheckpointManager\n"
        "with CheckpointManager(sys.argv[1]) as m:\n"
        "    m.save(0, {'w': np.zeros(2)})\n"
        "    assert 'tensorflow' not in sys.modules\n"
        "    assert 'globalstep.integrations.tensorflow' not in sys.modules\n"
        "    import tensorflow as tf\n"
        "    m.save(1, {'w': tf.Variable([1.0, 2.0])})\n"
        "    assert 'globalstep.integrations.tensorflow' in sys.modules\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_unused_values_are_logged_when_the_status_goes_unless_expect_partial(tmp_path, caplog):
    """A status whose checkpoint held values nothing took logs them when it is dropped, as
    TensorFlow does; expect_partial() silences that."""
    path = ctf.Checkpoint(step=tf.Variable(1), w=tf.Variable([1.0])).save(str(tmp_path / "c"))
    with caplog.at_level(logging.WARNING, logger="globalstep"):
        status = ctf.Checkpoint(step=tf.Variable(0)).restore(path)
        del status
        gc.collect()
    assert "were never restored (no object took them): objects/w. Call status." in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="globalstep"):
        ctf.Checkpoint(step=tf.Variable(0)).restore(path).expect_partial()
        full = ctf.Checkpoint(step=tf.Variable(0), w=tf.Variable([0.0])).restore(path)
        del full
        gc.collect()
    assert caplog.text == ""
