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
- ``ddp+poll``: the bare loop plus ``Preemption(()).poll()`` once per update: the
  preemption agreement (issue #27) alone: one look at the Store (``check`` of one key, a
  round trip to the rank that hosts it) per update; no collective.
- ``ddp+poll10``: ``Preemption((), every=10)``: one look at the Store every 10 updates.
- ``run+stop``: ``run`` with ``handle_signals=True`` (the default stop signals, SIGINT,
  SIGTERM and SIGUSR1) and ``Ranks(stop_every=1)``: the agreement looks at the Store at
  every ``run.update``; ``run`` has it off.
- ``run+stop10``: as ``run+stop`` with ``Ranks(stop_every=10)`` (the default).

Printed per contender (rank 0's times): the median time per update over the rounds, the
spread (min-max), and the median per-round ratio to ``ddp`` of the same round; then the
agreement's cost: the median per-round ratio of each ``ddp+poll`` contender to ``ddp`` and
of each ``run+stop`` one to ``run``.

Then the saves (issue #27), bench_per_rank_save.py's trees and timing: each round, on both
ranks, ``--saves`` distributed saves of the DDP model with Adam and a clock
(``replicated``), alternated with as many of the same tree plus each rank's own
``RNGState()``, data ``torch.Generator``, NumPy generator and a ``PerRank`` array
(``per-rank``: every rank writes its own file, the writer records them); printed: the
median time of one save (rank 0's, from a barrier: written, reported, committed) and the
median per-round ratio.

Run: `PYTHONPATH=src .venv/bin/python bench/bench_distributed.py [--n 500] [--rounds 5]
[--saves 20]`.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from typing import Any

from _two_ranks import run_two_ranks

CONTENDERS = (
    "ddp",
    "run",
    "run+check100",
    "run+check1",
    "run+reduce",
    "ddp+8allreduce",
    "ddp+poll",
    "ddp+poll10",
    "run+stop",
    "run+stop10",
)
# The preemption agreement's cost: each contender beside the same loop without it.
AGREEMENT = {"ddp+poll": "ddp", "ddp+poll10": "ddp", "run+stop": "run", "run+stop10": "run"}


def _loop(name: str, n: int, directory: str) -> float:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from globalstep import Clock, Run
    from globalstep.distributed import Preemption
    from globalstep.run import Ranks

    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(dist.get_rank())
    inputs, targets = torch.randn(32, 64, generator=data), torch.randn(32, 1, generator=data)
    ranks = {
        "run": Ranks(check_every=None),
        "run+stop": Ranks(check_every=None, stop_every=1),
        "run+stop10": Ranks(check_every=None, stop_every=10),
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
            handle_signals=name.startswith("run+stop"),
            ranks=ranks,
            writer_options={"formats": ("jsonl",)},
        )
        run.restore()
    clock = Clock()
    extra = [torch.zeros(1, dtype=torch.float64) for _ in range(8)]
    # No signal is sent: the agreement's own cost.
    stop = Preemption((), every=10 if name == "ddp+poll10" else 1) if "poll" in name else None
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
            if stop is not None and stop.poll():
                raise AssertionError("no stop was asked for")
        elif name == "run+reduce":
            value = loss.item()
            run.update(**{f"m{i}": value for i in range(8)})
        else:
            run.update(loss=loss.item())
    elapsed = time.perf_counter() - start
    if run is not None:
        run.close()
    if stop is not None:
        stop.close()
    return elapsed / n


SAVES = ("replicated", "per-rank")  # bench_per_rank_save.py's two trees


def _saves(rank: int, count: int, directory: str) -> dict[str, float]:
    """The median time of one distributed save of each of bench_per_rank_save.py's trees."""
    from bench_per_rank_save import states, time_saves

    return time_saves(directory, states(rank), count)


def _rank(rank: int, base: str, n: int, rounds: int, saves: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in CONTENDERS + SAVES}
    # One directory for both ranks (``base``): every rank of a Run takes part in its
    # distributed saves, so the ranks must open the same checkpoint directory (one of each
    # rank's own leaves the writer waiting for a rank that saves elsewhere).
    for index in range(rounds):
        for name in CONTENDERS:
            directory = os.path.join(base, f"{name}-{index}")
            times[name].append(_loop(name, n, directory))
        if saves:
            for name, median in _saves(rank, saves, os.path.join(base, f"saves-{index}")).items():
                times[name].append(median)
        if rank == 0:
            print(f"round {index + 1}/{rounds} done", file=sys.stderr, flush=True)
    return times


def main(argv: list[str] | None = None) -> None:
    """Starts two ranks, runs the contenders round-robin and prints the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--saves", type=int, default=20, help="saves per variant and round")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = run_two_ranks(_rank, args.n, args.rounds, args.saves)
    saved = {name: times.pop(name) for name in SAVES}
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
    print("\nthe preemption agreement, beside the same loop without it")
    print("| contender | baseline | x baseline (median of rounds) |")
    print("|---|---|---:|")
    for name, baseline in AGREEMENT.items():
        ratio = statistics.median(v / b for v, b in zip(times[name], times[baseline], strict=True))
        print(f"| {name} | {baseline} | {ratio:.3f} |")
    if not args.saves:
        return
    print(f"\nsaves: {args.saves} per variant and round, median of each round's median")
    print("| save | ms/save (median) | spread | x replicated (median of rounds) |")
    print("|---|---:|---:|---:|")
    for name, values in saved.items():
        ratio = statistics.median(v / b for v, b in zip(values, saved["replicated"], strict=True))
        row = (
            name,
            f"{statistics.median(values) * 1e3:.2f}",
            f"{min(values) * 1e3:.2f}-{max(values) * 1e3:.2f}",
            f"{ratio:.3f}",
        )
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
