"""A child process for the Run crash and signal tests: a Run-based NumPy training loop.

Run as ``python run_loop.py DIRECTORY TOTAL_STEPS WRITER [SLEEP_SECONDS [LOOP [KILL_AT]]]``.
WRITER is ``before`` (the writer is opened before the restore) or ``after`` (opened at the
first update, after it). LOOP is ``plain`` (the default) or ``skips``: each update
accumulates the gradients of two micro-batches, and a loss scale (saved state, as a
``GradScaler``'s) makes some updates overflow: skipped (``applied=False``, the scale
halved), once or twice in a row, among them the first attempts after each checkpoint;
the scale grows back after applied updates. With KILL_AT=S the process SIGKILLs itself
right after its first skipped update at step S (its logs flushed first). The loop shuffles
its data per epoch, adds a noise term drawn from a saved random generator, follows a
schedule, saves every 25 steps and logs a scalar per step (the "skips" loop: ``loss`` and
``lr``). The plain loop also counts in a dict of plain numbers it passed to ``restore``
(issue 33: restored in place, so the counting goes on from the checkpoint's). It prints
``ready S U`` after the restore (S: the step resumed at, U: the dict's update count then),
``save S`` just before each checkpoint commit and ``saved S`` after it; at the end it
writes the weights' bytes to ``DIRECTORY/weights`` and the dict, as JSON, to
``DIRECTORY/meta.json``.
"""

import sys


def main(
    directory: str,
    total_steps: int,
    writer: str,
    sleep_seconds: float,
    loop: str = "plain",
    kill_at: int | None = None,
) -> None:
    """Trains to total_steps, resuming from the newest checkpoint."""
    import json
    import os
    import pathlib
    import signal
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
    scale = np.array([1024.0])  # the loss scale of the "skips" loop
    state = {"weights": weights, "noise": GeneratorState(noise), "ballast": ballast, "meta": meta}
    if loop == "skips":
        state["scale"] = scale
    with run:
        if writer == "before":
            _ = run.writer
        run.restore(state)
        print(f"ready {run.step} {meta['updates']}", flush=True)
        while loop == "skips" and not run.done:
            lr, gradient, losses = run.value("lr"), np.zeros(features), []
            for _micro in range(2):  # gradient accumulation over two micro-batches
                epoch, index = divmod(run.next_batch(), rows // batch)
                order = np.random.default_rng([5, epoch]).permutation(rows)
                taken = order[index * batch : (index + 1) * batch]
                error = inputs[taken] @ weights - targets[taken]
                gradient += scale * (2 * inputs[taken].T @ error / batch)
                losses.append(float(np.mean(error**2)))
            gradient = gradient / (2 * scale) + 0.01 * noise.normal(size=features)
            # An overflow, as under a loss scale too high: at some steps, until the scale
            # has come down to 256 (then it grows back, doubling per applied update).
            step = run.step
            if (step % 25 == 0 or step % 7 == 3) and scale[0] > 256:
                scale /= 2
                run.update(loss=float(np.mean(losses)), lr=lr, applied=False)
                if step == kill_at:
                    run.writer.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
            else:
                weights -= lr * gradient
                np.minimum(scale * 2, 1024.0, out=scale)
                run.update(loss=float(np.mean(losses)), lr=lr)
            if sleep_seconds:
                time.sleep(sleep_seconds)
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
    main(
        sys.argv[1],
        int(sys.argv[2]),
        sys.argv[3],
        float(sys.argv[4]) if sys.argv[4:] else 0.0,
        sys.argv[5] if sys.argv[5:] else "plain",
        int(sys.argv[6]) if sys.argv[6:] else None,
    )
