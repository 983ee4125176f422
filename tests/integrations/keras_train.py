"""A small Keras run for the resume tests: python keras_train.py DIR [KILL_AT_BATCH].

Trains an MLP with dropout by compiled fit() on shuffled data, with a compat.keras
schedule as the learning rate, a GlobalStepCallback that logs every update and saves
every 5, restoring the newest checkpoint first. With KILL_AT_BATCH it SIGKILLs itself after
that many batches of this process. It writes DIR/final.npz (every variable) when done.
The backend is KERAS_BACKEND's.
"""

from __future__ import annotations

import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np

from globalstep import Clock
from globalstep.checkpoint import CheckpointManager
from globalstep.compat import keras as ck
from globalstep.integrations import keras as gk
from globalstep.summary import SummaryWriter

EPOCHS, ROWS, BATCH = 3, 100, 8  # 13 batches an epoch, the last one of 4 rows


class KillAt(keras.callbacks.Callback):
    """SIGKILLs the process after ``n`` batches of this process (mid-epoch)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.seen = n, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.n:
            os.kill(os.getpid(), signal.SIGKILL)


def main(directory: str, kill_at: int | None) -> None:
    keras.utils.set_random_seed(1234)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 6)).astype("float32")
    y = (x @ rng.normal(size=(6, 1)) + 0.1 * rng.normal(size=(ROWS, 1))).astype("float32")
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dropout(0.3),
            keras.layers.Dense(1),
        ]
    )
    schedule = ck.CosineDecay(0.0, 30, warmup_target=0.05, warmup_steps=5, alpha=0.1)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=schedule), loss="mse")
    data = gk.ResumableDataset(x, y, batch_size=BATCH, seed=7)
    clock = Clock(steps_per_epoch=data.steps_per_epoch)
    manager = CheckpointManager(os.path.join(directory, "ckpt"), max_to_keep=2)
    callback = gk.GlobalStepCallback(clock, manager=manager, save_every=5, data=data)
    callback.restore(model)
    writer = SummaryWriter(os.path.join(directory, "logs"), clock=clock)
    callback.writer = writer
    callbacks = [callback] + ([KillAt(kill_at)] if kill_at else [])
    gk.fit(model, data, epochs=EPOCHS, callbacks=callbacks, verbose=0, shuffle=False)
    writer.close()
    manager.close()
    np.savez(
        os.path.join(directory, "final.npz"),
        **{v.path.replace("/", "."): keras.ops.convert_to_numpy(v.value) for v in model.variables},
        **{
            "opt." + v.path.replace("/", "."): keras.ops.convert_to_numpy(v.value)
            for v in model.optimizer.variables
        },
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
