"""Seed 001's loop (shared/seeds/001, the accepted answer's first program), as printed, with
only ``tf.compat.v1.train.exponential_decay`` changed to
``globalstep.compat.tf.exponential_decay``: it runs, and prints TensorFlow's own learning
rates (the same program with TensorFlow's decay, run in the same test) for every step.

The seed leaves ``train_dataset``, ``model``, ``loss_fn`` and ``optimizer`` to the reader:
here 1,200 rows in batches of 100 (12 steps an epoch, as its output shows), a small Keras
classifier, sparse cross-entropy, and the SGD class (the loop calls
``optimizer(learning_rate=...)``).
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SETUP = """
import numpy as np
import tensorflow as tf
import keras
import globalstep

keras.utils.set_random_seed(1)
rows = np.random.default_rng(0)
x = rows.normal(size=(1200, 5)).astype("float32")
y = (x[:, 0] > 0).astype("int64")
train_dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(100)
model = keras.Sequential([keras.Input(shape=(5,)), keras.layers.Dense(6, activation="relu"),
                          keras.layers.Dense(2)])
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = keras.optimizers.SGD
"""

# The seed's program, verbatim (its indentation and spacing kept).
SEED_LOOP = """
epochs = 10
global_step = tf.Variable(0, trainable=False, dtype= tf.int32)
starter_learning_rate = 1.0

for epoch in range(epochs):
    print("Starting Epoch {}/{}".format(epoch+1,epochs))
    for step, (x_batch_train, y_batch_train) in enumerate(train_dataset):
        
        with tf.GradientTape() as tape:
            logits = model(x_batch_train, training=True)
            loss_value = loss_fn(y_batch_train, logits)
            
        grads = tape.gradient(loss_value, model.trainable_weights)
        
        learning_rate = tf.compat.v1.train.exponential_decay(
                    starter_learning_rate,
                    global_step,
                    100000, 
                    0.96
        )
        
        
        optimizer(learning_rate=learning_rate).apply_gradients(zip(grads, model.trainable_weights))
        print("Global Step: {}  Learning Rate: {}  Examples Processed: {}".format(global_step.numpy(), learning_rate(), (step + 1) * 100))
        global_step.assign_add(1)
"""  # noqa: E501, W291, W293 (the seed's long lines and trailing spaces)


def _run(loop: str) -> tuple[str, list[np.ndarray]]:
    """Runs SETUP then ``loop``; returns what it printed and the trained weights."""
    namespace: dict[str, object] = {}
    out = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(out):
        warnings.simplefilter("ignore")
        exec(SETUP, namespace)
        exec(loop, namespace)
    model = namespace["model"]
    return out.getvalue(), [np.asarray(w) for w in model.get_weights()]  # type: ignore[attr-defined]


@pytest.mark.slow
def test_seed_001_loop_prints_tensorflows_learning_rates():
    """The seed's loop with globalstep's decay prints TF's rates, steps 0..119, and trains
    the same weights, bit for bit."""
    pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("Keras runs on another backend")
    ours_loop = SEED_LOOP.replace(
        "tf.compat.v1.train.exponential_decay", "globalstep.compat.tf.exponential_decay"
    )
    assert ours_loop.count("globalstep.compat.tf.exponential_decay") == 1
    assert ours_loop.replace("globalstep.compat.tf.", "tf.compat.v1.train.") == SEED_LOOP

    theirs_out, theirs_weights = _run(SEED_LOOP)
    ours_out, ours_weights = _run(ours_loop)

    lines = [line for line in ours_out.splitlines() if line.startswith("Global Step")]
    assert len(lines) == 120
    assert lines[0] == "Global Step: 0  Learning Rate: 1.0  Examples Processed: 100"
    assert lines[23].startswith("Global Step: 23  Learning Rate: 0.99999")
    assert len({line.split("  ")[1] for line in lines[:24]}) == 24  # a new rate every step
    assert ours_out == theirs_out
    for ours, theirs in zip(ours_weights, theirs_weights, strict=True):
        assert ours.tobytes() == theirs.tobytes()
