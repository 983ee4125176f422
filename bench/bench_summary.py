"""Scalar logging throughput of globalstep's SummaryWriter beside its peers.

Each contender writes N scalars (4 tags in turn, step = index) into a fresh directory; the
time includes closing the writer, so everything is on disk. Contenders: tensorboardX's and
torch.utils.tensorboard's SummaryWriter, a plain JSONL append (json.dumps + write per
scalar), and globalstep's SummaryWriter with event files only, JSONL only, and both. For
globalstep it also reports the training thread's cost of one ``scalar()`` call: the time of
the loop of calls (the background thread runs meanwhile, so its GIL share counts) over N.

Run: `.venv/bin/python bench/bench_summary.py [--n 200000] [--repeat 3]`. Peers run once
(they take tens of seconds); globalstep's figures are the best of ``--repeat`` runs.
``--breakdown`` also prints where a scalar's time goes: each backend's encoding and write
of N queued scalars alone, and one ``scalar()`` call with the background thread asleep.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

TAGS = ("loss", "lr", "accuracy", "grad_norm")


def _value(i: int) -> float:
    return 1.0 / (i + 1)


def _run_peer_writer(writer_class: type, logdir: str, n: int) -> float:
    start = time.perf_counter()
    writer = writer_class(logdir)
    for i in range(n):
        writer.add_scalar(TAGS[i % 4], _value(i), i)
    writer.close()
    return time.perf_counter() - start


def run_tensorboardx(logdir: str, n: int) -> float:
    from tensorboardX import SummaryWriter

    return _run_peer_writer(SummaryWriter, logdir, n)


def run_torch(logdir: str, n: int) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.utils.tensorboard import SummaryWriter

    return _run_peer_writer(SummaryWriter, logdir, n)


def run_jsonl_append(logdir: str, n: int) -> float:
    start = time.perf_counter()
    with open(f"{logdir}/plain.jsonl", "a", encoding="utf-8") as file:
        for i in range(n):
            record = {"step": i, "wall_time": time.time(), "tag": TAGS[i % 4], "value": _value(i)}
            file.write(json.dumps(record) + "\n")
    return time.perf_counter() - start


def globalstep_runner(formats: tuple[str, ...]) -> Callable[[str, int], tuple[float, float]]:
    def run(logdir: str, n: int) -> tuple[float, float]:
        from globalstep import SummaryWriter

        start = time.perf_counter()
        writer = SummaryWriter(logdir, formats=formats)
        loop_start = time.perf_counter()
        for i in range(n):
            writer.scalar(TAGS[i % 4], _value(i), i)
        loop = time.perf_counter() - loop_start
        writer.close()
        return time.perf_counter() - start, loop

    return run


def breakdown(logdir: str, n: int) -> dict[str, float]:
    """Returns µs per scalar: each backend's write() alone, and a call with no background work."""
    from globalstep import SummaryWriter
    from globalstep.summary._base import SCALAR, Item
    from globalstep.summary._jsonl import JsonlBackend
    from globalstep.summary._tensorboard import TensorBoardBackend
    from globalstep.summary._writer import _BATCH_ITEMS

    items: list[Item] = [(SCALAR, TAGS[i % 4], i, time.time(), _value(i)) for i in range(n)]
    result = {}
    for name, backend in (
        ("event encode+write", TensorBoardBackend(logdir, 0)),
        ("JSONL encode+write", JsonlBackend(logdir)),
    ):
        start = time.perf_counter()
        for k in range(0, n, _BATCH_ITEMS):
            backend.write(items[k : k + _BATCH_ITEMS])
        backend.close()
        result[name] = (time.perf_counter() - start) / n * 1e6
    # Batches below the wake-up size, flushed between, untimed: the thread never runs.
    writer = SummaryWriter(f"{logdir}/calls", formats=("jsonl",), flush_seconds=3600)
    chunk, spent = _BATCH_ITEMS - 1, 0.0
    for k in range(0, n, chunk):
        start = time.perf_counter()
        for i in range(k, min(n, k + chunk)):
            writer.scalar(TAGS[i % 4], _value(i), i)
        spent += time.perf_counter() - start
        writer.flush()
    writer.close()
    result["scalar() call alone"] = spent / n * 1e6
    return result


def _in_fresh_dir(fn: Callable[[str, int], T], n: int) -> T:
    logdir = tempfile.mkdtemp(prefix="bench_summary_")
    try:
        return fn(logdir, n)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-peers", action="store_true", help="globalstep and JSONL only")
    parser.add_argument("--breakdown", action="store_true", help="where a scalar's time goes")
    args = parser.parse_args()
    n = args.n
    rates: dict[str, float] = {}
    peers: list[tuple[str, Callable[[str, int], float]]] = [("jsonl append", run_jsonl_append)]
    if not args.skip_peers:
        peers += [("tensorboardX", run_tensorboardx), ("torch.utils.tensorboard", run_torch)]
    for name, fn in peers:
        repeat = args.repeat if name == "jsonl append" else 1
        try:
            seconds = min(_in_fresh_dir(fn, n) for _ in range(repeat))
        except ImportError:
            print(f"{name}: not installed, skipped")
            continue
        rates[name] = n / seconds
    call_us: dict[str, float] = {}
    for label, formats in (
        ("globalstep tensorboard", ("tensorboard",)),
        ("globalstep jsonl", ("jsonl",)),
        ("globalstep both", ("tensorboard", "jsonl")),
    ):
        runs = [_in_fresh_dir(globalstep_runner(formats), n) for _ in range(args.repeat)]
        rates[label] = n / min(total for total, _loop in runs)
        call_us[label] = min(loop for _total, loop in runs) / n * 1e6
    print(f"{n:,} scalars, time including close")
    print(f"{'writer':<26}{'scalars/s':>12}{'µs each':>10}{'x tbX':>8}{'x jsonl':>9}{'call µs':>9}")
    tbx = rates.get("tensorboardX")
    for name, rate in rates.items():
        vs_tbx = f"{rate / tbx:8.1f}" if tbx else f"{'-':>8}"
        vs_jsonl = rate / rates["jsonl append"]
        call = f"{call_us[name]:9.2f}" if name in call_us else f"{'-':>9}"
        print(f"{name:<26}{rate:12,.0f}{1e6 / rate:10.2f}{vs_tbx}{vs_jsonl:9.2f}{call}")
    if args.breakdown:
        runs = [_in_fresh_dir(breakdown, n) for _ in range(args.repeat)]
        print(f"\nwhere a scalar's time goes (µs each, best of {args.repeat})")
        for part in runs[0]:
            print(f"{part:<26}{min(r[part] for r in runs):10.2f}")


if __name__ == "__main__":
    main()
