"""Seed 000's two TensorFlow programs, with only ``tf.train.*`` swapped for globalstep's.

The seed prints a ``GradientTape`` training loop with a ``tf.Variable`` global step, then a
checkpoint example (``tf.train.Checkpoint(optimizer=..., model=..., step=global_step)``,
``tf.train.CheckpointManager(checkpoint, './tf_ckpts', max_to_keep=3)``, a restore of
``manager.latest_checkpoint``, a save every 100 steps, and
``status.assert_existing_objects_matched()``). Below they are kept as printed; the only
change is ``tf.train.`` -> ``globalstep.compat.tf.`` (and the import that name needs).

Each program runs in a fresh directory, in fresh processes (tf_seed_program.py), beside
TensorFlow's own ``tf.train`` run of the same text: what they print, what they raise and
the state a second process restores must agree. Then the checkpoint example's
``# Training loop goes here`` is filled with the seed's own loop, and the run is SIGKILLed
at random updates and restarted: the restore happens before the model or the optimizer
is built (the seed never builds them), and the final weights, optimizer variables and
step must equal an uninterrupted run's, bit for bit.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
pytest.importorskip("tensorflow")
pytest.importorskip("keras")

import globalstep

RUNNER = Path(__file__).with_name("tf_seed_program.py")
SRC = str(Path(globalstep.__file__).resolve().parents[1])

# Seed 000, "Basic Example", as printed.
SEED_LOOP = """\
import tensorflow as tf

# Create a variable to hold the global step count
global_step = tf.Variable(0, trainable=False, name='global_step')

# Suppose we have a model
model = tf.keras.Sequential([tf.keras.layers.Dense(10)])

# Define an optimizer
optimizer = tf.keras.optimizers.SGD(learning_rate=0.01)

# Compile the model with the optimizer
model.compile(optimizer=optimizer, loss='mean_squared_error')

# Simulate training data
x_train = tf.random.normal((100, 5))
y_train = tf.random.normal((100, 10))

# Custom training loop
for step in range(1000):
    with tf.GradientTape() as tape:
        predictions = model(x_train)
        loss = tf.reduce_mean(tf.square(predictions - y_train))
    
    # Compute gradients
    gradients = tape.gradient(loss, model.trainable_variables)
    
    # Apply gradients and increment the global step
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    
    global_step.assign_add(1)

    if step % 100 == 0 and step != 0:
        print(f"Step {step}: loss = {loss.numpy()}")

print(f"Final global step: {global_step.numpy()}")
"""  # noqa: W293 (the seed's own blank lines with spaces)

# Seed 000, "Checkpointing Example", as printed.
SEED_CHECKPOINT = """\
checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=model, step=global_step)
manager = tf.train.CheckpointManager(checkpoint, './tf_ckpts', max_to_keep=3)

# Restores the most recent checkpoint
status = checkpoint.restore(manager.latest_checkpoint)

if manager.latest_checkpoint:
    print(f"Restored from {manager.latest_checkpoint}")
else:
    print("Initializing from scratch.")

# Save checkpoint every 100 steps
for step in range(1000):
    # Training loop goes here
    checkpoint.step.assign_add(1) # Assume this is updated each iteration
    
    if int(global_step) % 100 == 0:
        save_path = manager.save()
        print(f"Saved checkpoint for step {global_step.numpy()}: {save_path}")

status.assert_existing_objects_matched()
"""  # noqa: W293

# The seed's loop body, for the checkpoint example's "# Training loop goes here".
SEED_LOOP_BODY = """\
    with tf.GradientTape() as tape:
        predictions = model(x_train)
        loss = tf.reduce_mean(tf.square(predictions - y_train))
    
    # Compute gradients
    gradients = tape.gradient(loss, model.trainable_variables)
    
    # Apply gradients and increment the global step
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
"""  # noqa: W293


def ours(program: str) -> str:
    """The program with only ``tf.train.`` swapped for ``globalstep.compat.tf.``."""
    assert program.count("tf.train.") == 2
    return "import globalstep.compat.tf\n" + program.replace("tf.train.", "globalstep.compat.tf.")


def _start(program: str, directory: Path, kill_at: str | None = None) -> subprocess.Popen[str]:
    directory.mkdir(exist_ok=True)
    (directory / "program.py").write_text(program)
    env = dict(os.environ)
    env.pop("GS_KILL_AT", None)
    # This checkout's globalstep first, whatever the directory the program runs in.
    env["PYTHONPATH"] = os.pathsep.join([SRC, *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"  # every line printed before a SIGKILL reaches the pipe
    if kill_at is not None:
        env["GS_KILL_AT"] = kill_at
    return subprocess.Popen(
        [sys.executable, str(RUNNER), "program.py", "state.npz"],
        cwd=directory,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen[str], expect: int = 0) -> list[str]:
    out, err = process.communicate()
    assert process.returncode == expect, err[-3000:]
    return out.splitlines()


def _state(directory: Path) -> dict[str, np.ndarray]:
    with np.load(directory / "state.npz", allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def _without_losses(lines: list[str]) -> list[str]:
    """The lines but the loss prints, whose values depend on the unseeded random data."""
    losses = [line for line in lines if line.startswith("Step ")]
    assert [line.split(":")[0] for line in losses] == [f"Step {s}" for s in range(100, 1000, 100)]
    assert all(re.fullmatch(r"Step \d+: loss = [0-9.e+-]+", line) for line in losses)
    return [line for line in lines if not line.startswith("Step ")]


@pytest.mark.slow
def test_seed_programs_run_and_a_second_process_restores_as_tensorflow_does(tmp_path):
    """The two programs, run twice each in fresh processes, print and raise what
    TensorFlow's tf.train run of the same text does, and the second process restores the
    first one's weights, optimizer and step."""
    program = SEED_LOOP + "\n" + SEED_CHECKPOINT
    mine, theirs = tmp_path / "globalstep", tmp_path / "tensorflow"
    runs = {}
    for attempt in (1, 2):
        processes = [_start(ours(program), mine), _start(program, theirs)]
        runs[attempt] = [_without_losses(_finish(p)) for p in processes]
        if attempt == 1:
            first = _state(mine)
    saved = [
        f"Saved checkpoint for step {s}: ./tf_ckpts/ckpt-{s // 100 - 10}"
        for s in range(1100, 2001, 100)
    ]
    # A fresh directory: nothing to restore, ten saves; then the seed's last line raises
    # TensorFlow's own AssertionError (the status of restore(None) matches nothing).
    expected_first = [
        "Final global step: 1000",
        "Initializing from scratch.",
        *saved,
        "ASSERTION: No checkpoint specified (save_path=None); nothing is being restored.",
    ]
    assert runs[1][0] == runs[1][1] == expected_first
    # The second process restores the newest of the three kept, goes on numbering, matches.
    resaved = [
        f"Saved checkpoint for step {s}: ./tf_ckpts/ckpt-{s // 100 - 10}"
        for s in range(2100, 3001, 100)
    ]
    expected_second = ["Final global step: 1000", "Restored from ./tf_ckpts/ckpt-10", *resaved]
    assert runs[2][0] == runs[2][1] == expected_second
    kept = sorted(n for n in os.listdir(mine / "tf_ckpts") if n.startswith("ckpt-"))
    assert kept == ["ckpt-18", "ckpt-19", "ckpt-20"]
    # What the second process restored is the first one's state (its own 1000 updates from
    # other random data were overwritten); the step went on from 2000.
    second = _state(mine)
    assert second["global_step"] == 3000
    assert first["global_step"] == 2000
    for key in first:
        if key != "global_step":
            assert second[key].dtype == first[key].dtype
            assert np.array_equal(second[key], first[key]), key
    assert any(key.startswith("optimizer/") for key in first)


def _training_checkpoint_program(optimizer: str, updates: int = 1000) -> str:
    """The checkpoint example with the seed's loop body where it says "Training loop goes
    here", after the seed's set-up (seeded, so every process draws the same data)."""
    setup = SEED_LOOP[: SEED_LOOP.index("# Custom training loop")]
    setup = setup.replace(
        "import tensorflow as tf\n",
        "import tensorflow as tf\n\ntf.keras.utils.set_random_seed(0)\n",
    )
    setup = setup.replace("tf.keras.optimizers.SGD(learning_rate=0.01)", optimizer)
    checkpoint = SEED_CHECKPOINT.replace("    # Training loop goes here\n", SEED_LOOP_BODY)
    checkpoint = checkpoint.replace("range(1000)", f"range({updates})")
    program = ours(setup + checkpoint)
    assert "build(" not in program  # the user code never builds the model or the optimizer
    return program


@pytest.mark.slow
@pytest.mark.parametrize(
    ("optimizer", "kills"),
    [
        ("tf.keras.optimizers.SGD(learning_rate=0.01)", 3),  # as printed: no slots
        ("tf.keras.optimizers.Adam(learning_rate=0.01)", 1),  # slots created at update 1
    ],
    ids=["sgd-as-printed", "adam"],
)
def test_sigkilled_checkpoint_loop_resumes_bit_identical(tmp_path, optimizer, kills):
    """SIGKILLed at random updates and restarted, the seed's checkpoint loop restores into
    a model and an optimizer not built yet (weights at the first call, slots at the first
    update) and ends bit-identical to an uninterrupted run of as many updates."""
    program = _training_checkpoint_program(optimizer)
    rng = random.Random(f"{optimizer}{kills}")
    plan = [(rng.randrange(150, 950), rng.choice(["before", "after"])) for _ in range(kills)]
    # Killed at its u-th update (before or after it), a process has advanced the step u-1
    # times past where it started, so the next one restores the last multiple of 100.
    expected_starts = [0]
    for update, _ in plan:
        expected_starts.append(expected_starts[-1] + (update - 1) // 100 * 100)
    total = expected_starts[-1] + 1000
    reference = tmp_path / "reference"  # uninterrupted, as many updates, run beside
    uninterrupted = _start(_training_checkpoint_program(optimizer, updates=total), reference)
    crashed = tmp_path / "crashed"
    for (update, when), start in zip(plan, expected_starts, strict=False):
        lines = _finish(_start(program, crashed, f"{update}:{when}"), expect=-signal.SIGKILL)
        first = f"Restored from ./tf_ckpts/ckpt-{start // 100}" if start else "Initializing"
        assert lines[0].startswith(first), lines[:2]
        saves = [line for line in lines if line.startswith("Saved checkpoint")]
        assert saves[-1].startswith(
            f"Saved checkpoint for step {start + (update - 1) // 100 * 100}:"
        )
    lines = _finish(_start(program, crashed))
    assert lines[0] == f"Restored from ./tf_ckpts/ckpt-{expected_starts[-1] // 100}"
    assert not any(line.startswith("ASSERTION") for line in lines)  # the status matched
    _finish(uninterrupted)
    got, want = _state(crashed), _state(reference)
    assert int(got["global_step"]) == total
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key].dtype == want[key].dtype
        assert np.array_equal(got[key], want[key]), key
    slots = [k for k in want if k.startswith("optimizer/")]
    assert len(slots) == (2 if "SGD" in optimizer else 2 + 4)  # iterations, rate, m and v
