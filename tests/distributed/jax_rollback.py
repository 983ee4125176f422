"""One process of the JAX rollback test: ``python jax_rollback.py PORT RANK SIZE DIR SCENARIO``.

Two JAX processes train replicated parameters (the gradients averaged over the processes
by ``multihost_utils.process_allgather``, Adam) by a Run that saves every 10 updates:

- ``nan``: with ``Rollback(skip_batches=2)``; process 1's batch at data position 23 holds a
  NaN, so its loss is NaN there and process 0's is finite: both must roll back to step 20
  together and move the data past 23 + 2;
- ``reference``: no NaN, no policy; the data position jumps from 20 to 26 by hand.

Writes ``DIR/SCENARIO-RANK.json``: the positions drawn, the rollbacks seen, the final
parameters' bytes and step.
"""

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import multihost_utils

NAN_AT, SKIP, TOTAL = 23, 2, 40


def _batch(position, rank):
    inputs = np.random.default_rng(1000 * rank + position).normal(size=(8, 4))
    if rank == 1 and position == NAN_AT:
        inputs[0, 0] = np.nan
    return inputs.astype(np.float32)


@jax.jit
def _grad(params, inputs):
    def loss(p):
        return jnp.mean((inputs @ p["w"] + p["b"] - inputs.sum(1, keepdims=True)) ** 2)

    return jax.value_and_grad(loss)(params)


def main(port, rank, size, directory, scenario):
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=size, process_id=rank)
    from globalstep import Run
    from globalstep.run import Ranks, Rollback

    params = {"w": jnp.zeros((4, 1)), "b": jnp.zeros(1)}
    opt = optax.adam(0.05)
    state = {"params": params, "opt": opt.init(params)}
    drawn, rolled = [], []
    rollback = Rollback(skip_batches=SKIP) if scenario == "nan" else None
    with Run(
        Path(directory) / scenario,
        total_steps=TOTAL,
        save_every=10,
        rollback=rollback,
        progress=False,
        handle_signals=False,
        ranks=Ranks(reduce="mean"),
        writer_options={"formats": ("jsonl",)},
    ) as run:
        state = run.restore(state)
        while not run.done:
            if scenario == "reference" and run.data_position == 20:
                run.data_position = NAN_AT + 1 + SKIP
            position = run.next_batch()
            loss, grads = _grad(state["params"], _batch(position, rank))
            grads = jax.tree.map(lambda g: g.mean(0), multihost_utils.process_allgather(grads))
            updates, opt_state = opt.update(grads, state["opt"], state["params"])
            candidate = {"params": optax.apply_updates(state["params"], updates), "opt": opt_state}
            before = run.step
            drawn.append(position)
            applied = run.update(loss=float(loss), state=candidate)
            state = run.state  # the candidate, or the checkpoint's tree after a rollback
            if not applied:
                rolled.append(
                    {
                        "step": before,
                        "own_loss": repr(float(loss)),
                        "restored": run.step,
                        "data_position": run.data_position,
                    }
                )
    leaves = jax.tree.leaves(state)
    seen = {
        "drawn": drawn,
        "rolled": rolled,
        "params": [np.asarray(leaf).tobytes().hex() for leaf in leaves],
        "step": run.step,
    }
    (Path(directory) / f"{scenario}-{rank}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]), sys.argv[4], sys.argv[5])
