"""Two JAX processes SIGKILLed and restarted: every process ends as an unbroken run's.

tests/distributed/jax_loop.py (a Run, replicated parameters under optax's Adam, each
process's own data generator and PRNG key) runs on 2 processes of ``jax.distributed`` on
127.0.0.1. Beside an uninterrupted run, a chain of attempts on one directory is
interrupted four times: the pair SIGKILLed together at a random update (twice: once just
before a save's update, the kill landing anywhere in it, once at any update), then each
process in turn SIGKILLed alone as a save's update runs (process 0, then process 1), whose
peer JAX terminates (its coordination service declares the dead process after
``heartbeat_timeout_seconds=5``, or at once where process 0, which hosts it, died): the
time the peer takes to exit is measured, and a save interrupted is never committed. Each
restarted pair resumes from the newest committed checkpoint; at the end each process's
parameters, optimizer state, PRNG key and generator state equal the uninterrupted run's
byte for byte, and the logged loss holds each step once with the uninterrupted run's
values. On main
84cf7b6 both tests fail: no JAX engine, so each process is a run of its own, and the
second to open the directory fails with ``LockError`` (locked by another writer).

SIGTERM to one of the 2 processes: both stop at one step agreed through the coordination
service's keys, one checkpoint there, both exit 143.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

from jax_spawn import finish, start

from globalstep.checkpoint import CheckpointManager
from globalstep.summary import read_run

SIZE, TOTAL, SAVE_EVERY = 2, 36, 4
FATAL = "JAX distributed service detected fatal errors"  # JAX's, as it terminates a peer
PAUSE_SECONDS = 0.05  # slept after each update by the killed chain, so that kills land
TIMEOUT_SECONDS = 120  # for one attempt: a hang fails the test, not CI


def _lines(directory: Path, name: str, rank: int) -> list[list[str]]:
    path = directory / f"{name}-{rank}"
    text = path.read_text() if path.exists() else ""
    return [line.split() for line in text.splitlines(keepends=True) if line.endswith("\n")]


def _log(directory: Path) -> str:
    logs = sorted(directory.parent.glob(f"{directory.name}.log-*.log"))
    return "\n".join(f"{p.name}:\n{p.read_text(errors='replace')[-4000:]}" for p in logs)


def _attempt(
    directory: Path, attempt: int, *, pause: float = 0.0, total: int = TOTAL
) -> list[subprocess.Popen]:
    args = [str(directory), str(total), str(SAVE_EVERY if total == TOTAL else total)]
    env = {"GS_SLEEP": str(pause), "GS_ATTEMPT": str(attempt)}
    return start("jax_loop.py", SIZE, args, directory.parent / f"{directory.name}.log", **env)


def _wait_for(
    directory: Path, rank: int, attempt: int, step: int, children: list, total: int = TOTAL
) -> int:
    """Waits until ``rank`` of ``attempt`` reports an update >= ``step``; its pid."""
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        for seen, pid, reached in _lines(directory, "progress", rank):
            if int(seen) == attempt and int(reached) >= step:
                assert int(reached) < total, f"attempt {attempt} ended before its kill"
                return int(pid)
        assert all(c.poll() is None for c in children), _log(directory)
        time.sleep(0.005)
    raise AssertionError(f"rank {rank} never reached update {step} in attempt {attempt}")


def _committed(directory: Path) -> list[int]:
    return CheckpointManager(directory / "checkpoints", read_only=True).steps()


def _final(directory: Path, rank: int) -> dict[str, bytes]:
    with np.load(directory / f"final-{rank}.npz") as arrays:
        return {key: arrays[key].tobytes() for key in arrays.files}


def _loss(directory: Path) -> list[tuple[int, float]]:
    return [(p.step, p.value) for p in read_run(directory / "logs").scalars["loss"]]


@pytest.mark.slow
def test_jax_processes_killed_together_and_alone_resume_exactly(tmp_path: Path) -> None:
    rng = random.Random(37)
    reference_dir, crashed = tmp_path / "reference", tmp_path / "crashed"
    reference = _attempt(reference_dir, 0)
    # Before a save's update (the kill lands in it, anywhere), then at any update.
    together = [rng.randrange(1, 4) * SAVE_EVERY - 1, rng.randrange(2 * SAVE_EVERY, 17)]
    # Each process alone, as a save's update runs: process 0, then process 1.
    alone = [rng.randrange(5, 7) * SAVE_EVERY - 1, rng.randrange(7, 9) * SAVE_EVERY - 1]
    kills = [*[(step, None) for step in together], *zip(alone, range(SIZE), strict=True)]
    resumed_from, exits = [], {}
    for attempt, (step, victim) in enumerate([*kills, (None, None)]):
        resumed_from.append(max(_committed(crashed), default=0) if attempt else 0)
        children = _attempt(crashed, attempt, pause=PAUSE_SECONDS)
        if step is None:
            assert finish(children) == [0] * SIZE, _log(crashed)
            break
        pids = [_wait_for(crashed, r, attempt, step, children) for r in range(SIZE)]
        time.sleep(rng.uniform(0.0, 2 * PAUSE_SECONDS))
        if victim is None:
            for child in children:
                child.send_signal(signal.SIGKILL)
            assert finish(children) == [-signal.SIGKILL] * SIZE
            continue
        assert pids[victim] == children[victim].pid
        survivor = tmp_path / f"crashed.log-{1 - victim}.log"
        logged = len(survivor.read_bytes())
        children[victim].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        status = children[1 - victim].wait(TIMEOUT_SECONDS)
        exits[victim] = (status, round(time.monotonic() - killed, 2))
        assert finish(children)[victim] == -signal.SIGKILL
        # The survivor was terminated by JAX (SIGABRT), with JAX's message, in seconds
        # (process 0 hosts the coordination service: its death is seen at once; process
        # 1's after heartbeat_timeout_seconds=5), not after the save's timeout (600 s).
        assert status == -signal.SIGABRT, _log(crashed)
        assert FATAL.encode() in survivor.read_bytes()[logged:], _log(crashed)
        assert exits[victim][1] < 60, exits
    assert finish(reference) == [0] * SIZE, _log(reference_dir)
    print(f"killed together after {together}; alone after {alone}: (status, seconds) {exits}")

    for rank in range(SIZE):
        resumed = _lines(crashed, "resumed", rank)
        assert [int(a) for a, _ in resumed] == list(range(len(kills) + 1))
        assert [int(s) for _, s in resumed] == resumed_from
        assert 0 not in resumed_from[1:], "a restart did not resume"
        want, got = _final(reference_dir, rank), _final(crashed, rank)
        assert sorted(got) == sorted(want)
        different = [key for key in want if got[key] != want[key]]
        assert not different, f"rank {rank} differs from the uninterrupted run in {different}"
    first, second = _final(reference_dir, 0), _final(reference_dir, 1)
    assert first["key"] != second["key"]
    assert first["data"] != second["data"]
    assert first["['params']['w1']"] == second["['params']['w1']"]  # replicated

    expected = _loss(reference_dir)
    assert [step for step, _ in expected] == list(range(1, TOTAL + 1))
    assert _loss(crashed) == expected
    reader = CheckpointManager(crashed / "checkpoints", read_only=True)
    for committed in reader.steps():  # a save a kill interrupted was never committed
        reader.verify(committed)


@pytest.mark.slow
def test_sigterm_to_one_jax_process_stops_both_at_one_checkpoint(tmp_path: Path) -> None:
    """SIGTERM to one of 2 processes (a cloud's signal to one VM): both stop at one step,
    agreed through the coordination service's keys, the one checkpoint is there, and
    both exit 143. No periodic save comes before (save_every = total)."""
    rng = random.Random(143)
    directory, total, receiver = tmp_path / "run", 400, rng.randrange(SIZE)
    children = _attempt(directory, 0, pause=PAUSE_SECONDS, total=total)
    for rank in range(SIZE):
        _wait_for(directory, rank, 0, 5, children, total)
    time.sleep(rng.uniform(0.0, 0.3))
    children[receiver].send_signal(signal.SIGTERM)
    assert finish(children) == [128 + signal.SIGTERM] * SIZE, _log(directory)
    committed = _committed(directory)
    assert len(committed) == 1, committed
    for rank in range(SIZE):  # the stopping update raised SystemExit before its record
        assert int(_lines(directory, "progress", rank)[-1][2]) + 1 == committed[0]
    assert f"saved step {committed[0]} after SIGTERM; run again to resume" in _log(directory)
