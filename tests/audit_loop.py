"""A child process for the resume audit tests: a Run-based NumPy loop, SIGKILLed on demand.

Run as ``python audit_loop.py DIRECTORY KEEP_RNG KILL_AT [AUDIT]``. The loop draws its
data from ``np.random.default_rng(5)``, which is in the saved state where KEEP_RNG is 1 and
forgotten where it is 0 (a resumed attempt then draws from the generator's start again).
It saves every 10 updates, logs ``loss`` and ``x`` per update (JSONL), and with KILL_AT=S
flushes its logs after update S and SIGKILLs itself. At the end it writes the audit and the
warnings it gave, as JSON, to ``DIRECTORY/audit.json``. AUDIT: ``true`` (default),
``false`` or a tolerance.
"""

import sys


def main(directory: str, keep_rng: bool, kill_at: int, audit: bool | float = True) -> None:
    import json
    import os
    import pathlib
    import signal
    import warnings

    import numpy as np

    from globalstep import Run
    from globalstep.run import GeneratorState

    rng = np.random.default_rng(5)
    weights = np.zeros(4)
    state = {"w": weights, "rng": GeneratorState(rng)} if keep_rng else {"w": weights}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Run(
            directory,
            total_steps=30,
            save_every=10,
            progress=False,
            writer_options={"formats": ("jsonl",)},
            audit=audit,
        ) as run:
            run.restore(state)
            while not run.done:
                x = rng.normal(size=4)
                weights += 0.1 * x
                run.update(loss=float(weights.sum()), x=float(x[0]))
                if run.step == kill_at:
                    run.writer.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
    outcome = run.audit
    record = {
        "audit": None
        if outcome is None
        else {
            "compared": outcome.compared,
            "first": None if outcome.first is None else list(vars(outcome.first).values()),
            "line": outcome.line(),
        },
        "warnings": [{"category": w.category.__name__, "message": str(w.message)} for w in caught],
    }
    pathlib.Path(directory, "audit.json").write_text(json.dumps(record))


if __name__ == "__main__":
    option = sys.argv[4] if len(sys.argv) > 4 else "true"
    audit = {"true": True, "false": False}.get(option)
    main(
        sys.argv[1],
        sys.argv[2] == "1",
        int(sys.argv[3]),
        float(option) if audit is None else audit,
    )
