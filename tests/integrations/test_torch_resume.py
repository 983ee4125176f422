"""The exact-resume test: a torch loop SIGKILLed at 5 random updates ends bit-identical."""

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from globalstep.summary import read_run

SCRIPT = Path(__file__).with_name("torch_resume_loop.py")
TOTAL = 75


def _start(directory, kill_at=None, *, script=SCRIPT, args=(str(TOTAL),)):
    """Starts ``script DIRECTORY ARGS...``, to be SIGKILLed at ``kill_at`` ("k:when")."""
    env = {**os.environ, "GS_KILL_AT": kill_at} if kill_at is not None else None
    return subprocess.Popen(
        [sys.executable, str(script), str(directory), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run(directory, kill_at=None, *, script=SCRIPT, args=(str(TOTAL),)):
    """Runs the script to its end (or its kill); returns its exit code and stderr."""
    process = _start(directory, kill_at, script=script, args=args)
    _, err = process.communicate()
    return process.returncode, err


def _series(directory):
    run = read_run(directory / "logs")
    return {tag: [(p.step, p.value) for p in run.scalars[tag]] for tag in ("loss", "lr")}


@pytest.mark.slow
def test_sigkill_at_five_random_updates_resumes_bit_identical(tmp_path):
    """Killed at 5 random updates and resumed each time, the run ends as an unbroken one."""
    reference = tmp_path / "reference"
    reference.mkdir()
    uninterrupted = _start(reference)  # runs beside the crashed chain

    rng = random.Random(2026)
    kills = sorted(rng.sample(range(1, TOTAL), 5))
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    for step in kills:
        when = rng.choice(["before", "after"])
        code, err = _run(crashed, kill_at=f"{step}:{when}")
        assert code == -signal.SIGKILL, (step, err)
        assert not (crashed / "report.json").exists()
    code, err = _run(crashed)
    assert code == 0, err
    _, err = uninterrupted.communicate()
    assert uninterrupted.returncode == 0, err

    want = np.load(reference / "final.npz")
    got = np.load(crashed / "final.npz")
    assert sorted(want) == sorted(got)
    for key in want:
        assert want[key].tobytes() == got[key].tobytes(), key
    report = json.loads((crashed / "report.json").read_text())
    assert report == json.loads((reference / "report.json").read_text())
    assert report["optimizer_steps"] == [report["clock"]] == [TOTAL]
    series = _series(crashed)
    assert series == _series(reference)
    assert [s for s, _ in series["lr"]] == list(range(1, TOTAL + 1))
