"""The README's standalone pattern (a CheckpointManager and a SummaryWriter, no Run) SIGKILLed
at 3 random updates and resumed: every step is logged once, in every reader.

The kills are random per test run; the seed is printed and named in every failure, and
``GS_KILL_SEED=...`` replays it.
"""

import csv
import io
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorboard")

from test_torch_resume import _run, _start

from globalstep.summary import read_run

SCRIPT = Path(__file__).with_name("torch_standalone_loop.py")
TOTAL = 160
TAGS = ("loss", "lr")


def _series(logdir):
    """The (step, value) pairs of each tag in JSONL, through globalstep's reader."""
    run = read_run(logdir)
    return {tag: [(p.step, p.value) for p in run.scalars[tag]] for tag in TAGS}


def _cli_series(logdir):
    """The same pairs through `globalstep logs DIR --csv -`."""
    out = subprocess.run(
        [sys.executable, "-m", "globalstep", "logs", str(logdir), "--csv", "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    return {
        tag: [(int(r["step"]), float(r["value"])) for r in rows if r["tag"] == tag] for tag in TAGS
    }


def _event_series(logdir):
    """The same pairs through TensorBoard's EventAccumulator, on the event files alone."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in TAGS}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["maybe_save", "save"])
def test_sigkilled_standalone_loop_logs_every_step_once(tmp_path, mode):
    """Killed at 3 random updates and resumed each time, the loop's curves hold steps
    1..160 once each, with an uninterrupted run's values, in the JSONL reader, `globalstep
    logs` and TensorBoard's EventAccumulator; the weights match bit for bit."""
    seed = int(os.environ.get("GS_KILL_SEED", random.randrange(2**32)))
    print(f"GS_KILL_SEED={seed}")
    rng = random.Random(seed)
    kills = sorted(rng.sample(range(1, TOTAL), 3))
    whens = [rng.choice(["before", "after"]) for _ in kills]
    where = f"GS_KILL_SEED={seed}: kills at {list(zip(kills, whens, strict=True))}"
    args = (str(TOTAL), mode)

    reference = tmp_path / "reference"
    reference.mkdir()
    uninterrupted = _start(reference, script=SCRIPT, args=args)  # beside the crashed chain
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    for step, when in zip(kills, whens, strict=True):
        code, err = _run(crashed, kill_at=f"{step}:{when}", script=SCRIPT, args=args)
        assert code == -signal.SIGKILL, (where, step, err)
        assert not (crashed / "report.json").exists(), where
    code, err = _run(crashed, script=SCRIPT, args=args)
    assert code == 0, (where, err)
    _, err = uninterrupted.communicate()
    assert uninterrupted.returncode == 0, err

    want, got = np.load(reference / "final.npz"), np.load(crashed / "final.npz")
    assert sorted(want) == sorted(got)
    for key in want:
        assert want[key].tobytes() == got[key].tobytes(), (where, key)

    expected = _series(reference / "logs")
    for tag in TAGS:
        assert [s for s, _ in expected[tag]] == list(range(1, TOTAL + 1)), tag
    assert _series(crashed / "logs") == expected, where
    assert _cli_series(crashed / "logs") == expected, where
    float32 = {t: [(s, float(np.float32(v))) for s, v in pairs] for t, pairs in expected.items()}
    assert _event_series(crashed / "logs") == float32, where
