"""Child processes for the multi-process tests: one rank of a gloo group on 127.0.0.1.

Forked by spawn.py as ``main(SCENARIO, RANK, WORLD_SIZE, PORT, OUT_DIRECTORY)``; the test
process holds the TCPStore on PORT; each child connects to it, runs SCENARIO and writes what
it saw to ``OUT_DIRECTORY/<scenario>-<rank>.json``:

- ``group``: a DDP model trained for 30 updates with a StepAgreement every 10, then
  reduce_metrics with each op and with mismatched tags, then a run in which rank 1 skips one
  tick and the next check raises.
- ``counter``: 1,000 indices from a SharedStepCounter, no process group needed.
- ``counter-kill``: as ``counter``, but rank 0 is SIGKILLed after taking 100 indices.
- ``run``: a Run on every rank in one directory, metrics reduced, agreement every 5 updates;
  then a Run with the default Ranks() in which rank 1 reports one update as skipped.
"""

import datetime
import json
import sys
from pathlib import Path
from typing import Any

TIMEOUT = datetime.timedelta(seconds=30)


def connect(rank: int, size: int, port: int, *, group: bool) -> Any:
    """Connects to the test's store and, with ``group``, joins the gloo process group."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=TIMEOUT)
    if group:
        dist.init_process_group(
            "gloo",
            store=dist.PrefixStore("group", store),
            rank=rank,
            world_size=size,
            timeout=TIMEOUT,
        )
    return store


def ddp_updates(model: Any, optimizer: Any, clock: Any, check: Any, updates: int) -> None:
    """Trains ``model`` on rank-specific data, ticking and checking once per update."""
    import torch

    from globalstep.distributed import rank

    data = torch.Generator().manual_seed(rank())
    for _ in range(updates):
        inputs = torch.randn(8, 4, generator=data)
        loss = (model(inputs) - inputs.sum(1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        clock.tick()
        check(clock)


def group_scenario(rank: int, size: int) -> dict[str, Any]:
    """DDP steps agreeing, reduced metrics, and a skipped tick caught."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from globalstep import Clock, ConfigError
    from globalstep._errors import StepMismatchError
    from globalstep.distributed import StepAgreement, assert_steps_agree, reduce_metrics

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    clock, check = Clock(), StepAgreement(every=10)
    ddp_updates(model, optimizer, clock, check, 30)
    out: dict[str, Any] = {
        "ddp_step": assert_steps_agree(clock),
        "ddp_checks": check.calls // check.every,
        "weights": torch.nn.utils.parameters_to_vector(model.parameters()).detach().tolist(),
    }
    value = {"loss": float(rank + 1), "count": 10 * rank}
    out["reduced"] = {op: reduce_metrics(value, op=op) for op in ("mean", "sum", "max", "min")}
    try:
        reduce_metrics({"loss": 1.0} if rank else {"accuracy": 1.0})
    except ConfigError as err:
        out["tags_error"] = str(err)
    calls = 0
    try:
        for _ in range(10):
            if rank != 1 or calls != 7:  # rank 1 misses one tick
                clock.tick()
            calls += 1
            check(clock)
    except StepMismatchError as err:
        out["skip"] = {"message": str(err), "ranks": err.ranks, "steps": err.steps, "at": calls}
    return out


def counter_scenario(store: Any) -> dict[str, Any]:
    """Takes 1,000 indices from the shared counter."""
    from globalstep.distributed import SharedStepCounter

    counter = SharedStepCounter(store, "test/steps")
    return {"indices": [counter.next() for _ in range(1000)]}


def counter_kill_scenario(store: Any, rank: int, out: Path) -> dict[str, Any]:
    """Rank 0 takes 100 indices, records them and is SIGKILLed; the others take 1,000."""
    import os
    import signal

    from globalstep.distributed import SharedStepCounter

    counter = SharedStepCounter(store, "test/killed")
    if rank != 0:
        return {"indices": [counter.next() for _ in range(1000)]}
    taken = [counter.next() for _ in range(100)]
    (out / f"counter-kill-{rank}.json").write_text(json.dumps({"indices": taken}))
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: SIGKILL ends the process")


def run_scenario(rank: int, directory: Path) -> dict[str, Any]:
    """A Run on every rank of the group in one directory."""
    import io

    from globalstep import Run
    from globalstep._errors import StepMismatchError
    from globalstep.run import Ranks

    stream = io.StringIO()
    with Run(
        directory,
        total_steps=12,
        save_every=6,
        progress=True,
        log_every=4,
        stream=stream,
        handle_signals=False,
        ranks=Ranks(reduce="mean", check_every=5),
        writer_options={"formats": ("jsonl",)},
    ) as run:
        run.restore({"weights": [0.0, 1.0]})
        while not run.done:
            run.update(loss=float(rank + 1) * run.step)
        checks = run.ranks_check.calls if run.ranks_check is not None else None
        every_rank_saves = run.checkpoints._rounds.distributed
    updates = 0
    try:
        with Run(directory / "skip", progress=False, handle_signals=False) as run:
            run.restore()
            for _ in range(100):
                updates += 1
                run.update(applied=rank != 1 or updates != 3)  # rank 1 skips update 3
    except StepMismatchError as err:
        skip = {"message": str(err), "ranks": err.ranks, "at": updates}
    return {
        "output": stream.getvalue(),
        "checks": checks,
        "skip": skip,
        "every_rank_saves": every_rank_saves,
    }


def main(scenario: str, rank: int, size: int, port: int, out: Path) -> None:
    """Runs one scenario on this rank and writes its result."""
    store = connect(rank, size, port, group=not scenario.startswith("counter"))
    if scenario == "group":
        result = group_scenario(rank, size)
    elif scenario == "counter":
        result = counter_scenario(store)
    elif scenario == "counter-kill":
        result = counter_kill_scenario(store, rank, out)
    else:
        result = run_scenario(rank, out / "run")
    (out / f"{scenario}-{rank}.json").write_text(json.dumps(result))
    if not scenario.startswith("counter"):
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    name, rank_text, size_text, port_text, out_text = sys.argv[1:]
    main(name, int(rank_text), int(size_text), int(port_text), Path(out_text))
