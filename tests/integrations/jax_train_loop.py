"""A jitted optax training loop with a compat schedule that resumes from its checkpoints.

Run as ``python jax_train_loop.py CKPT_DIR TOTAL_STEPS OUT.npz``: restores the newest
checkpoint in CKPT_DIR if any (params, optimizer state, PRNG key, clock), trains to
TOTAL_STEPS, saving every 3 steps, printing ``resumed N`` after a restore and ``step N``
after each update, and writes the
final params and optimizer state leaves to OUT.npz.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

from globalstep import Clock
from globalstep.checkpoint import CheckpointManager
from globalstep.compat import optax as co
from globalstep.integrations.jax import check_optax_count


def main(directory: str, total: int, out: str) -> None:
    """Trains to ``total`` steps, resuming where the newest checkpoint stopped."""
    schedule = co.warmup_cosine_decay_schedule(0.0, 3e-2, 5, total)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=1e-3))
    key = jax.random.key(0)
    k1, k2, key = jax.random.split(key, 3)
    params = {
        "w1": jax.random.normal(k1, (4, 16)) * 0.5,
        "b1": jnp.zeros(16),
        "w2": (jax.random.normal(k2, (16, 1)) * 0.5).astype(jnp.bfloat16),
    }
    state = opt.init(params)
    clock = Clock("train")

    @jax.jit
    def step(params, state, key):
        key, sub = jax.random.split(key)
        x = jax.random.normal(sub, (32, 4))
        y = jnp.sin(x.sum(axis=1, keepdims=True))

        def loss(p):
            h = jnp.tanh(x @ p["w1"] + p["b1"])
            return jnp.mean((h @ p["w2"].astype(jnp.float32) - y) ** 2)

        grads = jax.grad(loss)(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, key

    with CheckpointManager(directory, max_to_keep=2) as manager:
        if manager.steps():
            tree = manager.restore({"params": params, "opt": state, "key": key, "clock": clock})
            params, state, key = tree["params"], tree["opt"], tree["key"]
            check_optax_count(state, clock)
            print(f"resumed {clock.step}", flush=True)
        while clock.step < total:
            params, state, key = step(params, state, key)
            clock.tick()
            print(f"step {clock.step}", flush=True)
            if clock.step % 3 == 0:
                manager.save(
                    clock.step, {"params": params, "opt": state, "key": key, "clock": clock}
                )
    leaves = jax.tree.leaves((params, state))
    np.savez(out, *[np.asarray(leaf).reshape(-1).view(np.uint8) for leaf in leaves])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
