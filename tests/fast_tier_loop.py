"""A child process for the fast tier's kill tests: a Run-based torch loop with a fast tier.

Run as ``python fast_tier_loop.py DIRECTORY FAST_DIRECTORY TOTAL_STEPS [KILL_AT]``. The Run
saves to ``DIRECTORY/checkpoints`` every 50 updates and to the fast tier in FAST_DIRECTORY
every 5. A linear model with SGD and momentum (its optimizer state saved) fits batches
chosen by the data position; each update logs its loss. It prints ``ready S TIER WHY``
after the restore (S: the step resumed at, TIER and WHY: the manager's record of the
restore, ``-`` for none). With KILL_AT=S the process SIGKILLs itself right after update S
(the update's point enqueued, nothing else done). At the end it writes the parameters'
and the momentum buffers' bytes to ``DIRECTORY/weights``.
"""

import sys


def main(directory: str, fast: str, total_steps: int, kill_at: int | None = None) -> None:
    """Trains to total_steps, resuming from the newest checkpoint of either tier."""
    import os
    import pathlib
    import signal

    import torch

    from globalstep import FastTier, Run

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(256, 8, generator=generator, dtype=torch.float64)
    targets = inputs @ torch.randn(8, 2, generator=generator, dtype=torch.float64)
    model = torch.nn.Linear(8, 2).double()
    with torch.no_grad():
        model.weight.copy_(torch.randn(2, 8, generator=generator, dtype=torch.float64))
        model.bias.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    run = Run(
        directory,
        total_steps=total_steps,
        save_every=50,
        fast_tier=FastTier(fast, save_every=5),
        progress=False,
        stream=sys.stderr,
    )
    with run:
        run.restore({"model": model, "optimizer": optimizer})
        record = run.checkpoints.last_restore
        tier, why = ("-", "-") if record is None else (record.tier, record.fell_back_from)
        print(f"ready {run.step} {tier} {why or '-'}", flush=True)
        while not run.done:
            index = run.next_batch() % 32
            x, y = inputs[index * 8 : (index + 1) * 8], targets[index * 8 : (index + 1) * 8]
            optimizer.zero_grad()
            loss = torch.mean((model(x) - y) ** 2)
            loss.backward()
            optimizer.step()
            run.update(loss=loss.item())
            if run.step == kill_at:
                run.writer.sync()  # its points on disk, as a while later: the steps redone
                os.kill(os.getpid(), signal.SIGKILL)
    buffers = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
    data = b"".join(t.detach().numpy().tobytes() for t in [*model.parameters(), *buffers])
    pathlib.Path(directory, "weights").write_bytes(data)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if sys.argv[4:] else None)
