"""Per-update cost of the preemption agreement inside a 2-rank gloo DDP loop.

The loop of ``bench_distributed.py`` (two ranks on 127.0.0.1, ``Linear(64, 64)``, ReLU,
``Linear(64, 1)``, batch 32, SGD under ``DistributedDataParallel``); only the loop of
``--n`` updates is timed, on each rank, after a barrier. The contenders, run round-robin
for ``--rounds`` rounds:

- ``ddp``: the bare DDP loop.
- ``ddp+poll``: the bare loop plus ``Preemption(()).poll()`` once per update (one async
  ``all_reduce(MAX)`` of one int64 issued per update, the previous one waited for).
- ``ddp+poll10``: ``Preemption((), every=10)``: one issued every 10 updates.
- ``run``: a ``Run`` on both ranks, ``Ranks(check_every=None)``, ``handle_signals=False``
  (no agreement): rank 0 logs the loss (JSONL), rank 1 only ticks.
- ``run+stop``: the same Run with the default stop signals (SIGINT, SIGTERM, SIGUSR1):
  the agreement polled by every ``run.update``.
- ``run+stop10``: as ``run+stop`` with ``Ranks(stop_every=10)``.

Printed per contender (rank 0's times): the median time per update over the rounds, the
spread (min-max), the median per-round ratio to its baseline of the same round (``ddp``
for the ``ddp+`` contenders, ``run`` for the ``run+`` ones): the agreement's cost; and for
the ``ddp+poll`` ones the median time per update spent inside ``poll()`` itself (issuing
the reduction, and waiting where the previous one had not completed): the rest of the
cost is the reductions' work on gloo's threads, competing for the cores.

Run: `PYTHONPATH=src .venv/bin/python bench/bench_preemption.py [--n 500] [--rounds 5]`.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from typing import Any

CONTENDERS = ("ddp", "ddp+poll", "ddp+poll10", "run", "run+stop", "run+stop10")
_IN_POLL: dict[str, list[float]] = {}  # contender: seconds per update inside poll()


def _loop(name: str, n: int, directory: str) -> float:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from globalstep import Run
    from globalstep.distributed import Preemption
    from globalstep.run import Ranks

    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(dist.get_rank())
    inputs, targets = torch.randn(32, 64, generator=data), torch.randn(32, 1, generator=data)
    run = stop = None
    if name.startswith("run"):
        run = Run(
            directory,
            progress=False,
            stream=io.StringIO(),
            handle_signals=name != "run",
            ranks=Ranks(check_every=None, stop_every=10 if name == "run+stop10" else 1),
            writer_options={"formats": ("jsonl",)},
        )
        run.restore()
    elif name != "ddp":
        stop = Preemption((), every=10 if name == "ddp+poll10" else 1)
    in_poll = 0.0
    dist.barrier()
    start = time.perf_counter()
    for _ in range(n):
        loss = nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if run is not None:
            run.update(loss=loss.item())
        elif stop is not None:
            polled = time.perf_counter()
            if stop.poll():
                raise AssertionError("no stop was asked for")
            in_poll += time.perf_counter() - polled
    elapsed = time.perf_counter() - start
    if stop is not None:
        _IN_POLL.setdefault(name, []).append(in_poll / n)
    if run is not None:
        run.close()
    if stop is not None:
        stop.close()
    return elapsed / n


def _rank(rank: int, port: int, n: int, rounds: int, out: str) -> None:
    """One rank: every contender, round-robin; ``out``'s directory is shared by the ranks
    (a distributed save writes into the writer's directory)."""
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
    base = os.path.dirname(out)
    _loop("ddp", n, base)  # a warm-up, untimed: the first DDP loop builds its buckets
    for index in range(rounds):
        for name in CONTENDERS:
            directory = os.path.join(base, f"{name}-{index}")
            times[name].append(_loop(name, n, directory))
        if rank == 0:
            print(f"round {index + 1}/{rounds} done", file=sys.stderr, flush=True)
    if rank == 0:
        with open(out, "w") as file:
            json.dump({"times": times, "in_poll": _IN_POLL}, file)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    """Starts two ranks, runs the contenders round-robin and prints the table."""
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
            found = json.load(file)
    times: dict[str, list[float]] = found["times"]
    in_poll: dict[str, list[float]] = found["in_poll"]
    print(f"2 ranks (gloo, 127.0.0.1), {args.n} updates x {args.rounds} rounds; load: ", end="")
    print(" ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(
        "| contender | µs/update (median) | spread | x baseline (median of rounds) | µs in poll() |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, values in times.items():
        base = times["run" if name.startswith("run") else "ddp"]
        ratio = statistics.median(v / b for v, b in zip(values, base, strict=True))
        row: Any = (
            name,
            f"{statistics.median(values) * 1e6:.0f}",
            f"{min(values) * 1e6:.0f}-{max(values) * 1e6:.0f}",
            f"{ratio:.3f}",
            f"{statistics.median(in_poll[name]) * 1e6:.0f}" if name in in_poll else "",
        )
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
