"""A child process for the ledger's kill test: a Run-based NumPy loop that SIGKILLs itself.

Run as ``python ledger_loop.py DIRECTORY TOTAL_STEPS [KILL_AT]``: trains to TOTAL_STEPS,
saving every 5 updates (every checkpoint kept), resuming from the newest checkpoint; with
KILL_AT=S it makes its logs durable right after update S and SIGKILLs itself. It prints
``ready S`` after the restore.
"""

import sys


def main(directory: str, total_steps: int, kill_at: int | None) -> None:
    import os
    import signal

    import numpy as np

    from globalstep import Run

    weights = np.zeros(4096)
    with Run(
        directory,
        total_steps=total_steps,
        save_every=5,
        progress=False,
        checkpoint_options={"max_to_keep": None},
    ) as run:
        run.restore({"weights": weights})
        print(f"ready {run.step}", flush=True)
        while not run.done:
            weights += 1.0
            run.update(loss=float(weights[0]))
            if run.step == kill_at:
                run.writer.sync()
                os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if sys.argv[3:] else None)
