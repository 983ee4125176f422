"""One process of a JAX multi-process training loop through ``Run``, for the kill tests.

Usage: ``python jax_loop.py PORT RANK SIZE DIR TOTAL SAVE_EVERY``. The processes call
``jax.distributed.initialize`` (``heartbeat_timeout_seconds=5``: a dead peer is noticed in
seconds); the parameters are replicated (the same initial values on every process, the
gradients averaged over the processes by ``multihost_utils.process_allgather``, a JAX
collective, each update) and updated by optax's Adam; each process draws its own batches
from its own ``numpy.random.Generator`` (``1000 + rank``) and its own noise from its own
JAX PRNG key (``PerRank``), both saved per process. The Run logs the loss averaged over the
processes (``Ranks(reduce="mean")``), and compares the steps every 5 updates. Lines marked
``# test`` are the test's instrumentation:

- after each update, ``attempt pid step`` is appended to ``DIR/progress-RANK``;
- after the restore, ``attempt step`` is appended to ``DIR/resumed-RANK`` (``attempt``:
  the environment's ``GS_ATTEMPT``);
- at the end, ``DIR/final-RANK.npz`` holds the process's parameters, optimizer state,
  PRNG key data and data generator state.

``GS_SLEEP`` (seconds, default 0) is slept after each update so that a kill from outside
lands while the run still has updates to do.
"""

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import multihost_utils

import globalstep
from globalstep.checkpoint import PerRank
from globalstep.run import Ranks

HEARTBEAT_SECONDS = 5


def _record(directory, name, rank, text):  # test
    with open(os.path.join(directory, f"{name}-{rank}"), "a") as file:
        file.write(text + "\n")
        file.flush()


def _final(directory, rank, state):  # test
    leaves = jax.tree_util.tree_leaves_with_path({"params": state["params"], "opt": state["opt"]})
    arrays = {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}
    arrays["key"] = np.asarray(jax.random.key_data(state["key"].value))
    arrays["data"] = np.asarray(state["data"].bit_generator.state["state"]["state"] % 2**64)
    np.savez(os.path.join(directory, f"final-{rank}.npz"), **arrays)


def _loss(params, inputs, targets):
    hidden = jnp.tanh(inputs @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] - targets) ** 2)


_grad = jax.jit(jax.value_and_grad(_loss))


def main(port, rank, size, directory, total, save_every):
    pause = float(os.environ.get("GS_SLEEP", "0"))  # test
    attempt = os.environ.get("GS_ATTEMPT", "0")  # test
    os.makedirs(directory, exist_ok=True)  # test: its records may come before the Run's
    jax.distributed.initialize(
        f"127.0.0.1:{port}",
        num_processes=size,
        process_id=rank,
        heartbeat_timeout_seconds=HEARTBEAT_SECONDS,
    )
    init = jax.random.split(jax.random.key(0), 2)  # the same on every process
    params = {
        "w1": jax.random.normal(init[0], (8, 16)) * 0.3,
        "b1": jnp.zeros(16),
        "w2": jax.random.normal(init[1], (16, 1)) * 0.3,
    }
    opt = optax.adam(1e-2)
    state = {
        "params": params,
        "opt": opt.init(params),
        "data": np.random.default_rng(1000 + rank),  # this process's batches
        "key": PerRank(jax.random.key(100 + rank)),  # this process's noise
    }
    with globalstep.Run(
        directory,
        total_steps=total,
        save_every=save_every,
        progress=False,
        ranks=Ranks(reduce="mean", check_every=5),
        checkpoint_options={"max_to_keep": 3},
        writer_options={"formats": ("jsonl",)},
    ) as run:
        state = run.restore(state)
        _record(directory, "resumed", rank, f"{attempt} {run.step}")  # test
        while not run.done:
            inputs = state["data"].normal(size=(16, 8)).astype(np.float32)
            key, noise = jax.random.split(state["key"].value)
            targets = inputs.sum(1, keepdims=True) + 0.1 * jax.random.normal(noise, (16, 1))
            loss, grads = _grad(state["params"], inputs, targets)
            gathered = multihost_utils.process_allgather(grads)  # every process's, by rank
            grads = jax.tree_util.tree_map(lambda g: jnp.mean(g, axis=0), gathered)
            updates, opt_state = opt.update(grads, state["opt"], state["params"])
            state = {
                **state,
                "params": optax.apply_updates(state["params"], updates),
                "opt": opt_state,
                "key": PerRank(key),
            }
            run.update(loss=float(loss), state=state)
            _record(directory, "progress", rank, f"{attempt} {os.getpid()} {run.step}")  # test
            time.sleep(pause)  # test
    _final(directory, rank, state)  # test


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
