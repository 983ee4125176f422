"""Checks run on one Keras backend in a subprocess: python keras_backend_check.py DIR.

Prints one JSON object of results; KERAS_BACKEND picks the backend. Used by
test_keras_backends.py (a process has one backend, so each runs apart).
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np

from globalstep import Clock
from globalstep.compat import keras as ck
from globalstep.integrations import keras as gk
from globalstep.schedules import CosineDecay, PiecewiseConstant


class Table(keras.optimizers.schedules.LearningRateSchedule):
    """A reference: the rate looked up in a table by the step, with Keras ops only."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype="float32")

    def __call__(self, step):
        return keras.ops.take(keras.ops.convert_to_tensor(self.values), step)


def train(learning_rate, *, accumulate=None, callbacks=(), batches=24):
    """Weights after compiled fit() of a small MLP with dropout, from one seed."""
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(8 * batches, 5)).astype("float32")
    y = rng.normal(size=(8 * batches, 1)).astype("float32")
    model = keras.Sequential(
        [
            keras.Input((5,)),
            keras.layers.Dense(8, "relu"),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(1),
        ]
    )
    opt = keras.optimizers.Adam(learning_rate=learning_rate, gradient_accumulation_steps=accumulate)
    model.compile(optimizer=opt, loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, shuffle=True, verbose=0, callbacks=list(callbacks))
    return model, [keras.ops.convert_to_numpy(v.value) for v in model.variables]


def same(a, b):
    return all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))


class StepBound(keras.callbacks.Callback):
    """Raises once fit() runs more than ``n`` batches: a bound on steps, not on time."""

    def __init__(self, n):
        super().__init__()
        self.n, self.seen = n, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen > self.n:
            raise RuntimeError(f"fit() ran past {self.n} batches")


def plain_fit_checks():
    """model.fit on a ResumableDataset: 3 epochs end after 3 epochs' batches, on the
    batches gk.fit gives (Keras' default shuffle=True included), and a second plain fit
    after a first continues with the data's next epoch."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(22, 5)).astype("float32")  # 5 batches an epoch, the last of 2
    y = rng.normal(size=(22, 1)).astype("float32")

    def run(how):
        keras.utils.set_random_seed(4)
        model = keras.Sequential(
            [keras.Input((5,)), keras.layers.Dense(8, "relu"), keras.layers.Dense(1)]
        )
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        data = gk.ResumableDataset(x, y, batch_size=5, seed=3)
        clock = Clock(steps_per_epoch=data.steps_per_epoch)
        bound = StepBound(3 * data.steps_per_epoch)
        callback = gk.GlobalStepCallback(clock, data=data)
        if how == "gk.fit":
            gk.fit(model, data, epochs=3, callbacks=[bound, callback], verbose=0)
        elif how == "plain":
            model.fit(data, epochs=3, callbacks=[bound, callback], verbose=0)
        elif how == "plain, no callback":
            model.fit(data, epochs=3, callbacks=[bound], verbose=0)
        else:  # one epoch, then the two others in a second call
            model.fit(data, epochs=1, callbacks=[bound, callback], verbose=0)
            model.fit(data, epochs=3, initial_epoch=1, callbacks=[bound, callback], verbose=0)
        weights = [keras.ops.convert_to_numpy(v.value) for v in model.variables]
        return weights, [bound.seen, clock.step, clock.epoch, data.position]

    try:
        reference, counts = run("gk.fit")
        out = {"gk.fit": counts}
        for how in ("plain", "plain, no callback", "plain, two calls"):
            weights, counts = run(how)
            out[how] = counts
            out[how + " same batches"] = same(reference, weights)
        return out
    except RuntimeError as error:
        return {"error": str(error)}


def main(directory):
    out = {"backend": keras.backend.backend()}
    keras_cos = keras.optimizers.schedules.CosineDecay(
        0.0, 20, alpha=0.1, warmup_target=0.05, warmup_steps=4
    )
    ours_cos = ck.CosineDecay(0.0, 20, alpha=0.1, warmup_target=0.05, warmup_steps=4)
    out["compat_is_schedule"] = isinstance(
        ours_cos, keras.optimizers.schedules.LearningRateSchedule
    )
    _, w_keras = train(keras_cos)
    _, w_ours = train(ours_cos)
    out["compat_equals_keras_in_fit"] = same(w_keras, w_ours)
    _, w_other = train(
        keras.optimizers.schedules.CosineDecay(
            0.0, 20, alpha=0.1, warmup_target=0.06, warmup_steps=4
        )
    )
    out["control_differs"] = not same(w_keras, w_other)

    core = CosineDecay(0.05, 20, alpha=0.1)
    table = Table(np.asarray([core(s) for s in range(64)], dtype="float32"))
    _, w_table = train(table)
    _, w_core = train(gk.learning_rate_schedule(core))
    out["core_equals_table_in_fit"] = same(w_table, w_core)

    piece = PiecewiseConstant((6, 12), (0.05, 0.02, 0.01))
    _, w_piece = train(gk.learning_rate_schedule(piece))
    _, w_kpiece = train(
        keras.optimizers.schedules.PiecewiseConstantDecay([5, 11], [0.05, 0.02, 0.01])
    )
    out["core_piecewise_equals_keras"] = same(w_piece, w_kpiece)

    clock = Clock()
    model, _ = train(
        gk.learning_rate_schedule(core, gradient_accumulation_steps=3),
        accumulate=3,
        callbacks=[gk.GlobalStepCallback(clock)],
    )
    out["accumulation_clock"] = [
        clock.step,
        int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
    ]

    config = keras.saving.serialize_keras_object(ours_cos)
    back = keras.saving.deserialize_keras_object(config)
    out["serialized_class"] = config.get("registered_name")
    out["round_trip"] = type(back) is type(ours_cos) and back.get_config() == ours_cos.get_config()
    wrapped = gk.learning_rate_schedule(core)
    back = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(wrapped))
    out["core_round_trip"] = back.schedule == core
    model, _ = train(ours_cos, batches=2)
    path = os.path.join(directory, "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    lr = loaded.optimizer._learning_rate
    out["model_round_trip"] = (
        type(lr).__name__ == "CosineDecay" and lr.get_config() == ours_cos.get_config()
    )
    out["plain_fit"] = plain_fit_checks()
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
