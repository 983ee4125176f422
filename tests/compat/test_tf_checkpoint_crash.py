"""compat.tf's Checkpoint and CheckpointManager beside a SummaryWriter, under SIGKILL
(issue 33, point 5): killed at random moments, some inside a save, and resumed with
``restore_or_initialize``, the loop ends with the uninterrupted run's weights, bit for bit,
and every reader (JSONL, TensorBoard's EventAccumulator, ``globalstep logs --csv``) shows
the uninterrupted run's curve, each step once: no point a committed checkpoint covers is
lost, though the loop never flushes its writer."""

import contextlib
import pathlib
import random
import subprocess

import pytest
from test_run_crash import _assert_same_curves, _spawn

LOOP = str(pathlib.Path(__file__).parents[1] / "compat_tf_loop.py")
TOTAL_STEPS = 120


def _start(directory):
    return _spawn(LOOP, directory, TOTAL_STEPS, 0.004)


def _until(lines, prefix):
    """The first line starting with ``prefix``, or None if the process ended first."""
    while (line := lines.get(timeout=120)) is not None:
        if line.startswith(prefix):
            return line
    return None


def _to_end(directory):
    process, lines = _start(directory)
    output = []
    while (line := lines.get(timeout=300)) is not None:
        output.append(line)
    assert process.wait(timeout=60) == 0, "\n".join(output)
    return output


@pytest.mark.slow
def test_sigkilled_compat_tf_loop_with_a_writer_resumes_exactly(tmp_path):
    """Killed 8 times (3 right as a save starts, 5 at random times) and resumed: the
    weights and every reader's curve equal the uninterrupted run's, each step once, and
    each resume starts at a step the loop had logged."""
    pytest.importorskip("tensorboard")
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    _to_end(reference)
    rng = random.Random(33)
    moments = ["save"] * 3 + ["random"] * 5
    rng.shuffle(moments)
    resumed = []
    for moment in moments:
        process, lines = _start(crashed)
        ready = _until(lines, "ready")
        assert ready is not None
        resumed.append(int(ready.split()[1]))
        if moment == "save" and TOTAL_STEPS - resumed[-1] > 7:
            _until(lines, "save ")
        else:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=rng.uniform(0.05, 0.4))
        process.kill()
        process.wait(timeout=60)
    output = _to_end(crashed)
    resumed.append(int(next(line for line in output if line.startswith("ready")).split()[1]))
    assert resumed == sorted(resumed), resumed
    assert resumed[-1] > 0, resumed
    assert (crashed / "weights").read_bytes() == (reference / "weights").read_bytes()
    _assert_same_curves(crashed / "logs", reference / "logs", ["loss"])
