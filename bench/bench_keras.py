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
of medians to the baseline and the microseconds each adds to it; then each callback's own
time per batch, its ``on_train_batch_begin`` and ``on_train_batch_end`` timed in place
(less noisy than a difference of two whole fits on a shared machine). Usage::

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
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np

from globalstep import Clock
from globalstep.compat import keras as ck
from globalstep.integrations import keras as gk
from globalstep.schedules import CosineDecay
from globalstep.summary import SummaryWriter

BATCHES, BATCH = 200, 32
_ns = time.perf_counter_ns


def timed(name: str, callback: Any, into: dict[str, list[int]]) -> Any:
    """Wraps the callback's per-batch hooks so each batch's time in them goes to
    ``into[name]`` (one entry per batch: begin and end together)."""
    begin, end = callback.on_train_batch_begin, callback.on_train_batch_end
    into[name] = []
    pending = [0]

    def on_begin(batch: int, logs: Any = None) -> None:
        start = _ns()
        begin(batch, logs)
        pending[0] = _ns() - start

    def on_end(batch: int, logs: Any = None) -> None:
        start = _ns()
        end(batch, logs)
        into[name].append(pending[0] + _ns() - start)

    callback.on_train_batch_begin, callback.on_train_batch_end = on_begin, on_end
    return callback


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
    in_place: dict[str, list[int]] = {}
    callback = timed("keras+callback", gk.GlobalStepCallback(Clock(), writer=writer), in_place)
    contenders["keras+callback"] = (base, [callback])
    base_tb = build(keras.optimizers.schedules.CosineDecay(0.01, 10_000))
    callback_tb = gk.GlobalStepCallback(Clock(), writer=tb_writer)
    contenders["keras+callback(tb)"] = (
        base_tb,
        [timed("keras+callback(tb)", callback_tb, in_place)],
    )
    peer = build(keras.optimizers.schedules.CosineDecay(0.01, 10_000))
    board = keras.callbacks.TensorBoard(os.path.join(logdir, "keras"), update_freq=1)
    contenders["keras+TensorBoard"] = (peer, [timed("keras+TensorBoard", board, in_place)])
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for model, callbacks in contenders.values():  # warm-up: compile
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)
    for values in in_place.values():
        values.clear()  # the warm-up's batches
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
    print()
    print("| callback | its own µs/batch, median (in place) | mean |")
    print("|---|---|---|")
    for name, values in in_place.items():
        median, mean = statistics.median(values) / 1e3, statistics.mean(values) / 1e3
        print(f"| {name} | {median:.0f} | {mean:.0f} |")


if __name__ == "__main__":
    main()
