"""A prepared GPU check of issue #27: one rank, CUDA generators saved and restored per device.

On a machine with CUDA, for each of two checkpoint managers (a plain one, and a distributed
one on a one-rank NCCL group on 127.0.0.1), a small CUDA model with dropout is trained for
``--total`` updates with batches from a CUDA ``torch.Generator`` and the process's CUDA
generators (every device's, through ``RNGState()``) in the state, saved at ``--at``; then
the checkpoint is restored into a fresh model, optimizer and generators that were moved on
(the generators drawn from, so that a restore that does nothing shows), and the updates
after ``--at`` are done again. Checked, byte for byte: the parameters, the optimizer state,
every device's CUDA RNG state and the data generator's state, against the uninterrupted
run; printed one line per part and ``all parts equal`` at the end (exit status 1 where a
part differs).

Without CUDA it prints why it skips and exits 0.

Run: `PYTHONPATH=src .venv/bin/python bench/gpu_ranks_check.py [--total 20] [--at 10]`.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
from typing import Any


def _train(model: Any, opt: Any, data: Any, updates: int) -> None:
    import torch

    for _ in range(updates):
        inputs = torch.randn(32, 16, device="cuda", generator=data)
        loss = torch.nn.functional.mse_loss(model(inputs), inputs.sum(1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()


def _fresh(seed: int) -> tuple[Any, Any, Any]:
    import torch

    torch.manual_seed(seed)  # also seeds every CUDA device's generator
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(64, 1)
    ).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    data = torch.Generator(device="cuda").manual_seed(1000 + seed)
    return model, opt, data


def _bytes(model: Any, opt: Any, data: Any) -> dict[str, bytes]:
    import torch

    out = {f"param/{k}": v.detach().cpu().numpy().tobytes() for k, v in model.state_dict().items()}
    for index, values in enumerate(opt.state.values()):
        for key, value in values.items():
            out[f"opt/{index}/{key}"] = value.detach().cpu().numpy().tobytes()
    for device, state in enumerate(torch.cuda.get_rng_state_all()):
        out[f"rng/cuda:{device}"] = state.numpy().tobytes()
    out["data/cuda-generator"] = data.get_state().numpy().tobytes()
    return out


def check(directory: str, total: int, at: int, *, distributed: bool) -> list[str]:
    """Returns the parts that differ from the uninterrupted run (empty: all equal)."""
    import torch

    from globalstep import CheckpointManager, Clock
    from globalstep.integrations.torch import RNGState

    model, opt, data = _fresh(0)
    clock = Clock()
    state = {"clock": clock, "model": model, "opt": opt, "rng": RNGState(), "data": data}
    with CheckpointManager(directory, distributed=distributed) as manager:
        _train(model, opt, data, at)
        for _ in range(at):
            clock.tick()
        manager.save(clock, state)
        _train(model, opt, data, total - at)
        want = _bytes(model, opt, data)

        model, opt, data = _fresh(7)
        _train(model, opt, data, 3)  # moved on: a restore that does nothing shows
        torch.rand(5, device="cuda")
        clock = Clock()
        state = {"clock": clock, "model": model, "opt": opt, "rng": RNGState(), "data": data}
        manager.restore(state)
        if clock.step != at:
            return [f"clock: restored step {clock.step}, saved {at}"]
        _train(model, opt, data, total - at)
        got = _bytes(model, opt, data)
    if sorted(got) != sorted(want):
        return [f"parts: {sorted(got)} != {sorted(want)}"]
    return [key for key in want if got[key] != want[key]]


def main(argv: list[str] | None = None) -> int:
    """Runs both checks where CUDA is available; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=20)
    parser.add_argument("--at", type=int, default=10)
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print("skipped: no CUDA device (torch.cuda.is_available() is False)")
        return 0
    import torch.distributed as dist

    print(f"{torch.cuda.device_count()} CUDA device(s): {torch.cuda.get_device_name(0)}")
    failed = False
    with tempfile.TemporaryDirectory() as base:
        different = check(os.path.join(base, "plain"), args.total, args.at, distributed=False)
        print(f"1 process, plain manager: {different or 'equal'}")
        failed |= bool(different)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
        torch.cuda.set_device(0)
        try:
            different = check(os.path.join(base, "ranks"), args.total, args.at, distributed=True)
        finally:
            dist.destroy_process_group()
        print(f"1 rank, NCCL, distributed manager: {different or 'equal'}")
        failed |= bool(different)
    print("some parts differ" if failed else "all parts equal")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
