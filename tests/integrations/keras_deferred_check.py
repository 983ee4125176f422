"""Deferred restoration on one Keras backend: python keras_deferred_check.py DIR.

KERAS_BACKEND picks the backend. A model trained 3 batches by compiled fit() is saved
with its Adam; a model not built yet, with an Adam not built yet, restores it (weights
pending until the first call, slots until the optimizer builds), then both fit() 4 more
batches. Prints one JSON object: what was pending before and after, and whether the two
runs' variables are equal bit for bit.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np

from globalstep.checkpoint import CheckpointManager


def _model(seed, built):
    keras.utils.set_random_seed(seed)
    layers = [keras.layers.Dense(4, "relu"), keras.layers.Dense(1)]
    model = keras.Sequential(([keras.Input((5,))] if built else []) + layers)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    return model


def _values(model):
    variables = model.variables + model.optimizer.variables
    return [np.array(keras.ops.convert_to_numpy(v.value)) for v in variables]


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(56, 5)).astype("float32")
    y = rng.normal(size=(56, 1)).astype("float32")
    trained = _model(1, built=True)
    trained.fit(x[:24], y[:24], batch_size=8, shuffle=False, verbose=0)
    with CheckpointManager(sys.argv[1]) as manager:
        manager.save(3, {"model": trained})
        fresh = _model(2, built=False)
        _, report = manager.restore({"model": fresh}, partial=True)
    before = report.pending()
    trained.fit(x[24:], y[24:], batch_size=8, shuffle=False, verbose=0)
    fresh.fit(x[24:], y[24:], batch_size=8, shuffle=False, verbose=0)
    a, b = _values(trained), _values(fresh)
    equal = len(a) == len(b) and all(
        p.dtype == q.dtype and np.array_equal(p, q) for p, q in zip(a, b, strict=True)
    )
    print(
        json.dumps(
            {
                "ok": report.ok,
                "pending_before": before,
                "pending_after": report.pending(),
                "iterations": int(keras.ops.convert_to_numpy(fresh.optimizer.iterations)),
                "equal": equal,
            }
        )
    )


if __name__ == "__main__":
    main()
