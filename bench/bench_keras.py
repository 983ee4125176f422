"""Per-batch cost of globalstep's Keras parts inside compiled fit(), beside Keras' own.

Contenders, each a small MLP trained by compiled ``fit()`` on one backend
(``KERAS_BACKEND``), 200 batches an epoch, timed per epoch after a warm-up epoch, in
round-robin rounds (the machine is shared and noisy):

- ``keras``: Adam with Keras' own ``CosineDecay`` (the baseline);
- ``compat``: Adam with ``globalstep.compat.keras.CosineDecay`` (same arithmetic);
- ``core``: Adam with a core ``globalstep.schedules.CosineDecay`` via
  ``learning_rate_schedule`` (read on the host from inside the compiled step);
- ``keras+callback``: the baseline plus ``GlobalStepCallback`` writing loss and rate
  to JSONL every batch (a clock tick, the iterations check, two scalars);
- ``keras+callback(tb)``: the same, writing TensorBoard event files instead;
- ``keras+TensorBoard``: the baseline plus Keras' own
  ``keras.callbacks.TensorBoard(update_freq=1)`` (loss and rate every batch, to event
  files), the peer of the two above.

Prints a Markdown table: median and spread (min-max) of microseconds per batch, the ratio
of medians to the baseline and the microseconds each adds to it. Usage::

    KERAS_BACKEND=jax python bench/bench_keras.py [--rounds 5]
    python bench/bench_keras.py --backends tensorflow,jax,torch   # one process each
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np

from globalstep import Clock
from globalstep.compat import keras as ck
from globalstep.integrations import keras as gk
from globalstep.schedules import CosineDecay
from globalstep.summary import SummaryWriter

BATCHES, BATCH = 200, 32


def build(learning_rate):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dropout(0.1),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=learning_rate), loss="mse")
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default=None, help="comma-separated: one run each")
    args = parser.parse_args()
    if args.backends:
        for backend in args.backends.split(","):
            env = {**os.environ, "KERAS_BACKEND": backend}
            command = [sys.executable, __file__, "--rounds", str(args.rounds)]
            subprocess.run(command, env=env, check=True)
        return
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCHES * BATCH, 32)).astype("float32")
    y = rng.normal(size=(BATCHES * BATCH, 1)).astype("float32")
    logdir = tempfile.mkdtemp()
    writer = SummaryWriter(os.path.join(logdir, "jsonl"), formats=("jsonl",))
    tb_writer = SummaryWriter(os.path.join(logdir, "tb"), formats=("tensorboard",))
    contenders = {
        "keras": (build(keras.optimizers.schedules.CosineDecay(0.01, 10_000)), []),
        "compat": (build(ck.CosineDecay(0.01, 10_000)), []),
        "core": (build(gk.learning_rate_schedule(CosineDecay(0.01, 10_000))), []),
    }
    base = build(keras.optimizers.schedules.CosineDecay(0.01, 10_000))
    callback = gk.GlobalStepCallback(Clock(), writer=writer)
    contenders["keras+callback"] = (base, [callback])
    base_tb = build(keras.optimizers.schedules.CosineDecay(0.01, 10_000))
    callback_tb = gk.GlobalStepCallback(Clock(), writer=tb_writer)
    contenders["keras+callback(tb)"] = (base_tb, [callback_tb])
    peer = build(keras.optimizers.schedules.CosineDecay(0.01, 10_000))
    board = keras.callbacks.TensorBoard(os.path.join(logdir, "keras"), update_freq=1)
    contenders["keras+TensorBoard"] = (peer, [board])
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for model, callbacks in contenders.values():  # warm-up: compile
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)
    for _ in range(args.rounds):
        for name, (model, callbacks) in contenders.items():
            start = time.perf_counter()
            model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)
            times[name].append((time.perf_counter() - start) / BATCHES * 1e6)
    writer.close()
    tb_writer.close()
    baseline = statistics.median(times["keras"])
    print(f"backend {keras.backend.backend()}, {BATCHES} batches of {BATCH}, {args.rounds} rounds")
    print(f"load: {os.getloadavg()}")
    print("| contender | µs/batch median | spread (min-max) | ratio to keras | added |")
    print("|---|---|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"| {name} | {median:.0f} | {min(values):.0f}-{max(values):.0f} | "
            f"{median / baseline:.2f} | {median - baseline:+.0f} |"
        )


if __name__ == "__main__":
    main()
