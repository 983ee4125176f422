"""Checkpoint save/restore speed beside torch.save, safetensors, np.save and a raw write.

The state is 64 float32 arrays totalling 1 GiB (``--mib`` changes the total). Every write
figure includes fsync; cold reads drop the files from the page cache first
(posix_fadvise DONTNEED after an fsync). Peak extra memory is measured in a fresh child
process per writer (VmHWM after the save minus VmRSS before it). Prints GB/s and the ratios
the issue targets; deletes every file it writes.

Run:
    PYTHONPATH=src python bench/bench_checkpoint.py [--mib 1024] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

N_ARRAYS = 64


def make_state(total_mib: int) -> dict[str, np.ndarray]:
    per = total_mib * (1 << 20) // N_ARRAYS // 4
    rng = np.random.default_rng(0)
    # Each array is allocated once, so the peak RSS before a save is the state itself.
    return {f"layer{i:02d}/weight": rng.random(per, dtype=np.float32) for i in range(N_ARRAYS)}


def nbytes(state: dict[str, np.ndarray]) -> int:
    return sum(a.nbytes for a in state.values())


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_cache(root: str) -> None:
    """Evicts every file under root from the page cache."""
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# ---------------------------------------------------------------- writers


def write_raw(state: dict[str, np.ndarray], path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for array in state.values():
            view = memoryview(array.reshape(-1).view(np.uint8))
            while view:
                view = view[os.write(fd, view[: 1 << 30]) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def nested(state: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """The same arrays as a tree: {"layer00": {"weight": ...}, ...}."""
    tree: dict[str, dict[str, np.ndarray]] = {}
    for key, array in state.items():
        layer, name = key.split("/")
        tree.setdefault(layer, {})[name] = array
    return tree


def write_ours(state: dict[str, np.ndarray], path: str) -> None:
    from globalstep.checkpoint import CheckpointManager

    with CheckpointManager(path, max_to_keep=None) as manager:
        manager.save(1, nested(state))


def write_safetensors(state: dict[str, np.ndarray], path: str) -> None:
    from safetensors.numpy import save_file

    save_file(state, path)
    fsync_path(path)


def write_torch(state: dict[str, np.ndarray], path: str) -> None:
    import torch

    torch.save({k: torch.from_numpy(v) for k, v in state.items()}, path)
    fsync_path(path)


def write_np(state: dict[str, np.ndarray], path: str) -> None:
    os.makedirs(path)
    for i, array in enumerate(state.values()):
        file = os.path.join(path, f"{i}.npy")
        np.save(file, array)
        fsync_path(file)


WRITERS = {
    "raw": write_raw,
    "ours": write_ours,
    "safetensors": write_safetensors,
    "torch": write_torch,
    "np.save": write_np,
}


# ---------------------------------------------------------------- readers


def read_raw(state: dict[str, np.ndarray], path: str) -> None:
    with open(path, "rb", buffering=0) as f:
        for array in state.values():
            out = np.empty_like(array)
            f.readinto(memoryview(out.reshape(-1).view(np.uint8)))


def read_ours(path: str) -> Any:
    from globalstep.checkpoint import CheckpointManager

    with CheckpointManager(path, read_only=True) as manager:
        return manager.restore()


def read_safetensors(path: str) -> Any:
    from safetensors.numpy import load_file

    return load_file(path)


def read_torch_mmap(path: str) -> Any:
    import torch

    loaded = torch.load(path, mmap=True, weights_only=True)
    return {k: v.clone() for k, v in loaded.items()}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def peak_child(writer: str, mib: int, directory: str) -> None:
    """In a fresh process: the extra peak RSS (MiB) one save costs, printed as JSON.

    The peak is VmHWM, reset to the current RSS just before the save (clear_refs 5), so
    neither the state's construction nor the parent process counts.
    """
    state = make_state(mib)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kib("VmRSS")
    target = os.path.join(directory, f"peak-{writer}")
    WRITERS[writer](state, target)
    after = _status_kib("VmHWM")
    print(json.dumps({"extra_mib": (after - before) / 1024, "state_mib": before / 1024}))


def timed_write(
    name: str, writer: Callable[[dict[str, np.ndarray], str], None], state: Any, path: str
) -> float:
    """Seconds one write takes; ours is timed as a training loop pays it: save() alone,
    with the manager (and its lock) opened beforehand, as a run opens it once."""
    if name != "ours":
        return timed(lambda: writer(state, path))
    from globalstep.checkpoint import CheckpointManager

    tree = nested(state)
    with CheckpointManager(path, max_to_keep=None) as manager:
        return timed(lambda: manager.save(1, tree))


def remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="state size in MiB (1024)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where files go")
    parser.add_argument("--repeats", type=int, default=2, help="best of N runs (2)")
    parser.add_argument("--peak", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="gs-bench-", dir=args.dir)
    try:
        if args.peak:
            peak_child(args.peak, args.mib, work)
            return
        run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: str) -> None:
    state = make_state(args.mib)
    size = nbytes(state)
    gb = size / 1e9
    print(f"state: {N_ARRAYS} float32 arrays, {size / (1 << 30):.3f} GiB; files in {work}")
    paths = {name: os.path.join(work, name) for name in WRITERS}
    write_s: dict[str, float] = {name: float("inf") for name in WRITERS}
    for _ in range(args.repeats):
        # Round-robin, best of the repeats; each write starts with no dirty pages pending.
        for name, writer in WRITERS.items():
            remove(paths[name])
            os.sync()
            write_s[name] = min(write_s[name], timed_write(name, writer, state, paths[name]))
    for name in WRITERS:
        print(f"write {name:12s} {gb / write_s[name]:6.3f} GB/s  ({write_s[name]:.2f} s)")
    raw = write_s["raw"]
    print("write ratio to raw (higher is faster):")
    for name in WRITERS:
        print(f"  {name:12s} {raw / write_s[name]:.3f}x")

    ours_file = os.path.join(paths["ours"], "step-000000000001")
    readers = {
        "raw": lambda: read_raw(state, paths["raw"]),
        "ours restore": lambda: read_ours(paths["ours"]),
        "ours into template": lambda: _restore_into(paths["ours"], state),
        "safetensors load_file": lambda: read_safetensors(paths["safetensors"]),
        "torch.load mmap+copy": lambda: read_torch_mmap(paths["torch"]),
    }
    read_s: dict[str, dict[str, float]] = {"cold": {}, "warm": {}}
    for mode in ("cold", "warm"):
        for name in readers:
            read_s[mode][name] = float("inf")
        for _ in range(args.repeats):
            for name, reader in readers.items():
                if mode == "cold":
                    drop_cache(work)
                else:
                    reader()
                read_s[mode][name] = min(read_s[mode][name], timed(reader))
        for name in readers:
            print(f"read {mode} {name:22s} {gb / read_s[mode][name]:6.3f} GB/s")
    print("restore ratio to safetensors load_file (higher is faster):")
    for mode in ("cold", "warm"):
        base = read_s[mode]["safetensors load_file"]
        for name in ("ours restore", "ours into template"):
            print(f"  {mode} {name:20s} {base / read_s[mode][name]:.3f}x")

    from globalstep.checkpoint import CheckpointManager

    drop_cache(work)
    with CheckpointManager(paths["ours"], read_only=True) as manager:
        start = time.perf_counter()
        with manager.open() as reader:
            first = reader["layer00/weight"]
            lazy_open = time.perf_counter() - start
            value = float(first[12345])
            lazy_touch = time.perf_counter() - start
    print(
        f"lazy open of one array: {lazy_open * 1e3:.2f} ms (first element read: "
        f"{lazy_touch * 1e3:.2f} ms, value {value:.3f})"
    )
    assert os.path.isdir(ours_file)

    for name in list(paths):
        remove(paths[name])
    copy_s = timed(lambda: {k: v.copy() for k, v in state.items()})
    async_dir = os.path.join(work, "async")
    with CheckpointManager(async_dir, async_save=True) as manager:
        tree = nested(state)
        blocked = timed(lambda: manager.save(1, tree))
        total = blocked + timed(manager.wait)
    print(
        f"async save: caller blocked {blocked:.3f} s; memcpy of the state {copy_s:.3f} s; "
        f"ratio {blocked / copy_s:.2f}x (target <= 1.5x); whole save {total:.2f} s"
    )
    remove(async_dir)

    print("extra peak memory during one save (fresh process each):")
    for name in ("ours", "safetensors", "torch", "raw"):
        out = subprocess.run(
            [sys.executable, __file__, "--peak", name, "--mib", str(args.mib), "--dir", work],
            capture_output=True,
            text=True,
            check=True,
            env=os.environ,
        ).stdout
        peak = json.loads(out.strip().splitlines()[-1])
        print(
            f"  {name:12s} {peak['extra_mib']:8.2f} MiB "
            f"(process peak before the save: {peak['state_mib']:.0f} MiB)"
        )


def _restore_into(path: str, state: dict[str, np.ndarray]) -> Any:
    from globalstep.checkpoint import CheckpointManager

    template = nested({k: np.empty_like(v) for k, v in state.items()})
    with CheckpointManager(path, read_only=True) as manager:
        return manager.restore(template)


if __name__ == "__main__":
    main()
