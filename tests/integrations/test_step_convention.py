"""One step convention for every logged value, on every path (issue 24, case 4).

The same tiny run, 3 epochs of 4 batches with one exponential decay, is trained and logged
through each way globalstep offers: a torch loop with ``attach`` and a writer with a clock,
``Run``, a JAX/optax loop, and the Keras ``GlobalStepCallback`` on the TensorFlow, JAX and
torch backends (one subprocess each, step_convention_keras.py), beside the references the
convention is taken from (``tf.summary.scalar(step=optimizer.iterations)`` after
``apply_gradients``, Keras' TensorBoard callback). Every path must log the loss and the
rate at steps 1..12 (the step after each update), the rate at step s being the schedule's
value at s - 1 (the rate that update used), as the JSONL reader and ``globalstep logs``
read them.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from keras_subprocess import run_on_backend

from globalstep import Clock, ExponentialDecay, Run, SummaryWriter
from globalstep.summary import read_run
from globalstep.summary._logs import run_logs

EPOCHS, BATCHES, BATCH = 3, 4, 4
STEPS = list(range(1, EPOCHS * BATCHES + 1))
SCHEDULE = ExponentialDecay(0.1, decay_steps=1, rate=0.8)
SCRIPT = Path(__file__).with_name("step_convention_keras.py")


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCHES * BATCH, 3)).astype("float32")
    return x, (x @ np.array([[1.0], [-2.0], [0.5]])).astype("float32")


def _batches():
    x, y = _data()
    for _ in range(EPOCHS):
        for b in range(BATCHES):
            rows = slice(b * BATCH, (b + 1) * BATCH)
            yield x[rows], y[rows]


def _torch(directory: Path) -> None:
    torch = pytest.importorskip("torch")
    from globalstep.integrations.torch import attach

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    clock = Clock(steps_per_epoch=BATCHES)
    attach(opt, clock, SCHEDULE)
    with SummaryWriter(directory, clock=clock, formats=("jsonl",)) as writer:
        for x, y in _batches():
            opt.zero_grad()
            loss = torch.mean((model(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2)
            loss.backward()
            opt.step()  # sets the rate of update number clock.step, then ticks
            writer.scalars({"loss": loss.item(), "lr": opt.param_groups[0]["lr"]})


def _run(directory: Path) -> None:
    weights = np.zeros((3, 1))
    clock = Clock(steps_per_epoch=BATCHES)
    with Run(
        directory,
        total_steps=len(STEPS),
        clock=clock,
        schedules={"lr": SCHEDULE},
        progress=False,
        stream=io.StringIO(),
    ) as run:
        run.restore({"weights": weights})
        for x, y in _batches():
            lr = run.value("lr")  # the rate of update number run.step
            error = x @ weights - y
            weights -= lr * 2 * x.T @ error / len(x)
            run.update(loss=float(np.mean(error**2)), lr=lr)


def _jax(directory: Path) -> None:
    jax = pytest.importorskip("jax")
    optax = pytest.importorskip("optax")
    import jax.numpy as jnp

    from globalstep.integrations.jax import check_optax_count, traceable

    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=traceable(SCHEDULE))
    params = jnp.zeros((3, 1))
    state = opt.init(params)
    clock = Clock(steps_per_epoch=BATCHES)

    @jax.jit
    def train_step(params, state, x, y):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((x @ p - y) ** 2))(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    with SummaryWriter(directory, clock=clock, formats=("jsonl",)) as writer:
        for x, y in _batches():
            params, state, loss = train_step(params, state, x, y)
            clock.tick()
            check_optax_count(state, clock)
            # inject_hyperparams keeps the rate the update just used.
            writer.scalars({"loss": loss, "lr": state.hyperparams["learning_rate"]})


def _keras(backend: str, directory: Path) -> dict[str, Path]:
    run_on_backend(SCRIPT, backend, str(directory))
    return {f"keras callback ({backend})": directory / "keras"}


def _steps_and_rates(logdir: Path) -> tuple[list[int], list[int], list[tuple[int, float]]]:
    run = read_run(logdir)
    loss = [p.step for p in run.scalars.get("loss", [])]
    rates = [(p.step, p.value) for p in run.scalars.get("lr", [])]
    return loss, [s for s, _ in rates], rates


def _logs_rows(logdir: Path) -> list[tuple[str, str, str, str]]:
    """``globalstep logs DIR``'s rows: tag, points, first step, last step."""
    lines: list[str] = []
    assert run_logs(str(logdir), out=lines.append) == 0
    table = "\n".join(lines).splitlines()
    return [tuple(line.split()[:4]) for line in table if line.split()[:1] in (["loss"], ["lr"])]


def _event_steps(logdir: Path, tag: str) -> list[int]:
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = ea.EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    if tag in acc.Tags()["scalars"]:
        return [e.step for e in acc.Scalars(tag)]
    return [e.step for e in acc.Tensors(tag)]  # tf.summary writes scalars as tensors


@pytest.mark.slow
def test_every_path_logs_at_the_step_after_the_update_with_the_rate_it_used(tmp_path):
    """Torch, Run, JAX and Keras on 3 backends: loss and lr at steps 1..12, lr(s) = f(s-1)."""
    logdirs: dict[str, Path] = {}
    for name, train in (("torch attach + writer", _torch), ("Run", _run), ("jax/optax", _jax)):
        train(tmp_path / name.split()[0].replace("/", "_"))
        logdirs[name] = tmp_path / name.split()[0].replace("/", "_")
    logdirs["Run"] = logdirs["Run"] / "logs"
    for backend in ("tensorflow", "jax", "torch"):
        logdirs.update(_keras(backend, tmp_path / f"keras_{backend}"))
    logdirs["tf loop + writer"] = tmp_path / "keras_tensorflow" / "tf_loop"

    expected = [SCHEDULE(s - 1) for s in STEPS]
    for name, logdir in logdirs.items():
        loss, lr, rates = _steps_and_rates(logdir)
        assert loss == STEPS, (name, loss)
        assert lr == STEPS, (name, lr, sorted(read_run(logdir).scalars))
        got = [v for _, v in rates]
        assert np.allclose(got, expected, rtol=1e-6, atol=0), (name, got)
        assert not np.allclose(got, [SCHEDULE(s) for s in STEPS], rtol=1e-3), name
        assert _logs_rows(logdir) == [("loss", "12", "1", "12"), ("lr", "12", "1", "12")], name

    # The references: tf.summary after apply_gradients, and Keras' own TensorBoard callback.
    references = tmp_path / "keras_tensorflow"
    assert _event_steps(references / "tf_summary", "loss") == STEPS
    assert _event_steps(references / "tf_summary", "lr") == STEPS
    assert _event_steps(references / "keras_tensorboard" / "train", "batch_loss") == STEPS
