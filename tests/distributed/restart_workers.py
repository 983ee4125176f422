"""Child processes for the restarted-group test: ranks of a group whose Store outlives them.

torchrun (torch >= 2.5, c10d rendezvous) hands its workers the agent's own TCPStore, which
lives on across restarts of the workers: a restarted group finds the keys of the group
before it there. Forked by spawn.py as ``main("attempt-A", RANK, WORLD_SIZE, PORT, OUT)``
with the same store for every attempt A, each rank sets the variables torchrun sets
(``TORCHELASTIC_USE_AGENT_STORE=True``, ``TORCHELASTIC_RESTART_COUNT=A``), joins a gloo
group (under a prefix of its own attempt: gloo's own keys are not what is tested), and
opens a distributed CheckpointManager on the shared store itself, as a worker's default
store is the agent's:

- attempt 0 saves steps 1 and 2 of ``{"clock", "data": torch.Generator}`` (the generator is
  per-rank: every rank writes its own file);
- attempt 1 restores step 2 and saves step 3 after drawing from the generator.

Each rank writes ``OUT/attempt-A-RANK.json``: the generator's state bytes at each save, and
(attempt 1) what a fresh template restored from the newest checkpoint after the save.
"""

import datetime
import json
import os
from pathlib import Path
from typing import Any

TIMEOUT = datetime.timedelta(seconds=30)


def main(scenario: str, rank: int, size: int, port: int, out: Path) -> None:
    """Runs one attempt on this rank and writes what it saved and restored."""
    import torch
    import torch.distributed as dist

    from globalstep import CheckpointManager, Clock
    from globalstep.checkpoint import DistributedOptions

    attempt = int(scenario.rsplit("-", 1)[1])
    os.environ.update(
        TORCHELASTIC_USE_AGENT_STORE="True",
        TORCHELASTIC_RESTART_COUNT=str(attempt),
        TORCHELASTIC_RUN_ID="restarted",
    )
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=TIMEOUT)
    group_store = dist.PrefixStore(f"group-{attempt}", store)
    dist.init_process_group("gloo", store=group_store, rank=rank, world_size=size, timeout=TIMEOUT)
    options = DistributedOptions(store=store, timeout_seconds=20)
    clock, data = Clock(), torch.Generator().manual_seed(1000 + rank)
    state: dict[str, Any] = {"clock": clock, "data": data}
    saved = {}
    with CheckpointManager(out / "ckpt", distributed=options) as manager:
        if attempt:
            manager.restore(state)
        for _ in range(2 if attempt == 0 else 1):
            torch.randn(3, generator=data)
            clock.tick()
            manager.save(clock, state)
            saved[clock.step] = data.get_state().tolist()
    result: dict[str, Any] = {"saved": saved}
    if attempt:
        dist.barrier()
        fresh: dict[str, Any] = {"clock": Clock(), "data": torch.Generator()}
        with CheckpointManager(out / "ckpt", distributed=options) as manager:
            result["latest"] = manager.latest_step()
            manager.restore(fresh)
        result["restored"] = fresh["data"].get_state().tolist()
    (out / f"{scenario}-{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
