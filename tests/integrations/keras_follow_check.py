"""follow() in custom loops on one Keras backend: python keras_follow_check.py.

Prints one JSON object; KERAS_BACKEND picks the backend (a process has one). Each loop
applies updates with ``optimizer.apply`` eagerly and calls the follower after each; the
report holds the clock's step and ``optimizer.iterations`` after every update. Used by
test_keras_follow.py.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np

from globalstep import Clock
from globalstep.integrations import keras as gk


def _iterations(optimizer):
    return int(keras.ops.convert_to_numpy(optimizer.iterations))


def loop(optimizer, grads):
    """(clock step, optimizer.iterations, follower's return) after each update of a
    one-variable loop: stateful ``apply`` on TensorFlow and torch, a jitted
    ``stateless_apply`` on JAX (how JAX loops run; Keras' LossScaleOptimizer cannot
    apply statefully there)."""
    w = keras.Variable(np.zeros(2, "float32"))
    optimizer.build([w])
    clock = Clock()
    follower = gk.follow(optimizer, clock)
    seen = []
    if keras.backend.backend() == "jax":
        import jax

        apply = jax.jit(optimizer.stateless_apply)
        state = [v.value for v in optimizer.variables]
        weights = [w.value]
        for g in grads:
            weights, state = apply(state, [np.asarray(g, "float32")], weights)
            returned = follower.stateless(state)
            for v, value in zip(optimizer.variables, state, strict=True):
                v.assign(value)  # for the report's optimizer.iterations only
            seen.append((clock.step, _iterations(optimizer), returned))
        return seen
    for g in grads:
        optimizer.apply([keras.ops.convert_to_tensor(np.asarray(g, "float32"))], [w])
        returned = follower()
        seen.append((clock.step, _iterations(optimizer), returned))
    return seen


def main():
    ones, inf = [1.0, 1.0], [np.inf, 1.0]
    out = {"backend": keras.backend.backend()}
    out["plain"] = loop(keras.optimizers.Adam(0.01), [ones] * 5)
    out["loss_scale"] = loop(
        keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
        [ones, inf, ones, inf, inf, ones],
    )
    out["accumulate"] = loop(keras.optimizers.SGD(0.1, gradient_accumulation_steps=3), [ones] * 7)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
