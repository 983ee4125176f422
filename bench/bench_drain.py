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

Run: `PYTHONPATH=src .venv/bin/python bench/bench_drain.py [--n 19999] [--repeats 7]
[--loss plain|grad|float] [--formats tensorboard,jsonl]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from globalstep import Clock
from globalstep.summary import SummaryWriter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=19_999, help="updates per flush (< 20,000)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--loss", choices=("plain", "grad", "float"), default="plain")
    parser.add_argument("--formats", default="tensorboard,jsonl")
    args = parser.parse_args()
    torch.set_num_threads(1)
    clock = Clock()
    loss = torch.tensor(1.5)
    leaf = torch.randn(4, requires_grad=True)
    with tempfile.TemporaryDirectory() as logdir:
        writer = SummaryWriter(
            logdir, clock=clock, flush_seconds=3600.0, formats=tuple(args.formats.split(","))
        )

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
        f"loss={args.loss} formats={args.formats} n={args.n}: flush CPU per update "
        f"median {statistics.median(spent):.2f} us (min {min(spent):.2f}, max "
        f"{max(spent):.2f}; " + ", ".join(f"{s:.2f}" for s in spent) + ")"
    )


if __name__ == "__main__":
    main()
