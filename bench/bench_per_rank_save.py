"""A distributed save's time with per-rank leaves beside the same save without them.

Two ranks (processes on 127.0.0.1, gloo) hold the same DDP model (``Linear(64, 64)``,
ReLU, ``Linear(64, 1)``) and Adam after one update, and save it with a
``CheckpointManager(distributed=True)``:

- ``replicated``: ``{"clock", "model", "opt"}``: the writer writes it, rank 1 reports an
  empty part (the save as it was before per-rank leaves).
- ``per-rank``: the same plus the issue's per-rank leaves: ``RNGState()``, a
  ``torch.Generator``, a NumPy ``Generator`` and a ``PerRank`` array of ``--extra``
  float32 values (default 1,000): every rank writes its own file, reported through the
  Store and recorded in ``state.json``.

Each round saves each contender ``--saves`` times (a new step each), alternating; the time
of one ``save`` call (commit included, synchronous) is taken on rank 0 after a barrier.
Printed: the median per save, the spread, and the median per-round ratio to
``replicated``.

The two functions :func:`states` and :func:`time_saves` are what a larger benchmark
(bench_distributed.py) calls on every rank to time the same two saves.

Run: ``PYTHONPATH=src python bench/bench_per_rank_save.py [--saves 20] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from _two_ranks import run_two_ranks

CONTENDERS = ("replicated", "per-rank")


def states(rank: int, *, extra: int = 1000) -> dict[str, Any]:
    """The two trees to save on ``rank`` (inside an initialised group): contender -> tree."""
    import numpy as np
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from globalstep import Clock, PerRank
    from globalstep.integrations.torch import RNGState

    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(1000 + rank)
    model(torch.randn(8, 64, generator=data)).sum().backward()
    optimizer.step()
    replicated = {"clock": Clock(), "model": model, "opt": optimizer}
    per_rank = {
        **replicated,
        "rng": RNGState(),
        "data": data,
        "noise": np.random.default_rng(rank),
        "seen": PerRank(np.full(extra, rank, np.float32)),
    }
    return {"replicated": replicated, "per-rank": per_rank}


def time_saves(directory: str, trees: dict[str, Any], saves: int) -> dict[str, float]:
    """Saves each tree ``saves`` times (alternating), every rank; returns the median seconds
    of one save per contender, as this rank timed it (after a barrier before each)."""
    import torch.distributed as dist

    from globalstep.checkpoint import CheckpointManager

    times: dict[str, list[float]] = {name: [] for name in trees}
    managers = {
        name: CheckpointManager(os.path.join(directory, name), max_to_keep=2, distributed=True)
        for name in trees
    }
    try:
        for step in range(1, saves + 1):
            for name, tree in trees.items():
                dist.barrier()
                start = time.perf_counter()
                managers[name].save(step, tree)
                times[name].append(time.perf_counter() - start)
    finally:
        for manager in managers.values():
            manager.close()
    return {name: statistics.median(values) for name, values in times.items()}


def _rank(rank: int, scratch: str, saves: int, rounds: int, extra: int) -> list[dict[str, float]]:
    trees = states(rank, extra=extra)
    return [time_saves(os.path.join(scratch, str(index)), trees, saves) for index in range(rounds)]


def main(argv: list[str] | None = None) -> None:
    """Starts two ranks, times the two saves and prints the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--extra", type=int, default=1000)
    args = parser.parse_args(argv)
    rounds_times: list[dict[str, float]] = run_two_ranks(_rank, args.saves, args.rounds, args.extra)
    print(f"2 ranks (gloo, 127.0.0.1), {args.saves} saves x {args.rounds} rounds; load: ", end="")
    print(" ".join(f"{x:.2f}" for x in os.getloadavg()))
    print("| contender | ms/save (median of rounds) | spread | x replicated (median) |")
    print("|---|---:|---:|---:|")
    for name in CONTENDERS:
        values = [r[name] for r in rounds_times]
        ratio = statistics.median(r[name] / r["replicated"] for r in rounds_times)
        row = (
            name,
            f"{statistics.median(values) * 1e3:.2f}",
            f"{min(values) * 1e3:.2f}-{max(values) * 1e3:.2f}",
            f"{ratio:.3f}",
        )
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
