"""Run under SIGINT and SIGTERM: a checkpoint at the step reached, the status, a resume."""

import pathlib
import signal
import subprocess
import sys
import time

import pytest

from globalstep import CheckpointManager
from globalstep.distributed import SAME_DELIVERY_SECONDS
from globalstep.summary import read_run

LOOP = str(pathlib.Path(__file__).with_name("run_loop.py"))
TOTAL_STEPS = 60


def _start(directory, sleep_seconds):
    return subprocess.Popen(
        [sys.executable, LOOP, str(directory), str(TOTAL_STEPS), "after", str(sleep_seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_ready(process):
    for line in process.stdout:
        if line.startswith("ready"):
            return
    raise AssertionError("the loop ended before it was ready")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run's directory."""
    directory = tmp_path_factory.mktemp("reference")
    process = _start(directory, 0.0)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    return directory


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_exits_and_resumes(tmp_path, reference, signum, status):
    """A signal mid-run saves the step reached, exits 128 + signum; the resumed run ends
    with the uninterrupted run's weights and each step logged once."""
    process = _start(tmp_path, 0.02)
    _wait_ready(process)
    time.sleep(0.4)
    process.send_signal(signum)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == status, output
    assert f"after {signal.Signals(signum).name}; run again to resume" in output
    stopped_at = int(output.split("saved step ")[1].split()[0])
    assert 0 < stopped_at < TOTAL_STEPS
    with CheckpointManager(tmp_path / "checkpoints", read_only=True) as manager:
        assert manager.latest_step() == stopped_at
    process = _start(tmp_path, 0.0)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    assert f"resumed from step {stopped_at}" in output
    assert (tmp_path / "weights").read_bytes() == (reference / "weights").read_bytes()
    steps = [p.step for p in read_run(tmp_path / "logs").scalars["loss"]]
    assert steps == list(range(1, TOTAL_STEPS + 1))


@pytest.mark.slow
def test_second_signal_exits_at_once(tmp_path):
    """A second SIGTERM during the update in flight kills the process without saving (one
    more than SAME_DELIVERY_SECONDS after the first: a repeat sooner is the same
    pre-emption delivered twice, see tests/test_preemption.py)."""
    process = _start(tmp_path, 2.0)  # each update takes 2 s: both signals land inside one
    _wait_ready(process)
    time.sleep(0.3)
    process.send_signal(signal.SIGTERM)
    time.sleep(SAME_DELIVERY_SECONDS + 0.2)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == -signal.SIGTERM, output
    assert "got SIGTERM" in output
    assert "saved step" not in output
