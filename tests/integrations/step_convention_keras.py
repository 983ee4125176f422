"""The tiny run of test_step_convention.py on one Keras backend: python THIS.py DIR.

KERAS_BACKEND picks the backend. Trains 3 epochs of 4 batches by compiled fit() with a
GlobalStepCallback writing JSONL to DIR/keras. On the TensorFlow backend it also logs the
references the convention is taken from: a custom loop calling ``tf.summary.scalar(...,
step=optimizer.iterations)`` after ``apply_gradients`` (DIR/tf_summary), the same loop
logging through globalstep's writer (DIR/tf_loop), and Keras' own TensorBoard callback
with ``update_freq=1`` (DIR/keras_tensorboard).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np

from globalstep import Clock, ExponentialDecay
from globalstep.integrations import keras as gk
from globalstep.summary import SummaryWriter

EPOCHS, BATCHES, BATCH = 3, 4, 4
SCHEDULE = ExponentialDecay(0.1, decay_steps=1, rate=0.8)


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCHES * BATCH, 3)).astype("float32")
    return x, (x @ np.array([[1.0], [-2.0], [0.5]])).astype("float32")


def model(learning_rate):
    keras.utils.set_random_seed(0)
    net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    net.compile(optimizer=keras.optimizers.SGD(learning_rate=learning_rate), loss="mse")
    return net


def keras_callback(directory):
    x, y = data()
    net = model(gk.learning_rate_schedule(SCHEDULE))
    clock = Clock(steps_per_epoch=BATCHES)
    with SummaryWriter(directory, clock=clock, formats=("jsonl",)) as writer:
        callback = gk.GlobalStepCallback(clock, writer=writer)
        net.fit(
            x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=[callback]
        )


def tensorflow_references(directory):
    import tensorflow as tf

    x, y = data()
    net = model(gk.learning_rate_schedule(SCHEDULE))
    net.fit(
        x,
        y,
        batch_size=BATCH,
        epochs=EPOCHS,
        shuffle=False,
        verbose=0,
        callbacks=[
            keras.callbacks.TensorBoard(os.path.join(directory, "keras_tensorboard"), update_freq=1)
        ],
    )
    net = model(1.0)  # the rate is set by hand below, from the schedule
    optimizer = net.optimizer
    clock = Clock(steps_per_epoch=BATCHES)
    tf_writer = tf.summary.create_file_writer(os.path.join(directory, "tf_summary"))
    ours = SummaryWriter(os.path.join(directory, "tf_loop"), clock=clock, formats=("jsonl",))
    with tf_writer.as_default(), ours:
        for _ in range(EPOCHS):
            for b in range(BATCHES):
                rows = slice(b * BATCH, (b + 1) * BATCH)
                rate = SCHEDULE(clock.step)  # the rate of update number clock.step
                optimizer.learning_rate = rate
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean((net(x[rows]) - y[rows]) ** 2)
                grads = tape.gradient(loss, net.trainable_variables)
                optimizer.apply_gradients(zip(grads, net.trainable_variables, strict=True))
                clock.tick()
                tf.summary.scalar("loss", loss, step=optimizer.iterations)
                tf.summary.scalar("lr", rate, step=optimizer.iterations)
                ours.scalars({"loss": float(loss), "lr": rate})
    tf_writer.close()


def main(directory):
    keras_callback(os.path.join(directory, "keras"))
    if keras.backend.backend() == "tensorflow":
        tensorflow_references(directory)


if __name__ == "__main__":
    main(sys.argv[1])
