"""Rank side of the rollback tests on several ranks (test_rollback_ranks.py).

Forked by spawn.py (``spawn("rollback", 2, out, module="rollback_workers")``), which calls
:func:`main`: each rank joins the gloo group (:func:`workers.connect`) and runs, one after
the other, in directories of OUT_DIRECTORY:

- ``nan``: a DDP model with dropout (SGD with momentum) trained for 40 updates by a Run
  that saves every 10 and rolls back with ``Rollback(skip_batches=2)``; each rank has its
  own dropout stream (``torch.manual_seed(100 + rank)``, saved through ``RNGState``) and its
  own input noise (``torch.Generator().manual_seed(1000 + rank)``), both per-rank leaves;
  the batch at data position 23 holds a NaN on rank 1 only, so rank 1's loss is NaN there
  and rank 0's is finite (the NaN reaches both models through DDP's gradient all-reduce).
- ``reference``: the same loop without a NaN and without a rollback policy, whose data
  position jumps from 20 to 26 after step 20: the batches the rolled-back run draws.
- ``spike``: scalars only; rank 1 reports a loss of 100 (the mean of the ranks' values is a
  spike) and later one of 8 (a spike on rank 1 alone, not of the mean); ``spike-max`` the
  same with ``Ranks(reduce="max")``, where 8 is a spike of the ranks' maximum.
- ``writer-saves``: a NaN on rank 1 where the writer alone saves (``distributed=False``).
- ``one-rank``, ``invalid``, ``no-checkpoint``, ``give-up``: the tag given on rank 0 only, a
  value that is not a number on rank 1, a NaN before any checkpoint, a second NaN past
  ``max_rollbacks=1``: the errors every rank raises.

Imports torch only inside its functions (pytest imports this module for its doctests).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from workers import connect

NAN_AT = 23  # the data position whose batch holds a NaN on rank 1
SKIP = 2  # the policy's skip_batches
TOTAL = 40


def _batch(position: int, rank: int) -> Any:
    import torch

    inputs = torch.randn(8, 4, generator=torch.Generator().manual_seed(1000 * rank + position))
    if rank == 1 and position == NAN_AT:
        inputs[0, 0] = float("nan")
    return inputs


def _train(directory: Path, rank: int, *, rollback: Any, jump: tuple[int, int] | None) -> Any:
    """The DDP loop through Run; returns what this rank drew, rolled back and ended with."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from globalstep import Run
    from globalstep.integrations.torch import RNGState
    from globalstep.run import Ranks

    torch.manual_seed(0)
    inner = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.Dropout(0.25), torch.nn.Linear(8, 1)
    )
    model = DistributedDataParallel(inner)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(100 + rank)  # each rank's own dropout stream
    noise = torch.Generator().manual_seed(1000 + rank)  # each rank's own input noise
    drawn, rolled = [], []
    stream = io.StringIO()
    with Run(
        directory,
        total_steps=TOTAL,
        save_every=10,
        rollback=rollback,
        progress=False,
        stream=stream,
        handle_signals=False,
        ranks=Ranks(reduce="mean"),
        writer_options={"formats": ("jsonl",)},
    ) as run:
        run.restore({"model": model, "opt": opt, "rng": RNGState(), "noise": noise})
        while not run.done:
            if jump is not None and run.data_position == jump[0]:
                run.data_position = jump[1]
            position = run.next_batch()
            inputs = _batch(position, rank)
            inputs = inputs + 0.01 * torch.randn(8, 4, generator=noise)
            loss = (model(inputs) - inputs.sum(1, keepdim=True)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            before = run.step
            drawn.append(position)
            if not run.update(loss=loss.item()):
                rolled.append(
                    {
                        "step": before,
                        "position": position,
                        "own_loss": repr(loss.item()),
                        "restored": run.step,
                        "data_position": run.data_position,
                    }
                )
    params = [p.detach().numpy().tobytes().hex() for p in model.parameters()]
    momentum = [opt.state[p]["momentum_buffer"].numpy().tobytes().hex() for p in model.parameters()]
    return {
        "drawn": drawn,
        "rolled": rolled,
        "params": params,
        "momentum": momentum,
        "rng": [
            torch.get_rng_state().numpy().tobytes().hex(),
            noise.get_state().numpy().tobytes().hex(),
        ],
        "step": run.step,
        "output": stream.getvalue(),
    }


def _scalars_run(directory: Path, **options: Any) -> Any:
    from globalstep import Run

    return Run(directory, progress=False, stream=io.StringIO(), handle_signals=False, **options)


def _spike(directory: Path, rank: int, reduce: str | None) -> dict[str, Any]:
    """Rank 1's loss of 100 spikes the mean (both roll back); 8 spikes rank 1's alone (and
    the ranks' maximum, with ``reduce="max"``)."""
    from globalstep.run import Ranks, Rollback

    policy = Rollback(spike_factor=5.0, median_of=5, skip_batches=0)
    answers = []
    ranks = Ranks(reduce=reduce)
    with _scalars_run(directory, save_every=5, rollback=policy, ranks=ranks) as run:
        run.restore({})
        for _ in range(12):
            answers.append(run.update(loss=1.0))
        answers.append(run.update(loss=100.0 if rank == 1 else 1.0))
        after_spike = run.step
        for _ in range(3):
            answers.append(run.update(loss=1.0))
        answers.append(run.update(loss=8.0 if rank == 1 else 1.0))  # the mean is 4.5
        return {"answers": answers, "after_spike": after_spike, "end": run.step}


def _writer_saves(directory: Path, rank: int) -> dict[str, Any]:
    """The writer alone saves (``distributed=False``), rank 1 reads: rank 1's NaN at step 12
    rolls both back to the writer's step 10, both restoring its counter there."""
    import numpy as np

    from globalstep.run import Rollback

    counter = np.zeros(1)
    answers = []
    with _scalars_run(
        directory,
        save_every=5,
        rollback=Rollback(skip_batches=1),
        checkpoint_options={"distributed": False},
    ) as run:
        state = run.restore({"counter": counter})
        for _ in range(13):
            state["counter"] += 1
            nan = rank == 1 and run.step == 12
            answers.append(run.update(loss=float("nan") if nan else 1.0))
        return {
            "answers": answers,
            "step": run.step,
            "counter": run.state["counter"].tolist(),
            "data_position": run.data_position,
        }


def _error(directory: Path, rank: int, case: str) -> str:
    """Runs ``case`` and returns the error it raised on this rank (type: message)."""
    from globalstep.run import Rollback

    save_every = None if case == "no-checkpoint" else 1
    policy = Rollback(max_rollbacks=1, skip_batches=0)
    try:
        with _scalars_run(directory, save_every=save_every, rollback=policy) as run:
            run.restore({})
            if case == "one-rank":
                run.update(loss=1.0) if rank == 0 else run.update()
            elif case == "invalid":
                run.update(loss="x" if rank == 1 else 1.0)
            elif case == "give-up":  # rank 1's NaN twice: one rollback is allowed
                for loss in (1.0, 1.0, float("nan"), 1.0, float("nan")):
                    run.update(loss=loss if rank == 1 else 1.0)
            else:
                run.update(loss=float("nan") if rank == 1 else 1.0)
    except Exception as err:  # the test reads which error, on which rank
        return f"{type(err).__name__}: {err}"
    return "no error"


def rollback_scenario(rank: int, out: Path) -> dict[str, Any]:
    """Every part of the scenario on this rank, in order (see the module's docstring)."""
    from globalstep.run import Rollback

    result = {
        "nan": _train(out / "nan", rank, rollback=Rollback(skip_batches=SKIP), jump=None),
        "reference": _train(out / "reference", rank, rollback=None, jump=(20, 20 + 4 + SKIP)),
        "spike": _spike(out / "spike", rank, None),
        "spike-max": _spike(out / "spike-max", rank, "max"),
        "writer-saves": _writer_saves(out / "writer-saves", rank),
    }
    for case in ("one-rank", "invalid", "no-checkpoint", "give-up"):
        result[case] = _error(out / case, rank, case)
    return result


def main(scenario: str, rank: int, size: int, port: int, out: Path) -> None:
    """Runs the scenario on this rank of the group and writes its result."""
    connect(rank, size, port, group=True)
    result = rollback_scenario(rank, out)
    (out / f"{scenario}-{rank}.json").write_text(json.dumps(result))
    import torch.distributed as dist

    dist.destroy_process_group()
