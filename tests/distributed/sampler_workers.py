"""One rank of the ResumableSampler-over-ranks test: an attempt of a run on one world size.

Forked by spawn.py (``module="sampler_workers"``) as ``main(ATTEMPT, RANK, WORLD_SIZE, PORT,
OUT_DIRECTORY)`` for the attempts ``a``, ``b``, ``c`` of test_sampler_ranks.py: every rank
builds a ResumableSampler without rank or world size (taken from the process group), a
per-rank RNGState, and a distributed CheckpointManager on one directory; restores the
newest checkpoint (saved on another world size), then takes batches through a DataLoader
until the attempt's last update, where every rank saves, or to the epoch's end. It writes
the indices it drew, the warnings the restore gave, and what it restored to
``OUT_DIRECTORY/<attempt>-<rank>.json``. Imports are inside the functions: the module is
imported by the fork server.
"""

import json
from pathlib import Path
from typing import Any

LENGTH = 101  # samples in an epoch: uneven over 4 ranks and over 2
BATCH = 3
SEED = 7
STOPS = {"a": 3, "b": 7, "c": None}  # the step each attempt saves and stops at; c: epoch's end


class Indices:
    """A map-style dataset whose items are their own index."""

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> int:
        return index


def sampler_scenario(attempt: str, rank: int, directory: Path) -> dict[str, Any]:
    """Runs one attempt on this rank; returns what it drew and what its restore said."""
    import warnings

    import torch
    from torch.utils.data import DataLoader

    from globalstep import CheckpointManager, Clock
    from globalstep.integrations.torch import ResumableSampler, RNGState

    torch.manual_seed(100 + rank)  # each rank's own stream; a restore replaces it
    sampler = ResumableSampler(Indices(), seed=SEED)
    clock = Clock()
    state = {"clock": clock, "data": sampler, "rng": RNGState()}
    with CheckpointManager(directory, distributed=True) as manager:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            restored = manager.restore(state) if manager.latest_step() is not None else None
        start = {"step": clock.step, "epoch": sampler.epoch, "position": sampler.position}
        loader = DataLoader(Indices(), batch_size=BATCH, sampler=sampler)
        drawn: list[int] = []
        noise: list[float] = []
        stop = STOPS[attempt]
        for batch in sampler.batches(loader):
            drawn += [int(i) for i in batch]
            noise.append(float(torch.rand(())))  # the rank's RNG, as dropout would use it
            clock.tick()
            if clock.step == stop:
                manager.save(clock, state)
                break
        end = {"step": clock.step, "epoch": sampler.epoch, "position": sampler.position}
    return {
        "world_size": sampler.world_size,
        "rank": sampler.rank,
        "restored": restored is not None,
        "start": start,
        "end": end,
        "drawn": drawn,
        "noise": noise,
        "warnings": [(w.category.__name__, str(w.message)) for w in caught],
    }


def main(attempt: str, rank: int, size: int, port: int, out: Path) -> None:
    """Runs one attempt on this rank of a gloo group and writes its result."""
    import torch.distributed as dist
    from workers import connect

    connect(rank, size, port, group=True)
    result = sampler_scenario(attempt, rank, out / "checkpoints")
    (out / f"{attempt}-{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
