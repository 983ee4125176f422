"""CPU time of SummaryWriter's drain per update: what the background thread spends per
``scalars({"loss": <0-d tensor>, "lr": <float>})``, both formats (issue 8's budget).

It queues ``--n`` updates with the background thread asleep (``flush_seconds=3600`` and
fewer than the 20,000 queued items that wake it), then times ``flush()``, which drains the
queue on the calling thread, with ``time.thread_time`` (CPU, so a loaded machine's
preemption does not inflate it); the median of ``--repeats`` flushes, each of a fresh
queue. The drain reads the tensors (``.item()``, which frees each tensor and what it
holds), encodes the event records and the JSON lines, and writes them.

``--loss``: ``plain`` (``loss * i``, a tensor with no autograd graph, as
``/tmp/prof/drainprof.py``), ``grad`` (``(w * i).sum()`` of a leaf that requires grad: its
graph is freed in the drain, as a training loop's loss is) or ``float`` (no tensor).

``--tracker`` adds a tracker format whose client sends nothing (``Tracker("bench",
client=...)``, no checkpoint commits: every point stays pending, ``max_pending`` raised
past them): the drain then also writes the tracker's record, a line per point.

Run: `PYTHONPATH=src .venv/bin/python bench/bench_drain.py [--n 19999] [--repeats 7]
[--loss plain|grad|float] [--formats tensorboard,jsonl] [--tracker]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from globalstep import Clock
from globalstep.summary import SummaryWriter, Tracker


class _Nowhere:
    """A tracker client that opens a run and never has anything to send."""

    def open(self, run_id: str | None, *, logdir: str, key: str) -> str:
        return run_id or key

    def send(self, points: list[tuple[str, int, float, float]]) -> None:
        pass

    def close(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=19_999, help="updates per flush (< 20,000)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--loss", choices=("plain", "grad", "float"), default="plain")
    parser.add_argument("--formats", default="tensorboard,jsonl")
    parser.add_argument("--tracker", action="store_true", help="and a tracker's record")
    args = parser.parse_args()
    formats: tuple[str | Tracker, ...] = tuple(args.formats.split(","))
    if args.tracker:
        formats += (Tracker("bench", client=_Nowhere, max_pending=10**8),)
    torch.set_num_threads(1)
    clock = Clock()
    loss = torch.tensor(1.5)
    leaf = torch.randn(4, requires_grad=True)
    with tempfile.TemporaryDirectory() as logdir:
        writer = SummaryWriter(logdir, clock=clock, flush_seconds=3600.0, formats=formats)

        def queue(count: int) -> None:
            for i in range(count):
                if args.loss == "plain":
                    value: object = loss * i
                elif args.loss == "grad":
                    value = (leaf * i).sum()
                else:
                    value = 1.5 * i
                writer.scalars({"loss": value, "lr": 0.01 + i})
                clock.tick()

        queue(100)  # the tags' first calls and encodings, untimed
        writer.flush()
        spent = []
        for _ in range(args.repeats):
            queue(args.n)
            start = time.thread_time()
            writer.flush()
            spent.append((time.thread_time() - start) / args.n * 1e6)
        writer.close()
    print(
        f"loss={args.loss} formats={args.formats}{'+tracker' * args.tracker} n={args.n}: "
        "flush CPU per update "
        f"median {statistics.median(spent):.2f} us (min {min(spent):.2f}, max "
        f"{max(spent):.2f}; " + ", ".join(f"{s:.2f}" for s in spent) + ")"
    )


if __name__ == "__main__":
    main()
