"""Restarts by torchrun: a rank SIGKILLed 3 times, every rank ends as an unbroken run's.

``torchrun --nproc-per-node=N --max-restarts=3`` (c10d rendezvous on 127.0.0.1, a free
port) runs tests/distributed/torchrun_loop.py: issue #27's script (a distributed
CheckpointManager) and the same loop through ``Run``, on 2 and on 4 gloo ranks. The test
SIGKILLs one rank (chosen at random) from outside at 3 random updates; torchrun restarts
the whole group each time and every rank resumes from the newest committed checkpoint.
Beside it the same command runs without kills. Each rank's parameters, optimizer state,
torch RNG state and data generator state must equal the uninterrupted run's byte for
byte, and the logged loss must hold each step once with the uninterrupted run's values.
On 4 ranks DDP keeps its first gradient buckets (``find_unused_parameters=True``): with the
buckets DDP rebuilds after each process's first update, the first update after a restart
sums 4 ranks' gradients in another order and the last bits differ (measured: a stop at
step 12 and a resume differ from the uninterrupted run in every parameter; with fixed
buckets they are equal), which is DDP's doing, not the checkpoint's.

torchrun (torch >= 2.5) hands its workers the agent's own TCPStore, which outlives them:
the last test restarts a group on one Store (spawn.py's fork server, twice) and checks that
the restarted group's saves do not take the keys of the group before it for their own.
"""

from __future__ import annotations

import ast
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from spawn import spawn

from globalstep.summary import read_run

LOOP = Path(__file__).with_name("torchrun_loop.py")
TOTAL, SAVE_EVERY, KILLS = 30, 4, 3
# For one torchrun command, all its attempts together: a hang fails the test, not CI.
TIMEOUT_SECONDS = 240
# Slept by the killed chain's ranks after each update, so that a kill chosen for update k
# lands while the run still has updates to do (the reference sleeps none).
PAUSE_SECONDS = 0.05


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def torchrun(
    directory: Path, ranks: int, mode: str, *, pause: float = 0.0
) -> subprocess.Popen[bytes]:
    """Starts torchrun on the loop: ``ranks`` workers, up to 3 restarts, output to a log."""
    directory.mkdir()
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc-per-node={ranks}",
        f"--max-restarts={KILLS}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{_free_port()}",
        "--monitor-interval=0.1",
        str(LOOP),
        str(directory),
        str(TOTAL),
        str(SAVE_EVERY),
        mode,
        # DDP rebuilds its gradient buckets after each process's first update: on 3 ranks
        # or more the first update after a restart then sums the ranks' gradients in
        # another order than the uninterrupted run did (the last bits differ; on 2 ranks
        # a + b == b + a). Fixed buckets keep the order; 2 ranks run DDP as it comes.
        "default" if ranks == 2 else "fixed",
    ]
    # torch >= 2.5 hands the workers the agent's own TCPStore, kept across restarts: the
    # restarted group then reads the keys of the one before (gloo's addresses), and its
    # init fails or hangs (pytorch/pytorch#135712). Opting out gives each attempt a store.
    env = {**os.environ, "GS_SLEEP": str(pause), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    with open(directory.with_suffix(".log"), "wb") as log:
        return subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _lines(directory: Path, name: str, rank: int) -> list[list[str]]:
    path = directory / f"{name}-{rank}"
    if not path.exists():
        return []
    # A line being written has no newline yet: it is read at the next poll.
    text = path.read_text()
    return [line.split(" ", 2) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def _pid_at(directory: Path, rank: int, attempt: int, step: int, process: subprocess.Popen) -> int:
    """Waits until ``rank`` of ``attempt`` reports an update >= ``step``; returns its pid."""
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        for seen, pid, reached in _lines(directory, "progress", rank):
            if int(seen) == attempt and int(reached) >= step:
                assert int(reached) < TOTAL, f"attempt {attempt} ended before its kill"
                return int(pid)
        assert process.poll() is None, _log(directory)
        time.sleep(0.005)
    raise AssertionError(f"rank {rank} never reached update {step} in attempt {attempt}")


def _log(directory: Path) -> str:
    return directory.with_suffix(".log").read_text(errors="replace")[-6000:]


def _finish(process: subprocess.Popen, directory: Path) -> None:
    try:
        code = process.wait(timeout=TIMEOUT_SECONDS)
    finally:
        # torchrun and its workers share a session of their own: none outlives the test.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert code == 0, _log(directory)


def kill_three_times(
    directory: Path, ranks: int, process: subprocess.Popen, rng: random.Random
) -> list[tuple[int, int]]:
    """SIGKILLs a random rank at 3 random updates, one per attempt; returns (rank, step)s."""
    kills = []
    for attempt, step in enumerate(sorted(rng.sample(range(2, TOTAL - 8), KILLS))):
        rank = rng.randrange(ranks)
        pid = _pid_at(directory, rank, attempt, step, process)
        time.sleep(rng.uniform(0.0, PAUSE_SECONDS))  # anywhere in an update or a save
        os.kill(pid, signal.SIGKILL)
        kills.append((rank, step))
    return kills


def _final(directory: Path, rank: int) -> dict[str, bytes]:
    with np.load(directory / f"final-{rank}.npz") as arrays:
        return {key: arrays[key].tobytes() for key in arrays.files}


def _loss(directory: Path) -> list[tuple[int, float]]:
    return [(p.step, p.value) for p in read_run(directory / "logs").scalars["loss"]]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["manager", "run"])
@pytest.mark.parametrize("ranks", [2, 4])
def test_sigkilled_rank_restarted_by_torchrun_resumes_exactly(tmp_path, ranks, mode):
    """3 SIGKILLs of one rank, 3 restarts by torchrun: every rank ends bit-identical."""
    reference = torchrun(tmp_path / "reference", ranks, mode)
    crashed = tmp_path / "crashed"
    chain = torchrun(crashed, ranks, mode, pause=PAUSE_SECONDS)
    try:
        kills = kill_three_times(crashed, ranks, chain, random.Random(f"{ranks}-{mode}"))
    finally:
        _finish(chain, crashed)
        _finish(reference, tmp_path / "reference")
    print(f"killed (rank, at update): {kills}")

    for rank in range(ranks):
        # Every attempt of every rank resumed from the newest committed checkpoint.
        resumed = _lines(crashed, "resumed", rank)
        assert [int(a) for a, _, _ in resumed] == list(range(KILLS + 1))
        for _, step, committed in resumed:
            assert int(step) == max(ast.literal_eval(committed), default=0)
        assert [int(s) for _, s, _ in resumed[1:]] != [0] * KILLS, "no restart resumed"

        want, got = _final(tmp_path / "reference", rank), _final(crashed, rank)
        assert sorted(got) == sorted(want)
        different = [key for key in want if got[key] != want[key]]
        assert not different, f"rank {rank} differs from the uninterrupted run in {different}"
    # Each rank has state of its own: restoring the writer's copy everywhere would not do.
    first, second = _final(tmp_path / "reference", 0), _final(tmp_path / "reference", 1)
    assert first["rng/torch"] != second["rng/torch"]
    assert first["data/generator"] != second["data/generator"]

    expected = _loss(tmp_path / "reference")
    assert [step for step, _ in expected] == list(range(1, TOTAL + 1))
    assert _loss(crashed) == expected


@pytest.mark.slow
def test_a_restarted_group_on_the_agents_store_saves_and_restores_its_own_state(tmp_path):
    """Two attempts on one Store that outlives them, as torchrun's shared store does: the
    second attempt's save is its own (each rank's generator from that save comes back),
    not one read from the first attempt's keys."""
    import datetime

    import torch.distributed as dist

    store = dist.TCPStore(
        "127.0.0.1",
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=60),
    )
    first = spawn("attempt-0", 2, tmp_path, module="restart_workers", store=store)
    second = spawn("attempt-1", 2, tmp_path, module="restart_workers", store=store)
    for rank in range(2):
        assert sorted(first[rank]["saved"]) == ["1", "2"]
        assert second[rank]["latest"] == 3
        assert second[rank]["restored"] == second[rank]["saved"]["3"], rank
    assert second[0]["restored"] != second[1]["restored"]  # each rank's own
