"""Per-update cost of globalstep's distributed parts inside a 2-rank gloo DDP loop.

Two ranks (processes on 127.0.0.1) train the same small model (``Linear(64, 64)``, ReLU,
``Linear(64, 1)``, batch 32, SGD) under ``DistributedDataParallel``; only the loop of
``--n`` updates is timed, on each rank, after a barrier. The contenders, run round-robin for
``--rounds`` rounds:

- ``ddp``: the bare DDP loop, with ``clock.tick()`` after ``optimizer.step()``.
- ``run``: the loop with a ``Run`` on both ranks, ``Ranks(check_every=None)``: rank 0 logs
  the loss (JSONL), rank 1 only ticks.
- ``run+check100``: the default ``Ranks()``: as ``run``, plus the step agreement check
  (one ``all_gather`` of one int64) every 100 updates.
- ``run+check1``: the check on every update, to show one check's own cost.
- ``run+reduce``: ``Ranks(reduce="mean")`` with 8 scalars per update: one ``all_reduce``
  of 10 float64 per update (8 values, 2 for the tag check).
- ``ddp+8allreduce``: the bare loop plus 8 ``all_reduce`` calls of one scalar each per
  update: how per-value synchronisation (Lightning's ``self.log(..., sync_dist=True)``,
  one collective per logged value) costs, beside ``run+reduce``'s one collective.

Printed per contender (rank 0's times): the median time per update over the rounds, the
spread (min-max), and the median per-round ratio to ``ddp`` of the same round.

Run: `PYTHONPATH=src .venv/bin/python bench/bench_distributed.py [--n 500] [--rounds 5]`.
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import statistics
import sys
import tempfile
import time
from typing import Any

CONTENDERS = ("ddp", "run", "run+check100", "run+check1", "run+reduce", "ddp+8allreduce")


def _loop(name: str, n: int, directory: str) -> float:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from globalstep import Clock, Run
    from globalstep.run import Ranks

    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(dist.get_rank())
    inputs, targets = torch.randn(32, 64, generator=data), torch.randn(32, 1, generator=data)
    ranks = {
        "run": Ranks(check_every=None),
        "run+check100": Ranks(),
        "run+check1": Ranks(check_every=1),
        "run+reduce": Ranks(reduce="mean", check_every=None),
    }.get(name)
    run = None
    if ranks is not None:
        run = Run(
            directory,
            progress=False,
            stream=io.StringIO(),
            handle_signals=False,
            ranks=ranks,
            writer_options={"formats": ("jsonl",)},
        )
        run.restore()
    clock = Clock()
    extra = [torch.zeros(1, dtype=torch.float64) for _ in range(8)]
    dist.barrier()
    start = time.perf_counter()
    for _ in range(n):
        loss = nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if run is None:
            clock.tick()
            if name == "ddp+8allreduce":
                for tensor in extra:
                    tensor.fill_(loss.item())
                    dist.all_reduce(tensor)
        elif name == "run+reduce":
            value = loss.item()
            run.update(**{f"m{i}": value for i in range(8)})
        else:
            run.update(loss=loss.item())
    elapsed = time.perf_counter() - start
    if run is not None:
        run.close()
    return elapsed / n


def _rank(rank: int, port: int, n: int, rounds: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # two ranks on a small machine: no oversubscription

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=120),
    )
    times: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    with tempfile.TemporaryDirectory() as base:
        for index in range(rounds):
            for name in CONTENDERS:
                directory = os.path.join(base, f"{name}-{index}")
                times[name].append(_loop(name, n, directory))
            if rank == 0:
                print(f"round {index + 1}/{rounds} done", file=sys.stderr, flush=True)
    if rank == 0:
        with open(out, "w") as file:
            import json

            json.dump(times, file)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    """Starts two ranks, runs the contenders round-robin and prints the table."""
    import json
    import socket

    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "times.json")
        mp.start_processes(
            _rank, args=(port, args.n, args.rounds, out), nprocs=2, start_method="spawn"
        )
        with open(out) as file:
            times: dict[str, list[float]] = json.load(file)
    base = times["ddp"]
    print(f"2 ranks (gloo, 127.0.0.1), {args.n} updates x {args.rounds} rounds; load: ", end="")
    print(" ".join(f"{x:.2f}" for x in os.getloadavg()))
    print("| contender | µs/update (median) | spread | x ddp (median of rounds) |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        ratio = statistics.median(v / b for v, b in zip(values, base, strict=True))
        row: Any = (
            name,
            f"{statistics.median(values) * 1e6:.0f}",
            f"{min(values) * 1e6:.0f}-{max(values) * 1e6:.0f}",
            f"{ratio:.3f}",
        )
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
