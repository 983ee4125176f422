"""One rank of the ResumableSampler-over-ranks test: an attempt of a run on one world size.

Forked by spawn.py (``module="sampler_workers"``) as ``main(ATTEMPT, RANK, WORLD_SIZE, PORT,
OUT_DIRECTORY)`` for the attempts of test_sampler_ranks.py: every rank builds a
ResumableSampler without rank or world size (taken from the process group), a per-rank
RNGState, and a distributed CheckpointManager on one directory; restores the newest
checkpoint (saved on another world size), then takes batches through a DataLoader:

- ``a``: to step 3, where every rank saves and stops;
- ``b-K``: saving at every odd step, to step K, where every rank writes its result and
  SIGKILLs itself before saving (what it drew after the newest commit is lost with it);
- ``c``: to the epoch's end, without saving.

Each rank writes the batches it drew, the warnings the restore gave, and what it restored
to ``OUT_DIRECTORY/<attempt>-<rank>.json``. Imports are inside the functions: the module is
imported by the fork server.
"""

import json
import os
import signal
from pathlib import Path
from typing import Any

LENGTH = 101  # samples in an epoch: uneven over 4 ranks and over 2
BATCH = 3
SEED = 7


class Indices:
    """A map-style dataset whose items are their own index."""

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> int:
        return index


def sampler_scenario(attempt: str, rank: int, out: Path) -> dict[str, Any]:
    """Runs one attempt on this rank; returns what it drew and what its restore said (an
    attempt ``b-K`` writes that itself and is SIGKILLed at step K)."""
    import warnings

    import torch
    from torch.utils.data import DataLoader

    from globalstep import CheckpointManager, Clock
    from globalstep.integrations.torch import ResumableSampler, RNGState

    kill_at = int(attempt[2:]) if attempt.startswith("b-") else None
    torch.manual_seed(100 + rank)  # each rank's own stream; a restore replaces it
    sampler = ResumableSampler(Indices(), seed=SEED)
    clock = Clock()
    state = {"clock": clock, "data": sampler, "rng": RNGState()}
    with CheckpointManager(out / "checkpoints", distributed=True) as manager:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            restored = manager.restore(state) if manager.latest_step() is not None else None
        result: dict[str, Any] = {
            "world_size": sampler.world_size,
            "rank": sampler.rank,
            "restored": restored is not None,
            "start": {"step": clock.step, "epoch": sampler.epoch, "position": sampler.position},
            "batches": [],
            "noise": [],
            "warnings": [(w.category.__name__, str(w.message)) for w in caught],
        }
        for batch in sampler.batches(DataLoader(Indices(), batch_size=BATCH, sampler=sampler)):
            result["batches"].append([int(i) for i in batch])
            result["noise"].append(float(torch.rand(())))  # the rank's RNG, as dropout's
            clock.tick()
            if clock.step == kill_at:
                (out / f"{attempt}-{rank}.json").write_text(json.dumps(result))
                os.kill(os.getpid(), signal.SIGKILL)
            if attempt == "a" and clock.step == 3:
                manager.save(clock, state)
                break
            if kill_at is not None and clock.step % 2:
                manager.save(clock, state)
        result["end"] = {"step": clock.step, "epoch": sampler.epoch, "position": sampler.position}
    return result


def main(attempt: str, rank: int, size: int, port: int, out: Path) -> None:
    """Runs one attempt on this rank of a gloo group and writes its result."""
    import torch.distributed as dist
    from workers import connect

    connect(rank, size, port, group=True)
    result = sampler_scenario(attempt, rank, out)
    (out / f"{attempt}-{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
