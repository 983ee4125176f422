"""SIGKILL at random updates and resume: a TF2 GradientTape loop in tf.function, bit for bit.

Each run is a subprocess of tf_resume_loop.py (Adam with a warm-up + cosine rate, dropout,
a shuffled tf.data pipeline, the clock following optimizer.iterations, compat.tf.summary
logging, a checkpoint every 5 updates). The interrupted run is SIGKILLed at three random
updates (before or after that update's log line and checkpoint), resumed each time from
its newest checkpoint, then finished. Its weights, optimizer slots, step and next batches
must be byte-identical to an uninterrupted run's, and TensorBoard's curves must hold each
step once with the same values (the batch each update used among them).
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

pytest.importorskip("tensorflow")
pytest.importorskip("keras")
ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

SCRIPT = Path(__file__).with_name("tf_resume_loop.py")
TOTAL, SAVE_EVERY = 39, 5  # 3 epochs of 13 batches


def _run(directory: Path, kill: str | None = None) -> int:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    env.pop("GS_KILL_AT", None)
    if kill is not None:
        env["GS_KILL_AT"] = kill
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(directory)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if kill is None:
        assert done.returncode == 0, done.stderr[-3000:]
    return done.returncode


def _kills(rng: random.Random) -> list[str]:
    """Three kill points "k:when", each inside the run (k counts this process's updates)."""
    points, step = [], 0
    for _ in range(3):
        k = rng.randint(1, min(12, TOTAL - step - 1))
        when = rng.choice(["before", "after"])
        points.append(f"{k}:{when}")
        reached = step + k
        saved = reached if when == "after" else reached - 1  # the checkpoint at `reached`?
        step = saved // SAVE_EVERY * SAVE_EVERY
    return points


def _curves(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = ea.EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


@pytest.mark.slow
def test_sigkill_at_random_updates_and_resume_is_bit_identical(tmp_path):
    """Killed at three random updates and resumed, the run ends byte-identical."""
    seed = random.SystemRandom().randrange(2**32)
    kills = _kills(random.Random(seed))
    _run(tmp_path / "full")
    for kill in kills:
        rc = _run(tmp_path / "resumed", kill)
        assert rc == -signal.SIGKILL, f"kill at {kill} (seed {seed}): exit {rc}"
    _run(tmp_path / "resumed")
    full = np.load(tmp_path / "full" / "final.npz")
    resumed = np.load(tmp_path / "resumed" / "final.npz")
    assert sorted(full.files) == sorted(resumed.files)
    assert int(full["step"]) == int(full["iterations"]) == TOTAL
    assert any("seed_generator" in name for name in full.files)  # dropout's RNG state
    assert any(name.startswith("opt.adam.") for name in full.files)  # Adam's slots
    assert any(name.startswith("next1.") for name in full.files)  # the next batches
    different = [k for k in full.files if full[k].tobytes() != resumed[k].tobytes()]
    assert not different, f"kills {kills} (seed {seed}): {different}"
    ours, theirs = _curves(tmp_path / "full" / "logs"), _curves(tmp_path / "resumed" / "logs")
    assert set(ours) == {"loss", "learning_rate", "batch_crc24"}
    for tag, points in theirs.items():
        assert [s for s, _ in points] == list(range(1, TOTAL + 1)), (tag, kills, seed)
    assert ours == theirs, f"kills {kills} (seed {seed})"
