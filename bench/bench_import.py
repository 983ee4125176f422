"""Import time of `globalstep` beside NumPy's own and, where installed, Lightning's.

Each import runs in a fresh interpreter, best of N runs, so caches of an earlier import do
not count. Run: `.venv/bin/python bench/bench_import.py [--repeat 7]`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time


def best_import_seconds(module: str, repeat: int) -> float | None:
    best = None
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            return None
        best = elapsed if best is None else min(best, elapsed)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    baseline = best_import_seconds("sys", args.repeat) or 0.0
    numpy_s = best_import_seconds("numpy", args.repeat)
    print(f"interpreter start alone: {baseline:.3f} s (subtracted below)")
    assert numpy_s is not None
    rows = [("numpy", numpy_s)]
    every_part = "globalstep, globalstep.schedules, globalstep.checkpoint, globalstep.summary"
    for module in ("globalstep", every_part, "lightning", "pytorch_lightning", "ignite"):
        seconds = best_import_seconds(module, args.repeat)
        if seconds is not None:
            rows.append((module, seconds))
        else:
            print(f"{module}: not installed, skipped")
    print(f"{'import':<80}{'s':>8}{'x numpy':>10}")
    for module, seconds in rows:
        net = seconds - baseline
        print(f"{module:<80}{net:>8.3f}{net / (numpy_s - baseline):>10.2f}")


if __name__ == "__main__":
    main()
