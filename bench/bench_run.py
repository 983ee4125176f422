"""Per-update cost of globalstep.Run inside a real torch loop, beside a hand loop and peers.

Every contender trains the same trivial model (``nn.Linear(32, 1)``, a fixed batch of 64,
SGD) for ``--n`` updates; only the loop is timed (not start-up or the final save). The
contenders, run round-robin for ``--rounds`` rounds:

- ``hand``: the bare loop with the learning rate from an inline cosine formula.
- ``run``: the same loop with ``globalstep.Run`` doing the work of issue 8's point 7: two
  schedules read per update (``run.value``), ``run.update(loss=<tensor>, lr=lr)`` logging
  two scalars (TensorBoard + JSONL), checking the save trigger (which never fires) and the
  progress display's trigger (a line every 100 steps, to /dev/null).
- ``run+ckpt``: as ``run``, plus an async checkpoint every 100 updates of the model's
  weights (the save's thread fsyncs the logs before it commits).
- ``run+ckpt1000``: the same with a checkpoint every 1,000 updates.
- ``hand+files``: the hand loop, and a thread that every 100 updates makes the file
  system calls of a crash-safe save of this state, with no globalstep code (the log
  files' fsyncs, three small files fsynced, a directory fsync, the rename, the parent's
  fsync, the retention's deletion): the floor that such checkpoints put under
  ``run+ckpt`` on this machine.
- ``ignite``: ignite's ``Engine`` with a handler every 100 iterations.
- ``lightning``: Lightning's ``Trainer``, bare (no logger, checkpoint or progress bar).
- ``lightning+log``: with its TensorBoard logger and ``self.log`` of the loss and the rate.
- ``lightning+full``: with the logger, the progress bar and a ``ModelCheckpoint`` every
  100 steps.

The timed part of the Run contenders ends once the writer has written every point logged
(``flush``, no fsync): its background thread writes every 2 s, longer than a round lasts,
and a long run pays for every point.

For each contender it prints the median wall time per update over the rounds, the spread
(min-max), the median of its per-round excess over the hand loop of the same round, and the
same two for the process's CPU time (all threads: the training thread, the writer's and
the checkpoints' background threads), which a loaded machine's preemption does not
inflate. For ``run`` and ``run+ckpt`` it also prints the training thread's own time in
Run's calls (the two ``value`` calls and ``update``, the loss tensor passed as it is),
timed around them with ``perf_counter_ns`` (and ``thread_time_ns``) inside the loop, less
the same timers' cost read in place by the hand loop of the round (which times two empty
spans at the same places): the median over all updates, the mean (which holds the saves'
copies and every wait for the GIL or the CPU), the mean in thread CPU time, and the CPU
time of globalstep's background threads (the writer's, the saves') per update.

Run: `.venv/bin/python bench/bench_run.py [--n 2000] [--rounds 5] [--only hand,run]`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import statistics
import sys
import tempfile
import threading
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


Cost = tuple[float, float]
"""Seconds per update: (wall time, CPU time of the whole process, all threads)."""


def _now() -> Cost:
    return time.perf_counter(), time.process_time()


def _per_update(start: Cost, end: Cost, n: int) -> Cost:
    return (end[0] - start[0]) / n, (end[1] - start[1]) / n


def bench_hand(n: int, directory: str) -> Cost:
    """The bare loop; the rate from an inline formula."""
    model, optimizer, x, y = _setup()
    loss_fn = nn.functional.mse_loss
    group = optimizer.param_groups[0]
    spans, cpus = [], []
    wall, cpu = time.perf_counter_ns, time.thread_time_ns
    start = _now()
    for step in range(n):
        # The timers run's loop reads, around nothing: their cost in place.
        c0 = cpu()
        t0 = wall()
        t1 = wall()
        c1 = cpu()
        group["lr"] = _cosine(step, n)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        c2 = cpu()
        t2 = wall()
        t3 = wall()
        c3 = cpu()
        spans.append((t1 - t0) + (t3 - t2))
        cpus.append((c1 - c0) + (c3 - c2))
    cost = _per_update(start, _now(), n)
    EMPTY_SPANS.append((statistics.median(spans), statistics.fmean(cpus)))
    return cost


# contender: per round, (median and mean wall us of Run's calls per update, their mean
# thread CPU us, the background threads' CPU us per update)
RUN_CALLS: dict[str, list[tuple[float, float, float, float]]] = {}
EMPTY_SPANS: list[tuple[float, float]] = []  # per round: the hand loop's empty spans, ns


def _span_cost_ns() -> tuple[float, float]:
    """The (median wall, mean thread CPU) ns of the loop's two timed spans around nothing,
    outside any loop (used only when no hand loop ran first)."""
    wall, cpu = time.perf_counter_ns, time.thread_time_ns
    walls, cpus = [], []
    for _ in range(2001):
        c0 = cpu()
        t0 = wall()
        t1 = wall()
        c1 = cpu()
        walls.append(t1 - t0)
        cpus.append(c1 - c0)
    return 2 * statistics.median(walls), 2 * statistics.fmean(cpus)


def _background_cpu_ns(threads: list[threading.Thread]) -> int:
    """The CPU time the given threads have used so far."""
    total = 0
    for thread in threads:
        if thread.ident is not None and thread.is_alive():
            with contextlib.suppress(OSError):
                total += time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))
    return total


def _globalstep_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("globalstep-")]


def _bench_run(n: int, directory: str, *, save_every: int | None) -> Cost:
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
        save_every=save_every or 10**12,
        progress=True,
        log_every=100,
        stream=sink,
        handle_signals=False,
        checkpoint_options={"async_save": True, "max_to_keep": 2},
    )
    weights = model.weight.detach().numpy()  # shares memory with the parameter
    run.restore({"weights": weights})
    _ = run.writer
    background = _background_cpu_ns(_globalstep_threads())
    calls, cpus = [], []
    wall, cpu = time.perf_counter_ns, time.thread_time_ns
    start = _now()
    for _ in range(n):
        c0 = cpu()
        t0 = wall()
        lr = run.value("lr")
        wd = run.value("wd")
        t1 = wall()
        c1 = cpu()
        group["lr"] = lr
        group["weight_decay"] = wd
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        c2 = cpu()
        t2 = wall()
        run.update(loss=loss, lr=lr)  # the loss tensor as it is: read off the thread
        t3 = wall()
        c3 = cpu()
        calls.append((t1 - t0) + (t3 - t2))
        cpus.append((c1 - c0) + (c3 - c2))
    # The points not written yet are written in the timed part: the writer drains every 2
    # s, longer than a round's loop lasts, and a long run pays for every point's drain.
    c0 = cpu()
    run.writer.flush()
    elapsed = _per_update(start, _now(), n)
    # What the loop left to the background: the save in flight.
    run.writer.sync_points()
    run.checkpoints.wait()
    leftover = cpu() - c0
    background = _background_cpu_ns(_globalstep_threads()) - background + leftover
    run.close()
    sink.close()
    # The timers' own cost, read in place by the hand loop of this round (it runs first).
    wall_cost, cpu_cost = EMPTY_SPANS[-1] if EMPTY_SPANS else _span_cost_ns()
    name = "run" if save_every is None else "run+ckpt" if save_every == 100 else "run+ckpt1000"
    RUN_CALLS.setdefault(name, []).append(
        (
            (statistics.median(calls) - wall_cost) / 1e3,
            (statistics.fmean(calls) - wall_cost) / 1e3,
            (statistics.fmean(cpus) - cpu_cost) / 1e3,
            background / n / 1e3,
        )
    )
    return elapsed


def bench_run(n: int, directory: str) -> Cost:
    """Run: two schedules read, two scalars logged, two triggers checked per update."""
    return _bench_run(n, directory, save_every=None)


def bench_run_ckpt(n: int, directory: str) -> Cost:
    """As bench_run, plus an async checkpoint every 100 updates."""
    return _bench_run(n, directory, save_every=100)


def bench_run_ckpt1000(n: int, directory: str) -> Cost:
    """As bench_run, plus an async checkpoint every 1,000 updates."""
    return _bench_run(n, directory, save_every=1000)


def _fsynced(path: str, data: bytes, flags: int = os.O_WRONLY | os.O_CREAT | os.O_EXCL) -> None:
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _bare_save(directory: str, number: int, lines: bytes) -> None:
    """What a crash-safe save of this state asks of the file system, with no code of
    ours: the two log files' new lines fsynced, three small files written and fsynced in
    a temporary directory, its fsync, the rename, the parent's fsync, and the checkpoint
    before the previous one deleted (renamed away, the parent fsynced, removed)."""
    for name in ("events", "metrics.jsonl"):
        _fsynced(os.path.join(directory, name), lines, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    staging = os.path.join(directory, f".tmp-{number}")
    os.mkdir(staging)
    for name, size in (("arrays.bin", 160), ("state.json", 900), ("COMMIT", 120)):
        _fsynced(os.path.join(staging, name), b"x" * size)
    _fsync_dir(staging)
    os.rename(staging, os.path.join(directory, f"step-{number}"))
    _fsync_dir(directory)
    old = os.path.join(directory, f"step-{number - 200}")
    if os.path.isdir(old):
        trash = os.path.join(directory, f".trash-{number}")
        os.rename(old, trash)
        _fsync_dir(directory)
        for name in os.listdir(trash):
            os.unlink(os.path.join(trash, name))
        os.rmdir(trash)


def bench_hand_files(n: int, directory: str) -> Cost:
    """The hand loop, and a thread that makes a bare save's file system calls every 100
    updates (``_bare_save``): what crash-safe checkpoints cost this machine's loop."""
    model, optimizer, x, y = _setup()
    loss_fn = nn.functional.mse_loss
    group = optimizer.param_groups[0]
    due = threading.Semaphore(0)
    lines = b'{"step": 100, "wall_time": 1764590000.123456, "tag": "loss", "value": 0.5}\n' * 200

    def saves() -> None:
        number = 0
        while True:
            due.acquire()
            number += 100
            if number > n:
                return
            _bare_save(directory, number, lines)

    thread = threading.Thread(target=saves)
    thread.start()
    start = _now()
    for step in range(n):
        group["lr"] = _cosine(step, n)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if step % 100 == 99:
            due.release()
    cost = _per_update(start, _now(), n)
    due.release()
    thread.join()
    return cost


def bench_ignite(n: int, directory: str) -> Cost:
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
    times: dict[str, Cost] = {}
    engine.add_event_handler(
        Events.ITERATION_COMPLETED(every=100), lambda e: seen.append(e.state.iteration)
    )
    engine.add_event_handler(Events.STARTED, lambda e: times.setdefault("start", _now()))
    engine.add_event_handler(Events.COMPLETED, lambda e: times.setdefault("end", _now()))
    engine.run(range(n), max_epochs=1)
    return _per_update(times["start"], times["end"], n)


def _bench_lightning(n: int, directory: str, *, log: bool, full: bool) -> Cost:
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

    times: dict[str, Cost] = {}

    class Timer(Callback):
        def on_train_start(self, trainer: object, module: object) -> None:
            times["start"] = _now()

        def on_train_end(self, trainer: object, module: object) -> None:
            times["end"] = _now()

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
    return _per_update(times["start"], times["end"], n)


def bench_lightning(n: int, directory: str) -> Cost:
    """Lightning's Trainer, bare."""
    return _bench_lightning(n, directory, log=False, full=False)


def bench_lightning_log(n: int, directory: str) -> Cost:
    """Lightning with its TensorBoard logger."""
    return _bench_lightning(n, directory, log=True, full=False)


def bench_lightning_full(n: int, directory: str) -> Cost:
    """Lightning with logger, progress bar and a ModelCheckpoint every 100 steps."""
    return _bench_lightning(n, directory, log=True, full=True)


CONTENDERS: dict[str, Callable[[int, str], Cost]] = {
    "hand": bench_hand,
    "hand+files": bench_hand_files,
    "run": bench_run,
    "run+ckpt": bench_run_ckpt,
    "run+ckpt1000": bench_run_ckpt1000,
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
    results: dict[str, list[Cost]] = {name: [] for name in names}
    before = os.getloadavg()[0]
    for _ in range(args.rounds):
        for name in names:
            with tempfile.TemporaryDirectory() as directory:
                results[name].append(CONTENDERS[name](args.n, directory))
    print(
        f"{args.n} updates x {args.rounds} rounds, load average {before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after ({os.cpu_count()} CPUs)"
    )
    print(
        f"{'contender':16} {'wall us/update':>15} {'spread':>16} {'excess':>9} "
        f"{'CPU us/update':>14} {'CPU excess':>11}"
    )
    hand = results["hand"]
    for name in names:
        costs = results[name]
        walls = [c[0] for c in costs]
        excess = statistics.median(c[0] - h[0] for c, h in zip(costs, hand, strict=True))
        cpu_excess = statistics.median(c[1] - h[1] for c, h in zip(costs, hand, strict=True))
        spread = f"{min(walls) * 1e6:.1f}-{max(walls) * 1e6:.1f}"
        cpu = statistics.median(c[1] for c in costs)
        print(
            f"{name:16} {statistics.median(walls) * 1e6:15.1f} {spread:>16} "
            f"{excess * 1e6:+9.1f} {cpu * 1e6:14.1f} {cpu_excess * 1e6:+11.1f}"
        )
    for name, rounds in RUN_CALLS.items():
        columns = list(zip(*rounds, strict=True))
        median, mean, cpu, background = (statistics.median(c) for c in columns)
        print(
            f"{name}: Run's calls (two value() + update()) on the training thread, per update: "
            f"median {median:.2f} us (rounds: {', '.join(f'{c:.2f}' for c in columns[0])}), "
            f"mean {mean:.2f} us wall / {cpu:.2f} us CPU; background threads "
            f"{background:.2f} us CPU; averaged over the run, training thread CPU + "
            f"background: {cpu + background:.2f} us (rounds: "
            + ", ".join(f"{c + b:.2f}" for c, b in zip(columns[2], columns[3], strict=True))
            + ")"
        )


if __name__ == "__main__":
    main()
