"""Per-batch cost of globalstep's Keras parts inside compiled fit(), beside Keras' own.

Contenders, each a small MLP trained by compiled ``fit()`` on one backend
(``KERAS_BACKEND``), 200 batches an epoch, timed per epoch after a warm-up epoch, in
round-robin rounds (the machine is shared and noisy):

- ``keras``: Adam with Keras' own ``CosineDecay`` (the baseline);
- ``compat``: Adam with ``globalstep.compat.keras.CosineDecay`` (same arithmetic);
- ``core``: Adam with a core ``globalstep.schedules.CosineDecay`` via
  ``learning_rate_schedule`` (read on the host from inside the compiled step);
- ``keras+callback``: the baseline plus ``GlobalStepCallback`` writing loss and rate
  to JSONL every batch (a clock tick, the iterations check, two scalars).

Prints a Markdown table: median and spread (min-max) of microseconds per batch, and the
ratio of medians to the baseline. Usage::

    KERAS_BACKEND=jax python bench/bench_keras.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
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
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCHES * BATCH, 32)).astype("float32")
    y = rng.normal(size=(BATCHES * BATCH, 1)).astype("float32")
    logdir = tempfile.mkdtemp()
    writer = SummaryWriter(logdir, formats=("jsonl",))
    contenders = {
        "keras": (build(keras.optimizers.schedules.CosineDecay(0.01, 10_000)), []),
        "compat": (build(ck.CosineDecay(0.01, 10_000)), []),
        "core": (build(gk.learning_rate_schedule(CosineDecay(0.01, 10_000))), []),
    }
    base = build(keras.optimizers.schedules.CosineDecay(0.01, 10_000))
    callback = gk.GlobalStepCallback(Clock(), writer=writer)
    contenders["keras+callback"] = (base, [callback])
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for model, callbacks in contenders.values():  # warm-up: compile
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)
    for _ in range(args.rounds):
        for name, (model, callbacks) in contenders.items():
            start = time.perf_counter()
            model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)
            times[name].append((time.perf_counter() - start) / BATCHES * 1e6)
    writer.close()
    baseline = statistics.median(times["keras"])
    print(f"backend {keras.backend.backend()}, {BATCHES} batches of {BATCH}, {args.rounds} rounds")
    print(f"load: {os.getloadavg()}")
    print("| contender | µs/batch median | spread (min-max) | ratio to keras |")
    print("|---|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"| {name} | {median:.0f} | {min(values):.0f}-{max(values):.0f} | "
            f"{median / baseline:.2f} |"
        )


if __name__ == "__main__":
    main()
