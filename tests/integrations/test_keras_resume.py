"""SIGKILL mid-epoch and resume: compiled fit() on three backends, bit for bit.

Each run is a subprocess of keras_train.py (a small MLP with dropout, shuffled data, a
compat.keras CosineDecay as Adam's learning rate, a checkpoint every 5 updates). The
interrupted run is SIGKILLed three times at random batches inside an epoch, resumed each
time from its newest checkpoint, then finished; its final variables (model and optimizer)
and its per-step TensorBoard curves must equal an uninterrupted run's.
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

pytest.importorskip("keras")
ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

SCRIPT = Path(__file__).with_name("keras_train.py")
BATCHES_PER_EPOCH, EPOCHS, SAVE_EVERY = 13, 3, 5


def _run(backend: str, directory: Path, kill_at: int | None = None) -> int:
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    args = [sys.executable, str(SCRIPT), str(directory)]
    if kill_at is not None:
        args.append(str(kill_at))
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if kill_at is None:
        assert done.returncode == 0, done.stderr[-3000:]
    return done.returncode


def _kill_points(rng: random.Random) -> list[int]:
    """Three batch counts, each killing its process inside an epoch (not at its end)."""
    points, step = [], 0
    for _ in range(3):
        while True:
            k = rng.randint(1, 12)
            if (step + k) % BATCHES_PER_EPOCH:
                break
        points.append(k)
        step = (step + k) // SAVE_EVERY * SAVE_EVERY  # resumes from the newest checkpoint
    return points


def _curves(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = ea.EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "tensorflow", "torch"])
def test_sigkill_mid_epoch_and_resume_is_bit_identical(tmp_path, backend):
    """Killed at three random mid-epoch batches and resumed, the run ends bit-identical."""
    seed = random.SystemRandom().randrange(2**32)
    kills = _kill_points(random.Random(seed))
    pytest.importorskip(backend)
    _run(backend, tmp_path / "full")
    for k in kills:
        rc = _run(backend, tmp_path / "resumed", k)
        assert rc == -signal.SIGKILL, f"kill at {k} (seed {seed}): exit {rc}"
    _run(backend, tmp_path / "resumed")
    full = np.load(tmp_path / "full" / "final.npz")
    resumed = np.load(tmp_path / "resumed" / "final.npz")
    assert sorted(full.files) == sorted(resumed.files)
    assert any("seed_generator" in name for name in full.files)  # dropout's state is saved
    different = [k for k in full.files if not np.array_equal(full[k], resumed[k])]
    assert not different, f"kills {kills} (seed {seed}): {different}"
    ours, theirs = _curves(tmp_path / "full" / "logs"), _curves(tmp_path / "resumed" / "logs")
    steps = BATCHES_PER_EPOCH * EPOCHS
    assert [s for s, _ in ours["loss"]] == list(range(1, steps + 1))
    assert ours == theirs, f"kills {kills} (seed {seed})"
