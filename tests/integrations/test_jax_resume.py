"""Exact resume of a jitted optax training step with a compat schedule, shown by SIGKILL.

A subprocess trains with ``optax.adamw`` on a ``compat.optax`` warm-up cosine schedule
(bfloat16 and float32 parameters, a typed PRNG key as data state), saving every 3 steps; it
is killed with SIGKILL at 3 random moments and resumed each time; its final parameters and
optimizer state equal an uninterrupted run's bit for bit.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

LOOP = Path(__file__).with_name("jax_train_loop.py")
TOTAL = 30


def run(directory: Path, out: Path, kill_after: int | None = None) -> tuple[bool, int]:
    """Runs the loop; with ``kill_after``, SIGKILLs it once it has printed that step.
    Returns whether it was killed and the step it resumed from (0: a fresh start)."""
    proc = subprocess.Popen(
        [sys.executable, str(LOOP), str(directory), str(TOTAL), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    killed, resumed = False, 0
    for line in proc.stdout:
        if line.startswith("resumed "):
            resumed = int(line.split()[1])
        if kill_after is not None and line.strip() == f"step {kill_after}":
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
            break
    proc.stdout.close()
    code = proc.wait(timeout=300)
    assert killed or code == 0, f"the loop failed with exit code {code}"
    return killed, resumed


@pytest.mark.slow
def test_sigkill_at_three_random_steps_resumes_bit_for_bit(tmp_path, capsys):
    """Killed at 3 random steps and resumed, the run ends with the uninterrupted run's
    parameters and optimizer state, bit for bit."""
    run(tmp_path / "reference", tmp_path / "reference.npz")
    kills = sorted(random.Random().sample(range(2, TOTAL - 1), 3))
    directory = tmp_path / "killed"
    resumed_from = []
    for at in kills:
        killed, resumed = run(directory, tmp_path / "unused.npz", kill_after=at)
        assert killed, at
        resumed_from.append(resumed)
    resumed_from.append(run(directory, tmp_path / "resumed.npz")[1])
    # Each run after the first resumed from a checkpoint at most 3 steps before its kill
    # (saved every 3 steps; a kill during a save leaves the one before), never from scratch.
    for at, resumed in zip(kills, resumed_from[1:], strict=True):
        assert at - 6 < resumed <= at, (kills, resumed_from)
    with capsys.disabled():
        print(f"\nkilled after steps {kills}; resumed from steps {resumed_from[1:]}")
    reference = np.load(tmp_path / "reference.npz")
    resumed = np.load(tmp_path / "resumed.npz")
    assert reference.files == resumed.files
    for name in reference.files:
        np.testing.assert_array_equal(resumed[name], reference[name], err_msg=f"{name} {kills}")
