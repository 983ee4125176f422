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
    parser.add_argument("--compat-only", action="store_true", help="only the compat section")
    parser.add_argument("--only", default="", help="compat cases whose name contains this")
    args = parser.parse_args()
    if args.compat_only:
        compat_timings(args.repeat, args.only)
        return
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


def per_call_median(fn: Callable[[int], Any], start: int, calls: int = 4000) -> float:
    """The median time of single calls ``fn(step)`` at consecutive steps, in microseconds
    (after a first call; block fills of the memo are in the sweep, once per 1,024 steps)."""
    fn(start)
    clock = time.perf_counter_ns
    samples = []
    for step in range(start, start + calls):
        begin = clock()
        fn(step)
        samples.append(clock() - begin)
    overhead = min(-(clock() - clock()) for _ in range(1000))  # the timer's own cost
    return max(float(np.median(samples)) - overhead, 0.0) / 1000


def compat_cases() -> list[
    tuple[str, Callable[[], Any], Callable[[Any], Callable[[], Any]] | None]
]:
    """(name, our schedule, the peer's eager call on an array of steps), per compat module."""
    from globalstep import compat

    cases: list[tuple[str, Callable[[], Any], Callable[[Any], Callable[[], Any]] | None]] = []

    def tf_peer(name: str, *args: Any, **kwargs: Any) -> Callable[[Any], Callable[[], Any]]:
        def make(steps: np.ndarray) -> Callable[[], Any]:
            import tensorflow as tf

            fn = getattr(tf.compat.v1.train, name)
            tensor = tf.constant(steps)
            if name == "piecewise_constant":
                schedule = fn(tf.constant(0, tf.int64), *args, **kwargs).func
            else:
                schedule = fn(args[0], 0, *args[1:], **kwargs).func
            return lambda: schedule(tensor).numpy()

        return make

    tf_cases = [
        ("exponential_decay", (0.1, 1000, 0.96), {}),
        ("natural_exp_decay", (0.1, 1000, 0.5), {}),
        ("inverse_time_decay", (0.1, 1000, 0.5), {}),
        ("polynomial_decay", (0.1, 10**5), {"power": 2.0}),
        ("cosine_decay", (0.1, 10**6), {}),
        ("cosine_decay_restarts", (0.1, 1000), {}),
        ("linear_cosine_decay", (0.1, 10**6), {}),
    ]
    for name, args, kwargs in tf_cases:
        cases.append(
            (
                f"tf.{name}",
                lambda n=name, a=args, k=kwargs: (
                    getattr(compat.tf, n)(a[0], 0, *a[1:], **k).schedule
                ),
                tf_peer(name, *args, **kwargs),
            )
        )
    cases.append(  # TF's case() takes one scalar step: no array call to compare with
        (
            "tf.piecewise_constant",
            lambda: compat.tf.piecewise_constant(0, [1000, 5000], [0.1, 0.05, 0.01]).schedule,
            None,
        )
    )

    def keras_peer(name: str, *args: Any, **kwargs: Any) -> Callable[[Any], Callable[[], Any]]:
        def make(steps: np.ndarray) -> Callable[[], Any]:
            import keras

            schedule = getattr(keras.optimizers.schedules, name)(*args, **kwargs)
            tensor = keras.ops.convert_to_tensor(steps)
            return lambda: keras.ops.convert_to_numpy(schedule(tensor))

        return make

    for name, args in (
        ("ExponentialDecay", (0.1, 1000, 0.96)),
        ("InverseTimeDecay", (0.1, 1000, 0.5)),
        ("PolynomialDecay", (0.1, 10**5)),
        ("CosineDecay", (0.1, 10**6)),
        ("CosineDecayRestarts", (0.1, 1000)),
        ("PiecewiseConstantDecay", ([1000, 5000], [0.1, 0.05, 0.01])),
    ):
        cases.append(
            (
                f"keras.{name}",
                lambda n=name, a=args: getattr(compat.keras, n)(*a),
                keras_peer(name, *args),
            )
        )

    def optax_peer(name: str, *args: Any) -> Callable[[Any], Callable[[], Any]]:
        def make(steps: np.ndarray) -> Callable[[], Any]:
            os.environ.setdefault("JAX_PLATFORMS", "cpu")
            import jax.numpy as jnp
            import optax

            schedule = getattr(optax, name)(*args)
            counts = jnp.asarray(steps.astype(np.int32))
            return lambda: schedule(counts).block_until_ready()

        return make

    for name, args in (
        ("exponential_decay", (0.1, 1000, 0.96)),
        ("polynomial_schedule", (0.1, 0.0, 2.0, 10**5)),
        ("linear_schedule", (0.1, 0.0, 10**5)),
        ("cosine_decay_schedule", (0.1, 10**6)),
        ("warmup_cosine_decay_schedule", (0.0, 0.1, 1000, 10**6)),
        ("piecewise_constant_schedule", (0.1, {1000: 0.5, 5000: 0.2})),
    ):
        cases.append(
            (
                f"optax.{name}",
                lambda n=name, a=args: getattr(compat.optax, n)(*a),
                optax_peer(name, *args),
            )
        )

    def torch_peer(name: str, kwargs: dict[str, Any]) -> Callable[[Any], Callable[[], Any]]:
        """torch's scheduler stepped once per step (its only way to give the rates),
        reading ``get_last_lr()[0]`` after each ``step()``."""

        def make(steps: np.ndarray) -> Callable[[], Any]:
            import torch

            theirs = dict(kwargs)
            lr = theirs["base_lr"] if name == "CyclicLR" else theirs.pop("base_lr", 0.1)
            count = len(steps)

            def run() -> list[float]:
                param = torch.nn.Parameter(torch.zeros(1))
                optimizer = torch.optim.SGD([param], lr=lr, momentum=0.9)
                if name == "SWALR":
                    scheduler = torch.optim.swa_utils.SWALR(optimizer, **theirs)
                else:
                    scheduler = getattr(torch.optim.lr_scheduler, name)(optimizer, **theirs)
                optimizer.step()  # (torch warns when the scheduler steps first)
                rates = [scheduler.get_last_lr()[0]]
                step, last = scheduler.step, scheduler.get_last_lr
                for _ in range(count - 1):
                    step()
                    rates.append(last()[0])
                return rates

            run.once = True  # type: ignore[attr-defined]  # ~1,000x ours: one round is enough
            return run

        return make

    for name, kwargs in (
        ("StepLR", {"base_lr": 0.1, "step_size": 30, "gamma": 0.1}),
        ("ExponentialLR", {"base_lr": 0.1, "gamma": 0.99}),
        ("CosineAnnealingLR", {"base_lr": 0.1, "T_max": 1000}),
        ("CosineAnnealingLR", {"base_lr": 0.1, "T_max": 1000, "eta_min": 0.001}),
        ("OneCycleLR", {"max_lr": 0.1, "total_steps": 10**6}),
        ("CyclicLR", {"base_lr": 0.001, "max_lr": 0.1, "step_size_up": 2000}),
        ("CyclicLR", {"base_lr": 0.001, "max_lr": 0.1, "mode": "exp_range", "gamma": 0.99999}),
        ("LambdaLR", {"base_lr": 0.1, "lr_lambda": _inverse_sqrt}),
        ("SWALR", {"base_lr": 0.1, "swa_lr": 0.05, "anneal_epochs": 10}),
    ):
        label = name + ("(eta_min)" if "eta_min" in kwargs else "")
        label += "(exp_range)" if kwargs.get("mode") == "exp_range" else ""
        cases.append(
            (
                f"torch.{label}",
                lambda n=name, k=kwargs: getattr(compat.torch, n)(**k),
                torch_peer(name, kwargs),
            )
        )
    return cases


def _inverse_sqrt(k: int) -> float:
    """A LambdaLR factor (module level: the same function for ours and torch's)."""
    return 1.0 / math.sqrt(k + 1)


def compat_timings(repeat: int, only: str = "") -> None:
    """Every compat schedule: the scalar call (median of single calls at consecutive steps)
    and values() on 1,000,000 steps in float32 beside the peer's eager call on the same
    steps; contenders interleaved round-robin, ``repeat`` rounds, median and spread."""
    steps = np.arange(COMPAT_N, dtype=np.int64)
    rows = []
    for name, make, peer in compat_cases():
        if only not in name:
            continue
        try:
            ours = make()
        except (AttributeError, TypeError) as error:  # a name another branch adds or renames
            print(f"{name}: skipped ({error})")
            continue
        call = [per_call_median(ours, 12_345 + 7_000 * r) for r in range(repeat)]
        theirs_fn = None
        if peer is not None:
            try:
                theirs_fn = peer(steps)
                if not getattr(theirs_fn, "once", False):
                    theirs_fn()  # the first call (tracing, kernel set-up) is not timed
            except Exception as error:  # no peer installed, or it takes no array of steps
                print(f"{name}: no peer array call ({type(error).__name__})")
                theirs_fn = None
        mine, theirs = [], []
        for round_ in range(repeat):
            # A fresh schedule each round: compat.torch keeps the rates it has computed.
            mine.append(best(lambda make=make: make().values(steps), 1))
            if theirs_fn is not None and (round_ == 0 or not getattr(theirs_fn, "once", False)):
                theirs.append(best(theirs_fn, 1))
        rows.append((name, call, mine, theirs))
    print(f"\ncompat schedules: scalar call and values() on {COMPAT_N:,} steps, median of {repeat}")
    print(
        f"{'':36}{'us/call':>8} {'(spread)':>12} {'values s':>9} {'(spread)':>15} "
        f"{'peer s':>8} {'(spread)':>15} {'x peer':>7}"
    )
    for name, call, mine, theirs in rows:
        spread = f"{min(call):.2f}-{max(call):.2f}"
        ratio = f"{np.median(mine) / np.median(theirs):7.3f}" if theirs else "      -"
        peer_s = f"{np.median(theirs):8.4f}" if theirs else "       -"
        peer_spread = f"{min(theirs):.4f}-{max(theirs):.4f}" if theirs else "-"
        print(
            f"{name:36}{np.median(call):8.2f} {spread:>12} {np.median(mine):9.4f} "
            f"{f'{min(mine):.4f}-{max(mine):.4f}':>15} {peer_s} {peer_spread:>15} {ratio}"
        )


if __name__ == "__main__":
    main()
