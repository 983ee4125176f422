"""Child processes for the preemption tests: one rank of a gloo group training under a Run.

Forked by spawn.py as ``main(SCENARIO, RANK, WORLD_SIZE, PORT, OUT_DIRECTORY)``; each rank
trains a small DDP model through a :class:`~globalstep.Run` (no periodic saves: only a
stop saves) until the test signals it from outside, and writes what it saw to
``OUT_DIRECTORY/<scenario>-<rank>.json``: the signals it received with its clock's step at
each (recorded by a handler that then hands the signal to the Run's), the step it stopped
at, the exit status, and its weights. ``ready-<rank>`` appears after update 5.

Scenarios: ``every1`` (``Ranks(stop_every=1)``) and ``every3`` (``Ranks(stop_every=3)``);
``plain``: a :class:`~globalstep.distributed.Preemption` in a plain loop (no Run), rank 1
asking for a stop before poll 7, every rank recording what each of 16 polls returned; then
one on the default group with rank 0 asking for SIGUSR1 and rank 1 for SIGTERM.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from workers import connect

UPDATES = 3000  # far more than a test waits for: a run that reaches it was never stopped


def _recording(run: Any, received: list[list[int]]) -> None:
    """Notes each stop signal with the step at which it arrived and the Run's poll count
    then, and lets the handler in place take it (the Run's; where there is none, the
    default action)."""
    import os

    for signum in (signal.SIGTERM, signal.SIGUSR1):
        handler = signal.getsignal(signum)

        def record(number: int, frame: Any, handler: Any = handler) -> None:
            stop = run._plan.stop  # the Run's agreement: its polls name the stop it asks for
            received.append([number, run.step, stop.polls if stop is not None else None])
            if callable(handler):
                handler(number, frame)
            else:
                signal.signal(number, signal.SIG_DFL)
                os.kill(os.getpid(), number)

        signal.signal(signum, record)


def train(scenario: str, rank: int, out: Path) -> dict[str, Any]:
    """Trains until the agreed stop; returns what this rank saw."""
    import io
    import time

    import torch
    from torch.nn.parallel import DistributedDataParallel

    from globalstep import Run
    from globalstep.run import Ranks

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(rank)
    received: list[list[int]] = []
    seen: dict[str, Any] = {"received": received, "stopped": None, "status": None}
    run = Run(
        out / "run",
        progress=False,
        stream=io.StringIO(),
        ranks=Ranks(stop_every=3 if scenario == "every3" else 1),
        writer_options={"formats": ("jsonl",)},
    )
    _recording(run, received)
    with run:
        run.restore({"model": model, "optimizer": optimizer})
        try:
            while run.step < UPDATES:
                inputs = torch.randn(8, 4, generator=data)
                loss = (ddp(inputs) - inputs.sum(1, keepdim=True)).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                run.update(loss=loss.item())
                if run.step == 5:
                    (out / f"ready-{rank}").touch()
                time.sleep(0.002)
        except SystemExit as stop:
            seen.update(stopped=run.step, status=stop.code)
            raise
        finally:
            seen["weights"] = torch.nn.utils.parameters_to_vector(model.parameters()).tolist()
            (out / f"{scenario}-{rank}.json").write_text(json.dumps(seen))
    return seen


def plain(rank: int) -> dict[str, Any]:
    """Polls 16 times (every=2, delay=2, on a gloo group given); rank 1 asks for SIGUSR1
    before poll 7."""
    import torch.distributed as dist

    from globalstep.distributed import Preemption

    group = dist.new_group(backend="gloo")
    answers = []
    with Preemption((), every=2, delay=2, group=group) as stop:
        for poll in range(1, 17):
            dist.barrier(group)  # the ranks in lockstep, as DDP's gradient all_reduce keeps them
            if rank == 1 and poll == 7:
                stop.request(signal.SIGUSR1)
            answers.append(stop.poll())
        distributed = stop.distributed
    # Different signals on different ranks: every rank gets the first request's.
    stops: list[int] = []
    with Preemption((), on_stop=lambda s: stops.append(int(s))) as stop:
        stop.request(signal.SIGUSR1 if rank == 0 else signal.SIGTERM)
        mixed = []
        for _ in range(3):
            dist.barrier(group)
            mixed.append(stop.poll())
    return {"answers": answers, "distributed": distributed, "mixed": mixed, "stops": stops}


def main(scenario: str, rank: int, size: int, port: int, out: Path) -> None:
    """Joins the group and runs the scenario (``train`` writes its own result)."""
    connect(rank, size, port, group=True)
    if scenario == "plain":
        (out / f"{scenario}-{rank}.json").write_text(json.dumps(plain(rank)))
        import torch.distributed as dist

        dist.destroy_process_group()
    else:
        train(scenario, rank, out)
