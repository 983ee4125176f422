"""A Run whose loop rebinds its state (JAX and optax, ``w = w - lr * g``) under SIGKILL.

The loop (tests/rebound_loop.py) builds a new tree at each update. Handed to
``run.update(..., state=...)``, the checkpoints follow it: killed at 3 random updates and
resumed, the run ends bit for bit where an uninterrupted one does, each step logged once.
Not handed over, the restored tree would be saved unchanged at every checkpoint: the first
save after updates is refused with what to do, and nothing stale is committed.
"""

import pathlib
import random
import subprocess
import sys

import pytest

from globalstep.checkpoint import CheckpointManager
from globalstep.summary import read_run

LOOP = str(pathlib.Path(__file__).with_name("rebound_loop.py"))
TOTAL_STEPS = 40
SLEEP_SECONDS = 0.01
REFUSAL = "run.update(..., state=new_tree)"


def _needs(framework):
    if framework == "jax":
        pytest.importorskip("jax")
        pytest.importorskip("optax")


def _start(directory, framework, mode, total=TOTAL_STEPS, sleep=0.0):
    command = [sys.executable, LOOP, str(directory), framework, mode, str(total), str(sleep)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _run_to_end(directory, framework, mode, total=TOTAL_STEPS):
    process = _start(directory, framework, mode, total)
    output, _ = process.communicate(timeout=300)
    return process.returncode, output


def _kill_after(directory, framework, rng):
    """Starts the follow loop, kills it at a random update after the one it resumed at."""
    with _start(directory, framework, "follow", sleep=SLEEP_SECONDS) as process:
        assert process.stdout is not None
        target = None
        for line in process.stdout:
            word, _, number = line.strip().partition(" ")
            if word == "ready":
                target = rng.randint(int(number) + 1, TOTAL_STEPS - 2)
            elif word == "step" and target is not None and int(number) >= target:
                break
        process.kill()
    assert not pathlib.Path(directory, "final").exists(), "the run ended before its kill"


def _committed(directory):
    with CheckpointManager(pathlib.Path(directory, "checkpoints"), read_only=True) as manager:
        return manager.steps()


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["numpy", "jax"])
def test_rebound_state_handed_over_resumes_bit_for_bit(tmp_path, framework):
    """3 SIGKILLs at random updates, each resumed: the final state equals an uninterrupted
    run's byte for byte, and each step 1..N is logged once with the same loss."""
    _needs(framework)
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    code, output = _run_to_end(reference, framework, "follow")
    assert code == 0, output
    rng = random.Random(24)
    for _ in range(3):
        _kill_after(crashed, framework, rng)
    code, output = _run_to_end(crashed, framework, "follow")
    assert code == 0, output
    assert (crashed / "final").read_bytes() == (reference / "final").read_bytes()
    expected = [(p.step, p.value) for p in read_run(reference / "logs").scalars["loss"]]
    assert [s for s, _ in expected] == list(range(1, TOTAL_STEPS + 1))
    assert [(p.step, p.value) for p in read_run(crashed / "logs").scalars["loss"]] == expected


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["numpy", "jax"])
def test_rebound_state_not_handed_over_is_refused(tmp_path, framework):
    """A new run that never hands its tree over is refused at its first save, with what to
    do, and commits nothing; a resumed one is refused at its first save after the restore,
    leaving the checkpoint it resumed from the newest."""
    _needs(framework)
    code, output = _run_to_end(tmp_path / "new", framework, "forget")
    assert code != 0
    assert "`state` must change while updates are applied" in output, output
    assert "the tree to save at step 5 is the one restore() returned at step 0" in output
    assert REFUSAL in output
    assert _committed(tmp_path / "new") == []

    resumed = tmp_path / "resumed"
    code, output = _run_to_end(resumed, framework, "follow", total=12)
    assert code == 0, output
    code, output = _run_to_end(resumed, framework, "forget")
    assert code != 0
    assert "the tree to save at step 15 is the one restore() returned at step 12" in output
    assert REFUSAL in output
    assert _committed(resumed) == [5, 10, 12]
