"""The ledger's own cost per save, and the saves' GB/s beside the raw floor it measured.

For each storage (``--dirs``: a local disk and tmpfs, ``/dev/shm``), rounds alternate two
variants of the same synchronous saves of a state of ``--mib`` MiB (16 float32 arrays):
``CheckpointManager(..., ledger=False)`` and the default ledger (``ledger.jsonl`` beside the
checkpoints: one JSON line written and fsynced per save, the raw floor measured once in a
thread after the first save). The order of the variants is reversed every other round;
each variant opens a fresh directory, saves once to warm up (and, with the ledger, waits
until its floor is measured, so that the floor's write does not run beside the timed
saves), then times ``--saves`` saves on the training thread. Reported per storage: the
median time of a save with and without the ledger and their difference (the ledger's cost
per save, within the noise of the disk); the median time of the ledger's work inside a
save, timed in place (its ``saved`` call: the record written and fsynced, and the
checkpoint's size read as the manager reads it, once more); the median time of one record
alone (``Ledger.append`` with its fsync, ``--appends`` times in a row); and the saves' GB/s
from the ledger's own records beside the floor it measured. Deletes what it writes.

Run:
    PYTHONPATH=src python bench/bench_ledger.py [--mib 64] [--rounds 5] [--saves 5]
        [--dirs /tmp/bench-ledger,/dev/shm/bench-ledger] [--appends 50]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time

import numpy as np

from globalstep import CheckpointManager
from globalstep.checkpoint import LEDGER_FILE, Ledger, read_ledger
from globalstep.checkpoint._ledger import checkpoint_bytes
from globalstep.storage import open_storage


def make_state(mib: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    per = mib * (1 << 20) // 16 // 4
    return {f"layer{i:02d}": rng.random(per, dtype=np.float32) for i in range(16)}


def run_variant(
    root: str, ledger: bool, state: dict, saves: int, inside: list[float]
) -> tuple[list[float], str]:
    """Times ``saves`` saves into a fresh directory; returns the times and the directory.
    With the ledger, appends to ``inside`` the time of each save's record (the ledger's
    ``saved`` call, timed in place, and the checkpoint's size read for it)."""
    directory = os.path.join(root, f"{'ledger' if ledger else 'none'}-{time.time_ns()}")
    with CheckpointManager(directory, ledger=ledger, max_to_keep=2) as manager:
        if manager.ledger is not None:
            record, storage = manager.ledger.saved, open_storage(directory)

            def timed_record(step: int, *args: object, **kwargs: object) -> None:
                started = time.perf_counter()
                checkpoint_bytes(storage, f"step-{step:012d}")
                record(step, *args, **kwargs)
                inside.append(time.perf_counter() - started)

            manager.ledger.saved = timed_record  # type: ignore[method-assign]
        manager.save(0, state)  # warm-up; with the ledger, the floor starts now
        if ledger:
            path = os.path.join(directory, LEDGER_FILE)
            while not read_ledger(path).floors:
                time.sleep(0.01)
        times = []
        for step in range(1, saves + 1):
            started = time.perf_counter()
            manager.save(step, state)
            times.append(time.perf_counter() - started)
    return times, directory


def append_cost(root: str, appends: int) -> float:
    """The median time of one ledger record (write + fsync) in ``root``."""
    path = os.path.join(root, f"append-{time.time_ns()}.jsonl")
    ledger = Ledger(path)
    times = []
    for step in range(appends):
        started = time.perf_counter()
        ledger.append("save", step=step, tier="durable", bytes=1 << 26, stall_seconds=0.1)
        times.append(time.perf_counter() - started)
    ledger.close()
    os.remove(path)
    return statistics.median(times)


def bench(root: str, args: argparse.Namespace, state: dict) -> dict:
    os.makedirs(root, exist_ok=True)
    with_ledger: list[float] = []
    without: list[float] = []
    rates: list[float] = []
    floors: list[float] = []
    inside: list[float] = []
    for round_ in range(args.rounds):
        order = (True, False) if round_ % 2 == 0 else (False, True)
        for ledger in order:
            times, directory = run_variant(root, ledger, state, args.saves, inside)
            (with_ledger if ledger else without).extend(times)
            if ledger:
                summary = read_ledger(os.path.join(directory, LEDGER_FILE))
                rates += [s["gbps"] for s in summary.saves[1:]]
                floors += [f["gbps"] for f in summary.floors]
            shutil.rmtree(directory)
    record = append_cost(root, args.appends)
    return {
        "save_ledger_ms": 1e3 * statistics.median(with_ledger),
        "save_none_ms": 1e3 * statistics.median(without),
        "spread_ledger_ms": (1e3 * min(with_ledger), 1e3 * max(with_ledger)),
        "spread_none_ms": (1e3 * min(without), 1e3 * max(without)),
        "record_ms": 1e3 * record,
        "inside_ms": 1e3 * statistics.median(inside[1:]),
        "gbps": statistics.median(rates),
        "floor_gbps": statistics.median(floors),
        "floor_spread": (min(floors), max(floors)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--saves", type=int, default=5)
    parser.add_argument("--appends", type=int, default=50)
    parser.add_argument("--dirs", default="/tmp/bench-ledger,/dev/shm/bench-ledger")
    args = parser.parse_args()
    state = make_state(args.mib)
    print(f"{args.mib} MiB state, {args.rounds} rounds x {args.saves} saves per variant")
    print(
        "storage | save, ledger (ms) | save, none (ms) | ledger's cost per save (ms) | "
        "the record inside a save (ms) | one record alone (ms) | saves GB/s | floor GB/s"
    )
    for root in args.dirs.split(","):
        r = bench(root, args, state)
        print(
            f"{root} | {r['save_ledger_ms']:.1f} ({r['spread_ledger_ms'][0]:.1f}-"
            f"{r['spread_ledger_ms'][1]:.1f}) | {r['save_none_ms']:.1f} "
            f"({r['spread_none_ms'][0]:.1f}-{r['spread_none_ms'][1]:.1f}) | "
            f"{r['save_ledger_ms'] - r['save_none_ms']:+.2f} | {r['inside_ms']:.3f} | "
            f"{r['record_ms']:.3f} | "
            f"{r['gbps']:.3f} | {r['floor_gbps']:.3f} ({r['floor_spread'][0]:.3f}-"
            f"{r['floor_spread'][1]:.3f})"
        )
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
