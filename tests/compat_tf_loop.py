"""A child process for the compat.tf kill test: a NumPy loop checkpointed by
``globalstep.compat.tf``'s Checkpoint and CheckpointManager beside a SummaryWriter.

Run as ``python compat_tf_loop.py DIRECTORY TOTAL_STEPS [SLEEP_SECONDS]``. The loop restores
the newest checkpoint (``restore_or_initialize``), then opens its writer (TensorBoard event
files and JSONL) and trains: a shuffled batch per step, a noise term from a saved random
generator, a loss logged per step, a save every 7 steps through the manager (no
``writer.flush()``: the save makes the points durable). It prints ``ready S`` after the
restore, ``save S`` before each save and ``saved S`` after it; at the end it writes the
weights' bytes to ``DIRECTORY/weights``.
"""

import sys


def main(directory: str, total_steps: int, sleep_seconds: float) -> None:
    """Trains to total_steps, resuming from the newest checkpoint."""
    import pathlib
    import time

    import numpy as np

    import globalstep
    from globalstep.compat import tf as tf_compat
    from globalstep.run import GeneratorState

    rows, batch, features = 48, 6, 8
    data = np.random.default_rng(0)
    inputs = data.normal(size=(rows, features))
    targets = inputs @ data.normal(size=features)
    weights = np.zeros(features)
    noise = np.random.default_rng(1)
    clock = globalstep.Clock(steps_per_epoch=rows // batch)
    checkpoint = tf_compat.Checkpoint(step=clock, weights=weights, noise=GeneratorState(noise))
    manager = tf_compat.CheckpointManager(checkpoint, f"{directory}/ckpt", max_to_keep=3)
    manager.restore_or_initialize()
    print(f"ready {clock.step}", flush=True)
    writer = globalstep.SummaryWriter(
        f"{directory}/logs", clock=clock, formats=("tensorboard", "jsonl")
    )
    while clock.step < total_steps:
        epoch, index = divmod(clock.step, rows // batch)
        taken = np.random.default_rng([5, epoch]).permutation(rows)[index * batch :][:batch]
        error = inputs[taken] @ weights - targets[taken]
        gradient = 2 * inputs[taken].T @ error / batch + 0.01 * noise.normal(size=features)
        weights -= 0.02 * gradient
        clock.tick()
        writer.scalars({"loss": float(np.mean(error**2))})
        if clock.step % 7 == 0:
            print(f"save {clock.step}", flush=True)
            manager.save()
            print(f"saved {clock.step}", flush=True)
        if sleep_seconds:
            time.sleep(sleep_seconds)
    manager.save()
    writer.close()
    pathlib.Path(directory, "weights").write_bytes(weights.tobytes())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) if sys.argv[3:] else 0.0)
