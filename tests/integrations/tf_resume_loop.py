"""A TensorFlow 2 training loop with globalstep, for the exact-resume SIGKILL test.

A GradientTape step in ``tf.function``, Adam with a warm-up + cosine rate, dropout, a
shuffled ``tf.data`` pipeline (ResumableTFDataset), the clock following
``optimizer.iterations``, ``tf.summary``-style logging (compat.tf.summary) and a checkpoint
every 5 updates. Lines marked ``# +gs`` are what globalstep adds to the plain TF loop
(``# ~gs`` marks a plain line it changes); ``# test`` lines are the test's own.

Usage: python tf_resume_loop.py DIR
Environment: GS_KILL_AT=k:when SIGKILLs the process once update k of this process is
applied, ``before`` its log line and checkpoint or ``after`` them. DIR/final.npz gets every
variable, the step and the next two batches when the run ends.
"""

import os
import signal
import sys
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import tensorflow as tf

import globalstep  # +gs
from globalstep.compat import keras as ck  # +gs
from globalstep.compat.tf import summary  # ~gs  (was: tf.summary)
from globalstep.integrations import tensorflow as gtf  # +gs

EPOCHS, ROWS, BATCH, SAVE_EVERY = 3, 100, 8, 5  # 13 batches an epoch, the last one of 4 rows
directory = sys.argv[1]
kill_at, _, when = os.environ.get("GS_KILL_AT", "-1:before").partition(":")  # test

keras.utils.set_random_seed(1234)
rng = np.random.default_rng(0)
x = rng.normal(size=(ROWS, 6)).astype("float32")
y = (x @ rng.normal(size=(6, 1)) + 0.1 * rng.normal(size=(ROWS, 1))).astype("float32")
data = gtf.ResumableTFDataset(x, y, batch_size=BATCH, seed=7)  # ~gs (from_tensor_slices.shuffle)
model = keras.Sequential(
    [
        keras.Input((6,)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(1),
    ]
)
schedule = ck.CosineDecay(0.0, 30, warmup_target=0.05, warmup_steps=5, alpha=0.1)  # ~gs
optimizer = keras.optimizers.Adam(learning_rate=schedule)

clock = globalstep.Clock(steps_per_epoch=data.steps_per_epoch)  # +gs
state = {"model": model, "optimizer": optimizer, "clock": clock, "data": data}  # +gs
manager = globalstep.CheckpointManager(f"{directory}/ckpt", max_to_keep=2)  # +gs
if manager.latest_step() is not None:  # +gs
    manager.restore(state)  # +gs  (the optimizer's slots are assigned when it builds them)
step_of = gtf.follow(optimizer, clock)  # +gs
writer = summary.create_file_writer(f"{directory}/logs", clock=clock)  # ~gs


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(xb, training=True) - yb) ** 2)
    rate = optimizer.learning_rate  # the rate this update uses
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss, rate


updates = 0  # test
with writer.as_default():
    for _epoch in range(data.epoch, EPOCHS):  # ~gs  (was: range(EPOCHS))
        for xb, yb in data:
            loss, rate = train_step(xb, yb)
            step_of()  # +gs  the clock follows optimizer.iterations
            updates += 1  # test
            if updates == int(kill_at) and when == "before":  # test
                os.kill(os.getpid(), signal.SIGKILL)  # test
            summary.scalar("loss", loss)  # at the step after this update
            summary.scalar("learning_rate", rate)
            crc = zlib.crc32(xb.numpy().tobytes() + yb.numpy().tobytes()) & 0xFFFFFF  # test
            summary.scalar("batch_crc24", float(crc))  # test: which batch this update used
            if clock.step % SAVE_EVERY == 0:  # +gs
                summary.flush()  # +gs  the curves are durable up to the checkpoint
                manager.save(clock, state)  # +gs
            if updates == int(kill_at) and when == "after":  # test
                os.kill(os.getpid(), signal.SIGKILL)  # test
writer.close()
manager.close()

following = list(data.dataset().take(2))  # test: the batches a longer run would get next
np.savez(  # test
    f"{directory}/final.npz",
    step=np.int64(clock.step),
    iterations=optimizer.iterations.numpy(),
    **{"var." + v.path.replace("/", "."): v.numpy() for v in model.variables},
    **{"opt." + v.path.replace("/", "."): v.numpy() for v in optimizer.variables},
    **{f"next{i}.{j}": t.numpy() for i, b in enumerate(following) for j, t in enumerate(b)},
)
