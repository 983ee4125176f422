"""A child process for the Run crash and signal tests: a Run-based NumPy training loop.

Run as ``python run_loop.py DIRECTORY TOTAL_STEPS WRITER [SLEEP_SECONDS]``. WRITER is
``before`` (the writer is opened before the restore) or ``after`` (opened at the first
update, after it). The loop shuffles its data per epoch, adds a noise term drawn from a
saved random generator, follows a schedule, saves every 25 steps and logs a scalar per
step. It also counts in a dict of plain numbers it passed to ``restore`` (issue 33: restored
in place, so the counting goes on from the checkpoint's). It prints ``ready S U`` after the
restore (S: the step resumed at, U: the dict's update count then), ``save S`` just before
each checkpoint commit and ``saved S`` after it; at the end it writes the weights' bytes to
``DIRECTORY/weights`` and the dict, as JSON, to ``DIRECTORY/meta.json``.
"""

import sys


def main(directory: str, total_steps: int, writer: str, sleep_seconds: float) -> None:
    """Trains to total_steps, resuming from the newest checkpoint."""
    import json
    import pathlib
    import time

    import numpy as np

    from globalstep import Clock, Run
    from globalstep.run import GeneratorState
    from globalstep.schedules import CosineDecay, warmup

    rows, batch, features = 64, 8, 16
    data = np.random.default_rng(0)
    inputs = data.normal(size=(rows, features))
    targets = inputs @ data.normal(size=features)
    weights = np.zeros(features)
    meta = {"updates": 0, "loss_sum": 0.0, "seen": {"rows": 0}, "last": [0.0, 0.0]}
    noise = np.random.default_rng(1)
    # A large leaf, so that saves take long enough for some kills to land inside them.
    ballast = np.arange(1 << 19, dtype=np.float64)
    run = Run(
        directory,
        total_steps=total_steps,
        save_every=25,
        clock=Clock(steps_per_epoch=rows // batch, batch_size=batch),
        schedules={"lr": warmup(CosineDecay(0.05, decay_steps=total_steps), 10)},
        config={"rows": rows, "batch": batch},
        progress=False,
        checkpoint_options={"max_to_keep": 3},
    )
    commit = run.checkpoints.save

    def save(*args, **kwargs):
        print(f"save {run.step}", flush=True)
        commit(*args, **kwargs)
        print(f"saved {run.step}", flush=True)

    run.checkpoints.save = save
    with run:
        if writer == "before":
            _ = run.writer
        run.restore(
            {"weights": weights, "noise": GeneratorState(noise), "ballast": ballast, "meta": meta}
        )
        print(f"ready {run.step} {meta['updates']}", flush=True)
        while not run.done:
            epoch, index = divmod(run.next_batch(), rows // batch)
            order = np.random.default_rng([5, epoch]).permutation(rows)
            taken = order[index * batch : (index + 1) * batch]
            error = inputs[taken] @ weights - targets[taken]
            lr = run.value("lr")
            gradient = 2 * inputs[taken].T @ error / batch + 0.01 * noise.normal(size=features)
            weights -= lr * gradient
            loss = float(np.mean(error**2))
            meta["updates"] += 1
            meta["loss_sum"] += loss
            meta["seen"]["rows"] += batch
            meta["last"][meta["updates"] % 2] = loss
            run.update(loss=loss)
            if sleep_seconds:
                time.sleep(sleep_seconds)
    pathlib.Path(directory, "weights").write_bytes(weights.tobytes())
    pathlib.Path(directory, "meta.json").write_text(json.dumps(meta))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]) if sys.argv[4:] else 0.0)
