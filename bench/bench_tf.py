"""Per-update cost of keeping the step in a TensorFlow 2 custom loop, beside TF's own ways.

One loop, five contenders, interleaved round-robin in one process (the machine is shared
and noisy): a GradientTape step in ``tf.function`` on a 32-64-1 MLP with dropout, Adam,
batches of 32 from a shuffled ``tf.data`` pipeline (``ResumableTFDataset``), an epoch of
``--batches`` updates per contender per round:

- ``plain``: the loop alone (no step kept beyond ``optimizer.iterations``);
- ``tf.Variable``: a ``tf.Variable`` global step incremented by hand inside the traced
  step (``global_step.assign_add(1)``, TF 1's ``minimize(global_step=...)`` written out);
- ``follow``: a globalstep Clock following ``optimizer.iterations``
  (``step_of = follow(optimizer, clock)``, ``step_of()`` after each update, in Python);
- ``follow(returned)``: the same, the traced step returning ``optimizer.iterations``
  and the loop passing it, ``step_of(iterations)`` (no read op of its own);
- ``tf.summary``: ``plain`` plus ``tf.summary.scalar("loss", loss, step=optimizer.iterations)``
  after each update, eagerly, to TensorFlow's own event file;
- ``follow+summary``: ``follow(returned)`` plus ``compat.tf.summary.scalar("loss", loss)``
  after each update, through globalstep's writer (TensorBoard event files).

Prints a Markdown table: median and spread (min-max) of microseconds per update over the
rounds, and each contender's median less ``plain``'s (a difference of two noisy numbers of
a millisecond or more); then ``step_of()``'s own time, timed in place around each call.

Run: ``PYTHONPATH=src python bench/bench_tf.py [--rounds 5] [--batches 200]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf

from globalstep import Clock
from globalstep.compat.tf import summary
from globalstep.integrations import tensorflow as gtf

BATCH = 32


def _loop(kind: str, batches: int, logdir: str) -> Any:
    """Returns ``run_epoch()``: one epoch of ``batches`` updates of contender ``kind``."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batches * BATCH, 32)).astype("float32")
    y = rng.normal(size=(batches * BATCH, 1)).astype("float32")
    data = gtf.ResumableTFDataset(x, y, batch_size=BATCH, seed=1)
    model = keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dropout(0.1),
            keras.layers.Dense(1),
        ]
    )
    optimizer = keras.optimizers.Adam(1e-3)
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    by_hand = kind == "tf.Variable"

    @tf.function
    def train_step(xb: Any, yb: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xb, training=True) - yb) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        if by_hand:
            global_step.assign_add(1)
        return loss, optimizer.iterations

    clock = Clock()
    step_of = gtf.follow(optimizer, clock) if kind.startswith("follow") else None
    if kind == "tf.summary":
        tf_writer = tf.summary.create_file_writer(os.path.join(logdir, "tf"))
    if kind == "follow+summary":
        writer = summary.create_file_writer(
            os.path.join(logdir, "gs"), clock=clock, formats=("tensorboard",)
        )

    def run_epoch() -> None:
        if kind == "follow":
            for xb, yb in data:
                train_step(xb, yb)
                start = clock_ns()
                step_of()
                in_place["follow"].append(clock_ns() - start)
        elif kind == "follow(returned)":
            for xb, yb in data:
                _, iterations = train_step(xb, yb)
                start = clock_ns()
                step_of(iterations)
                in_place["follow(returned)"].append(clock_ns() - start)
        elif kind == "follow+summary":
            with writer.as_default():
                for xb, yb in data:
                    loss, iterations = train_step(xb, yb)
                    step_of(iterations)
                    summary.scalar("loss", loss)
        elif kind == "tf.summary":
            with tf_writer.as_default():
                for xb, yb in data:
                    loss, _ = train_step(xb, yb)
                    tf.summary.scalar("loss", loss, step=optimizer.iterations)
        else:
            for xb, yb in data:
                train_step(xb, yb)

    return run_epoch


clock_ns = time.perf_counter_ns
KINDS = ("plain", "tf.Variable", "follow", "follow(returned)", "tf.summary", "follow+summary")
in_place: dict[str, list[int]] = {"follow": [], "follow(returned)": []}  # ns of each call


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    logdir = tempfile.mkdtemp()
    loops = {kind: _loop(kind, args.batches, logdir) for kind in KINDS}
    for run_epoch in loops.values():  # warm-up: trace and build
        run_epoch()
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(args.rounds):
        for kind, run_epoch in loops.items():
            start = time.perf_counter()
            run_epoch()
            times[kind].append((time.perf_counter() - start) / args.batches * 1e6)
    base = statistics.median(times["plain"])
    print(
        f"TF {tf.__version__}, {args.batches} updates of {BATCH} a round, {args.rounds} rounds, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print("| contender | µs/update median | spread (min-max) | added to plain |")
    print("|---|---|---|---|")
    for kind, values in times.items():
        median = statistics.median(values)
        spread = f"{min(values):.0f}-{max(values):.0f}"
        print(f"| {kind} | {median:.0f} | {spread} | {median - base:+.0f} |")
    print()
    for kind, calls in in_place.items():
        calls = calls[args.batches :]  # the timed rounds (the warm-up's calls dropped)
        print(
            f"{kind}: step_of() timed in place, median {statistics.median(calls) / 1e3:.1f} "
            f"µs, mean {statistics.mean(calls) / 1e3:.1f} µs over {len(calls)} calls"
        )


if __name__ == "__main__":
    main()
