"""Two gloo ranks on 127.0.0.1 for the distributed benchmarks, started one way.

``bench_distributed.py``, ``bench_per_rank_save.py`` and ``bench_rollback_ranks.py`` each
time something on two processes of one machine: :func:`run_two_ranks` picks a free port,
spawns the two ranks (``torch.multiprocessing``, ``spawn``), initialises a gloo group on
each (one torch thread per rank: two ranks on a small machine, no oversubscription), calls
the benchmark's ``rank_main(rank, scratch, *args)`` on both, and returns what rank 0's
returned (JSON: the ranks are other processes). ``scratch`` is one temporary directory
for both ranks (a distributed checkpoint directory must be the same on every rank).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import tempfile
from collections.abc import Callable
from typing import Any

_RESULT = "rank0.json"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_two_ranks(rank_main: Callable[..., Any], *args: Any) -> Any:
    """Runs ``rank_main(rank, scratch, *args)`` on two gloo ranks; returns rank 0's result
    (a JSON value: lists come back as lists, dict keys as str)."""
    import torch.multiprocessing as mp

    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        mp.start_processes(
            _rank, args=(rank_main, port, scratch, args), nprocs=2, start_method="spawn"
        )
        with open(os.path.join(scratch, _RESULT)) as file:
            return json.load(file)


def _rank(
    rank: int, rank_main: Callable[..., Any], port: int, scratch: str, args: tuple[Any, ...]
) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        result = rank_main(rank, scratch, *args)
        if rank == 0:
            with open(os.path.join(scratch, _RESULT), "w") as file:
                json.dump(result, file)
        dist.barrier()
    finally:
        dist.destroy_process_group()
