"""``globalstep demo``: a small model trained end to end, every part of globalstep on.

The model is the first example of the seed article done right: a linear model on inputs of
shape 100x5 and targets of shape 100x10, trained by plain SGD (mini-batches of 20 rows, so
5 steps per epoch) from a learning rate of 0.01 for 1,000 updates. The step advances with
the update itself (``clock.tick()`` right after the weights change); the rate of update
number ``step`` is ``schedule(step)``; a trigger, not a modulo on a loop counter, decides
when to print; checkpoints are saved every 200 steps and a run that stops early resumes
from the newest one when run again, with the same numbers as a run that never stopped;
loss and rate go to TensorBoard event files and JSONL, whose curves stay right across
the restart.

Example:
    >>> import io, tempfile
    >>> with tempfile.TemporaryDirectory() as directory:
    ...     result = run_demo(directory, steps=200, stream=io.StringIO())
    >>> result.final_step, result.losses[200] < result.losses[1]
    (200, True)
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from globalstep.checkpoint import CheckpointManager
from globalstep.clock import Clock
from globalstep.errors import ConfigError
from globalstep.schedules import ExponentialDecay
from globalstep.summary import ProgressDisplay, ThroughputMeter, available_formats
from globalstep.summary.writer import SummaryWriter
from globalstep.triggers import every

__all__ = ["DemoResult", "add_parser", "run_demo"]

ROWS, FEATURES, OUTPUTS, BATCH = 100, 5, 10, 20


@dataclass
class DemoResult:
    """What a demo run did.

    Attributes:
        final_step: the clock's step at the end.
        resumed_from: the step of the checkpoint the run resumed from, or None.
        losses: the loss of each update this run applied, keyed by the step after it.
    """

    final_step: int
    resumed_from: int | None = None
    losses: dict[int, float] = field(default_factory=dict)


def _data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    inputs = rng.normal(size=(ROWS, FEATURES))
    true_weights = rng.normal(size=(FEATURES, OUTPUTS))
    targets = inputs @ true_weights + 0.1 * rng.normal(size=(ROWS, OUTPUTS))
    return inputs, targets


def _batch_rows(seed: int, epoch: int, step_in_epoch: int) -> np.ndarray:
    """The rows of one mini-batch: a fresh shuffle per epoch, derived from the clock alone."""
    order = np.random.default_rng([seed, epoch]).permutation(ROWS)
    return order[step_in_epoch * BATCH : (step_in_epoch + 1) * BATCH]


def _check_int(parameter: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(parameter, f"must be an int >= {minimum}", value)


def run_demo(
    directory: str | os.PathLike[str],
    *,
    steps: int = 1000,
    learning_rate: float = 0.01,
    log_every: int = 100,
    save_every: int = 200,
    stop_at: int | None = None,
    seed: int = 0,
    stream: TextIO | None = None,
) -> DemoResult:
    """Trains the demo's linear model in ``directory``, resuming from its newest checkpoint.

    Args:
        directory: holds ``checkpoints/`` and ``logs/``; created if missing.
        steps: the run's length in optimizer updates, >= 1.
        learning_rate: the rate of the first update, > 0; it decays by 4% every 100 steps.
        log_every: steps between progress lines, >= 1.
        save_every: steps between checkpoints, >= 1.
        stop_at: stop at this step without a final checkpoint, as a pre-empted job would.
        seed: seeds the data and the batch order.
        stream: where the output goes; standard output by default.

    Raises:
        ConfigError: a parameter is out of range.
    """
    _check_int("steps", steps, 1)
    _check_int("log_every", log_every, 1)
    _check_int("save_every", save_every, 1)
    if stop_at is not None:
        _check_int("stop_at", stop_at, 1)
    if isinstance(learning_rate, bool) or not (
        isinstance(learning_rate, int | float) and 0 < learning_rate < float("inf")
    ):
        raise ConfigError("learning_rate", "must be a finite number > 0", learning_rate)
    out = stream if stream is not None else sys.stdout

    def log(line: str) -> None:
        out.write(line + "\n")

    root = Path(directory)
    inputs, targets = _data(seed)
    clock = Clock(steps_per_epoch=ROWS // BATCH, batch_size=BATCH)
    model = {"weights": np.zeros((FEATURES, OUTPUTS)), "bias": np.zeros(OUTPUTS)}
    schedule = ExponentialDecay(learning_rate, decay_steps=100, rate=0.96)
    state = {"clock": clock, "model": model}
    result = DemoResult(final_step=0)

    with CheckpointManager(root / "checkpoints", max_to_keep=3, save_every=save_every) as ckpt:
        if ckpt.latest_step() is not None:
            ckpt.restore(state)  # fills the model's arrays and the clock in place
            result.resumed_from = clock.step
            log(f"resumed from step {clock.step} ({ckpt.directory})")
        else:
            log(f"new run in {root}")
        # Opened after the restore, so that the writer marks the restart at the clock's step
        # and TensorBoard drops what a stopped attempt logged past it.
        with SummaryWriter(root / "logs", clock=clock, formats=available_formats()) as writer:
            display = ProgressDisplay(clock, total_steps=steps, every_n_steps=log_every, stream=out)
            meter, rate_reading = ThroughputMeter(clock), every(log_every)
            rate_reading.skip_past(clock)
            try:
                while clock.step < steps:
                    if stop_at is not None and clock.step >= stop_at:
                        log(f"stopped at step {clock.step} (as if pre-empted): run again to resume")
                        break
                    rate = schedule(clock.step)  # the rate update number `clock.step` uses
                    rows = _batch_rows(seed, clock.epoch, clock.step_in_epoch)
                    x, y = inputs[rows], targets[rows]
                    error = x @ model["weights"] + model["bias"] - y
                    loss = float(np.mean(error**2))
                    grad = 2.0 * error / error.size
                    model["weights"] -= rate * (x.T @ grad)
                    model["bias"] -= rate * grad.sum(axis=0)
                    clock.tick()
                    result.losses[clock.step] = loss
                    writer.scalars({"loss": loss, "lr": rate})
                    display.update(loss=loss, lr=rate)
                    if rate_reading.should_fire(clock):
                        meter.write(writer)
                    ckpt.maybe_save(clock, state, metrics={"loss": loss})
            finally:
                display.close()
        if clock.step >= steps and ckpt.latest_step() != clock.step:
            ckpt.save(clock, state)
    result.final_step = clock.step
    if result.resumed_from is not None and result.resumed_from >= steps:
        log(f"the run is complete; pass --steps N > {steps} to train further")
    log(f"final global step: {clock.step}")
    return result


def _run(args: argparse.Namespace) -> int:
    run_demo(
        args.dir,
        steps=args.steps,
        learning_rate=args.lr,
        log_every=args.log_every,
        save_every=args.save_every,
        stop_at=args.stop_at,
        seed=args.seed,
    )
    print(f"logs: {args.dir}/logs  (globalstep logs {args.dir}/logs, or tensorboard --logdir)")
    print(f"checkpoints: {args.dir}/checkpoints  (globalstep ckpt ls {args.dir}/checkpoints)")
    return 0


def add_parser(subparsers: Any) -> None:
    """Registers ``globalstep demo``."""
    parser = subparsers.add_parser(
        "demo",
        help="train a small model end to end, resuming where it stopped",
        description=(__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument("--dir", default="globalstep-demo", help="run directory (globalstep-demo)")
    parser.add_argument("--steps", type=int, default=1000, help="updates in the run (1000)")
    parser.add_argument("--lr", type=float, default=0.01, help="initial SGD rate (0.01)")
    parser.add_argument("--log-every", type=int, default=100, help="steps between lines (100)")
    parser.add_argument("--save-every", type=int, default=200, help="steps between saves (200)")
    parser.add_argument("--stop-at", type=int, default=None, help="stop early at this step")
    parser.add_argument("--seed", type=int, default=0, help="data and batch-order seed (0)")
    parser.set_defaults(func=_run)
