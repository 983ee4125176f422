"""One process of the JAX data test: ``python jax_data.py PORT RANK SIZE DIR PHASE BATCHES``.

``jax.distributed.initialize`` with SIZE processes; a ``ResumableOrder`` of 37 samples
(its rank and world size the process group's) in a distributed CheckpointManager in
``DIR/checkpoints``, restored where a checkpoint exists (on another process count, the
rest of the epoch is split over the new processes); BATCHES batches of 3 indices drawn
(None: to the epoch's end), written to ``DIR/drawn-PHASE-RANK.json``, and a save at the
next step.
"""

import json
import sys
import warnings
from pathlib import Path

import jax


def main(port, rank, size, directory, phase, batches):
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=size, process_id=rank)
    from globalstep.checkpoint import CheckpointManager
    from globalstep.integrations.jax import ResumableOrder

    out = Path(directory)
    order = ResumableOrder(37, seed=5)
    assert (order.rank, order.world_size) == (rank, size), order
    with CheckpointManager(out / "checkpoints", distributed=True) as manager:
        step = manager.latest_step() or 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if step:
                manager.restore({"order": order})
        drawn = []
        for index, batch in enumerate(order.batches_of(3)):
            drawn += batch.tolist()
            if batches is not None and index + 1 == batches:
                break
        manager.save(step + 1, {"order": order})
    seen = {"drawn": drawn, "epoch": order.epoch, "warnings": [str(w.message) for w in caught]}
    (out / f"drawn-{phase}-{rank}.json").write_text(json.dumps(seen))
    jax.distributed.shutdown()


if __name__ == "__main__":
    count = None if sys.argv[6] == "rest" else int(sys.argv[6])
    main(*(int(a) for a in sys.argv[1:4]), sys.argv[4], sys.argv[5], count)
