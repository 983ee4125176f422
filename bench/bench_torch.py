"""Per-update cost of globalstep's torch integration inside a real torch training loop.

The same small model, data and SGD update run under five drivers, interleaved round-robin:

* ``hand``: a plain loop with an inline cosine formula written into ``param_groups`` and a
  counter, logging ``loss.item()`` every 100 updates;
* ``globalstep``: ``attach(optimizer, clock, CosineDecay)`` (the rate set and the clock
  ticked by the optimizer's step hooks), two triggers (``every(100)``, ``every(1000)``) and
  two scalars per update through a JSONL ``SummaryWriter`` (the loss tensor as it is, read
  on the writer's thread);
* ``standalone``: the README's pattern without ``Run``: ``attach``, a ``SummaryWriter`` on
  the clock (event files and JSONL where the extra is installed) and a
  ``CheckpointManager(save_every=100)`` whose ``maybe_save(clock, state)`` runs after every
  update; each save first makes the writer's points durable (a flush and an fsync of its
  files, :mod:`globalstep._durability`), timed in place where that module exists (not
  before issue 24, so the same driver on an older checkout gives the cost without it);
* ``ignite``: an ignite ``Engine`` with a handler every 100 iterations;
* ``lightning``: a bare Lightning ``Trainer`` (no logger, progress bar, checkpointing or
  model summary), its per-update cost taken from two run lengths so set-up is excluded.

Two measures of globalstep's share per update: the time spent in its own code inside the
loop, per update (the step hooks, timed by marker hooks registered around them, plus the
triggers and the scalars, timed in place, less the timer's own cost), as its median and
mean over the updates in wall time, and its median in thread CPU time; the CPU time of
the writer's background thread per update (encoding and writing the points, reading the
loss tensors); the median less that of the same timers and marker hooks with nothing
between them, timed in place in the same round (their cold cost after torch's step is
several times their cost measured alone); and the whole loop's time minus the hand
loop's (noisy on a loaded machine: the difference of two numbers of ~100 us or more).

``--parts`` prints only the profile of that share: the driver run with one part of
globalstep's work at a time (attach's step pre-hook, its post-hook, the two triggers, the
two scalars), each part's median span less the empty driver's, and all of them together.

Run: ``python bench/bench_torch.py [--rounds 5] [--updates 2000] [--no-peers | --parts]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import math
import os
import statistics
import tempfile
import threading
import time
import warnings
from collections.abc import Callable

import torch

from globalstep import CheckpointManager, Clock, SummaryWriter, every
from globalstep.integrations.torch import attach
from globalstep.schedules import CosineDecay
from globalstep.summary import available_formats

BATCH, WIDTH, BASE_LR = 32, 32, 0.05
SAVE_EVERY = 100


def _setup(n: int, seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer, list]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 1)
    )
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR, momentum=0.9)
    data = [(torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)) for _ in range(64)]
    return model, opt, [data[i % 64] for i in range(n)]


def _loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(x), y)


def run_hand(n: int) -> dict[str, float]:
    model, opt, batches = _setup(n)
    step, logs = 0, []
    start = time.perf_counter()
    for x, y in batches:
        lr = BASE_LR * 0.5 * (1 + math.cos(math.pi * min(step, n) / n))
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad()
        loss = _loss(model, x, y)
        loss.backward()
        opt.step()
        step += 1  # noqa: SIM113 (the hand loop's own step counter is what is measured)
        if step % 100 == 0:
            logs.append((step, loss.item()))
    return {"total": time.perf_counter() - start}


def _timer_cost(timer: Callable[[], int]) -> float:
    """The median ns one ``timer() ... timer()`` span reads when nothing runs in it."""
    spans = []
    for _ in range(2001):
        t0 = timer()
        spans.append(timer() - t0)
    return statistics.median(spans)


PARTS = ("pre-hook", "post-hook", "triggers", "scalars")
"""The parts of globalstep's share, timed one at a time by ``--parts``."""


def run_globalstep(
    n: int,
    logdir: str,
    timer: Callable[[], int] = time.perf_counter_ns,
    *,
    empty: bool = False,
    parts: tuple[str, ...] = PARTS,
) -> dict[str, float]:
    """The globalstep driver; ``empty=True`` keeps its timers and marker hooks but runs
    none of globalstep's work in the spans (the clock ticks outside them): the timing's
    own cost in place, subtracted from the driver's spans. ``parts`` runs only some of the
    work (attach's step pre-hook that sets the rate, its post-hook that ticks the clock,
    the two triggers, the two scalars); the clock ticks outside the spans where the
    post-hook is left out."""
    if empty:
        parts = ()
    model, opt, batches = _setup(n)
    clock = Clock()
    hooked = "pre-hook" in parts or "post-hook" in parts
    attachment = attach(opt, clock, CosineDecay(BASE_LR, n)) if hooked else None
    if attachment is not None:
        # A part left out: its hook removed (detach() removes a handle once more, harmlessly).
        for part, handle in zip(("pre-hook", "post-hook"), attachment._handles, strict=True):
            if part not in parts:
                handle.remove()
    ticks = "post-hook" not in parts
    log_scalars, check_triggers = "scalars" in parts, "triggers" in parts
    # Marker hooks around attach's own: the time between them is globalstep's hook work.
    marks = {"t": 0, "hooks": 0}

    def open_mark(*_: object) -> None:
        marks["t"] = timer()

    def close_mark(*_: object) -> None:
        marks["hooks"] += timer() - marks["t"]

    pre_handles = [opt.register_step_pre_hook(close_mark)]  # after attach's pre-hook
    post_handles = [opt.register_step_post_hook(close_mark)]  # after attach's post-hook
    # The opening marks go in front of attach's hooks in torch's ordered hook dicts.
    pre_open = opt.register_step_pre_hook(open_mark)
    post_open = opt.register_step_post_hook(open_mark)
    opt._optimizer_step_pre_hooks.move_to_end(pre_open.id, last=False)
    opt._optimizer_step_post_hooks.move_to_end(post_open.id, last=False)
    writer = SummaryWriter(logdir, clock=clock, formats=("jsonl",), flush_seconds=60.0)
    log, save = every(100), every(1000)
    spans = []
    logs = []
    writer_thread = writer._thread
    background = _thread_cpu_ns(writer_thread)
    start = time.perf_counter()
    for x, y in batches:
        opt.zero_grad()
        loss = _loss(model, x, y)
        loss.backward()
        marks["hooks"] = 0
        opt.step()  # sets the rate of update clock.step, then ticks the clock
        if ticks:
            clock.tick()
        t0 = timer()
        if log_scalars:  # the loss tensor as it is: read on the writer's thread
            writer.scalars({"loss": loss, "lr": opt.param_groups[0]["lr"]})
        if check_triggers:
            if log.should_fire(clock):
                logs.append(clock.step)
            if save.should_fire(clock):
                logs.append(-clock.step)
        spans.append(timer() - t0 + marks["hooks"])
    total = time.perf_counter() - start
    # The writer's work for this loop: its thread's CPU, and what it had still to write.
    c0 = time.thread_time_ns()
    writer.flush()
    background = _thread_cpu_ns(writer_thread) - background + time.thread_time_ns() - c0
    writer.close()
    for handle in [*pre_handles, *post_handles, pre_open, post_open]:
        handle.remove()
    if attachment is not None:
        attachment.detach()
    assert clock.step == n
    cost = 3 * _timer_cost(timer)  # three spans per update: pre-hook, post-hook, inline
    return {
        "total": total,
        "direct_median": (statistics.median(spans) - cost) * 1e-9,
        "direct_mean": (statistics.fmean(spans) - cost) * 1e-9,
        "background": background / n * 1e-9,
    }


def run_standalone(
    n: int, directory: str, timer: Callable[[], int] = time.perf_counter_ns
) -> dict[str, float]:
    """The standalone driver: the writer and the manager used alone, as README.md shows;
    the span timed per update is ``writer.scalars(...)`` plus ``manager.maybe_save(...)``
    (a checkpoint every ``SAVE_EVERY`` updates, the writers' sync before it included)."""
    model, opt, batches = _setup(n)
    clock = Clock()
    attachment = attach(opt, clock, CosineDecay(BASE_LR, n))
    writer = SummaryWriter(
        os.path.join(directory, "logs"), clock=clock, formats=available_formats()
    )
    manager = CheckpointManager(
        os.path.join(directory, "ckpt"), max_to_keep=2, save_every=SAVE_EVERY
    )
    state = {"clock": clock, "model": model, "opt": opt}
    synced: list[int] = []
    try:
        from globalstep import _durability
    except ImportError:  # a checkout before issue 24: no sync before a commit
        _durability = None  # type: ignore[assignment]
    real_sync = None if _durability is None else _durability.sync_registered
    if real_sync is not None:

        def timed_sync() -> None:
            t0 = timer()
            real_sync()
            synced.append(timer() - t0)

        _durability.sync_registered = timed_sync  # type: ignore[union-attr]
    spans = []
    try:
        start = time.perf_counter()
        for x, y in batches:
            opt.zero_grad()
            loss = _loss(model, x, y)
            loss.backward()
            opt.step()  # sets the rate of update clock.step, then ticks the clock
            t0 = timer()
            writer.scalars({"loss": loss, "lr": opt.param_groups[0]["lr"]})
            manager.maybe_save(clock, state)
            spans.append(timer() - t0)
        total = time.perf_counter() - start
    finally:
        if real_sync is not None:
            _durability.sync_registered = real_sync  # type: ignore[union-attr]
    saves = len(manager.steps())
    writer.close()
    manager.close()
    attachment.detach()
    assert clock.step == n
    assert saves == min(2, n // SAVE_EVERY)
    return {
        "total": total,
        "span_median": statistics.median(spans) * 1e-9,
        "span_mean": statistics.fmean(spans) * 1e-9,
        "sync": sum(synced) / n * 1e-9 if real_sync is not None else math.nan,
        "sync_per_save": statistics.median(synced) * 1e-9 if synced else math.nan,
    }


def _thread_cpu_ns(thread: threading.Thread) -> int:
    """The CPU time another thread has used so far."""
    assert thread.ident is not None
    return time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))


def run_ignite(n: int) -> dict[str, float]:
    from ignite.engine import Engine, Events

    model, opt, batches = _setup(n)
    logs = []

    def update(engine: Engine, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        x, y = batch
        opt.zero_grad()
        loss = _loss(model, x, y)
        loss.backward()
        opt.step()
        return loss

    engine = Engine(update)

    @engine.on(Events.ITERATION_COMPLETED(every=100))
    def _log(engine: Engine) -> None:
        logs.append((engine.state.iteration, engine.state.output.item()))

    start = time.perf_counter()
    engine.run(batches, max_epochs=1)
    return {"total": time.perf_counter() - start}


def run_lightning(n: int) -> dict[str, float]:
    import lightning

    model, _, batches = _setup(n)

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
            x, y = batch
            return _loss(self.net, x, y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.net.parameters(), lr=BASE_LR, momentum=0.9)

    loader = torch.utils.data.DataLoader(batches, batch_size=None)
    trainer = lightning.Trainer(
        max_steps=n,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
    )
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        trainer.fit(Module(), loader)
    return {"total": time.perf_counter() - start}


def profile_parts(rounds: int, n: int) -> None:
    """Prints the in-place cost of each part of globalstep's share (the driver run with
    that part alone, its median span less the empty driver's, per round), and of all of
    them together: where the share's time goes."""
    variants: dict[str, tuple[str, ...]] = {part: (part,) for part in PARTS}
    variants["all"] = PARTS
    medians: dict[str, list[float]] = {name: [] for name in ["empty", *variants]}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for name in medians:
                logdir = os.path.join(tmp, f"{name}{r}")
                if name == "empty":
                    result = run_globalstep(n, logdir, empty=True)
                else:
                    result = run_globalstep(n, logdir, parts=variants[name])
                medians[name].append(result["direct_median"])
    print(f"load: {os.getloadavg()}, {rounds} rounds x {n} updates, torch threads 1")
    print("each part timed alone in place, median span less the empty driver's:")
    empty = medians.pop("empty")
    for name, values in medians.items():
        net = [(v - e) for v, e in zip(values, empty, strict=True)]
        rounds_us = ", ".join(f"{x * 1e6:.2f}" for x in net)
        print(f"  {name:<10} {statistics.median(net) * 1e6:6.2f} us  ({rounds_us})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--no-peers", action="store_true", help="skip ignite and Lightning")
    parser.add_argument(
        "--parts",
        action="store_true",
        help="only the profile: each part of globalstep's share timed alone in place",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    if args.parts:
        profile_parts(args.rounds, args.updates)
        return
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    n = args.updates
    per: dict[str, list[float]] = {
        "hand": [],
        "globalstep": [],
        "standalone": [],
        "ignite": [],
        "lightning": [],
    }
    alone: dict[str, list[float]] = {"span_median": [], "span_mean": [], "sync": []}
    per_save: list[float] = []
    direct: list[float] = []
    direct_mean: list[float] = []
    cpu: list[float] = []
    background: list[float] = []
    net: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            per["hand"].append(run_hand(n)["total"] / n)
            empty = run_globalstep(n, os.path.join(tmp, f"empty{r}"), empty=True)
            gs = run_globalstep(n, os.path.join(tmp, f"run{r}"))
            net.append(gs["direct_median"] - empty["direct_median"])
            per["globalstep"].append(gs["total"] / n)
            direct.append(gs["direct_median"])
            direct_mean.append(gs["direct_mean"])
            background.append(gs["background"])
            cpu.append(
                run_globalstep(n, os.path.join(tmp, f"cpu{r}"), time.thread_time_ns)[
                    "direct_median"
                ]
            )
            standalone = run_standalone(n, os.path.join(tmp, f"alone{r}"))
            per["standalone"].append(standalone["total"] / n)
            for key, values in alone.items():
                values.append(standalone[key])
            per_save.append(standalone["sync_per_save"])
            if not args.no_peers:
                per["ignite"].append(run_ignite(n)["total"] / n)
                short, long_ = n // 4, n // 4 + n // 2
                a, b = run_lightning(short)["total"], run_lightning(long_)["total"]
                per["lightning"].append((b - a) / (long_ - short))

    def us(values: list[float]) -> str:
        med = statistics.median(values) * 1e6
        lo, hi = min(values) * 1e6, max(values) * 1e6
        return f"{med:8.1f} us  [{lo:.1f} .. {hi:.1f}]"

    print(f"load: {os.getloadavg()}, {args.rounds} rounds x {n} updates, torch threads 1")
    print(f"{'driver':<12} {'per update (median [min .. max])':<36} {'minus hand (median)'}")
    hand = per["hand"]
    for name, values in per.items():
        if not values:
            continue
        extra = statistics.median([v - h for v, h in zip(values, hand, strict=True)]) * 1e6
        print(f"{name:<12} {us(values):<36} {extra:+8.1f} us")
    print("globalstep share per update, timed in place (hooks + triggers + 2 scalars):")
    print(f"  median over updates: {us(direct)}")
    print(f"  mean over updates:   {us(direct_mean)}  (GIL waits on the writer thread included)")
    print(f"  median, thread CPU time: {us(cpu)}  (preemption and GIL waits excluded)")
    print(f"  median, less the same spans timed around nothing in place: {us(net)}")
    print(f"  the writer's thread, CPU time per update: {us(background)}")
    print(
        f"standalone (writer + manager.maybe_save, a checkpoint every {SAVE_EVERY} updates, "
        "no Run), timed in place (scalars + maybe_save):"
    )
    print(f"  median over updates: {us(alone['span_median'])}")
    print(f"  mean over updates:   {us(alone['span_mean'])}  (the saves included)")
    if all(math.isnan(v) for v in alone["sync"]):
        print("  the writers' sync before each commit: none in this checkout")
    else:
        print(f"  of it, the writers' sync before each commit, per update: {us(alone['sync'])}")
        print(f"  the same, per save: {us(per_save)}")


if __name__ == "__main__":
    main()
