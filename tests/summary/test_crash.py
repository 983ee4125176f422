"""Fault test: a writer killed with SIGKILL mid-run leaves logs that read back and resume."""

import os
import signal
import subprocess
import sys
import time

import pytest

from globalstep import Clock, SummaryWriter
from globalstep.summary import read_run

_WRITER = """
import sys
from globalstep import Clock, SummaryWriter
clock = Clock()
writer = SummaryWriter(sys.argv[1], clock=clock, flush_seconds=0.01)
while True:
    clock.tick()
    writer.scalar("loss", float(clock.step))
"""


@pytest.mark.slow
def test_sigkill_mid_write_leaves_a_readable_prefix_and_resumes(tmp_path):
    """After SIGKILL and a resume from k//2, our reader and TensorBoard's show each step once."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], env=env)
    try:
        deadline = time.monotonic() + 60
        jsonl = tmp_path / "metrics.jsonl"
        while time.monotonic() < deadline and child.poll() is None:
            if jsonl.exists() and jsonl.stat().st_size > 2_000_000:
                break
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    from_jsonl = [p.step for p in read_run(tmp_path).scalars["loss"]]
    assert from_jsonl == list(range(1, len(from_jsonl) + 1))
    assert len(from_jsonl) > 10_000
    jsonl.rename(tmp_path / "jsonl.bak")
    from_events = [p.step for p in read_run(tmp_path).scalars["loss"]]
    assert from_events == list(range(1, len(from_events) + 1))
    (tmp_path / "jsonl.bak").rename(jsonl)

    resumed = Clock()
    resume_at = len(from_jsonl) // 2
    resumed.load_state_dict({**resumed.state_dict(), "step": resume_at, "step_in_epoch": 0})
    with SummaryWriter(tmp_path, clock=resumed) as writer:
        for _ in range(100):
            resumed.tick()
            writer.scalar("loss", -float(resumed.step))
    points = read_run(tmp_path).scalars["loss"]
    assert [p.step for p in points] == list(range(1, resume_at + 101))
    assert points[-1].value == -float(resume_at + 100)
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = ea.EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars("loss")
    assert [e.step for e in events] == list(range(1, resume_at + 101))
    assert events[-1].value == -float(resume_at + 100)
