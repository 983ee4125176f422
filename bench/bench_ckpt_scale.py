"""How checkpoint bookkeeping grows with the number of checkpoints in a directory (issue 15).

For N in 100, 300, 1,000, 3,000 and 10,000 checkpoints of 16 bytes each (``--counts``
changes them), it measures:

- ``ckpt ls``: ``python -m globalstep ckpt ls DIR`` in a fresh process, start-up included
  (and the start-up alone, ``python -m globalstep --version``, for reference);
- ``latest_step()`` on a read-only manager: its first call (a listing) and later calls on
  a quiet directory (median of 1,000);
- a save's own bookkeeping with ``max_to_keep=N`` (so each save also deletes the oldest):
  the time of ``save()`` minus the commit of its files and minus the deletion, median of
  30; and the deletion itself (a rename and the removal of three files);
- ``ckpt verify`` over all N (per checkpoint), and, on one 256 MiB checkpoint, verify's
  read speed beside reading the same file into memory (both from the page cache).

With ``--baseline SRC`` the ``ckpt ls`` and ``latest_step()`` figures are also taken with
another checkout's code (e.g. ``/work/main/src`` before this issue) for N up to 1,000.
The directories are written with fsync turned off (set-up only; nothing timed writes
them). Rounds interleave the contenders; the table gives medians and the spread.

Run:
    PYTHONPATH=src python bench/bench_ckpt_scale.py [--counts 100 1000 10000] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")


def populate(directory: str, count: int) -> None:
    """Writes ``count`` checkpoints of 16 bytes, without fsync (set-up only)."""
    from globalstep.checkpoint import CheckpointManager

    real_fsync = os.fsync
    os.fsync = lambda fd: None  # type: ignore[assignment]
    try:
        with CheckpointManager(directory, max_to_keep=None) as manager:
            for step in range(1, count + 1):
                manager.save(step, {"w": np.full(2, float(step))})
    finally:
        os.fsync = real_fsync


def run_timed(command: list[str], src: str) -> float:
    env = dict(os.environ, PYTHONPATH=src)
    began = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - began


LATEST = """
import sys, time
from globalstep.checkpoint import CheckpointManager
manager = CheckpointManager(sys.argv[1], read_only=True)
t = time.perf_counter(); manager.latest_step(); cold = time.perf_counter() - t
times = []
for _ in range(1000):
    t = time.perf_counter(); manager.latest_step(); times.append(time.perf_counter() - t)
times.sort()
print(cold, times[len(times) // 2])
"""


def latest_step(directory: str, src: str) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=src)
    out = subprocess.run(
        [sys.executable, "-c", LATEST, directory],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(out[0]), float(out[1])


def bookkeeping(directory: str, count: int, saves: int = 30) -> tuple[float, float]:
    """Medians of save() minus its commit and its deletion, and of the deletion alone,
    with max_to_keep=count (so each save deletes the oldest checkpoint)."""
    import globalstep.checkpoint._manager as manager_module
    from globalstep.checkpoint import CheckpointManager

    real_commit = manager_module.commit
    real_delete = CheckpointManager._delete
    inside: dict[str, float] = {}

    def timed_commit(*args: Any, **kwargs: Any) -> None:
        began = time.perf_counter()
        real_commit(*args, **kwargs)
        inside["commit"] = time.perf_counter() - began

    def timed_delete(self: Any, name: str) -> None:
        began = time.perf_counter()
        real_delete(self, name)
        inside["delete"] = inside.get("delete", 0.0) + time.perf_counter() - began

    manager_module.commit = timed_commit  # type: ignore[assignment]
    CheckpointManager._delete = timed_delete  # type: ignore[method-assign]
    own, deletion = [], []
    try:
        with CheckpointManager(directory, max_to_keep=count) as manager:
            start = (manager.latest_step() or 0) + 1
            manager.save(start, {"w": np.zeros(2)})  # the first save sweeps once
            for step in range(start + 1, start + 1 + saves):
                inside.clear()
                began = time.perf_counter()
                manager.save(step, {"w": np.full(2, float(step))})
                total = time.perf_counter() - began
                own.append(total - inside["commit"] - inside.get("delete", 0.0))
                deletion.append(inside.get("delete", 0.0))
    finally:
        manager_module.commit = real_commit
        CheckpointManager._delete = real_delete  # type: ignore[method-assign]
    return statistics.median(own), statistics.median(deletion)


def verify_speed(base: str) -> tuple[float, float]:
    """GB/s of CheckpointManager.verify and of a plain read of the same 256 MiB file."""
    from globalstep.checkpoint import CheckpointManager

    directory = os.path.join(base, "big")
    with CheckpointManager(directory) as manager:
        manager.save(1, {"w": np.ones(64 << 20, np.float32)})
        path = os.path.join(directory, "step-000000000001", "arrays.safetensors")
        size = os.path.getsize(path)
        buffer = bytearray(size)
        verify, plain = [], []
        for _ in range(5):
            began = time.perf_counter()
            manager.verify(1)
            verify.append(time.perf_counter() - began)
            began = time.perf_counter()
            with open(path, "rb", buffering=0) as f:
                f.readinto(buffer)
            plain.append(time.perf_counter() - began)
    shutil.rmtree(directory)
    return size / statistics.median(verify) / 1e9, size / statistics.median(plain) / 1e9


def spread(values: list[float], scale: float, unit: str) -> str:
    med = statistics.median(values) * scale
    return f"{med:.3g} {unit} ({min(values) * scale:.3g}-{max(values) * scale:.3g})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[100, 300, 1000, 3000, 10000])
    parser.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default=None, help="another checkout's src/ to compare")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="bench-ckpt-scale-", dir=args.dir)
    try:
        dirs = {}
        for count in args.counts:
            dirs[count] = os.path.join(base, str(count))
            began = time.perf_counter()
            populate(dirs[count], count)
            print(f"wrote {count} checkpoints in {time.perf_counter() - began:.1f} s", flush=True)
        time.sleep(0.2)  # quiet directories, as a reader polling a finished run sees them
        results: dict[tuple[str, int], list[float]] = {}
        contenders = [("new", SRC)] + ([("baseline", args.baseline)] if args.baseline else [])
        for _ in range(args.rounds):
            results.setdefault(("startup", 0), []).append(
                run_timed([sys.executable, "-m", "globalstep", "--version"], SRC)
            )
            for count in args.counts:
                for label, src in contenders:
                    if label == "baseline" and count > 1000:
                        continue
                    ls = [sys.executable, "-m", "globalstep", "ckpt", "ls", dirs[count]]
                    results.setdefault((f"ls {label}", count), []).append(run_timed(ls, src))
                    cold, warm = latest_step(dirs[count], src)
                    results.setdefault((f"latest cold {label}", count), []).append(cold)
                    results.setdefault((f"latest warm {label}", count), []).append(warm)
                sys.path.insert(0, SRC)
                own, deletion = bookkeeping(dirs[count], count)
                results.setdefault(("bookkeeping", count), []).append(own)
                results.setdefault(("deletion", count), []).append(deletion)
                time.sleep(0.2)
                began = time.perf_counter()
                verify = [sys.executable, "-m", "globalstep", "ckpt", "verify", dirs[count]]
                run_timed(verify, SRC)
                results.setdefault(("verify", count), []).append(
                    (time.perf_counter() - began) / count
                )
        sys.path.insert(0, SRC)
        read_speed = verify_speed(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"\nload: {os.getloadavg()}; python start-up + import: "
        f"{spread(results[('startup', 0)], 1e3, 'ms')}"
    )
    rows = [
        ("`ckpt ls` (process)", "ls new", 1e3, "ms"),
        ("`latest_step()` first call", "latest cold new", 1e3, "ms"),
        ("`latest_step()` later calls", "latest warm new", 1e6, "µs"),
        ("save bookkeeping, deletion aside", "bookkeeping", 1e3, "ms"),
        ("deleting the oldest (I/O)", "deletion", 1e3, "ms"),
        ("`ckpt verify` per checkpoint", "verify", 1e3, "ms"),
    ]
    if args.baseline:
        rows += [
            ("`ckpt ls` before (baseline)", "ls baseline", 1e3, "ms"),
            ("`latest_step()` first, before", "latest cold baseline", 1e3, "ms"),
            ("`latest_step()` later, before", "latest warm baseline", 1e6, "µs"),
        ]
    counts = args.counts
    print("| measure | " + " | ".join(f"N={c:,}" for c in counts) + " | growth per decade |")
    print("|---" * (len(counts) + 2) + "|")
    for title, key, scale, unit in rows:
        cells, medians = [], {}
        for c in counts:
            values = results.get((key, c))
            if values:
                cells.append(spread(values, scale, unit))
                medians[c] = statistics.median(values)
            else:
                cells.append("-")
        decades = [
            (medians[c * 10] / medians[c])
            for c in counts
            if c in medians and c * 10 in medians and medians[c] > 0
        ]
        growth = ", ".join(f"x{g:.2g}" for g in decades) or "-"
        print(f"| {title} | " + " | ".join(cells) + f" | {growth} |")
    print(
        f"\n`ckpt verify` on one 256 MiB checkpoint: {read_speed[0]:.2f} GB/s; "
        f"a plain read of the same file: {read_speed[1]:.2f} GB/s "
        f"(ratio {read_speed[0] / read_speed[1]:.2f})"
    )


if __name__ == "__main__":
    main()
