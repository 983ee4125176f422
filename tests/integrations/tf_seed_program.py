"""Runs a seed's program file in the current directory, then records the state it left.

Usage: ``python tf_seed_program.py PROGRAM STATE.npz``. The program runs as a script would
(``__name__ == "__main__"``), unchanged. An AssertionError it raises (the seed's last line,
``status.assert_existing_objects_matched()``, raises one after a fresh start, in
TensorFlow too) is printed as ``ASSERTION: <message>`` and the state is still recorded:
the model's variables, the optimizer's variables and ``global_step``, by position, in an
``.npz`` (read back with ``allow_pickle=False``).

With ``GS_KILL_AT=N:before`` (or ``N:after``) the process SIGKILLs itself at its N-th
``optimizer.apply_gradients`` call, before (after) the update: a harness hook on Keras'
optimizer class, outside the program's text.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np


def _kill_at(spec: str) -> None:
    import keras

    number, when = spec.split(":")
    target = int(number)
    original = keras.optimizers.Optimizer.apply_gradients
    calls = [0]

    def apply_gradients(self, grads_and_vars):
        calls[0] += 1
        if calls[0] == target and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = original(self, grads_and_vars)
        if calls[0] == target and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    keras.optimizers.Optimizer.apply_gradients = apply_gradients


def main() -> None:
    program, state = sys.argv[1], sys.argv[2]
    if os.environ.get("GS_KILL_AT"):
        _kill_at(os.environ["GS_KILL_AT"])
    namespace = {"__name__": "__main__"}
    with open(program) as f:
        code = compile(f.read(), program, "exec")
    try:
        exec(code, namespace)
    except AssertionError as err:
        print(f"ASSERTION: {err}", flush=True)
    arrays = {"global_step": np.array(namespace["global_step"].numpy())}
    for kind in ("model", "optimizer"):
        for i, v in enumerate(namespace[kind].variables):
            arrays[f"{kind}/{i:04d}"] = np.array(v.numpy())
    np.savez(state, **arrays)


if __name__ == "__main__":
    main()
