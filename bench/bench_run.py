"""Per-update cost of globalstep.Run inside a real torch loop, beside a hand loop and peers.

Every contender trains the same trivial model (``nn.Linear(32, 1)``, a fixed batch of 64,
SGD) for ``--n`` updates; only the loop is timed (not start-up or the final save). The
contenders, run round-robin for ``--rounds`` rounds:

- ``hand``: the bare loop with the learning rate from an inline cosine formula.
- ``run``: the same loop with ``globalstep.Run`` doing the work of issue 8's point 7: two
  schedules read per update (``run.value``), ``run.update(loss=<tensor>, lr=lr)`` logging
  two scalars (TensorBoard + JSONL), checking the save trigger (which never fires) and the
  progress display's trigger (a line every 100 steps, to /dev/null).
- ``run+ckpt``: as ``run``, plus an async checkpoint every 100 updates (after the logs are
  flushed and fsynced) of the model's weights.
- ``ignite``: ignite's ``Engine`` with a handler every 100 iterations.
- ``lightning``: Lightning's ``Trainer``, bare (no logger, checkpoint or progress bar).
- ``lightning+log``: with its TensorBoard logger and ``self.log`` of the loss and the rate.
- ``lightning+full``: with the logger, the progress bar and a ``ModelCheckpoint`` every
  100 steps.

For each contender it prints the median time per update over the rounds, the spread
(min-max) and the median of its per-round excess over the hand loop of the same round.
For ``run`` it also prints the training thread's own time in Run's calls (the two
``value`` calls and ``update``), timed around them inside the loop, per update (median
over all updates; the background writer's share of the GIL is in the loop figures).

Run: `.venv/bin/python bench/bench_run.py [--n 2000] [--rounds 5] [--only hand,run]`.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable

import torch
from torch import nn

BATCH, FEATURES = 64, 32


def _setup(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    model = nn.Linear(FEATURES, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(BATCH, FEATURES)
    y = torch.randn(BATCH, 1)
    return model, optimizer, x, y


def _cosine(step: int, n: int) -> float:
    return 0.05 * (1 + math.cos(math.pi * min(step, n) / n))


def bench_hand(n: int, directory: str) -> float:
    """The bare loop; the rate from an inline formula."""
    model, optimizer, x, y = _setup()
    loss_fn = nn.functional.mse_loss
    group = optimizer.param_groups[0]
    start = time.perf_counter()
    for step in range(n):
        group["lr"] = _cosine(step, n)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - start) / n


RUN_CALLS: dict[str, list[tuple[float, float]]] = {}  # contender: (median, mean) per round


def _timer_pair_ns() -> int:
    """The least time between two perf_counter_ns() reads: the timing's own cost."""
    clock = time.perf_counter_ns
    best = 10**9
    for _ in range(1000):
        a = clock()
        b = clock()
        best = min(best, b - a)
    return best


def _bench_run(n: int, directory: str, *, checkpoints: bool) -> float:
    from globalstep import CosineDecay, Run, warmup

    model, optimizer, x, y = _setup()
    loss_fn = nn.functional.mse_loss
    group = optimizer.param_groups[0]
    sink = open(os.devnull, "w")  # noqa: SIM115 - closed below
    run = Run(
        directory,
        total_steps=n,
        schedules={
            "lr": CosineDecay(0.1, decay_steps=n),
            "wd": warmup(CosineDecay(1e-4, decay_steps=n), 100),
        },
        save_every=100 if checkpoints else 10**12,
        progress=True,
        log_every=100,
        stream=sink,
        handle_signals=False,
        checkpoint_options={"async_save": True, "max_to_keep": 2},
    )
    weights = model.weight.detach().numpy()  # shares memory with the parameter
    run.restore({"weights": weights})
    _ = run.writer
    calls = []
    clock = time.perf_counter_ns
    start = time.perf_counter()
    for _ in range(n):
        t0 = clock()
        lr = run.value("lr")
        wd = run.value("wd")
        t1 = clock()
        group["lr"] = lr
        group["weight_decay"] = wd
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        t2 = clock()
        run.update(loss=loss, lr=lr)  # the loss tensor as it is: read off the thread
        t3 = clock()
        calls.append((t1 - t0) + (t3 - t2))
    elapsed = (time.perf_counter() - start) / n
    run.close()
    sink.close()
    cost = 2 * _timer_pair_ns()
    RUN_CALLS.setdefault("run+ckpt" if checkpoints else "run", []).append(
        ((statistics.median(calls) - cost) / 1e3, (statistics.fmean(calls) - cost) / 1e3)
    )
    return elapsed


def bench_run(n: int, directory: str) -> float:
    """Run: two schedules read, two scalars logged, two triggers checked per update."""
    return _bench_run(n, directory, checkpoints=False)


def bench_run_ckpt(n: int, directory: str) -> float:
    """As bench_run, plus an async checkpoint every 100 updates."""
    return _bench_run(n, directory, checkpoints=True)


def bench_ignite(n: int, directory: str) -> float:
    """ignite's Engine, a handler every 100 iterations."""
    from ignite.engine import Engine, Events

    model, optimizer, x, y = _setup()
    loss_fn = nn.functional.mse_loss
    group = optimizer.param_groups[0]

    def update(engine: Engine, batch: object) -> float:
        group["lr"] = _cosine(engine.state.iteration - 1, n)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    engine = Engine(update)
    seen = []
    times: dict[str, float] = {}
    engine.add_event_handler(
        Events.ITERATION_COMPLETED(every=100), lambda e: seen.append(e.state.iteration)
    )
    engine.add_event_handler(
        Events.STARTED, lambda e: times.setdefault("start", time.perf_counter())
    )
    engine.add_event_handler(
        Events.COMPLETED, lambda e: times.setdefault("end", time.perf_counter())
    )
    engine.run(range(n), max_epochs=1)
    return (times["end"] - times["start"]) / n


def _bench_lightning(n: int, directory: str, *, log: bool, full: bool) -> float:
    import lightning as L  # noqa: N812 - the name Lightning documents
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint
    from lightning.pytorch.loggers import TensorBoardLogger

    _, _, x, y = _setup()

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.model = nn.Linear(FEATURES, 1)

        def training_step(self, batch: object, index: int) -> torch.Tensor:
            loss = nn.functional.mse_loss(self.model(x), y)
            if log:
                self.log("loss", loss)
                self.log("lr", self.trainer.optimizers[0].param_groups[0]["lr"])
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    times: dict[str, float] = {}

    class Timer(Callback):
        def on_train_start(self, trainer: object, module: object) -> None:
            times["start"] = time.perf_counter()

        def on_train_end(self, trainer: object, module: object) -> None:
            times["end"] = time.perf_counter()

    callbacks: list[Callback] = [Timer()]
    if full:
        callbacks.append(ModelCheckpoint(dirpath=directory, every_n_train_steps=100))
    trainer = L.Trainer(
        max_steps=n,
        accelerator="cpu",
        devices=1,
        logger=TensorBoardLogger(directory) if log else False,
        log_every_n_steps=1,
        enable_checkpointing=full,
        enable_progress_bar=full,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    data = [0] * n
    # The progress bar draws on the terminal: count its cost, hide its output.
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
    try:
        trainer.fit(Module(), train_dataloaders=data)
    finally:
        sys.stdout, sys.stderr = streams
    return (times["end"] - times["start"]) / n


def bench_lightning(n: int, directory: str) -> float:
    """Lightning's Trainer, bare."""
    return _bench_lightning(n, directory, log=False, full=False)


def bench_lightning_log(n: int, directory: str) -> float:
    """Lightning with its TensorBoard logger."""
    return _bench_lightning(n, directory, log=True, full=False)


def bench_lightning_full(n: int, directory: str) -> float:
    """Lightning with logger, progress bar and a ModelCheckpoint every 100 steps."""
    return _bench_lightning(n, directory, log=True, full=True)


CONTENDERS: dict[str, Callable[[int, str], float]] = {
    "hand": bench_hand,
    "run": bench_run,
    "run+ckpt": bench_run_ckpt,
    "ignite": bench_ignite,
    "lightning": bench_lightning,
    "lightning+log": bench_lightning_log,
    "lightning+full": bench_lightning_full,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="updates per contender and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=None, help="comma-separated contenders")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(CONTENDERS)
    if "hand" not in names:
        names.insert(0, "hand")
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    results: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.rounds):
        for name in names:
            with tempfile.TemporaryDirectory() as directory:
                results[name].append(CONTENDERS[name](args.n, directory))
    load = os.getloadavg()
    print(
        f"{args.n} updates x {args.rounds} rounds, "
        f"load average {load[0]:.1f} ({os.cpu_count()} CPUs)"
    )
    print(f"{'contender':16} {'us/update':>10} {'spread':>16} {'excess over hand':>17}")
    hand = results["hand"]
    for name in names:
        times = results[name]
        excess = statistics.median(t - h for t, h in zip(times, hand, strict=True))
        spread = f"{min(times) * 1e6:.1f}-{max(times) * 1e6:.1f}"
        print(
            f"{name:16} {statistics.median(times) * 1e6:10.1f} {spread:>16} {excess * 1e6:+16.1f}"
        )
    for name, rounds in RUN_CALLS.items():
        medians = [m for m, _ in rounds]
        means = [m for _, m in rounds]
        print(
            f"{name}: training thread's time in Run's calls (two value() + update()) per "
            f"update: median {statistics.median(medians):.2f} us (rounds: "
            + ", ".join(f"{c:.2f}" for c in medians)
            + f"); mean {statistics.median(means):.2f} us (rounds: "
            + ", ".join(f"{c:.2f}" for c in means)
            + ")"
        )


if __name__ == "__main__":
    main()
