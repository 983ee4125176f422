"""One process of the JAX liveness test: ``python jax_live.py PORT RANK SIZE DIR VICTIM``.

``jax.distributed.initialize`` with JAX's default heartbeat timeout (100 s: JAX itself
would take that long to call a dead process dead). Every process opens a distributed
CheckpointManager in ``DIR/checkpoints`` and saves step 1, then step 2; process ``VICTIM``
stops inside its part of the save of step 2 (its per-process leaf written, its report not
sent) and writes ``DIR/inside`` for the test to SIGKILL it there. A process whose save
fails writes ``DIR/failed-RANK.json`` (the error's text and ranks, and when) and exits
with 3 at once (``os._exit``: JAX's own shutdown at exit would wait for the dead process).
"""

import json
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np


def main(port, rank, size, directory, victim):
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=size, process_id=rank)
    from globalstep.checkpoint import (
        CheckpointManager,
        DistributedCheckpointError,
        DistributedOptions,
        PerRank,
    )
    from globalstep.checkpoint._ranks import coordinated

    out = Path(directory)
    original = coordinated.SaveRound._write

    def write(self, staging):
        report = original(self, staging)
        if rank == victim and self.step == 2:
            (out / "inside").touch()
            time.sleep(120)  # the test kills this process here
        return report

    coordinated.SaveRound._write = write
    options = DistributedOptions(timeout_seconds=90)
    with CheckpointManager(out / "checkpoints", distributed=options) as manager:
        state = {"w": np.arange(4.0), "mine": PerRank(np.full(2, float(rank)))}
        manager.save(1, state)
        try:
            manager.save(2, state)
        except DistributedCheckpointError as err:
            failed = {"error": str(err), "ranks": err.ranks, "at": time.monotonic()}
            (out / f"failed-{rank}.json").write_text(json.dumps(failed))
            # Not sys.exit: JAX's shutdown barrier at exit would wait out its 100 s
            # heartbeat timeout for the dead process (the test measures the notice).
            os._exit(3)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]), sys.argv[4], int(sys.argv[5]))
