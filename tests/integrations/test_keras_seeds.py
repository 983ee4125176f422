"""The seeds' programs in Keras: exponential decay over 2 epochs, and a GAN with two clocks.

Seed 001 asks what TF1's ``exponential_decay(0.1, global_step, ..., staircase=True)``
gives as the step advances; here the same decay, from globalstep.compat.keras, drives a
Keras model's compiled fit() over 2 epochs of 12 batches, and the rates the callback
logged at steps 1..24 (the step after each update, the rate that update used) must be
TF's own, bit for bit. The GAN trains a critic 5 updates
per generator update, each with its own clock and schedule, checked against each
optimizer's iterations and restored together from one checkpoint.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    keras = pytest.importorskip("keras")
    tf = pytest.importorskip("tensorflow")

from globalstep import Clock
from globalstep.checkpoint import CheckpointManager
from globalstep.compat import keras as ck
from globalstep.integrations import keras as gk
from globalstep.summary import SummaryWriter, read_run


def test_exponential_decay_over_two_epochs_equals_tf(tmp_path):
    """Over 2 epochs of 12 batches the rates logged at steps 1..24 are TF1's, bit for bit."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 4)).astype("float32")
    y = rng.normal(size=(120, 1)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    lr = ck.ExponentialDecay(0.1, decay_steps=5, decay_rate=0.96, staircase=True)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr), loss="mse")
    clock = Clock(steps_per_epoch=12)
    with SummaryWriter(tmp_path, clock=clock, formats=("jsonl",)) as writer:
        callback = gk.GlobalStepCallback(clock, writer=writer)
        model.fit(x, y, batch_size=10, epochs=2, verbose=0, callbacks=[callback])
    logged = read_run(tmp_path).scalars["lr"]
    step = tf.Variable(0, dtype=tf.int64)
    decay = tf.compat.v1.train.exponential_decay(0.1, step, 5, 0.96, staircase=True)
    expected = []
    for s in range(24):
        step.assign(s)
        expected.append(float(decay().numpy()))
    assert [p.step for p in logged] == list(range(1, 25))  # update s + 1 used decay(s)
    assert [p.value for p in logged] == expected
    assert (clock.step, clock.epoch) == (24, 2)


def _gan():
    keras.utils.set_random_seed(1)
    critic = keras.Sequential(
        [keras.Input((2,)), keras.layers.Dense(8, "relu"), keras.layers.Dense(1)]
    )
    critic.compile(
        optimizer=keras.optimizers.RMSprop(ck.ExponentialDecay(5e-3, 10, 0.9)), loss="mse"
    )
    generator = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    frozen = keras.Sequential([keras.Input((2,)), *critic.layers])
    combined = keras.Sequential([keras.Input((3,)), generator, frozen])
    combined.compile(optimizer=keras.optimizers.Adam(ck.CosineDecay(1e-3, 20)), loss="mse")
    return critic, generator, combined


def _round(critic, generator, combined, critic_cb, generator_cb, rng):
    """5 critic updates (real vs generated points), then 1 generator update."""
    noise = rng.normal(size=(5 * 8, 3)).astype("float32")
    fake = keras.ops.convert_to_numpy(generator(noise))
    real = rng.normal(loc=2.0, size=(5 * 8, 2)).astype("float32")
    x = np.concatenate([real[:20], fake[:20]])
    y = np.concatenate([np.ones((20, 1)), -np.ones((20, 1))]).astype("float32")
    frozen = combined.layers[1]
    frozen.trainable = True  # the critic learns; the generator's loss leaves it alone
    critic.fit(x, y, batch_size=8, shuffle=False, verbose=0, callbacks=[critic_cb])
    frozen.trainable = False
    z = rng.normal(size=(8, 3)).astype("float32")
    combined.fit(z, np.ones((8, 1), "float32"), batch_size=8, verbose=0, callbacks=[generator_cb])


def test_gan_keeps_two_clocks_at_five_to_one(tmp_path):
    """A critic updated 5 times per generator update: each clock equals its iterations."""
    critic, generator, combined = _gan()
    clocks = {"critic": Clock("critic"), "generator": Clock("generator")}
    critic_cb = gk.GlobalStepCallback(clocks["critic"])
    generator_cb = gk.GlobalStepCallback(clocks["generator"])
    rng = np.random.default_rng(0)
    for _ in range(3):
        _round(critic, generator, combined, critic_cb, generator_cb, rng)
    assert (clocks["critic"].step, clocks["generator"].step) == (15, 3)
    assert int(critic.optimizer.iterations) == 15
    assert int(combined.optimizer.iterations) == 3
    with CheckpointManager(tmp_path) as manager:
        manager.save(3, {"critic": critic, "combined": combined, "clocks": clocks})
        fresh = _gan()
        # Each optimizer is built with its model's trainable variables of the time (the
        # checkpoint built it so): the critic's while it learns, the generator's alone.
        fresh[0].optimizer.build(fresh[0].trainable_variables)
        fresh[2].layers[1].trainable = False
        fresh[2].optimizer.build(fresh[2].trainable_variables)
        restored = {"critic": Clock("critic"), "generator": Clock("generator")}
        manager.restore({"critic": fresh[0], "combined": fresh[2], "clocks": restored})
    assert (restored["critic"].step, restored["generator"].step) == (15, 3)
    assert int(fresh[0].optimizer.iterations) == 15
    assert int(fresh[2].optimizer.iterations) == 3
    for a, b in zip(generator.variables, fresh[1].variables, strict=True):
        assert np.array_equal(gk._numpy(a), gk._numpy(b))
