"""A PyTorch training loop with globalstep, for the exact-resume SIGKILL test.

Shuffled DataLoader with 2 workers, dropout, AdamW, 2 accumulated micro-batches per update,
CPU autocast with a GradScaler that is made to skip some updates (an inf loss on chosen
batches), a one-cycle rate with momentum cycling, a checkpoint every 25 updates, loss and
rate logged at every update. Lines marked ``# +gs`` are what globalstep adds to the plain
torch loop (``# ~gs`` marks a plain line it changes); ``# test`` lines are the test's own
instrumentation (the kill switch and the final report).

Usage: python torch_resume_loop.py DIR TOTAL_UPDATES
Environment: GS_KILL_AT=k:when kills the process with SIGKILL once update k is applied,
``before`` its log line and checkpoint or ``after`` them.
"""

import json
import os
import signal
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

import globalstep  # +gs
from globalstep.compat.torch import OneCycleLR  # +gs
from globalstep.integrations import torch as gst  # +gs

directory, total = sys.argv[1], int(sys.argv[2])
kill_at, _, when = os.environ.get("GS_KILL_AT", "-1:before").partition(":")  # test

torch.manual_seed(0)
data = TensorDataset(torch.randn(480, 16), torch.randn(480, 1))
model = torch.nn.Sequential(
    torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(64, 1)
)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=8)
sampler = gst.ResumableSampler(data, seed=1)  # +gs  (the plain loop has shuffle=True)
loader = DataLoader(
    data, batch_size=8, sampler=sampler, num_workers=2, persistent_workers=True
)  # ~gs
clock = globalstep.Clock()  # +gs
schedule = OneCycleLR(max_lr=0.02, total_steps=total)  # +gs
gst.attach(opt, clock, schedule, momentum=gst.OneCycleMomentum(schedule))  # +gs
state = {"clock": clock, "model": model, "opt": opt, "scaler": scaler, "data": sampler}  # +gs
state["rng"] = gst.RNGState()  # +gs
manager = globalstep.CheckpointManager(f"{directory}/ckpt", max_to_keep=2)  # +gs
if manager.latest_step() is not None:  # +gs
    manager.restore(state)  # +gs
writer = globalstep.SummaryWriter(f"{directory}/logs", clock=clock, formats=("jsonl",))  # +gs

model.train()
running = 0.0
while clock.step < total:  # ~gs  (the plain loop counts its own steps)
    for x, y in sampler.batches(loader):  # ~gs  (was: for x, y in loader)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y) / 2
        if x[0, 0].item() > 2.0:  # an overflow on some batches: the scaler skips that update
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        running += loss.item()
        if (sampler.position // 8) % 2:  # ~gs  (the plain loop counts micro-batches)
            continue
        before = clock.step  # +gs
        scaler.step(opt)  # the update ticks the clock unless the scaler skipped it
        scaler.update()
        opt.zero_grad()
        if clock.step > before:  # +gs
            lr = opt.param_groups[0]["lr"]
            if clock.step == int(kill_at) and when == "before":  # test
                os.kill(os.getpid(), signal.SIGKILL)  # test
            writer.scalars({"loss": running, "lr": lr})  # +gs
            if clock.step % 25 == 0:  # +gs
                writer.flush()  # +gs
                manager.save(clock, state)  # +gs
            if clock.step == int(kill_at) and when == "after":  # test
                os.kill(os.getpid(), signal.SIGKILL)  # test
        running = 0.0
        if clock.step >= total:
            break
writer.close()  # +gs
manager.close()  # +gs

np.savez(
    f"{directory}/final.npz", **{k: v.float().numpy() for k, v in model.state_dict().items()}
)  # test
steps = sorted({int(s["step"].item()) for s in opt.state.values()})  # test
report = {"clock": clock.step, "optimizer_steps": steps, "scale": scaler.get_scale()}  # test
report["data"] = sampler.state_dict()  # test
with open(f"{directory}/report.json", "w") as f:  # test
    json.dump(report, f)  # test
