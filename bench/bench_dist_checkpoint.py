"""Sharded checkpoint save throughput: globalstep on 2 and 4 ranks, one rank, and DCP's own save.

The state is an FSDP2 (``fully_shard``) MLP of ``--mib`` MiB of float32 parameters on CPU
(gloo). Contenders, all saving the same parameters and all fsyncing their files:

- ``gs-1``: a plain ``CheckpointManager`` in one process saving the unsharded model;
- ``gs-2``, ``gs-4``: ``CheckpointManager(distributed=True)`` on 2 and 4 ranks (each rank
  writes its shards, rank 0 commits after every rank reported);
- ``dcp-2``, ``dcp-4``: ``torch.distributed.checkpoint.save`` (FileSystemWriter) of the
  same FSDP2 state dict on 2 and 4 ranks.

Every group of ranks is started once and kept; the parent then runs the contenders
round-robin, one save each per round, in an order rotated by one per round, and times
each save on rank 0 from a barrier before it to a barrier after it (so the slowest rank
counts). Reports the median and min-max of MB/s over the rounds, and each contender's
ratio to ``gs-1`` taken within each round. Deletes what it writes.

Run:
    PYTHONPATH=src python bench/bench_dist_checkpoint.py [--mib 256] [--rounds 7]
        [--warmup 1] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

LAYERS = 8


def _model(mib: int) -> Any:
    import torch

    width = int((mib * (1 << 20) / 4 / LAYERS) ** 0.5)
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(LAYERS)])


def _nbytes(model: Any) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def worker(rank: int, world: int, port: int, mib: int, root: str) -> None:
    """One rank of a group (world 1: the single-process contender); obeys stdin lines."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from globalstep.checkpoint import CheckpointManager

    model = _model(mib)
    size = _nbytes(model)
    if world > 1:
        from torch.distributed.fsdp import fully_shard

        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=600),
        )
        fully_shard(model)
    ours = os.path.join(root, f"gs-{world}")
    manager = CheckpointManager(ours, max_to_keep=1, distributed=world > 1)
    print("READY", flush=True)
    for step, line in enumerate(sys.stdin, start=1):
        command = line.strip()
        if command == "quit":
            break
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
        if command == "gs":
            manager.save(step, {"model": model})
        else:
            target = os.path.join(root, f"dcp-{world}-{step}")
            dcp.save(model.state_dict(), checkpoint_id=target)
        if world > 1:
            dist.barrier()
        elapsed = time.perf_counter() - start
        if command == "dcp" and rank == 0:
            shutil.rmtree(os.path.join(root, f"dcp-{world}-{step}"))
        if rank == 0:
            print(json.dumps({"seconds": elapsed, "bytes": size}), flush=True)
        if world > 1:
            dist.barrier()  # the DCP folder is gone before the next save starts
    manager.close()
    if world > 1:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Group:
    """A set of worker processes (one per rank), started once."""

    def __init__(self, world: int, mib: int, root: str) -> None:
        port = _free_port()
        self.procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    f"{r},{world},{port}",
                    "--mib",
                    str(mib),
                    "--dir",
                    root,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for r in range(world)
        ]
        for proc in self.procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == "READY", line

    def run(self, command: str) -> dict[str, float]:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(command + "\n")
            proc.stdin.flush()
        assert self.procs[0].stdout is not None
        return dict(json.loads(self.procs[0].stdout.readline()))

    def close(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("quit\n")
            proc.stdin.close()
        for proc in self.procs:
            proc.wait(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--worker", default=None)
    args = parser.parse_args()
    if args.worker:
        rank, world, port = (int(x) for x in args.worker.split(","))
        worker(rank, world, port, args.mib, args.dir)
        return
    root = tempfile.mkdtemp(prefix="bench-dist-ckpt-", dir=args.dir)
    groups = {w: Group(w, args.mib, root) for w in (1, 2, 4)}
    contenders = [
        ("gs-1", 1, "gs"),
        ("gs-2", 2, "gs"),
        ("gs-4", 4, "gs"),
        ("dcp-2", 2, "dcp"),
        ("dcp-4", 4, "dcp"),
    ]
    speeds: dict[str, list[float]] = {name: [] for name, _, _ in contenders}
    ratios: dict[str, list[float]] = {name: [] for name, _, _ in contenders}
    versus_dcp: dict[str, list[float]] = {"gs-2": [], "gs-4": []}
    size = 0
    try:
        for round_ in range(args.warmup + args.rounds):
            order = contenders[round_ % len(contenders) :] + contenders[: round_ % len(contenders)]
            this: dict[str, float] = {}
            for name, world, command in order:
                result = groups[world].run(command)
                size = int(result["bytes"])
                this[name] = size / result["seconds"] / 1e6
            if round_ < args.warmup:
                continue
            for name in this:
                speeds[name].append(this[name])
                ratios[name].append(this[name] / this["gs-1"])
            for name in versus_dcp:
                versus_dcp[name].append(this[name] / this[name.replace("gs", "dcp")])
    finally:
        for group in groups.values():
            group.close()
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"state: {size / (1 << 20):.0f} MiB float32 ({LAYERS} layers), "
        f"{args.rounds} rounds (+{args.warmup} warm-up); load: {os.getloadavg()}"
    )
    print("| contender | MB/s median | min-max | speed / gs-1 | speed / DCP, same ranks |")
    print("|---|---:|---:|---:|---:|")
    for name, _, _ in contenders:
        s, r = speeds[name], ratios[name]
        v = versus_dcp.get(name)
        dcp = f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" if v else "-"
        print(
            f"| {name} | {statistics.median(s):.0f} | {min(s):.0f}-{max(s):.0f} | "
            f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f}) | {dcp} |"
        )


if __name__ == "__main__":
    main()
