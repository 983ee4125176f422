"""Per-update cost of the tracker formats (MLflow, W&B) in a torch loop, and each one's lag.

Every contender trains the same trivial model (``nn.Linear(32, 1)``, a fixed batch of 64,
SGD) for ``--n`` updates through ``globalstep.Run`` (``run.update(loss=..., lr=...)``, a
checkpoint every ``--save-every`` updates). Only the loop is timed (not start-up, the
final save or the close); the timing starts once the tracker's run is open (the tool
imported, its run started or continued: a one-time cost, several seconds of W&B's init).
The tools (``--tools``, both by default):

- ``mlflow``: one real MLflow tracking server on 127.0.0.1 (MLflow's uvicorn app over
  SQLite, as the tests start it), in its own process.
- ``wandb``: W&B in offline mode (``WANDB_MODE=offline``: no network, W&B's service
  process writes its transaction log as it would before an upload).

The contenders, round-robin for ``--rounds`` rounds:

- ``files``: TensorBoard + JSONL only.
- ``<tool>``: TensorBoard + JSONL + the tool's format: points go to the tool from the
  tracker's sender thread once a checkpoint covers them (W&B's: each send confirmed in
  its transaction log).
- ``<tool>-by-hand`` (with ``--by-hand``): TensorBoard + JSONL, and the tool's own call in
  the loop at every update, as a user without the format would: ``mlflow.log_metric`` of
  the loss and the rate on an active run (its default synchronous logging, two HTTP
  requests an update: about 30 ms), ``wandb.log({...}, step=run.step)``.

It prints, per contender, the median wall time per update over the rounds and the ratio to
``files``; and the CPU time per update from the loop's start until the tracker has sent
every point of the loop (its backend's ``sent`` count: a private attribute, as
bench_torch reads the writer's thread): this process's (every thread: training, the
writer's, the tracker's sender) and its child processes' (the MLflow server, W&B's
service; read from ``/proc``, Linux only), with the excess over ``files`` per point sent
(two an update); and, in the same window, the CPU of this process's threads but the
training thread (the writer's, the tracker's sender, the tool's own), per point. On a
loaded machine the CPU times move less than the wall times. Then
each tool's lag in its last round: a side thread samples, every 0.1 s, the run's step
and the newest step of ``loss`` the tool holds (MLflow: its client's metric
history; W&B: the transaction log, read with globalstep's own reader); the lag in steps
(mean, max) and as time at the loop's rate.

Run: `WANDB_SILENT=true PYTHONPATH=src .venv/bin/python bench/bench_trackers.py [--n 2000]
[--rounds 3] [--save-every 100] [--tools mlflow,wandb] [--by-hand]`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "summary"))

from globalstep import Run

EXPERIMENT = "bench-trackers"


def _by_hand(tool: str, directory: str) -> tuple[Any, Callable[[float, int], None]]:
    """The tool's run started by hand, and the call that logs an update's two values."""
    if tool == "mlflow":
        import mlflow

        def log_mlflow(loss: float, step: int) -> None:
            mlflow.log_metric("loss", loss, step=step)
            mlflow.log_metric("lr", 0.01, step=step)

        return mlflow.start_run(run_name=f"by-hand-{directory}"), log_mlflow
    import wandb

    def log_wandb(loss: float, step: int) -> None:
        wandb.log({"loss": loss, "lr": 0.01}, step=step)

    return wandb.init(dir=directory), log_wandb


def _children_cpu() -> float:
    """The CPU seconds used so far by this process's descendants (0 without ``/proc``)."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as file:
                fields = file.read().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(name)] = int(fields[1])
        used[int(name)] = (int(fields[11]) + int(fields[12])) / tick
    total, me = 0.0, os.getpid()
    for pid in used:
        parent = parents.get(pid)
        while parent is not None and parent not in (me, 0, 1):
            parent = parents.get(parent)
        total += used[pid] if parent == me else 0.0
    return total


def _threads_cpu() -> dict[int, float]:
    """The CPU seconds used so far by each thread but the main one and the lag sampler."""
    used = {}
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.name == "bench-lag":
            continue
        try:
            used[thread.native_id or 0] = time.clock_gettime(
                time.pthread_getcpuclockid(thread.ident or 0)
            )
        except (OSError, ValueError):  # it ended meanwhile
            continue
    return used


def _loop(
    directory: str, n: int, save_every: int, contender: str, watch: dict[str, int] | None
) -> tuple[float, float, float, float]:
    """Trains n updates; returns the loop's wall time per update, and the CPU time per
    update of this process, of its children and of its threads but the training thread,
    from the loop's start until the tracker has sent every point."""
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(64, 32), torch.randn(64, 1)
    tool, _, how = contender.partition("-")
    formats = ("tensorboard", "jsonl", tool) if tool != "files" and not how else None
    options = {"formats": formats} if formats else {}
    by_hand, log = _by_hand(tool, directory) if how else (contextlib.nullcontext(), None)
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
        for backend in run.writer._sink.backends:  # and the tool's run: its start-up
            while getattr(backend, "run_id", "") is None:  # (import, init) is not timed
                time.sleep(0.01)
        cpu, children, threads = time.process_time(), _children_cpu(), _threads_cpu()
        started = time.perf_counter()
        for _ in range(n):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            opt.step()
            run.update(loss=loss, lr=0.01)
            if log is not None:
                log(loss.item(), run.step)
            if watch is not None:
                watch["step"] = run.step
        run.writer.flush()
        seconds = (time.perf_counter() - started) / n
        if watch is not None:
            watch["done"] = 1  # the lag is sampled while training only
        for backend in run.writer._sink.backends:  # the tracker's sender catches up
            while getattr(backend, "sent", 2 * n) < 2 * n:
                time.sleep(0.01)
        cpu = (time.process_time() - cpu) / n
        children = (_children_cpu() - children) / n
        after = _threads_cpu()
        background = sum(used - threads.get(ident, 0.0) for ident, used in after.items()) / n
    return seconds, cpu, children, background


def _mlflow_newest(directory: str) -> Callable[[], int | None]:
    """What reads the newest ``loss`` step MLflow holds for the run of ``directory``
    (None until the run exists)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    logdir = os.path.abspath(os.path.join(directory, "logs"))
    found: list[str] = []

    def newest() -> int | None:
        if not found:
            runs = client.search_runs(
                [client.get_experiment_by_name(EXPERIMENT).experiment_id],
                filter_string=f"tags.`globalstep.logdir` = '{logdir}'",
            )
            found.extend(r.info.run_id for r in runs[:1])
        if not found:
            return None
        history = client.get_metric_history(found[0], "loss")
        return max((m.step for m in history), default=0)

    return newest


def _wandb_newest(directory: str) -> Callable[[], int | None]:
    """What reads the newest global step W&B's transaction log holds for ``directory``
    (None until the log exists)."""
    from globalstep.summary._wandb import STEP_METRIC, history_rows, read_records

    logs = pathlib.Path(directory, "logs", "wandb")
    state: dict[str, Any] = {"path": None, "offset": 0, "newest": 0}

    def newest() -> int | None:
        if state["path"] is None:
            found = sorted(logs.glob("offline-run-*/run-*.wandb"))
            state["path"] = str(found[0]) if found else None
        if state["path"] is None:
            return None
        log = read_records(state["path"], state["offset"])
        state["offset"] = log.end
        for row in history_rows(log.records):
            state["newest"] = max(state["newest"], row.get(STEP_METRIC, 0))
        return int(state["newest"])

    return newest


_NEWEST = {"mlflow": _mlflow_newest, "wandb": _wandb_newest}


def _lag(
    newest: Callable[[], int | None],
    watch: dict[str, int],
    stop: threading.Event,
    out: list[tuple[float, int, int]],
) -> None:
    """Samples (time, run's step, the tool's newest step) every 0.1 s until stopped."""
    while not stop.wait(0.1):
        held = newest()
        if held is not None and not watch.get("done"):
            out.append((time.monotonic(), watch.get("step", 0), held))


def _report(tool: str, samples: list[tuple[float, int, int]], rate: float) -> None:
    lags = [step - newest for _, step, newest in samples if step]
    if not lags:
        print(f"lag of {tool}: no sample while training")
        return
    print(
        f"lag of {tool} behind the run while training ({len(lags)} samples every 0.1 s): "
        f"mean {statistics.mean(lags):.0f} steps, max {max(lags)} steps; at this loop's "
        f"{rate * 1e6:.0f} us/update: mean {statistics.mean(lags) * rate * 1e3:.0f} ms, "
        f"max {max(lags) * rate * 1e3:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--save-every", type=int, default=100)
    parser.add_argument("--tools", default="mlflow,wandb", help="mlflow, wandb or both")
    parser.add_argument("--by-hand", action="store_true", help="also the tools called by hand")
    args = parser.parse_args()
    tools = [t for t in args.tools.split(",") if t]
    unknown = set(tools) - set(_NEWEST)
    if unknown or not tools:
        parser.error(f"--tools must name mlflow and/or wandb; got {args.tools!r}")
    root = pathlib.Path(tempfile.mkdtemp(prefix="bench-trackers-"))
    server = None
    if "mlflow" in tools:
        from mlflow_server import MlflowServer

        server = MlflowServer(root / "server")
        server.start()
        os.environ["MLFLOW_TRACKING_URI"] = server.uri
        os.environ["MLFLOW_EXPERIMENT_NAME"] = EXPERIMENT
        import mlflow

        mlflow.set_experiment(EXPERIMENT)
    if "wandb" in tools:
        os.environ["WANDB_MODE"] = "offline"
    contenders = ["files"]
    for tool in tools:
        contenders += [tool, f"{tool}-by-hand"] if args.by_hand else [tool]
    times: dict[str, list[float]] = {c: [] for c in contenders}
    cpus: dict[str, list[float]] = {c: [] for c in contenders}
    child_cpus: dict[str, list[float]] = {c: [] for c in contenders}
    thread_cpus: dict[str, list[float]] = {c: [] for c in contenders}
    samples: dict[str, list[tuple[float, int, int]]] = {t: [] for t in tools}
    try:
        for round_ in range(args.rounds):
            for contender in contenders:
                directory = str(root / f"{contender}-{round_}")
                probed = contender in tools and round_ == args.rounds - 1
                watch: dict[str, int] | None = {} if probed else None
                stop, sampler = threading.Event(), None
                if watch is not None:
                    sampler = threading.Thread(
                        name="bench-lag",
                        target=_lag,
                        args=(_NEWEST[contender](directory), watch, stop, samples[contender]),
                    )
                    sampler.start()
                wall, cpu, children, background = _loop(
                    directory, args.n, args.save_every, contender, watch
                )
                thread_cpus[contender].append(background)
                times[contender].append(wall)
                cpus[contender].append(cpu)
                child_cpus[contender].append(children)
                stop.set()
                if sampler is not None:
                    sampler.join()
    finally:
        if server is not None:
            server.stop()
    base = statistics.median(times["files"])
    print(
        f"{args.n} updates x {args.rounds} rounds, a checkpoint every {args.save_every}; "
        f"load: " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    for contender in contenders:
        median = statistics.median(times[contender])
        spread = f"{min(times[contender]) * 1e6:.0f}-{max(times[contender]) * 1e6:.0f}"
        print(
            f"{contender:14s} {median * 1e6:8.1f} us/update (min-max {spread})  "
            f"x{median / base:.2f} of files"
        )
    own, kids = statistics.median(cpus["files"]), statistics.median(child_cpus["files"])
    print(
        "CPU per update, loop until all sent (median): this process / its children; "
        "excess over files per point; this process's threads but training's, per point"
    )
    for contender in contenders:
        mine, theirs = statistics.median(cpus[contender]), statistics.median(child_cpus[contender])
        print(
            f"{contender:14s} {mine * 1e6:8.1f} / {theirs * 1e6:7.1f} us  "
            f"excess per point: {(mine - own) / 2 * 1e6:6.1f} / {(theirs - kids) / 2 * 1e6:6.1f} us"
            f"  threads: {statistics.median(thread_cpus[contender]) / 2 * 1e6:6.1f} us"
        )
    for tool in tools:
        _report(tool, samples[tool], times[tool][-1])


if __name__ == "__main__":
    main()
