"""The process group's contract, as one function every implementation is run through, and
the ranks that run it on torch.distributed (forked by spawn.py, as in workers.py).

:func:`contract` calls every part of :class:`globalstep._group.ProcessGroup` on one rank,
in the same order on every rank, and returns what it saw; test_group.py asserts it against
the rank and the world size, for the single process, a gloo group of 2 processes and a
test double whose ranks are threads.
"""

import json
import math
from pathlib import Path
from typing import Any


def contract(group: Any) -> dict[str, Any]:
    """What ``group`` answers, on this rank (every rank calls it at the same point)."""
    from globalstep import ConfigError

    rank, world = group.rank, group.world_size
    seen: dict[str, Any] = {"rank": rank, "world": world, "connected": group.connected}
    seen["ints"] = group.all_gather_ints([rank, 10 * rank + 1, -(2**62)])
    floats = group.all_gather_floats([rank + 0.25, math.nan, -math.inf])
    seen["floats"] = [[repr(x) for x in row] for row in floats]
    seen["reduced"] = {
        op: group.all_reduce_floats([rank + 1.0, -rank * 0.5], op) for op in ("sum", "max", "min")
    }
    seen["broadcast"] = group.broadcast_int(100 + rank, src=world - 1)
    group.barrier()
    seen["writer"] = [group.is_writer(r) for r in range(world)]
    try:
        group.is_writer(world)
    except ConfigError as err:
        seen["writer_error"] = str(err)
    seen["restart_tag"] = group.restart_tag
    first, second = group.scope("contract"), group.scope("contract")
    seen["scopes"] = [first, second]
    store = group.store()
    if rank == 0:
        store.set(f"{first}/set", "from rank 0")
    won = store.compare_set(f"{first}/first", "", f"rank {rank}")
    store.add(f"{first}/count", rank + 1)
    group.barrier()
    seen["store"] = {
        "set": bytes(store.get(f"{first}/set")).decode(),
        "first": bytes(store.get(f"{first}/first")).decode(),
        "won": bytes(won).decode(),
        "count": store.add(f"{first}/count", 0),
        "check": [store.check([f"{first}/set"]), store.check([f"{first}/missing"])],
    }
    group.barrier()
    if rank == 0:
        seen["store"]["deleted"] = [
            store.delete_key(f"{first}/set"),
            store.check([f"{first}/set"]),
        ]
    group.barrier()
    return seen


def main(scenario: str, rank: int, size: int, port: int, out: Path) -> None:
    """``contract``: the contract on torch.distributed's group, as :func:`active` finds it."""
    import torch.distributed as dist
    from workers import connect

    from globalstep import _group

    connect(rank, size, port, group=True)
    try:
        seen = contract(_group.active())
        seen["found"] = type(_group.active()).__name__
    finally:
        dist.destroy_process_group()
    (out / f"{scenario}-{rank}.json").write_text(json.dumps(seen))
