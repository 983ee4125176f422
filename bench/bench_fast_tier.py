"""The fast tier's cost per update: a fast tier every 5 updates beside the durable one alone.

A torch MLP (``--width`` wide, two hidden layers, float32, SGD with momentum: the state
is the parameters and the momentum buffers) trains on a fixed batch for ``--n`` updates
per round. The contenders, alternated round by round for ``--rounds`` rounds (the order
rotated by one each round):

- ``hand``: the bare loop, no checkpoint.
- ``manager``: a ``CheckpointManager`` on the local disk (``--dir``), ``maybe_save`` at
  every update, ``save_every=50``.
- ``manager+fast``: the same with ``FastTier`` on ``/dev/shm`` (a temporary directory
  where there is none) every 5 updates, ``max_to_keep=2``.
- ``run``: a ``Run`` (``save_every=50``, no display) with ``run.update(loss=...)``.
- ``run+fast``: the same with ``fast_tier=FastTier(..., save_every=5)``.

Each contender starts in fresh directories (made before the timer starts, deleted after);
the timed part is the loop and the closing of the manager or the Run (its final save).
For each contender it prints the median wall time per update over the rounds, the
spread, and the median of its per-round excess over the hand loop of the same round.

Run: ``PYTHONPATH=src python bench/bench_fast_tier.py [--n 500] [--rounds 7] [--width 512]``.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

CONTENDERS = ("hand", "manager", "manager+fast", "run", "run+fast")


def _model(width: int) -> tuple[Any, Any, Any, Any]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width),
        torch.nn.Tanh(),
        torch.nn.Linear(width, width),
        torch.nn.Tanh(),
        torch.nn.Linear(width, 1),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x, y = torch.randn(64, width), torch.randn(64, 1)
    return model, optimizer, x, y


def _step(model: Any, optimizer: Any, x: Any, y: Any) -> Any:
    import torch

    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def _one(name: str, n: int, width: int, root: str, shm: str) -> float:
    """Runs contender ``name`` for ``n`` updates; returns the seconds per update."""
    from globalstep import Clock, FastTier, Run
    from globalstep.checkpoint import CheckpointManager

    model, optimizer, x, y = _model(width)
    durable = tempfile.mkdtemp(dir=root)
    fast_dir = tempfile.mkdtemp(dir=shm)
    fast = FastTier(fast_dir, save_every=5) if name.endswith("+fast") else None
    body: Callable[[], None]
    try:
        if name == "hand":

            def body() -> None:
                for _ in range(n):
                    _step(model, optimizer, x, y)

        elif name.startswith("manager"):

            def body() -> None:
                clock = Clock()
                state = {"clock": clock, "model": model, "optimizer": optimizer}
                with CheckpointManager(durable, save_every=50, fast_tier=fast) as manager:
                    for _ in range(n):
                        _step(model, optimizer, x, y)
                        clock.tick()
                        manager.maybe_save(clock, state)

        else:

            def body() -> None:
                with Run(
                    durable,
                    save_every=50,
                    fast_tier=fast,
                    progress=False,
                    stream=io.StringIO(),
                    handle_signals=False,
                    writer_options={"formats": ("jsonl",)},
                ) as run:
                    run.restore({"model": model, "optimizer": optimizer})
                    for _ in range(n):
                        loss = _step(model, optimizer, x, y)
                        run.update(loss=loss)

        start = time.perf_counter()
        body()
        return (time.perf_counter() - start) / n
    finally:
        shutil.rmtree(durable, ignore_errors=True)
        shutil.rmtree(fast_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500, help="updates per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--width", type=int, default=512, help="the MLP's hidden width")
    parser.add_argument("--dir", default=None, help="where the durable directories go")
    parser.add_argument("--only", default=",".join(CONTENDERS), help="contenders to run")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    names = [name for name in args.only.split(",") if name]
    root = args.dir or tempfile.mkdtemp(prefix="bench-fast-tier-")  # the local disk
    shm = tempfile.mkdtemp(
        prefix="bench-fast-tier-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )
    model = _model(args.width)[0]
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters()) * 2
    print(
        f"{args.n} updates x {args.rounds} rounds; width {args.width} (state "
        f"{nbytes / 2**20:.1f} MiB: parameters and momentum); durable in {root}, fast in "
        f"{shm}; load: {' '.join(f'{v:.2f}' for v in os.getloadavg())}"
    )
    times: dict[str, list[float]] = {name: [] for name in names}
    excess: dict[str, list[float]] = {name: [] for name in names}
    try:
        _one("run+fast", 20, args.width, root, shm)  # warm-up: imports, first touches
        for round_ in range(args.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            this = {name: _one(name, args.n, args.width, root, shm) for name in order}
            for name in names:
                times[name].append(this[name])
                if "hand" in this:
                    excess[name].append(this[name] - this["hand"])
    finally:
        shutil.rmtree(shm, ignore_errors=True)
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"load after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print("| contender | µs/update (median) | spread | excess over hand (median) |")
    print("|---|---:|---:|---:|")
    for name in names:
        spread = f"{min(times[name]) * 1e6:.1f}-{max(times[name]) * 1e6:.1f}"
        over = f"{statistics.median(excess[name]) * 1e6:+.1f}" if excess[name] else "-"
        print(f"| {name} | {statistics.median(times[name]) * 1e6:.1f} | {spread} | {over} |")


if __name__ == "__main__":
    main()
