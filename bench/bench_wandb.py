"""Per-update cost of W&B as a writer format in a torch loop (offline), and its lag.

The W&B counterpart of ``bench_trackers.py`` (MLflow's), on the same loop: a trivial model
(``nn.Linear(32, 1)``, a fixed batch of 64, SGD) trained ``--n`` updates through
``globalstep.Run`` (``run.update(loss=..., lr=...)``, a checkpoint every
``--save-every`` updates), W&B in offline mode (``WANDB_MODE=offline``: no network, W&B's
service writes its transaction log as it would before an upload). Only the loop is timed.
The contenders, round-robin for ``--rounds`` rounds:

- ``files``: TensorBoard + JSONL only.
- ``wandb``: TensorBoard + JSONL + ``"wandb"``: rows go to W&B from the tracker's sender
  thread once a checkpoint covers them, each send confirmed in W&B's transaction log.
- ``by-hand``: TensorBoard + JSONL, and ``wandb.log({"loss": ..., "lr": ...},
  step=run.step)`` called in the loop at every update, as a user without the format would.

It prints, per contender, the median wall time per update and the ratio to ``files``.
Then the lag of the ``wandb`` contender's last round: a side thread samples, every 0.1 s,
the run's step and the newest global step W&B's transaction log holds (read with the
client's own reader); the lag in steps (mean, max) and as time at the loop's rate.

Run: `WANDB_SILENT=true .venv/bin/python bench/bench_wandb.py [--n 2000] [--rounds 3]
[--save-every 100]`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import statistics
import tempfile
import threading
import time

import torch

from globalstep import Run
from globalstep.summary._wandb import STEP_METRIC, history_rows, read_records


def _loop(
    directory: str, n: int, save_every: int, contender: str, watch: dict[str, int] | None
) -> float:
    """Trains n updates; returns the loop's wall time per update."""
    import wandb

    torch.manual_seed(0)
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(64, 32), torch.randn(64, 1)
    formats = ("tensorboard", "jsonl", "wandb") if contender == "wandb" else None
    options = {"formats": formats} if formats else {}
    by_hand = wandb.init(dir=directory) if contender == "by-hand" else contextlib.nullcontext()
    with (
        by_hand,
        Run(
            directory,
            save_every=save_every,
            config={"model": "linear", "n": n},
            progress=False,
            handle_signals=False,
            writer_options=options,
        ) as run,
    ):
        run.restore({"model": model, "opt": opt})
        run.writer.flush()  # the writer (and its tracker) open before the timing
        started = time.perf_counter()
        for _ in range(n):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            opt.step()
            run.update(loss=loss, lr=0.01)
            if contender == "by-hand":
                wandb.log({"loss": loss.item(), "lr": 0.01}, step=run.step)
            if watch is not None:
                watch["step"] = run.step
        run.writer.flush()
        seconds = (time.perf_counter() - started) / n
        if watch is not None:
            watch["done"] = 1  # the lag is sampled while training only
    return seconds


def _lag(directory: str, watch: dict[str, int], stop: threading.Event, out: list[tuple]) -> None:
    """Samples (time, run's step, newest step of W&B's log) until stopped."""
    logs = pathlib.Path(directory, "logs", "wandb")
    path, offset, newest = None, 0, 0
    while not stop.wait(0.1):
        if path is None:
            found = sorted(logs.glob("offline-run-*/run-*.wandb"))
            path = str(found[0]) if found else None
            continue
        log = read_records(path, offset)
        offset = log.end
        for row in history_rows(log.records):
            newest = max(newest, row.get(STEP_METRIC, 0))
        if not watch.get("done"):
            out.append((time.monotonic(), watch.get("step", 0), newest))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--save-every", type=int, default=100)
    args = parser.parse_args()
    os.environ["WANDB_MODE"] = "offline"
    root = pathlib.Path(tempfile.mkdtemp(prefix="bench-wandb-"))
    contenders = ("files", "wandb", "by-hand")
    times: dict[str, list[float]] = {c: [] for c in contenders}
    samples: list[tuple] = []
    for round_ in range(args.rounds):
        for contender in contenders:
            directory = str(root / f"{contender}-{round_}")
            last = contender == "wandb" and round_ == args.rounds - 1
            watch: dict[str, int] | None = {} if last else None
            stop, sampler = threading.Event(), None
            if watch is not None:
                samples.clear()
                sampler = threading.Thread(target=_lag, args=(directory, watch, stop, samples))
                sampler.start()
            times[contender].append(_loop(directory, args.n, args.save_every, contender, watch))
            stop.set()
            if sampler is not None:
                sampler.join()
    base = statistics.median(times["files"])
    print(f"{args.n} updates x {args.rounds} rounds, a checkpoint every {args.save_every}")
    for contender in contenders:
        median = statistics.median(times[contender])
        spread = f"{min(times[contender]) * 1e6:.0f}-{max(times[contender]) * 1e6:.0f}"
        print(
            f"{contender:8s} {median * 1e6:8.1f} us/update (min-max {spread})  "
            f"x{median / base:.2f} of files"
        )
    lags = [step - newest for _, step, newest in samples if step]
    if lags:
        rate = times["wandb"][-1]
        print(
            f"lag of wandb behind the run while training ({len(lags)} samples every 0.1 s): "
            f"mean {statistics.mean(lags):.0f} steps, max {max(lags)} steps; at this loop's "
            f"{rate * 1e6:.0f} us/update: mean {statistics.mean(lags) * rate * 1e3:.0f} ms, "
            f"max {max(lags) * rate * 1e3:.0f} ms"
        )


if __name__ == "__main__":
    main()
