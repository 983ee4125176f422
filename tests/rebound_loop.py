"""A child process for the rebound-state Run tests: a loop that builds a new tree per update.

Run as ``python rebound_loop.py DIRECTORY FRAMEWORK MODE TOTAL_STEPS [SLEEP_SECONDS]``
(a sleep after each update, so that a kill lands mid-run). FRAMEWORK is
``numpy`` (``w = w - lr * g``, a noise term from a saved generator) or ``jax`` (a jitted
optax update returning new params and optimizer state). MODE is ``follow`` (each update
hands the new tree to ``run.update(..., state=...)``) or ``forget`` (it does not: the
restored tree stays in ``run.state``). The Run saves every 5 steps and logs the loss per
step. The loop prints ``ready S`` after the restore and ``step S`` after each update; at
the end it writes the state's bytes to ``DIRECTORY/final``.
"""

import sys

FEATURES, BATCH, BATCHES = 8, 16, 6


def _batch(index):
    import numpy as np

    data = np.random.default_rng([7, index % BATCHES])
    x = data.normal(size=(BATCH, FEATURES))
    return x, x @ np.linspace(-1.0, 1.0, FEATURES)


def _numpy(run, follow, pause):
    import numpy as np

    from globalstep.run import GeneratorState

    state = run.restore(
        {"w": np.zeros(FEATURES), "noise": GeneratorState(np.random.default_rng(1))}
    )
    w, noise = state["w"], state["noise"]
    print(f"ready {run.step}", flush=True)
    while not run.done:
        x, y = _batch(run.next_batch())
        error = x @ w - y
        gradient = 2 * x.T @ error / BATCH + 0.01 * noise.generator.normal(size=FEATURES)
        w = w - run.value("lr") * gradient  # a new array: the restored one is left as it is
        loss = float(np.mean(error**2))
        if follow:
            run.update(loss=loss, state={"w": w, "noise": noise})
        else:
            run.update(loss=loss)
        print(f"step {run.step}", flush=True)
        pause()
    return w.tobytes()


def _jax(run, follow, pause):
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    opt = optax.adam(0.05)
    params = {"w": jnp.zeros(FEATURES), "b": jnp.zeros(())}
    state = run.restore({"params": params, "opt": opt.init(params)})
    params, opt_state = state["params"], state["opt"]
    print(f"ready {run.step}", flush=True)

    @jax.jit
    def update(params, opt_state, x, y):
        def loss_of(p):
            return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

        loss, grads = jax.value_and_grad(loss_of)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    while not run.done:
        x, y = _batch(run.next_batch())
        params, opt_state, loss = update(params, opt_state, x, y)
        if follow:
            run.update(loss=float(loss), state={"params": params, "opt": opt_state})
        else:
            run.update(loss=float(loss))
        print(f"step {run.step}", flush=True)
        pause()
    leaves = jax.tree.leaves((params, opt_state))
    return b"".join(np.asarray(leaf).tobytes() for leaf in leaves)


def main(directory: str, framework: str, mode: str, total_steps: int, sleep: float) -> None:
    """Trains to total_steps, resuming from the newest checkpoint."""
    import pathlib
    import time

    from globalstep import CosineDecay, Run

    with Run(
        directory,
        total_steps=total_steps,
        save_every=5,
        schedules={"lr": CosineDecay(0.05, decay_steps=total_steps)},
        progress=False,
    ) as run:
        loop = _numpy if framework == "numpy" else _jax
        final = loop(run, mode == "follow", lambda: time.sleep(sleep))
    pathlib.Path(directory, "final").write_bytes(final)


if __name__ == "__main__":
    main(*sys.argv[1:4], int(sys.argv[4]), float(sys.argv[5]) if sys.argv[5:] else 0.0)
