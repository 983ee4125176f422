"""Writes the checkpoint directories under tests/data/main-5d95193/ (run once, on main).

The redesign (issue 26) must restore what the code before it wrote. This script was run
on main at 5d95193, before the redesign, with NumPy and torch installed:

    PYTHONPATH=src python tests/data/make_main_checkpoints.py tests/data/main-5d95193

and its output committed. ``tests/test_old_checkpoints.py`` restores each directory on the
current code and compares every value with ``expected.json``, which this script wrote from
the values it saved.
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

import globalstep
from globalstep.summary import SummaryWriter


def numpy_tree(step: int) -> dict:
    rng = np.random.default_rng(step)
    return {
        "w": rng.normal(size=(4, 3)).astype(np.float32),
        "b": rng.normal(size=5),
        "ints": np.arange(step, step + 6, dtype=np.int64).reshape(2, 3),
        "mask": np.array([True, False, step % 2 == 0]),
        "half": rng.normal(size=3).astype(np.float16),
        "nested": {"list": [np.full(2, step, dtype=np.uint8), 3.5 * step], "name": f"s{step}"},
    }


def to_json(value: object) -> object:
    """A tree as JSON: arrays as dtype, shape and values; the rest as it is."""
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_json(item) for item in value]
    if isinstance(value, np.ndarray):
        return {"dtype": str(value.dtype), "shape": list(value.shape), "values": value.tolist()}
    return value


def write(root: pathlib.Path) -> None:
    expected: dict = {}

    # 1. A CheckpointManager directory: a NumPy tree with a clock and a schedule, three
    #    saves kept of four, metrics, and one best-kept by loss.
    clock = globalstep.Clock(steps_per_epoch=10)
    schedule = globalstep.CosineDecay(0.1, decay_steps=100)
    with globalstep.CheckpointManager(root / "numpy", max_to_keep=3) as manager:
        for step in (10, 20, 30, 40):
            while clock.step < step:
                clock.tick()
            tree = numpy_tree(step)
            manager.save(clock, {"clock": clock, "model": tree}, metrics={"loss": 1.0 / step})
    expected["numpy"] = {
        "steps": [20, 30, 40],
        "epoch": clock.epoch,
        "lr_at_40": float(schedule(40)),
        "trees": {str(step): to_json(numpy_tree(step)) for step in (20, 30, 40)},
    }

    # 2. A torch model, optimizer, sampler and RNG (the README's quick start state).
    import torch
    from torch.utils.data import TensorDataset

    from globalstep.integrations import torch as gst

    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(40, 3), torch.randn(40, 1))
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    tclock = globalstep.Clock()
    gst.attach(opt, tclock, globalstep.CosineDecay(0.01, decay_steps=50))
    sampler = gst.ResumableSampler(dataset, seed=1)
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, sampler=sampler)
    for x, y in sampler.batches(loader):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if tclock.step == 3:
            break
    rng = gst.RNGState()
    with globalstep.CheckpointManager(root / "torch") as manager:
        manager.save(
            tclock, {"clock": tclock, "model": model, "opt": opt, "data": sampler, "rng": rng}
        )
    expected["torch"] = {
        "step": tclock.step,
        "weight": model.weight.detach().tolist(),
        "bias": model.bias.detach().tolist(),
        "exp_avg": opt.state[model.weight]["exp_avg"].tolist(),
        "lr": opt.param_groups[0]["lr"],
        "sampler": sampler.state_dict(),
        "next_torch_random": torch.rand(3).tolist(),
    }

    # 3. A Run directory: checkpoints, config and the curves it logged.
    weights = np.zeros(3)
    with globalstep.Run(
        root / "run",
        total_steps=30,
        save_every=10,
        schedules={"lr": globalstep.CosineDecay(0.1, decay_steps=30)},
        config={"batch_size": 20},
        progress=False,
    ) as run:
        state = run.restore({"weights": weights})
        while not run.done:
            lr = run.value("lr")
            weights -= lr * (weights - 1.0)
            run.update(loss=float(np.sum((weights - 1.0) ** 2)), lr=lr)
    expected["run"] = {"step": 30, "weights": weights.tolist(), "config": {"batch_size": 20}}
    del state

    # 4. A standalone writer's logs (JSONL and, with tensorboard, event files).
    with SummaryWriter(root / "logs", formats=("jsonl",)) as writer:
        for step in range(1, 6):
            writer.scalar("loss", 1.0 / step, step=step)
    expected["logs"] = {"loss": {str(s): 1.0 / s for s in range(1, 6)}}

    (root / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True))


if __name__ == "__main__":
    write(pathlib.Path(sys.argv[1]))
