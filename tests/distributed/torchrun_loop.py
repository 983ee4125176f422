"""One rank of a DDP training loop started by torchrun, for the restart tests.

Usage: ``torchrun --nproc-per-node=N ... torchrun_loop.py DIR TOTAL SAVE_EVERY MODE BUCKETS``,
MODE ``manager`` (issue #27's script: a distributed CheckpointManager and a SummaryWriter on
the writer rank) or ``run`` (the same loop through ``Run``); BUCKETS ``default`` (DDP as
it comes) or ``fixed`` (``find_unused_parameters=True``: DDP keeps its first gradient
buckets instead of rebuilding them after a process's first update, which changes the
order in which 3 or more ranks' gradients are summed at the first update after a restart;
see docs/several-processes.md, "Restarts by torchrun"). Each rank has its own dropout
stream (``torch.manual_seed(100 + rank)``, saved through ``RNGState``) and its own batches
(``torch.Generator().manual_seed(1000 + rank)``, saved as a leaf); the model is DDP with
dropout, the optimizer Adam. Lines marked ``# test`` are the test's instrumentation:

- after each update, ``attempt pid step`` is appended to ``DIR/progress-RANK`` (the test
  reads it to SIGKILL a rank from outside; ``attempt`` is torchrun's restart count);
- after the restore, ``attempt step committed-steps`` is appended to ``DIR/resumed-RANK``;
- at the end, ``DIR/final-RANK.npz`` holds the rank's parameters, optimizer state, torch
  RNG state and data generator state, as bytes.

``GS_SLEEP`` (seconds, default 0.02) is slept after each update so that the test's kill
lands while the run still has updates to do.
"""

import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import globalstep
from globalstep.integrations.torch import RNGState
from globalstep.run import Ranks


def _record(directory, name, rank, text):  # test
    with open(os.path.join(directory, f"{name}-{rank}"), "a") as file:
        file.write(text + "\n")
        file.flush()


def _final(directory, rank, model, opt, data):  # test
    arrays = {f"param/{k}": v.detach().numpy() for k, v in model.module.state_dict().items()}
    for index, values in enumerate(opt.state.values()):
        for key, value in values.items():
            arrays[f"opt/{index}/{key}"] = value.detach().numpy()
    arrays["rng/torch"] = torch.get_rng_state().numpy()
    arrays["data/generator"] = data.get_state().numpy()
    np.savez(os.path.join(directory, f"final-{rank}.npz"), **arrays)


def _batch(data):
    inputs = torch.randn(16, 8, generator=data)
    return inputs, inputs.sum(1, keepdim=True) + 0.1 * torch.randn(16, 1, generator=data)


def main(directory, total, save_every, mode, buckets):
    """Trains to ``total`` updates, resuming from the newest committed checkpoint."""
    pause = float(os.environ.get("GS_SLEEP", "0.02"))  # test
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))  # test
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(100 + rank)  # each rank's own dropout stream
    data = torch.Generator().manual_seed(1000 + rank)  # each rank's own batches
    model = DistributedDataParallel(
        torch.nn.Sequential(
            torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 1)
        ),
        find_unused_parameters=buckets == "fixed",
    )
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    if mode == "run":
        run_loop(directory, total, save_every, model, opt, data, rank, attempt, pause)
    else:
        manager_loop(directory, total, save_every, model, opt, data, rank, attempt, pause)
    _final(directory, rank, model, opt, data)  # test
    dist.destroy_process_group()


def _update(model, opt, data):
    inputs, targets = _batch(data)
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()


def manager_loop(directory, total, save_every, model, opt, data, rank, attempt, pause):
    """Issue #27's script: a distributed CheckpointManager; the writer rank logs its loss."""
    clock = globalstep.Clock()
    state = {"clock": clock, "model": model, "opt": opt, "rng": RNGState(), "data": data}
    manager = globalstep.CheckpointManager(
        f"{directory}/checkpoints", distributed=True, max_to_keep=3
    )
    if manager.latest_step() is not None:
        manager.restore(state)
    _record(directory, "resumed", rank, f"{attempt} {clock.step} {manager.steps()}")  # test
    writer = None
    if rank == 0:
        writer = globalstep.SummaryWriter(f"{directory}/logs", clock=clock, formats=("jsonl",))
    while clock.step < total:
        loss = _update(model, opt, data)
        clock.tick()
        if writer is not None:
            writer.scalars({"loss": loss})
        if clock.step % save_every == 0:
            manager.save(clock, state)
        _record(directory, "progress", rank, f"{attempt} {os.getpid()} {clock.step}")  # test
        time.sleep(pause)  # test
    if writer is not None:
        writer.close()
    manager.close()


def run_loop(directory, total, save_every, model, opt, data, rank, attempt, pause):
    """The same loop through Run: the loss averaged over the ranks, logged by rank 0."""
    with globalstep.Run(
        directory,
        total_steps=total,
        save_every=save_every,
        progress=False,
        ranks=Ranks(reduce="mean", check_every=5),
        checkpoint_options={"max_to_keep": 3},
        writer_options={"formats": ("jsonl",)},
    ) as run:
        run.restore({"model": model, "opt": opt, "rng": RNGState(), "data": data})
        steps = run.checkpoints.steps()  # test
        _record(directory, "resumed", rank, f"{attempt} {run.step} {steps}")  # test
        while not run.done:
            run.update(loss=_update(model, opt, data))
            _record(directory, "progress", rank, f"{attempt} {os.getpid()} {run.step}")  # test
            time.sleep(pause)  # test


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
