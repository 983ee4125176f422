"""``globalstep demo``: a small model trained end to end through a Run, every part on.

The model is a two-layer perceptron (8 inputs, 32 tanh units, 4 outputs) fitted by SGD
with momentum to a data set of 1,000 rows generated from ``--seed`` (a fixed random
teacher network plus noise), in shuffled mini-batches of 50 rows: 20 updates per epoch,
1,000 updates in all. It is a ``torch.nn`` model with ``torch.optim.SGD`` where PyTorch is
installed (``--framework torch``), the same network in NumPy otherwise
(``--framework numpy``); both start from the same weights and follow the same updates.
Everything goes through :class:`~globalstep.run.Run`:

- the learning rate warms up over 50 steps, then follows a cosine decay to the end;
- a checkpoint every 100 steps (the newest three kept), with the weights, the momentum,
  the clock and the data position, and one every 25 steps in a fast tier on ``/dev/shm``
  (a temporary directory where there is none; see :func:`fast_tier_path`), from which a
  stopped run resumes; JSONL logs of the loss and the rate at every step, and
  TensorBoard event files where the ``tensorboard`` extra is installed; a progress display
  with the step rate;
- one batch of the data set is corrupt (its targets multiplied by 1,000, ``--bad-batch``):
  the loss spikes, the run rolls back to the newest checkpoint before it (of either tier),
  skips past the bad batch and goes on;
- it ends by printing where the checkpoints, logs and ledger are, and the ledger's goodput
  line: the share of the wall time of every attempt that went into steps kept;
- Ctrl-C (or SIGTERM) saves a checkpoint after the update in flight; running the demo
  again resumes at that step and data position, with the same numbers as a run that
  never stopped, and TensorBoard's curves hold each step once.

Example:
    >>> import io, tempfile
    >>> with tempfile.TemporaryDirectory() as directory:
    ...     result = run_demo(directory, steps=200, bad_batch=None, stream=io.StringIO())
    >>> result.final_step, result.losses[200] < result.losses[1]
    (200, True)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from globalstep._clock import Clock
from globalstep._errors import ConfigError
from globalstep._optional import require
from globalstep._units import Duration, DurationLike
from globalstep.checkpoint import LEDGER_FILE, FastTier, read_ledger
from globalstep.run import Rollback, Run
from globalstep.schedules import CosineDecay, warmup

__all__ = [
    "FAST_EVERY",
    "FRAMEWORKS",
    "DemoResult",
    "add_parser",
    "closing_lines",
    "fast_tier_path",
    "ledger_lines",
    "run_demo",
]

FRAMEWORKS = ("auto", "torch", "numpy")

ROWS, INPUTS, HIDDEN, OUTPUTS, BATCH = 1000, 8, 32, 4, 50
BATCHES_PER_EPOCH = ROWS // BATCH
FAST_EVERY = 25
"""Steps between the fast tier's checkpoints."""


def fast_tier_path(directory: str | os.PathLike[str]) -> Path:
    """The demo's fast tier for the run in ``directory``: ``/dev/shm/globalstep-demo-<id>``
    (a directory of the system's temporary one where there is no ``/dev/shm``), the id
    made from the run directory's absolute path, so that a run resumes from its own.

    Example:
        >>> fast_tier_path("a") == fast_tier_path(os.path.abspath("a")) != fast_tier_path("b")
        True
    """
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    key = hashlib.sha256(os.path.abspath(directory).encode()).hexdigest()[:16]
    return Path(base, f"globalstep-demo-{key}")


@dataclass
class DemoResult:
    """What a demo run did.

    Attributes:
        final_step: the clock's step at the end.
        resumed_from: the step of the checkpoint the run resumed from, or None.
        losses: the loss of each update this run applied, keyed by the step after it
            (an update rolled back is replaced by the one applied after the rollback).
        rollbacks: the steps at which a bad update was rolled back.
        data_position: batches drawn at the end, the corrupt and skipped ones included.
    """

    final_step: int
    resumed_from: int | None = None
    losses: dict[int, float] = field(default_factory=dict)
    rollbacks: list[int] = field(default_factory=list)
    data_position: int = 0


class _PreemptedError(Exception):
    """Raised inside the Run to stop without a final checkpoint, as a killed job would."""


def _data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The data set: inputs and a teacher network's outputs plus noise, from ``seed``."""
    rng = np.random.default_rng(seed)
    inputs = rng.normal(size=(ROWS, INPUTS))
    teacher_1 = rng.normal(size=(INPUTS, HIDDEN)) / np.sqrt(INPUTS)
    teacher_2 = rng.normal(size=(HIDDEN, OUTPUTS)) / np.sqrt(HIDDEN)
    targets = np.tanh(inputs @ teacher_1) @ teacher_2 + 0.05 * rng.normal(size=(ROWS, OUTPUTS))
    return inputs, targets


def _model(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 1])
    return {
        "w1": rng.normal(size=(INPUTS, HIDDEN)) / np.sqrt(INPUTS),
        "b1": np.zeros(HIDDEN),
        "w2": rng.normal(size=(HIDDEN, OUTPUTS)) / np.sqrt(HIDDEN),
        "b2": np.zeros(OUTPUTS),
    }


def _batch_rows(seed: int, position: int) -> np.ndarray:
    """The rows of batch number ``position``: a fresh shuffle per epoch, from the position."""
    epoch, index = divmod(position, BATCHES_PER_EPOCH)
    order = np.random.default_rng([seed, epoch]).permutation(ROWS)
    return order[index * BATCH : (index + 1) * BATCH]


def _loss_and_gradients(
    model: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray
) -> tuple[float, dict[str, np.ndarray]]:
    hidden = np.tanh(x @ model["w1"] + model["b1"])
    error = hidden @ model["w2"] + model["b2"] - y
    loss = float(np.mean(error**2))
    d_out = 2.0 * error / error.size
    d_hidden = (d_out @ model["w2"].T) * (1.0 - hidden**2)
    return loss, {
        "w1": x.T @ d_hidden,
        "b1": d_hidden.sum(axis=0),
        "w2": hidden.T @ d_out,
        "b2": d_out.sum(axis=0),
    }


class _NumpyModel:
    """The network in NumPy: SGD with momentum 0.9 (``v = 0.9 v + g; w -= rate v``)."""

    name = "NumPy"

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        self.weights = weights
        self.velocity = {name: np.zeros_like(value) for name, value in weights.items()}

    def state(self) -> dict[str, Any]:
        return {"model": self.weights, "momentum": self.velocity}

    def close(self) -> None:
        pass

    def update(self, x: np.ndarray, y: np.ndarray, rate: float) -> float:
        loss, gradients = _loss_and_gradients(self.weights, x, y)
        for name, gradient in gradients.items():
            self.velocity[name] *= 0.9
            self.velocity[name] += gradient
            self.weights[name] -= rate * self.velocity[name]
        return loss


class _TorchModel:
    """The same network as ``torch.nn`` layers in float64, with ``torch.optim.SGD``."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        import torch

        self.torch = torch
        self.name = f"PyTorch {torch.__version__.split('+')[0]}"
        layers = [
            torch.nn.Linear(INPUTS, HIDDEN),
            torch.nn.Tanh(),
            torch.nn.Linear(HIDDEN, OUTPUTS),
        ]
        self.model = torch.nn.Sequential(*layers).double()
        with torch.no_grad():
            for layer, (w, b) in ((layers[0], ("w1", "b1")), (layers[2], ("w2", "b2"))):
                layer.weight.copy_(torch.from_numpy(weights[w].T))
                layer.bias.copy_(torch.from_numpy(weights[b]))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.0, momentum=0.9)
        # Matrices of 50x32 gain nothing from more threads, and spinning threads slow a
        # busy machine down many times; the setting is put back by close().
        self._threads = torch.get_num_threads()
        torch.set_num_threads(1)

    def close(self) -> None:
        self.torch.set_num_threads(self._threads)

    def state(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.optimizer}

    def update(self, x: np.ndarray, y: np.ndarray, rate: float) -> float:
        torch = self.torch
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        self.optimizer.zero_grad()
        error = self.model(torch.from_numpy(x)) - torch.from_numpy(y)
        loss = torch.mean(error**2)
        loss.backward()
        self.optimizer.step()
        return float(loss.item())


def _framework(framework: str) -> str:
    """``framework`` with ``auto`` resolved: torch where it imports, numpy otherwise."""
    if framework not in FRAMEWORKS:
        raise ConfigError("framework", f"must be one of {', '.join(FRAMEWORKS)}", framework)
    if framework != "auto":
        return framework
    try:
        import torch  # noqa: F401
    except ImportError:
        return "numpy"
    return "torch"


def _check_int(parameter: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(parameter, f"must be an int >= {minimum}", value)


def run_demo(
    directory: str | os.PathLike[str],
    *,
    steps: int = 1000,
    learning_rate: float = 0.05,
    warmup_steps: int = 50,
    log_every: int = 100,
    save_every: DurationLike = 100,
    keep: int = 3,
    stop_at: int | None = None,
    seed: int = 0,
    bad_batch: int | None = 650,
    pace_seconds: float = 0.0,
    progress: bool = True,
    stream: TextIO | None = None,
    framework: str = "auto",
) -> DemoResult:
    """Trains the demo's model in ``directory``, resuming from its newest checkpoint.

    Args:
        directory: holds ``checkpoints/`` and ``logs/``; created if missing.
        steps: the run's length in optimizer updates, >= 1.
        learning_rate: the peak rate, after the warm-up, > 0.
        warmup_steps: steps of the linear warm-up from 0, >= 0 and < ``steps``.
        log_every: steps between progress lines, >= 1.
        save_every: a duration between checkpoints: steps (``100``), epochs (``"5ep"``) or
            training time (``"30s"``).
        keep: checkpoints kept, >= 1.
        stop_at: stop at this step without a final checkpoint, as a killed job would.
        seed: seeds the data, the initial weights and the batch order.
        bad_batch: the data position of the corrupt batch, or None for clean data.
        pace_seconds: sleep this long after each update, to watch the run or stop it.
        progress: show the progress display.
        stream: where the output goes; standard output by default.
        framework: ``torch`` (a ``torch.nn`` model and ``torch.optim.SGD``), ``numpy``, or
            ``auto``: torch where it is installed.

    Raises:
        ConfigError: a parameter is out of range, the directory is not usable, or the
            configuration differs from the one the run in ``directory`` was started with.
        MissingDependencyError: ``framework="torch"`` without PyTorch installed.
    """
    demo = _Demo(
        steps=steps,
        learning_rate=learning_rate,
        warmup_steps=warmup_steps,
        log_every=log_every,
        save_every=save_every,
        keep=keep,
        stop_at=stop_at,
        seed=seed,
        bad_batch=bad_batch,
        pace_seconds=pace_seconds,
        progress=progress,
        framework=framework,
    )
    root = demo.check(directory)
    return demo.train(root, stream if stream is not None else sys.stdout)


@dataclass
class _Demo:
    """:func:`run_demo`'s settings, checked by :meth:`check`, and the run they make."""

    steps: int
    learning_rate: float
    warmup_steps: int
    log_every: int
    save_every: DurationLike
    keep: int
    stop_at: int | None
    seed: int
    bad_batch: int | None
    pace_seconds: float
    progress: bool
    framework: str

    def check(self, directory: str | os.PathLike[str]) -> Path:
        """Checks the settings (``framework`` "auto" becomes the one chosen); returns the
        run's directory.

        Raises:
            ConfigError: a parameter is out of range, or the directory is not usable.
            MissingDependencyError: ``framework="torch"`` without PyTorch installed.
        """
        _check_int("steps", self.steps, 1)
        _check_int("log_every", self.log_every, 1)
        _check_int("keep", self.keep, 1)
        _check_int("warmup_steps", self.warmup_steps, 0)
        if self.warmup_steps >= self.steps:
            raise ConfigError("warmup_steps", f"must be < steps={self.steps}", self.warmup_steps)
        if self.stop_at is not None:
            _check_int("stop_at", self.stop_at, 1)
        if self.bad_batch is not None:
            _check_int("bad_batch", self.bad_batch, 0)
        numbers = (("learning_rate", self.learning_rate, 0.0), ("pace", self.pace_seconds, -1))
        for name, value, low in numbers:
            if isinstance(value, bool) or not (
                isinstance(value, int | float) and low < value < 1e9
            ):
                rule = "a finite number > 0" if low == 0 else "a finite number >= 0"
                raise ConfigError(name, f"must be {rule}", value)
        Duration.parse(self.save_every, "save_every")
        self.framework = _framework(self.framework)
        if self.framework == "torch":
            require("torch", "torch", "globalstep demo --framework torch")
        root = Path(directory)
        if root.exists() and not root.is_dir():
            raise ConfigError(
                "--dir", "must be a directory (or a path to create one at)", str(root)
            )
        return root

    def train(self, root: Path, out: TextIO) -> DemoResult:
        """Trains in ``root``, resuming from its newest checkpoint (see :func:`run_demo`)."""
        inputs, targets = _data(self.seed)
        weights = _model(self.seed)
        clock = Clock(steps_per_epoch=BATCHES_PER_EPOCH, batch_size=BATCH)
        result = DemoResult(final_step=0)
        run = self._run(root, clock, out)
        model = _TorchModel(weights) if self.framework == "torch" else _NumpyModel(weights)
        try:
            with run:
                out.write(f"globalstep demo: {model.name} MLP {INPUTS}-{HIDDEN}-{OUTPUTS}\n")
                run.restore(model.state())
                if run.step > 0:
                    result.resumed_from = run.step
                self._loop(run, model, (inputs, targets), result, out)
        except _PreemptedError:
            pass
        finally:
            model.close()
        result.final_step = clock.step
        result.data_position = run.data_position
        return result

    def _run(self, root: Path, clock: Clock, out: TextIO) -> Run:
        steps, warmup_steps = self.steps, self.warmup_steps
        schedule = warmup(CosineDecay(self.learning_rate, steps - warmup_steps), warmup_steps)
        fast = fast_tier_path(root)
        if not (root / "checkpoints").exists():  # a new run: an old one's fast tier goes
            shutil.rmtree(fast, ignore_errors=True)
        return Run(
            root,
            total_steps=steps,
            clock=clock,
            schedules={"lr": schedule},
            save_every=self.save_every,
            fast_tier=FastTier(fast, save_every=FAST_EVERY),
            config={
                "seed": self.seed,
                "bad_batch": self.bad_batch,
                "model": f"mlp {INPUTS}-{HIDDEN}-{OUTPUTS}",
                "framework": self.framework,
            },
            strict=True,
            rollback=Rollback(tag="loss", spike_factor=20.0, median_of=50, skip_batches=5),
            progress=self.progress,
            log_every=self.log_every,
            stream=out,
            checkpoint_options={"max_to_keep": self.keep},
        )

    def _loop(
        self, run: Run, model: Any, data: tuple[Any, Any], result: DemoResult, out: TextIO
    ) -> None:
        """The updates, until the run is done, each noted in ``result``.

        Raises:
            _PreemptedError: at ``stop_at``, as a killed job would stop.
        """
        inputs, targets = data
        seed, bad_batch, stop_at, pace = self.seed, self.bad_batch, self.stop_at, self.pace_seconds
        while not run.done:
            if stop_at is not None and run.step >= stop_at:
                out.write(f"stopped at step {run.step} (as if killed): run again to resume\n")
                raise _PreemptedError
            position = run.next_batch()
            rows = _batch_rows(seed, position)
            x, y = inputs[rows], targets[rows]
            if position == bad_batch:
                y = y * 1000.0  # the corrupt batch: its loss spikes
            rate = run.value("lr")  # the rate update number run.step uses
            loss = model.update(x, y, rate)
            step = run.step
            if run.update(loss=loss, lr=rate):
                result.losses[run.step] = loss
            else:
                result.rollbacks.append(step)
            if pace:
                time.sleep(pace)


def _run(args: argparse.Namespace) -> int:
    directory = args.dir
    try:
        run_demo(
            directory,
            steps=args.steps,
            learning_rate=args.lr,
            warmup_steps=args.warmup_steps,
            log_every=args.log_every,
            save_every=args.save_every,
            keep=args.keep,
            stop_at=args.stop_at,
            seed=args.seed,
            bad_batch=None if args.bad_batch < 0 else args.bad_batch,
            pace_seconds=args.pace,
            framework=args.framework,
        )
    finally:
        if os.path.isdir(directory):
            for line in [*closing_lines(directory), *ledger_lines(directory)]:
                print(line)
    return 0


def ledger_lines(directory: str | os.PathLike[str]) -> list[str]:
    """Where the run's ledger is, and its goodput line (see
    :mod:`globalstep.checkpoint._ledger`): the demo's last lines; none without a ledger.

    Example:
        >>> import io, tempfile
        >>> with tempfile.TemporaryDirectory() as directory:
        ...     _ = run_demo(directory, steps=60, progress=False, stream=io.StringIO())
        ...     lines = ledger_lines(directory)
        >>> lines[1].startswith("goodput: ") and "1 attempt;" in lines[1]
        True
    """
    path = os.path.join(directory, LEDGER_FILE)
    if not os.path.isfile(path):
        return []
    return [
        f"ledger:      {path}   (globalstep ckpt ledger {directory})",
        read_ledger(path).goodput_line(),
    ]


def closing_lines(directory: str | os.PathLike[str]) -> list[str]:
    """Where the demo's checkpoints and logs are, with a viewer for each kind of file it wrote.

    ``globalstep logs`` reads JSONL and event files alike; ``tensorboard --logdir`` is named
    only where event files were written (the ``tensorboard`` extra), since TensorBoard
    shows nothing of a JSONL-only directory.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as directory:
        ...     os.mkdir(f"{directory}/logs")
        ...     open(f"{directory}/logs/metrics.jsonl", "w").close()
        ...     lines = closing_lines(directory)
        >>> "(JSONL: globalstep logs " in lines[1]
        True
        >>> print(lines[2])
        TensorBoard: no event files written (pip install 'globalstep[tensorboard]' to write them)
    """
    ckpt, logs = f"{directory}/checkpoints", f"{directory}/logs"
    names = os.listdir(logs) if os.path.isdir(logs) else []
    written = [
        kind
        for kind, found in (
            ("JSONL", "metrics.jsonl" in names),
            ("event files", any("tfevents" in name for name in names)),
        )
        if found
    ]
    lines = [f"checkpoints: {ckpt}   (globalstep ckpt ls {ckpt})"]
    if written:
        lines.append(f"logs:        {logs}   ({' and '.join(written)}: globalstep logs {logs})")
    if "event files" in written:
        lines.append(f"TensorBoard: tensorboard --logdir {logs}")
    elif written:
        lines.append(
            "TensorBoard: no event files written "
            "(pip install 'globalstep[tensorboard]' to write them)"
        )
    return lines


def add_parser(subparsers: Any) -> None:
    """Registers ``globalstep demo``."""
    parser = subparsers.add_parser(
        "demo",
        help="train a small model end to end, resuming where it stopped",
        description="A small model trained end to end through a Run, every part of "
        "globalstep on: warm-up and cosine schedule, checkpoints, TensorBoard logs, a "
        "rollback after a corrupt batch. Stop it with Ctrl-C and run it again: it resumes.",
    )
    parser.add_argument("--dir", default="globalstep-demo", help="run directory (globalstep-demo)")
    parser.add_argument("--steps", type=int, default=1000, help="updates in the run (1000)")
    parser.add_argument("--lr", type=float, default=0.05, help="peak learning rate (0.05)")
    parser.add_argument("--warmup-steps", type=int, default=50, help="warm-up steps (50)")
    parser.add_argument("--log-every", type=int, default=100, help="steps between lines (100)")
    parser.add_argument(
        "--save-every", default="100", help="between checkpoints: 100, 5ep or 30s (100 steps)"
    )
    parser.add_argument("--keep", type=int, default=3, help="checkpoints kept (3)")
    parser.add_argument("--stop-at", type=int, default=None, help="stop early at this step")
    parser.add_argument("--seed", type=int, default=0, help="data, weights and order seed (0)")
    parser.add_argument(
        "--bad-batch",
        type=int,
        default=650,
        help="data position of the corrupt batch (650; -1: none)",
    )
    parser.add_argument(
        "--pace", type=float, default=0.0, metavar="SECONDS", help="sleep after each update"
    )
    parser.add_argument(
        "--framework",
        default="auto",
        choices=FRAMEWORKS,
        help="the model's framework: torch, numpy, or auto (torch where installed)",
    )
    parser.set_defaults(func=_run)
