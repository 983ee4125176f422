"""The traced schedule inside a jitted optax training step, beside optax's own schedule.

One jitted step of a small MLP (``optax.adamw`` on 64x256x256x1, batch 128, CPU) with the
learning rate from: a constant (no schedule); optax's ``warmup_cosine_decay_schedule``;
``globalstep.compat.optax``'s (the same jax.numpy program, traced); and a core
``globalstep.schedules.CosineDecay`` made traceable with ``integrations.jax.traceable``
(a host callback per step). Contenders run round-robin, ``--rounds`` rounds of ``--steps``
steps each; the table gives the median time per step, its spread (min-max over rounds) and
the ratio to optax's schedule. Run:
``PYTHONPATH=src .venv/bin/python bench/bench_jax.py [--rounds 7] [--steps 300]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import optax

from globalstep.compat import optax as co
from globalstep.integrations.jax import traceable
from globalstep.schedules import CosineDecay


def make_step(learning_rate: Any) -> tuple[Callable[..., Any], Any, Any]:
    """A jitted training step with ``learning_rate``, its params and optimizer state."""
    keys = jax.random.split(jax.random.key(0), 4)
    params = {
        "w1": jax.random.normal(keys[0], (64, 256)) * 0.1,
        "w2": jax.random.normal(keys[1], (256, 256)) * 0.1,
        "w3": jax.random.normal(keys[2], (256, 1)) * 0.1,
    }
    x = jax.random.normal(keys[3], (128, 64))
    y = jnp.sin(x.sum(axis=1, keepdims=True))
    opt = optax.adamw(learning_rate, weight_decay=1e-4)

    def loss(p: Any) -> Any:
        h = jnp.tanh(jnp.tanh(x @ p["w1"]) @ p["w2"])
        return jnp.mean((h @ p["w3"] - y) ** 2)

    @jax.jit
    def step(p: Any, s: Any) -> Any:
        updates, s = opt.update(jax.grad(loss)(p), s, p)
        return optax.apply_updates(p, updates), s

    return step, params, opt.init(params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    total = args.rounds * args.steps + 10
    contenders = {
        "constant 1e-3 (no schedule)": 1e-3,
        "optax warmup_cosine_decay_schedule": optax.warmup_cosine_decay_schedule(
            0.0, 1e-3, 100, total
        ),
        "compat.optax warmup_cosine_decay_schedule": co.warmup_cosine_decay_schedule(
            0.0, 1e-3, 100, total
        ),
        "core CosineDecay via traceable()": traceable(CosineDecay(1e-3, total, dtype="float32")),
    }
    state = {}
    for name, lr in contenders.items():
        step, p, s = make_step(lr)
        p, s = step(p, s)  # compile
        jax.block_until_ready(p)
        state[name] = [step, p, s]
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name in contenders:
            step, p, s = state[name]
            start = time.perf_counter()
            for _ in range(args.steps):
                p, s = step(p, s)
            jax.block_until_ready(p)
            times[name].append((time.perf_counter() - start) / args.steps * 1e6)
            state[name][1:] = [p, s]
    reference = statistics.median(times["optax warmup_cosine_decay_schedule"])
    hlo = {
        name: jax.jit(lambda c, lr=contenders[name]: lr(c)).lower(jnp.int32(0)).as_text()
        for name in (
            "optax warmup_cosine_decay_schedule",
            "compat.optax warmup_cosine_decay_schedule",
        )
    }
    print(f"load: {os.getloadavg()}")
    print(f"compat's traced schedule lowers to optax's program: {len(set(hlo.values())) == 1}")
    print("| learning rate | median µs/step | spread (min-max) | vs optax's schedule |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"| {name} | {median:.0f} | {min(values):.0f}-{max(values):.0f} | "
            f"{median / reference:.2f}x |"
        )


if __name__ == "__main__":
    main()
