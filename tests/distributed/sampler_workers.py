"""One rank of the ResumableSampler-over-ranks test: an attempt of a run on one world size.

Called by workers.main for the scenarios ``sampler-<attempt>`` (see
test_sampler_ranks.py): every rank builds a ResumableSampler without rank or world size
(taken from the process group), a per-rank RNGState, and a distributed CheckpointManager
on one directory; restores the newest checkpoint (saved on another world size), then takes
batches through a DataLoader until the attempt's last update, where every rank saves, or to
the epoch's end. It returns the indices it drew, the warnings the restore gave, and what it
restored. Imports are inside the function: the module is imported by the fork server.
"""

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
