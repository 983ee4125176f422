"""Child processes for the per-rank checkpoint tests: one rank of a gloo group on 127.0.0.1.

Forked by spawn.py (``module="rank_workers"``) as ``main(SCENARIO, RANK, WORLD_SIZE, PORT,
OUT)``; each writes what it saw to ``OUT/<scenario>-<rank>.json``. The loop is the
issue's: each rank's own dropout stream (``torch.manual_seed(100 + rank)``; Python's and
NumPy's global generators seeded per rank too, all saved through ``RNGState``), its own
batches (``torch.Generator().manual_seed(1000 + rank)``), its own NumPy noise
(``np.random.default_rng(7 + rank)``) and a per-rank sum marked ``PerRank``, a DDP model
with dropout and Adam, in a ``CheckpointManager(distributed=True)`` saved every 10
updates:

- ``full``: 40 updates uninterrupted, in ``OUT/full``.
- ``kill-K``: the same in ``OUT/resumed``; every rank SIGKILLs itself after update K.
- ``resume``: a fresh start in ``OUT/resumed`` restores the newest checkpoint and goes on to
  40; then a save in which rank 1 has one more per-rank leaf than the writer, and an
  async save of a per-rank array changed as soon as ``save`` returned (in ``OUT/async``),
  and a read-only distributed manager's restore of the rank's own generator.
- ``run-full``, ``run-kill-K``, ``run-resume``: the same loop through ``Run`` (30 updates),
  uninterrupted, killed after update K, resumed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
from pathlib import Path
from typing import Any

import numpy as np
from workers import connect

UPDATES = 40
SAVE_EVERY = 10


def digest(*arrays: Any) -> str:
    """SHA-256 of the arrays' bytes, in order."""
    h = hashlib.sha256()
    for array in arrays:
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


def make_state(rank: int) -> dict[str, Any]:
    """The issue's state tree on ``rank``, freshly built."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from globalstep import Clock
    from globalstep.checkpoint import PerRank
    from globalstep.integrations.torch import RNGState

    torch.manual_seed(100 + rank)
    random.seed(200 + rank)
    np.random.seed(300 + rank)
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)
    )
    model = DistributedDataParallel(net)
    return {
        "clock": Clock(),
        "model": model,
        "opt": torch.optim.Adam(model.parameters(), lr=0.01),
        "rng": RNGState(),
        "data": torch.Generator().manual_seed(1000 + rank),
        "noise": np.random.default_rng(7 + rank),
        "seen": PerRank(np.zeros(1)),
    }


def observed(state: dict[str, Any]) -> dict[str, Any]:
    """What a rank holds, as digests: parameters, optimizer state, RNGs, data position."""
    import torch

    from globalstep.integrations.torch import RNGState

    params = [p.detach().numpy() for p in state["model"].parameters()]
    opt = state["opt"].state_dict()["state"]
    moments = [
        t.numpy() for i in sorted(opt) for k in sorted(opt[i]) for t in [opt[i][k].reshape(-1)]
    ]
    rng = RNGState(cuda=False).state_dict()
    return {
        "step": state["clock"].step,
        "params": digest(*params),
        "opt": digest(*moments),
        "torch_rng": digest(torch.get_rng_state().numpy()),
        "python_rng": digest(rng["python"]["state"]),
        "numpy_rng": digest(rng["numpy"]["keys"]),
        "data": digest(state["data"].get_state().numpy()),
        "noise": json.dumps(state["noise"].bit_generator.state),
        "seen": state["seen"].value.tolist(),
    }


def train(
    rank: int,
    directory: Path,
    *,
    resume: bool,
    kill_at: int | None,
    distributed: Any = True,
    after_update: Any = None,
) -> dict[str, Any]:
    """Runs the loop to UPDATES (restoring first with ``resume``); ``distributed`` is the
    manager's option, ``after_update`` (where given) is called after each update."""
    import torch

    from globalstep.checkpoint import CheckpointManager

    state = make_state(rank)
    clock, model, opt = state["clock"], state["model"], state["opt"]
    restored = None
    with CheckpointManager(directory, save_every=SAVE_EVERY, distributed=distributed) as manager:
        if resume:
            manager.restore(state)
            restored = clock.step
        while clock.step < UPDATES:
            inputs = torch.randn(8, 4, generator=state["data"])
            # Python's and NumPy's global generators drawn too (RNGState keeps them).
            scale = random.random() + np.random.uniform()
            noise = torch.from_numpy(scale * state["noise"].normal(size=(8, 1))).float()
            loss = (model(inputs) - inputs.sum(1, keepdim=True) - noise).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            clock.tick()
            state["seen"].value += float(inputs.sum())
            manager.maybe_save(clock, state)
            if clock.step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if after_update is not None:
                after_update()
    return {**observed(state), "restored": restored}


def run_loop(rank: int, directory: Path, *, kill_at: int | None) -> dict[str, Any]:
    """The same loop through ``Run`` (30 updates, saved every 10): it restores what the
    directory holds, trains to the end, and reports what the rank holds."""
    import torch

    from globalstep import Run

    state = make_state(rank)
    model, opt = state["model"], state["opt"]
    del state["clock"]  # the Run's own clock
    with Run(
        directory,
        total_steps=30,
        save_every=10,
        progress=False,
        handle_signals=False,
        writer_options={"formats": ("jsonl",)},
    ) as run:
        run.restore(state)
        restored = run.step
        while not run.done:
            inputs = torch.randn(8, 4, generator=state["data"])
            loss = (model(inputs) - inputs.sum(1, keepdim=True)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            state["seen"].value += float(inputs.sum())
            run.update(loss=loss.detach())
            if run.step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        state["clock"] = run.clock
        return {**observed(state), "restored": restored}


def read_only_restore(rank: int, directory: Path) -> str:
    """A read-only distributed manager (an evaluator on every rank) restores this rank's
    own per-rank leaves: its batch generator's digest."""
    import torch

    from globalstep.checkpoint import CheckpointManager

    data = torch.Generator()
    with CheckpointManager(directory, read_only=True, distributed=True) as manager:
        manager.restore({"data": data}, partial=True)
    return digest(data.get_state().numpy())


def async_save(rank: int, directory: Path) -> list[float]:
    """An async save of a per-rank array, changed in place as soon as ``save`` returns:
    the checkpoint holds the value at the save (the copy taken before the background
    write). Returns that value."""
    from globalstep.checkpoint import CheckpointManager, PerRank

    seen = np.full(3, 10.0 * rank)
    with CheckpointManager(directory, async_save=True, distributed=True) as manager:
        manager.save(1, {"w": np.ones(2), "seen": PerRank(seen)})
        before = seen.tolist()
        seen += 1.0  # while the background save may still be writing
        manager.wait()
    return before


def mismatched_save(rank: int, directory: Path) -> list[str]:
    """Two saves in which rank 1 has per-rank leaves the writer lacks (one more; where the
    writer has none at all): every rank's error for each."""
    from globalstep._errors import DistributedCheckpointError
    from globalstep.checkpoint import CheckpointManager, PerRank

    more: dict[str, Any] = {"w": np.ones(2), "mine": PerRank(np.full(1, rank))}
    alone: dict[str, Any] = {"w": np.ones(2)}
    if rank == 1:
        more["extra"] = PerRank(np.zeros(1))
        alone["mine"] = PerRank(np.zeros(1))
    errors = []
    with CheckpointManager(directory, distributed=True) as manager:
        for step, state in ((1, more), (2, alone)):
            try:
                manager.save(step, state)
                errors.append("no error")
            except DistributedCheckpointError as err:
                errors.append(str(err))
        errors.append(str(manager.steps()))
    return errors


def main(scenario: str, rank: int, size: int, port: int, out: Path) -> None:
    """Runs one scenario on this rank and writes its result."""
    import torch.distributed as dist

    connect(rank, size, port, group=True)
    if scenario == "full":
        result = train(rank, out / "full", resume=False, kill_at=None)
    elif scenario.startswith("run-"):  # run-full, run-kill-K, run-resume
        kill = int(scenario[9:]) if scenario.startswith("run-kill-") else None
        where = "run-full" if scenario == "run-full" else "run-resumed"
        result = run_loop(rank, out / where, kill_at=kill)
    elif scenario.startswith("kill-"):
        result = train(rank, out / "resumed", resume=False, kill_at=int(scenario[5:]))
    else:
        result = train(rank, out / "resumed", resume=True, kill_at=None)
        result["mismatch"] = mismatched_save(rank, out / "mismatch")
        result["async"] = async_save(rank, out / "async")
        result["read_only"] = read_only_restore(rank, out / "resumed")
    (out / f"{scenario}-{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
