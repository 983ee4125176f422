"""Child processes for the liveness tests: a rank SIGKILLed inside a distributed save, and
its peer, which must notice within seconds rather than at the save's timeout.

Forked by spawn.py (``module="live_workers"``) as ``main(SCENARIO, RANK, WORLD_SIZE, PORT,
OUT)``. The loop is rank_workers.py's (the issue's: DDP with dropout, Adam, each rank's own
generators and a ``PerRank`` sum, 40 updates saved every 10), with
``DistributedOptions(timeout_seconds=TIMEOUT_SECONDS)``:

- ``full``: uninterrupted, in ``OUT/full``.
- ``inside-V-S``: in ``OUT/resumed`` (resumed from its newest checkpoint where it has one);
  rank V stops inside its part of the save of step S (its per-rank file written, its
  report not yet sent) and writes ``OUT/inside-V-S.marker``: the test SIGKILLs it there.
- ``random-N``: the same, every rank writing ``OUT/random-N-R.marker`` inside each save of
  its own and pausing 20 ms after each update: the test SIGKILLs a rank at a random moment.
- ``resume``: resumes and runs to the end.
- ``release``: one save of ``OUT/release`` in which rank 1 SIGKILLs itself once it read the
  commit, before it tells rank 0 (the Store's last user) it is done with the save's keys;
  rank 0 reports how long its save took and what ``lost`` told it meanwhile.
- ``slow``: one save of ``OUT/slow`` that rank 1 reaches ``SLOW_SECONDS`` after rank 0
  (a long update: the interpreter busy all along), while rank 0 waits for it inside the
  save; each rank reports the committed steps and what ``lost`` told it.

A rank whose run fails (the peer of the killed one) writes ``{"error": ..., "ranks": ...}``
as its result and exits with status 3 (``sys.exit``: the whole exit is timed).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from rank_workers import train
from workers import connect

TIMEOUT_SECONDS = 60.0
"""The save's ``timeout_seconds``: what a dead peer costs without the liveness signal."""
HOLD_SECONDS = 120.0
"""How long the victim stays inside the save (the test kills it long before)."""
SLOW_SECONDS = 8.0
"""How long the slow rank computes before its save: longer than a dead rank's silence."""


def mark_saves(rank: int, marker: Any) -> None:
    """Calls ``marker(step)`` on this rank inside each save, after it wrote its own part
    (per-rank leaves, shards) and before it reports it (or, on the writer, before it writes
    the replicated arrays and waits for the others)."""
    from globalstep.checkpoint._ranks import coordinated

    original = coordinated.SaveRound._write

    def write(self: Any, staging: str) -> dict[str, Any]:
        report = original(self, staging)
        marker(self.step)
        return report

    coordinated.SaveRound._write = write  # type: ignore[method-assign]


def spy_on_lost() -> list[list[int]]:
    """Records every rank ``TorchGroup.lost`` reports, in the list returned."""
    from globalstep._group import TorchGroup

    told: list[list[int]] = []
    lost = TorchGroup.lost

    def spy(self: Any, ranks: Any) -> list[int]:
        found = lost(self, ranks)
        if found:
            told.append(found)
        return found

    TorchGroup.lost = spy  # type: ignore[method-assign]
    return told


def slow(rank: int, directory: Path) -> dict[str, Any]:
    """The ``slow`` scenario on this rank."""
    import numpy as np

    from globalstep.checkpoint import CheckpointManager, DistributedOptions, PerRank

    told = spy_on_lost()
    options = DistributedOptions(timeout_seconds=TIMEOUT_SECONDS)
    with CheckpointManager(directory, distributed=options) as manager:
        if rank == 1:
            end, spins = time.monotonic() + SLOW_SECONDS, 0
            while time.monotonic() < end:
                spins += 1
        started = time.monotonic()
        manager.save(1, {"w": np.ones(2), "mine": PerRank(np.full(1, rank))})
        seconds = time.monotonic() - started
        return {"steps": manager.steps(), "seconds": seconds, "lost": told}


def release(rank: int, directory: Path) -> dict[str, Any]:
    """The ``release`` scenario on this rank."""
    import os
    import signal

    import numpy as np

    from globalstep.checkpoint import CheckpointManager, DistributedOptions, PerRank
    from globalstep.checkpoint._ranks import coordinated

    told = spy_on_lost()
    if rank == 1:

        def die(self: Any) -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        coordinated.SaveRound._release_store = die  # type: ignore[method-assign]
    options = DistributedOptions(timeout_seconds=TIMEOUT_SECONDS)
    with CheckpointManager(directory, distributed=options) as manager:
        started = time.monotonic()
        manager.save(1, {"w": np.ones(2), "mine": PerRank(np.full(1, rank))})
        seconds = time.monotonic() - started
        return {"steps": manager.steps(), "seconds": seconds, "lost": told}


def main(scenario: str, rank: int, size: int, port: int, out: Path) -> None:
    """Runs one scenario on this rank and writes its result."""
    import torch.distributed as dist

    from globalstep.checkpoint import CheckpointManager, DistributedOptions

    connect(rank, size, port, group=True)
    options = DistributedOptions(timeout_seconds=TIMEOUT_SECONDS)
    if scenario in ("full", "release", "slow"):
        if scenario == "full":
            result = train(rank, out / "full", resume=False, kill_at=None, distributed=options)
        else:
            result = {"release": release, "slow": slow}[scenario](rank, out / scenario)
        (out / f"{scenario}-{rank}.json").write_text(json.dumps(result))
        dist.destroy_process_group()
        return
    directory = out / "resumed"
    resume = CheckpointManager(directory, read_only=True).latest_step() is not None
    after_update = None
    kind, *args = scenario.split("-")
    if kind == "inside" and rank == int(args[0]):

        def hold(step: int) -> None:
            if step == int(args[1]):
                (out / f"{scenario}.marker").write_text(str(step))
                time.sleep(HOLD_SECONDS)

        mark_saves(rank, hold)
    elif kind == "random":
        mark_saves(rank, lambda step: (out / f"{scenario}-{rank}.marker").write_text(str(step)))

        def after_update() -> None:
            time.sleep(0.02)

    try:
        result = train(
            rank,
            directory,
            resume=resume,
            kill_at=None,
            distributed=options,
            after_update=after_update,
        )
    except Exception as err:  # the peer died: this rank's run fails, and says why
        failed = {"error": f"{type(err).__name__}: {err}", "ranks": getattr(err, "ranks", None)}
        (out / f"{scenario}-{rank}.json").write_text(json.dumps(failed))
        sys.exit(3)
    (out / f"{scenario}-{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
