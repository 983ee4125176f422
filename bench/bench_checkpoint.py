"""Checkpoint save/restore speed beside a raw write, safetensors, torch.save and np.save.

Three states: 64 float32 arrays of 1 GiB in total, the same at 4 GiB, and 10,000 float32
arrays of 4-64 KiB (an optimizer state, where per-array overhead dominates). For each, the
contenders run interleaved: every round writes each contender's file once, then reads
each once cold, in an order rotated by one per round (so that none is always first after
a cache drop). Every write includes fsync and starts with no dirty pages pending (sync);
every read starts cold (``--drop global``: ``sync; echo 3 > /proc/sys/vm/drop_caches``, as
root; ``--drop file``: fsync + ``posix_fadvise(DONTNEED)`` on each file written). Ratios
to raw are taken within each round, then summarised (median, min-max) over the rounds;
``--warmup`` rounds run first and are not counted (the first touch of fresh memory on a
VM costs more than every later one). After every write and read, the freed memory goes
back to the system (``malloc_trim``), so that each contender starts as a fresh process
does: without it, the reader after ``np.load`` (raw ``readinto``, in every round, as the
order rotates) refilled the very pages ``np.load``'s arrays of the same sizes had left,
with no page fault, where every other reader met fresh pages: 1-2 us a page on a VM. Peak
extra memory of one save is measured in a fresh child process per writer (VmHWM after the
save minus VmRSS before it). Deletes every file it writes; holds one state (plus one
restored copy) in memory at a time.

``--host-memory`` measures instead the peak extra memory of async saves (issue 35): two
async managers in one process (a durable tier and a fast tier) each save the state of
``--cases`` (one size) ``--rounds`` times, the fast one right after the durable one, as a
fast tier saving while the durable save is still written does; each bound
(``max_host_bytes`` as a multiple of the state's bytes, or none) runs in a fresh process,
whose extra peak RSS over the run (VmHWM minus the RSS before the first save), training
thread's wait for memory and wall time are printed.

Run:
    PYTHONPATH=src python bench/bench_checkpoint.py [--cases 1024,4096,small]
        [--rounds 5] [--warmup 1] [--drop global|file] [--dir /tmp]
    PYTHONPATH=src python bench/bench_checkpoint.py --host-memory --cases 256 --rounds 5
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

N_ARRAYS = 64
N_SMALL = 10_000
State = dict[str, np.ndarray]


def make_state(case: str) -> State:
    """The state of ``case``: a size in MiB (64 arrays) or ``small`` (10,000 arrays)."""
    rng = np.random.default_rng(0)
    if case == "small":
        sizes = rng.integers(1 << 10, (16 << 10) + 1, N_SMALL)  # float32: 4-64 KiB each
        return {
            f"opt{i // 100:03d}/p{i % 100:02d}": rng.random(n, np.float32)
            for i, n in enumerate(sizes)
        }
    per = int(case) * (1 << 20) // N_ARRAYS // 4
    # Each array is allocated once, so the peak RSS before a save is the state itself.
    return {f"layer{i:02d}/weight": rng.random(per, dtype=np.float32) for i in range(N_ARRAYS)}


def nested(state: State) -> dict[str, dict[str, np.ndarray]]:
    """The same arrays as a tree: {"layer00": {"weight": ...}, ...}."""
    tree: dict[str, dict[str, np.ndarray]] = {}
    for key, array in state.items():
        outer, inner = key.split("/")
        tree.setdefault(outer, {})[inner] = array
    return tree


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_cache(root: str, how: str) -> None:
    """Evicts the files under root (``file``) or the whole page cache (``global``)."""
    os.sync()
    if how == "global":
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        return
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


# ---------------------------------------------------------------- writers


def write_raw(state: State, path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for array in state.values():
            view = memoryview(array.reshape(-1).view(np.uint8))
            while view:
                view = view[os.write(fd, view[: 1 << 30]) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_safetensors(state: State, path: str) -> None:
    from safetensors.numpy import save_file

    save_file(state, path)
    fsync_path(path)


def write_torch(state: State, path: str) -> None:
    import torch

    torch.save({k: torch.from_numpy(v) for k, v in state.items()}, path)
    fsync_path(path)


def write_np(state: State, path: str) -> None:
    """np.save of every array, one after another into one file, fsynced once."""
    with open(path, "wb") as f:
        for array in state.values():
            np.save(f, array)
        f.flush()
        os.fsync(f.fileno())


def write_ours(state: State, path: str) -> None:
    from globalstep.checkpoint import CheckpointManager

    with CheckpointManager(path, max_to_keep=None) as manager:
        manager.save(1, nested(state))


WRITERS: dict[str, Callable[[State, str], None]] = {
    "raw": write_raw,
    "ours": write_ours,
    "safetensors": write_safetensors,
    "torch": write_torch,
    "np.save": write_np,
}
WRITE_LABELS = {
    "raw": "raw `os.write` + fsync",
    "ours": "**ours, `CheckpointManager.save`**",
    "safetensors": "safetensors `save_file` + fsync",
    "torch": "`torch.save` + fsync",
    "np.save": "`np.save` per array, one file, + fsync",
}


def timed_write(name: str, state: State, path: str) -> float:
    """Seconds one write takes; ours is timed as a training loop pays it: save() alone,
    with the manager (and its lock) opened beforehand, as a run opens it once."""
    if name != "ours":
        start = time.perf_counter()
        WRITERS[name](state, path)
        return time.perf_counter() - start
    from globalstep.checkpoint import CheckpointManager

    tree = nested(state)
    with CheckpointManager(path, max_to_keep=None) as manager:
        start = time.perf_counter()
        manager.save(1, tree)
        return time.perf_counter() - start


# ---------------------------------------------------------------- readers


def read_raw(shapes: list[tuple[Any, Any]], path: str) -> Any:
    out = []
    with open(path, "rb", buffering=0) as f:
        for shape, dtype in shapes:
            array = np.empty(shape, dtype)
            view = memoryview(array.reshape(-1).view(np.uint8))
            while view:
                view = view[f.readinto(view) :]
            out.append(array)
    return out


def read_ours(path: str, template: Any = None) -> Any:
    from globalstep.checkpoint import CheckpointManager

    with CheckpointManager(path, read_only=True) as manager:
        return manager.restore(template)


def read_safetensors(path: str) -> Any:
    from safetensors.numpy import load_file

    return load_file(path)


def read_torch(path: str) -> Any:
    import torch

    return torch.load(path, weights_only=True)


def read_np(count: int, path: str) -> Any:
    with open(path, "rb") as f:
        return [np.load(f) for _ in range(count)]


READ_LABELS = {
    "raw": "raw `readinto` (fresh arrays)",
    "ours": "**ours, `restore()`** (no template)",
    "ours template": "**ours, `restore(template)`** (in place)",
    "safetensors": "safetensors `load_file`",
    "torch": "`torch.load(weights_only=True)`",
    "np.save": "`np.load` per array",
}


def make_template(state: State) -> Any:
    """A resident template like a live model's (every page touched), built untimed."""
    template = nested({k: np.empty_like(v) for k, v in state.items()})
    for group in template.values():
        for array in group.values():
            array.fill(0)
    return template


# ---------------------------------------------------------------- rounds


def give_back_memory() -> None:
    """Frees what is garbage and returns the heap's free pages to the system (glibc)."""
    gc.collect()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _malloc_trim()


def remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def rotated(names: list[str], k: int) -> list[str]:
    k %= len(names)
    return names[k:] + names[:k]


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def run_case(case: str, args: argparse.Namespace, work: str) -> None:
    state = make_state(case)
    size = sum(a.nbytes for a in state.values())
    shapes = [(a.shape, a.dtype) for a in state.values()]
    folder = os.path.join(work, f"case-{case}")
    os.makedirs(folder)
    paths = {name: os.path.join(folder, name) for name in WRITERS}
    readers: dict[str, Callable[[], Any]] = {
        "raw": lambda: read_raw(shapes, paths["raw"]),
        "ours": lambda: read_ours(paths["ours"]),
        "ours template": lambda: read_ours(paths["ours"], template),
        "safetensors": lambda: read_safetensors(paths["safetensors"]),
        "torch": lambda: read_torch(paths["torch"]),
        "np.save": lambda: read_np(len(shapes), paths["np.save"]),
    }
    template: Any = None
    writes: dict[str, list[float]] = {n: [] for n in WRITERS}
    reads: dict[str, list[float]] = {n: [] for n in readers}
    load_before = os.getloadavg()
    print(f"\n## case {case}: {len(state)} float32 arrays, {size / (1 << 30):.3f} GiB", flush=True)
    for r in range(args.warmup + args.rounds):
        counted = r >= args.warmup
        line = [f"round {r - args.warmup + 1}" if counted else "warm-up"]
        for name in rotated(list(WRITERS), r):
            remove(paths[name])
            os.sync()
            seconds = timed_write(name, state, paths[name])
            give_back_memory()
            line.append(f"w {name} {seconds:.3f}")
            if counted:
                writes[name].append(seconds)
        for name in rotated(list(readers), r):
            if name == "ours template":
                template = make_template(state)  # untimed, as a live model's arrays are
            drop_cache(folder, args.drop)
            start = time.perf_counter()
            result = readers[name]()
            seconds = time.perf_counter() - start
            del result
            template = None
            give_back_memory()
            line.append(f"r {name} {seconds:.3f}")
            if counted:
                reads[name].append(seconds)
        print("  ".join(line), flush=True)
    load_after = os.getloadavg()
    report(case, size, writes, reads, load_before, load_after, args)
    shutil.rmtree(folder)


def report(
    case: str,
    size: int,
    writes: dict[str, list[float]],
    reads: dict[str, list[float]],
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
    args: argparse.Namespace,
) -> None:
    gb = size / 1e9
    rounds = len(writes["raw"])
    print(
        f"\n{rounds} rounds (+{args.warmup} warm-up), cache drop: {args.drop}; load average "
        f"before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after "
        f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}\n"
    )
    print("| save (incl. fsync) | GB/s median (min-max) | x raw, per round: median (min-max) |")
    print("|---|---:|---:|")
    for name, times in writes.items():
        ratios = [raw / t for raw, t in zip(writes["raw"], times, strict=True)]
        speeds = [gb / t for t in times]
        print(f"| {WRITE_LABELS[name]} | {summary(speeds)} | {summary(ratios)} |")
    print()
    print(
        "| cold restore | GB/s median (min-max) | x raw `readinto`, per round: median (min-max) |"
    )
    print("|---|---:|---:|")
    for name, times in reads.items():
        ratios = [raw / t for raw, t in zip(reads["raw"], times, strict=True)]
        speeds = [gb / t for t in times]
        print(f"| {READ_LABELS[name]} | {summary(speeds)} | {summary(ratios)} |")
    print()
    per_round = " ".join(
        f"{s / o:.2f}" for s, o in zip(writes["safetensors"], writes["ours"], strict=True)
    )
    print(f"save, ours faster than safetensors `save_file` by (per round, x): {per_round}")
    for other in ("torch", "safetensors"):
        w = " ".join(f"{s / o:.2f}" for s, o in zip(writes[other], writes["ours"], strict=True))
        r = " ".join(f"{s / o:.2f}" for s, o in zip(reads[other], reads["ours"], strict=True))
        t = " ".join(
            f"{s / o:.2f}" for s, o in zip(reads[other], reads["ours template"], strict=True)
        )
        print(f"vs {other}: save {w}; restore {r}; restore(template) {t}")
    print(flush=True)


# ---------------------------------------------------------------- peak memory


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def peak_child(writer: str, case: str, directory: str) -> None:
    """In a fresh process: the extra peak RSS (MiB) one save costs, printed as JSON.

    The peak is VmHWM, reset to the current RSS just before the save (clear_refs 5), so
    neither the state's construction nor the parent process counts.
    """
    from globalstep.checkpoint import CheckpointManager

    state = make_state(case)
    tree = nested(state)
    target = os.path.join(directory, f"peak-{writer}")
    save: Callable[[], None] = lambda: WRITERS[writer](state, target)  # noqa: E731
    with CheckpointManager(target + "-ours", max_to_keep=None) as manager:
        if writer == "ours":
            save = lambda: manager.save(1, tree)  # noqa: E731
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _status_kib("VmRSS")
        save()
        after = _status_kib("VmHWM")
    print(json.dumps({"extra_mib": (after - before) / 1024, "state_mib": before / 1024}))


def peaks(case: str, work: str) -> None:
    print(f"extra peak memory of one save, case {case} (fresh process each):")
    for name in ("ours", "safetensors", "torch", "np.save", "raw"):
        out = subprocess.run(
            [sys.executable, __file__, "--peak", name, "--cases", case, "--dir", work],
            capture_output=True,
            text=True,
            check=True,
            env=os.environ,
        ).stdout
        peak = json.loads(out.strip().splitlines()[-1])
        print(
            f"  {name:12s} {peak['extra_mib']:8.2f} MiB "
            f"(process RSS before the save: {peak['state_mib']:.0f} MiB)",
            flush=True,
        )


def host_memory_child(bound: str, case: str, rounds: int, directory: str) -> None:
    """In a fresh process: two async managers' saves under ``bound`` (a multiple of the
    state's bytes, or ``none``); prints the extra peak RSS, the waits and the time as JSON."""
    import warnings

    from globalstep.checkpoint import CheckpointManager, CheckpointWarning

    warnings.simplefilter("ignore", CheckpointWarning)  # a save larger than the bound
    state = make_state(case)
    size = sum(a.nbytes for a in state.values())
    tree = nested(state)
    limit = None if bound == "none" else int(float(bound) * size)
    options: dict[str, Any] = {"async_save": True, "max_host_bytes": limit, "max_to_keep": 1}
    waited = 0.0
    with (
        CheckpointManager(os.path.join(directory, "durable"), **options) as durable,
        CheckpointManager(os.path.join(directory, "fast"), **options) as fast,
    ):
        give_back_memory()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _status_kib("VmRSS")
        start = time.perf_counter()
        for step in range(1, rounds + 1):
            for manager in (durable, fast):
                manager.save(step, tree)
                waited += manager._saver.waited_for_memory_seconds
            for array in state.values():  # an update between saves
                array += 1.0
        durable.wait()
        fast.wait()
        seconds = time.perf_counter() - start
        after = _status_kib("VmHWM")
    print(
        json.dumps(
            {
                "extra_mib": (after - before) / 1024,
                "state_mib": size / (1 << 20),
                "waited_s": waited,
                "seconds": seconds,
            }
        )
    )


def host_memory(case: str, rounds: int, work: str) -> None:
    load = os.getloadavg()
    print(
        f"peak extra memory of async saves, case {case} MiB, {rounds} rounds of a durable "
        f"and a fast save, fresh process per bound; load average {load[0]:.2f} "
        f"{load[1]:.2f} {load[2]:.2f}\n"
    )
    print("| max_host_bytes | extra peak RSS, MiB | x state | waited for memory, s | wall, s |")
    print("|---|---:|---:|---:|---:|")
    for bound in ("none", "2.5", "1.5", "0.5"):
        folder = tempfile.mkdtemp(dir=work)
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--host-memory-child",
                bound,
                "--cases",
                case,
                "--rounds",
                str(rounds),
                "--dir",
                folder,
            ],
            capture_output=True,
            text=True,
            check=True,
            env=os.environ,
        ).stdout
        shutil.rmtree(folder, ignore_errors=True)
        peak = json.loads(out.strip().splitlines()[-1])
        label = "none" if bound == "none" else f"{bound} x state"
        print(
            f"| {label} | {peak['extra_mib']:.0f} | {peak['extra_mib'] / peak['state_mib']:.2f} "
            f"| {peak['waited_s']:.3f} | {peak['seconds']:.2f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", default="1024,4096,small", help="MiB sizes and/or 'small'")
    parser.add_argument("--rounds", type=int, default=5, help="counted rounds (5)")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted first rounds (1)")
    parser.add_argument("--drop", choices=("global", "file"), default="global")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where files go")
    parser.add_argument("--no-peak", action="store_true", help="skip the memory check")
    parser.add_argument("--peak", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--host-memory", action="store_true", help="async saves' peak memory")
    parser.add_argument("--host-memory-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="gs-bench-", dir=args.dir)
    try:
        if args.peak:
            peak_child(args.peak, args.cases, work)
            return
        if args.host_memory_child:
            host_memory_child(args.host_memory_child, args.cases, args.rounds, work)
            return
        if args.host_memory:
            host_memory(args.cases, args.rounds, work)
            return
        if args.rounds < 1:
            parser.error(f"--rounds must be >= 1; got {args.rounds}")
        print(f"files in {work}; {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
        for case in args.cases.split(","):
            run_case(case, args, work)
            gc.collect()
        if not args.no_peak:
            peaks("1024", work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
