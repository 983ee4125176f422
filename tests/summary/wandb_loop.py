"""A child process of the W&B kill-and-resume test: a Run-based NumPy loop logging to W&B.

Run as ``python wandb_loop.py DIRECTORY TOTAL_STEPS SLEEP_SECONDS`` with ``WANDB_MODE``
set by the caller (offline there). The writer's formats are JSONL and W&B; the loop logs
``loss`` and ``lr`` at every update, saves every 10 updates, prints ``ready S`` once
restored (S: the step resumed at) and ``step S`` after each update, and at the end
writes the weights' bytes to ``DIRECTORY/weights``.
"""

import sys


def main(directory: str, total_steps: int, sleep_seconds: float) -> None:
    """Trains to ``total_steps``, resuming from the newest checkpoint."""
    import pathlib
    import time

    import numpy as np

    from globalstep import Clock, Run
    from globalstep.run import GeneratorState
    from globalstep.schedules import CosineDecay, warmup
    from globalstep.summary import Tracker

    rows, batch, features = 32, 8, 4
    data = np.random.default_rng(0)
    inputs = data.normal(size=(rows, features))
    targets = inputs @ data.normal(size=features)
    weights = np.zeros(features)
    noise = np.random.default_rng(1)
    run = Run(
        directory,
        total_steps=total_steps,
        save_every=10,
        clock=Clock(steps_per_epoch=rows // batch, batch_size=batch),
        schedules={"lr": warmup(CosineDecay(0.05, decay_steps=total_steps), 5)},
        config={"rows": rows, "batch": batch, "model": {"features": features}},
        progress=False,
        # A busy machine can take seconds to start W&B's service: a generous close.
        writer_options={"formats": ("jsonl", Tracker("wandb", close_seconds=120))},
    )
    with run:
        run.restore({"weights": weights, "noise": GeneratorState(noise)})
        print(f"ready {run.step}", flush=True)
        while not run.done:
            epoch, index = divmod(run.next_batch(), rows // batch)
            order = np.random.default_rng([5, epoch]).permutation(rows)
            taken = order[index * batch : (index + 1) * batch]
            error = inputs[taken] @ weights - targets[taken]
            lr = run.value("lr")
            gradient = 2 * inputs[taken].T @ error / batch + 0.01 * noise.normal(size=features)
            weights -= lr * gradient
            run.update(loss=float(np.mean(error**2)), lr=lr)
            print(f"step {run.step}", flush=True)
            time.sleep(sleep_seconds)
    pathlib.Path(directory, "weights").write_bytes(weights.tobytes())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
