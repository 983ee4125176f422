"""Schedules beside their peers: vectorised values() and the scalar call.

values() of an exponential decay and a cosine decay on 10,000,000 steps, beside the NumPy
one-liner that computes the same formula and optax's schedule (eager, and jitted after a
compile run); the scalar call ``lr(step)`` beside the inline Python formula; and the
float32 compat layers' exponential decay on 1,000,000 steps and per call. Each
figure is the best of N runs. Run: `.venv/bin/python bench/bench_schedules.py [--repeat 5]`.
"""

from __future__ import annotations

import argparse
import math
import os
import time
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np

from globalstep.schedules import CosineDecay, ExponentialDecay

N = 10_000_000
COMPAT_N = 1_000_000


def best(fn: Callable[[], Any], repeat: int) -> float:
    """The best wall time of ``repeat`` runs of ``fn``, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def optax_timings(steps: np.ndarray, repeat: int) -> dict[str, float]:
    """optax's exponential and cosine decays on ``steps``, eager and jitted."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax
        import jax.numpy as jnp
        import optax
    except ImportError:
        return {}
    counts = jnp.asarray(steps.astype(np.int32))
    out = {}
    for name, schedule in (
        ("exponential", optax.exponential_decay(0.1, 1000, 0.96)),
        ("cosine", optax.cosine_decay_schedule(0.1, N)),
    ):
        jitted = jax.jit(schedule)
        jitted(counts).block_until_ready()
        out[f"optax {name} eager"] = best(lambda s=schedule: s(counts).block_until_ready(), repeat)
        out[f"optax {name} jit"] = best(lambda j=jitted: j(counts).block_until_ready(), repeat)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    steps = np.arange(N, dtype=np.int64)
    exp = ExponentialDecay(0.1, 1000, 0.96)
    cos = CosineDecay(0.1, N)
    times = {
        "globalstep exponential values()": best(lambda: exp.values(steps), args.repeat),
        "numpy exponential one-liner": best(lambda: 0.1 * 0.96 ** (steps / 1000), args.repeat),
        "globalstep cosine values()": best(lambda: cos.values(steps), args.repeat),
        "numpy cosine one-liner": best(
            lambda: 0.1 * (0.5 * (1 + np.cos(np.pi * np.minimum(steps, N) / N))), args.repeat
        ),
    }
    times.update(optax_timings(steps, args.repeat))
    print(f"values() on {N:,} steps, best of {args.repeat}")
    print(f"{'':38}{'seconds':>9}  {'x numpy':>8}")
    for name, seconds in times.items():
        family = "exponential" if "exponential" in name else "cosine"
        ratio = seconds / times[f"numpy {family} one-liner"]
        print(f"{name:38}{seconds:9.4f}  {ratio:8.2f}")

    number = 200_000
    scalar = {
        "globalstep exponential lr(step)": lambda: exp(12_345),
        "inline python 0.1 * 0.96 ** (s / 1000)": lambda: 0.1 * 0.96 ** (12_345 / 1000),
        "globalstep cosine lr(step)": lambda: cos(12_345),
        "inline python cosine": lambda: 0.1 * (0.5 * (1 + math.cos(math.pi * 12_345 / N))),
    }
    print(f"\nscalar call, best of {args.repeat} x {number:,} calls")
    print(f"{'':42}{'us/call':>8}  {'x inline':>8}")
    per_call = {
        name: min(timeit.repeat(fn, number=number, repeat=args.repeat)) / number * 1e6
        for name, fn in scalar.items()
    }
    for name, us in per_call.items():
        family = "cosine" if "cosine" in name else "0.96"
        inline = next(v for k, v in per_call.items() if k.startswith("inline") and family in k)
        print(f"{name:42}{us:8.3f}  {us / inline:8.1f}")
    compat_timings(args.repeat)


def compat_timings(repeat: int) -> None:
    """The float32 compat layers, which call the C library's powf once per element."""
    from globalstep.compat import keras, optax

    steps = np.arange(COMPAT_N, dtype=np.int64)
    print(f"\ncompat exponential decay (float32) on {COMPAT_N:,} steps, best of {repeat}")
    print(f"{'':34}{'values() s':>10}  {'us/call':>8}")
    for name, lr in (
        ("compat.keras ExponentialDecay", keras.ExponentialDecay(0.1, 1000, 0.96)),
        ("compat.optax exponential_decay", optax.exponential_decay(0.1, 1000, 0.96)),
    ):
        seconds = best(lambda lr=lr: lr.values(steps), repeat)
        number = 20_000
        call = min(timeit.repeat(lambda lr=lr: lr(12_345), number=number, repeat=repeat))
        print(f"{name:34}{seconds:10.3f}  {call / number * 1e6:8.2f}")


if __name__ == "__main__":
    main()
