"""Per-update cost of MLflow as a writer format in a torch loop, and the tracker's lag.

Every contender trains the same trivial model (``nn.Linear(32, 1)``, a fixed batch of 64,
SGD) for ``--n`` updates through ``globalstep.Run`` (``run.update(loss=..., lr=...)``, a
checkpoint every ``--save-every`` updates), against one real MLflow tracking server on
127.0.0.1 (MLflow's uvicorn app over SQLite, as the tests start it). Only the loop is
timed (not start-up, the final save or the close). The contenders, round-robin for
``--rounds`` rounds:

- ``files``: TensorBoard + JSONL only.
- ``mlflow``: TensorBoard + JSONL + ``"mlflow"``: points go to MLflow from the tracker's
  sender thread once a checkpoint covers them.
- ``by-hand``: TensorBoard + JSONL, and ``mlflow.log_metric`` of the loss and the rate
  called in the loop at every update (MLflow's own fluent API on an active run, its
  default synchronous logging), as a user without the format would.

It prints, per contender, the median wall time per update over the rounds and the ratio to
``files``. Then the lag of the ``mlflow`` contender's last round: a side thread samples,
every 0.1 s, the run's step and the newest step of ``loss`` that MLflow holds; the lag in
steps (mean, max) and as time at the loop's rate.

Run: `.venv/bin/python bench/bench_trackers.py [--n 2000] [--rounds 3] [--save-every 100]`.
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

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "summary"))
from mlflow_server import MlflowServer

from globalstep import Run


def _loop(
    directory: str, n: int, save_every: int, contender: str, watch: dict[str, int] | None
) -> float:
    """Trains n updates; returns the loop's wall time per update."""
    import mlflow

    torch.manual_seed(0)
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(64, 32), torch.randn(64, 1)
    formats = ("tensorboard", "jsonl", "mlflow") if contender == "mlflow" else None
    options = {"formats": formats} if formats else {}
    by_hand = (
        mlflow.start_run(run_name=f"by-hand-{directory}")
        if contender == "by-hand"
        else contextlib.nullcontext()
    )
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
                mlflow.log_metric("loss", loss.item(), step=run.step)
                mlflow.log_metric("lr", 0.01, step=run.step)
            if watch is not None:
                watch["step"] = run.step
        run.writer.flush()
        seconds = (time.perf_counter() - started) / n
        if watch is not None:
            watch["done"] = 1  # the lag is sampled while training only
    return seconds


def _lag(directory: str, watch: dict[str, int], stop: threading.Event, out: list[tuple]) -> None:
    """Samples (time, run's step, MLflow's newest loss step) until stopped."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    logdir = os.path.abspath(os.path.join(directory, "logs"))
    run_id = None
    while not stop.wait(0.1):
        if run_id is None:
            found = client.search_runs(
                [client.get_experiment_by_name("bench-trackers").experiment_id],
                filter_string=f"tags.`globalstep.logdir` = '{logdir}'",
            )
            run_id = found[0].info.run_id if found else None
            continue
        history = client.get_metric_history(run_id, "loss")
        newest = max((m.step for m in history), default=0)
        if not watch.get("done"):
            out.append((time.monotonic(), watch.get("step", 0), newest))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--save-every", type=int, default=100)
    args = parser.parse_args()
    root = pathlib.Path(tempfile.mkdtemp(prefix="bench-trackers-"))
    server = MlflowServer(root / "server")
    server.start()
    os.environ["MLFLOW_TRACKING_URI"] = server.uri
    os.environ["MLFLOW_EXPERIMENT_NAME"] = "bench-trackers"
    import mlflow

    mlflow.set_experiment("bench-trackers")
    contenders = ("files", "mlflow", "by-hand")
    times: dict[str, list[float]] = {c: [] for c in contenders}
    samples: list[tuple] = []
    try:
        for round_ in range(args.rounds):
            for contender in contenders:
                directory = str(root / f"{contender}-{round_}")
                last = contender == "mlflow" and round_ == args.rounds - 1
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
    finally:
        server.stop()
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
        rate = times["mlflow"][-1]
        print(
            f"lag of mlflow behind the run while training ({len(lags)} samples every 0.1 s): "
            f"mean {statistics.mean(lags):.0f} steps, max {max(lags)} steps; at this loop's "
            f"{rate * 1e6:.0f} us/update: mean {statistics.mean(lags) * rate * 1e3:.0f} ms, "
            f"max {max(lags) * rate * 1e3:.0f} ms"
        )


if __name__ == "__main__":
    main()
