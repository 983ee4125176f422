"""The README's standalone pattern in a torch loop, for the durability SIGKILL test.

A CheckpointManager with ``save_every=25`` and a SummaryWriter on the clock, used alone
(no ``Run``), as README.md's "Checkpoints" and "Step-keyed metrics" sections show: the
loop restores, trains, logs ``loss`` and ``lr`` at every update, and saves, with no flush
or sync of its own. Lines marked ``# test`` are the test's own instrumentation.

Usage: python torch_standalone_loop.py DIR TOTAL_UPDATES MODE
    MODE ``maybe_save``: ``manager.maybe_save(clock, state)`` after every update;
    MODE ``save``: ``manager.save(clock, state)`` by hand every 25 updates.
Environment: GS_KILL_AT=k:when kills the process with SIGKILL once update k is applied,
``before`` its log line and checkpoint or ``after`` them.
"""

import json
import os
import signal
import sys

import numpy as np
import torch

import globalstep
from globalstep.integrations import torch as gst

directory, total, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
kill_at, _, when = os.environ.get("GS_KILL_AT", "-1:before").partition(":")  # test
torch.set_num_threads(1)

torch.manual_seed(0)
x, y = torch.randn(256, 8), torch.randn(256, 1)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
clock = globalstep.Clock()
gst.attach(opt, clock, globalstep.CosineDecay(0.05, decay_steps=total))

state = {"clock": clock, "model": model, "opt": opt}
manager = globalstep.CheckpointManager(f"{directory}/ckpts", max_to_keep=3, save_every=25)
if manager.latest_step() is not None:
    manager.restore(state)
writer = globalstep.SummaryWriter(f"{directory}/logs", clock=clock)

while clock.step < total:
    start = (clock.step % 16) * 16  # the batch of update number `step`
    loss = torch.nn.functional.mse_loss(model(x[start : start + 16]), y[start : start + 16])
    opt.zero_grad()
    loss.backward()
    opt.step()  # sets the rate for this update, then ticks the clock
    lr = opt.param_groups[0]["lr"]  # the rate this update used
    if clock.step == int(kill_at) and when == "before":  # test
        os.kill(os.getpid(), signal.SIGKILL)  # test
    writer.scalars({"loss": loss, "lr": lr})
    if mode == "maybe_save":
        manager.maybe_save(clock, state)
    elif clock.step % 25 == 0:
        manager.save(clock, state)
    if clock.step == int(kill_at) and when == "after":  # test
        os.kill(os.getpid(), signal.SIGKILL)  # test
writer.close()
manager.close()

np.savez(f"{directory}/final.npz", **{k: v.numpy() for k, v in model.state_dict().items()})  # test
with open(f"{directory}/report.json", "w") as f:  # test
    json.dump({"clock": clock.step}, f)  # test
