"""A child process for the MLflow tests: a Run-based NumPy loop logging to MLflow.

Run as ``python mlflow_loop.py DIRECTORY TOTAL_STEPS [SLEEP_SECONDS]`` with
``MLFLOW_TRACKING_URI`` (and ``MLFLOW_EXPERIMENT_NAME``) set. The loop resumes from the
newest checkpoint, saves every 5 steps, logs ``loss`` and ``lr`` at each step through
``writer_options={"formats": ("jsonl", Tracker("mlflow", ...))}`` and stores its
``config`` as the MLflow run's parameters. It prints ``ready S`` after the restore and
``step S`` after each update.
"""

import sys


def main(directory: str, total_steps: int, sleep_seconds: float) -> None:
    """Trains to total_steps, resuming from the newest checkpoint."""
    import time

    import numpy as np

    from globalstep import Run
    from globalstep.run import GeneratorState
    from globalstep.schedules import CosineDecay
    from globalstep.summary import Tracker

    rows, features = 32, 8
    data = np.random.default_rng(0)
    inputs = data.normal(size=(rows, features))
    targets = inputs @ data.normal(size=features)
    weights = np.zeros(features)
    noise = np.random.default_rng(1)
    run = Run(
        directory,
        total_steps=total_steps,
        save_every=5,
        schedules={"lr": CosineDecay(0.05, decay_steps=total_steps)},
        config={"rows": rows, "model": {"features": features, "kind": "linear"}},
        progress=False,
        # "mlflow" with room for a server that a busy machine slows down at close
        writer_options={"formats": ("jsonl", Tracker("mlflow", close_seconds=240))},
    )
    with run:
        run.restore({"weights": weights, "noise": GeneratorState(noise)})
        print(f"ready {run.step}", flush=True)
        while not run.done:
            lr = run.value("lr")
            error = inputs @ weights - targets
            gradient = 2 * inputs.T @ error / rows + 0.01 * noise.normal(size=features)
            weights -= lr * gradient
            run.update(loss=float(np.mean(error**2)), lr=lr)
            print(f"step {run.step}", flush=True)
            if sleep_seconds:
                time.sleep(sleep_seconds)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) if sys.argv[3:] else 0.0)
