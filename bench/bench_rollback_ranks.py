"""Per-update cost of Run's rollback policy on 2 gloo ranks, inside a real DDP loop.

On several ranks a :class:`~globalstep.run.Rollback` policy gathers every rank's loss at
each update (``globalstep.distributed.gather_floats``: one ``all_gather`` of two float64 per
rank) so that every rank takes the same decision. This measures what that adds to a DDP
loop: two ranks on 127.0.0.1 train the same trivial model (``nn.Linear(32, 1)`` in DDP, a
fixed batch of 64 per rank, SGD) for ``--n`` updates per contender, round-robin for
``--rounds`` rounds, timed between two barriers (not start-up or the final save):

- ``hand``: the bare DDP loop, ``loss.item()`` read at each update.
- ``run``: the same loop with ``globalstep.Run`` (``run.update(loss=loss.item())``, JSONL
  logs, no checkpoint due, the default ``Ranks()``).
- ``run+rollback``: as ``run``, with ``rollback=Rollback()`` (no update is ever bad, so
  only the decision's collective and the policy's bookkeeping are timed).

Rank 0 prints, per contender, the median wall time per update over the rounds and the
spread, and for ``run+rollback`` the median of its per-round excess over ``run`` (the cost
of the decision on the ranks' losses) and the ratio of the two.

Run: `.venv/bin/python bench/bench_rollback_ranks.py [--n 2000] [--rounds 5]`.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from _two_ranks import run_two_ranks

CONTENDERS = ("hand", "run", "run+rollback")


def _loop(name: str, n: int, model: Any, opt: Any, batch: Any, directory: Path) -> float:
    """One contender's ``n`` updates on this rank; returns the seconds between barriers."""
    from globalstep import Run
    from globalstep.run import Rollback

    inputs, targets = batch
    run = None
    if name != "hand":
        run = Run(
            directory,
            rollback=Rollback() if name == "run+rollback" else None,
            progress=False,
            stream=io.StringIO(),
            handle_signals=False,
            writer_options={"formats": ("jsonl",)},
        )
        run.restore({"model": model, "opt": opt})
    dist.barrier()
    start = time.perf_counter()
    for _ in range(n):
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        value = loss.item()
        if run is not None:
            run.update(loss=value)
    dist.barrier()
    elapsed = time.perf_counter() - start
    if run is not None:
        run.close()
    return elapsed


def _rank(rank: int, scratch: str, n: int, rounds: int) -> dict[str, list[float]]:
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(rank)
    batch = (torch.randn(64, 32, generator=generator), torch.randn(64, 1, generator=generator))
    times: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    for number in range(rounds):
        for name in CONTENDERS:
            directory = Path(scratch) / f"{name}-{number}"
            times[name].append(_loop(name, n, model, opt, batch, directory) / n)
    return times


def _report(times: dict[str, list[float]], n: int, rounds: int) -> None:
    print(f"2 gloo ranks, {n} updates x {rounds} rounds; per update (median, min-max):")
    for name in CONTENDERS:
        values = [t * 1e6 for t in times[name]]
        print(
            f"  {name:13} {statistics.median(values):9.1f} us"
            f"  ({min(values):.1f}-{max(values):.1f})"
        )
    excess = [(a - b) * 1e6 for a, b in zip(times["run+rollback"], times["run"], strict=True)]
    ratio = statistics.median(times["run+rollback"]) / statistics.median(times["run"])
    print(
        f"  rollback's decision on the ranks' losses: +{statistics.median(excess):.1f} us per "
        f"update over run (median of the rounds' excess), ratio {ratio:.3f}"
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="updates per contender and round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    _report(run_two_ranks(_rank, args.n, args.rounds), args.n, args.rounds)


if __name__ == "__main__":
    main(sys.argv[1:])
