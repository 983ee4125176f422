"""Process-level tests: readers beside a pruning writer, a rollback killed, writers racing."""

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
from ckpt_helpers import subprocess_env

from globalstep.checkpoint import CheckpointManager

HERE = pathlib.Path(__file__).parent
SHM = pathlib.Path("/dev/shm")


def _progress(outs):
    total = 0
    for out in outs:
        with contextlib.suppress(FileNotFoundError, ValueError):
            total += int(pathlib.Path(f"{out}.progress").read_text())
    return total


def _child(*arguments, **options):
    return subprocess.Popen(
        [sys.executable, str(HERE / "live_run.py"), *map(str, arguments)],
        env=subprocess_env(),
        **options,
    )


@pytest.mark.slow
def test_readers_beside_a_pruning_writer_never_see_a_spurious_error():
    """Readers in other processes beside a writer keeping 2 on tmpfs for 20 s never fail.

    The evaluator's iterator yields committed steps once each, in order, up to the last.
    """
    if not SHM.is_dir():
        pytest.skip("needs /dev/shm")
    with tempfile.TemporaryDirectory(dir=SHM) as base:
        base = pathlib.Path(base)
        run, stop, stop_writer = base / "run", base / "stop", base / "stop-writer"
        writer = _child("writer", run, stop_writer, base / "writer.json", stdout=subprocess.PIPE)
        assert writer.stdout.readline().strip() == b"ready"
        outs = [base / f"reader{i}.json" for i in range(3)]
        readers = [_child("reader", run, stop, out) for out in outs]
        follower = _child("follower", run, stop, base / "follower.json")
        # 20 s at least, and on until the readers made 100,000 calls (a loaded machine
        # takes longer); the cap only keeps a stuck run from hanging CI.
        began = time.monotonic()
        while time.monotonic() - began < 20 or (
            _progress(outs) < 100_000 and time.monotonic() - began < 120
        ):
            time.sleep(0.5)
        stop_writer.touch()
        assert writer.wait() == 0
        writer.stdout.close()
        stop.touch()
        assert all(r.wait() == 0 for r in readers)
        assert follower.wait() == 0
        committed = json.loads((base / "writer.json").read_text())
        results = [json.loads((base / f"reader{i}.json").read_text()) for i in range(3)]
        followed = json.loads((base / "follower.json").read_text())
    errors = [e for r in results for e in r["errors"]]
    counts = {}
    for r in results:
        for name, n in r["counts"].items():
            counts[name] = counts.get(name, 0) + n
    print(
        f"\n{len(committed)} checkpoints committed; reads: {counts}; total {sum(counts.values())}"
    )
    print(f"follower yielded {len(followed['yielded'])}, missed {len(followed['missed'])}")
    assert errors == [], errors[:5]
    assert sum(counts.values()) >= 100_000
    assert len(counts) == 10
    assert min(counts.values()) >= 20
    assert followed["errors"] == []
    yielded = followed["yielded"]
    assert yielded == sorted(set(yielded))
    assert set(yielded) <= set(committed)
    assert yielded[-1] == committed[-1]
    assert set(followed["missed"]) <= set(committed) - set(yielded)


ROLLBACK = """
import sys, time
import numpy as np
from globalstep.checkpoint import CheckpointManager
with CheckpointManager(sys.argv[1], max_to_keep=None) as manager:
    manager.restore(step=5)
    print("restored", flush=True)
    if sys.argv[2] == "wait":
        time.sleep(60)
    for step in range(6, 9):
        manager.save(step, {"w": np.full(4, -float(step))})
    print("saved", flush=True)
"""


def _old_timeline(directory):
    with CheckpointManager(directory, max_to_keep=None) as manager:
        for step in range(1, 11):
            manager.save(step, {"w": np.full(4, float(step))})


def _check_one_timeline(directory):
    """A fresh process resumes on one timeline: the old one's newest, or the new one's."""
    with CheckpointManager(directory, read_only=True) as manager:
        steps = manager.steps()
        value = float(manager.restore()["w"][0])
        newest = manager.latest_step()
    if newest == 10:
        # Killed before the rollback's first save committed: the old timeline's newest.
        assert value == 10.0
        assert set(range(1, 6)) <= set(steps) <= set(range(1, 11))
        return "old"
    assert newest <= 8
    assert steps == list(range(1, newest + 1)), steps
    assert value == (-float(newest) if newest > 5 else float(newest))
    return "new"


@pytest.mark.slow
def test_a_rollback_killed_before_its_first_save_keeps_one_timeline(tmp_path):
    """SIGKILL between restore(step=5) and the first save leaves the old timeline whole."""
    _old_timeline(tmp_path)
    child = _child_script(tmp_path, "wait")
    assert child.stdout.readline().strip() == "restored"
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert _check_one_timeline(tmp_path) == "old"
    child = _child_script(tmp_path, "go")  # the rollback run again, to its end
    assert child.communicate()[0].split() == ["restored", "saved"]
    with CheckpointManager(tmp_path, read_only=True) as manager:
        assert manager.steps() == list(range(1, 9))
        assert manager.restore()["w"][0] == -8.0


@pytest.mark.slow
def test_a_rollback_killed_at_random_moments_never_returns_to_the_old_timeline(tmp_path):
    """SIGKILL at random moments of the rollback's saves: never a mix of timelines."""
    rng = np.random.default_rng(15)
    kinds = set()
    for attempt in range(10):
        directory = tmp_path / str(attempt)
        _old_timeline(directory)
        child = _child_script(directory, "go")
        assert child.stdout.readline().strip() == "restored"
        time.sleep(float(rng.uniform(0.0, 0.6)))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        kinds.add(_check_one_timeline(directory))
    print(f"\nafter the kills: {sorted(kinds)}")
    assert "new" in kinds


def _child_script(directory, mode):
    return subprocess.Popen(
        [sys.executable, "-c", ROLLBACK, str(directory), mode],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_two_local_url_writers_started_together_exclude_each_other(tmp_path):
    """Two writers opening one local:// directory at the same instant: one wins, 30 times."""
    start = time.time() + 5.0  # both children have imported everything by then
    outs = [tmp_path / f"starter{i}.txt" for i in range(2)]
    children = [
        _child("starter", f"local://{tmp_path}", start, out, stderr=subprocess.PIPE, text=True)
        for out in outs
    ]
    assert [c.communicate()[1] for c in children] == ["", ""]
    rounds = zip(*(out.read_text().splitlines() for out in outs), strict=True)
    for attempt, results in enumerate(rounds):
        assert sorted(results) == ["got the lock", "locked out"], (attempt, results)
        directory = tmp_path / str(attempt)
        with CheckpointManager(directory, read_only=True) as manager:
            manager.verify(1)
        assert sorted(os.listdir(directory / "step-000000000001")) == [
            "COMMITTED",
            "arrays.safetensors",
            "state.json",
        ]
