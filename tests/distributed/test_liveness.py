"""A rank SIGKILLed inside a distributed save: its peer notices within seconds, not at the
save's timeout (issue 37, on torch.distributed).

Each rank of a distributed manager keeps a heartbeat on the Store, and a rank waiting
inside a save asks the group which of the ranks it waits for stopped beating
(``ProcessGroup.lost``). The fixture runs live_workers.py's loop on 2 gloo ranks (the
Store held by the test process, as torchrun's agent holds it) with
``timeout_seconds=60``: uninterrupted; then killed inside a save, rank 1 (the writer waits
for its report) and rank 0 (the writer: rank 1 waits for the commit) in turn, then once or
twice a random rank at a random moment after a save began; and resumed to the end. Each
kill times the survivor from the SIGKILL to its exit. Before the liveness signal the
survivor of a kill inside a save waited the whole 60 s and failed with "did not report
within timeout_seconds=60".
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from live_workers import SLOW_SECONDS, TIMEOUT_SECONDS
from spawn import spawn

from globalstep.checkpoint import CheckpointManager

pytestmark = pytest.mark.slow

BOUND_SECONDS = 30.0
"""The most a survivor may take from the kill to its exit (the liveness signal's 5 s and the
process's exit, with room for a loaded machine; the timeout would take 60 s, 600 by default)."""
SEED = random.randrange(1 << 30)
"""The random kills' seed, a new one each session (named on failure)."""
INSIDE = ((1, 20), (0, 30))
"""(victim, step): the rank killed inside the save of that step, in turn."""


def _steps(directory: Path) -> list[int]:
    return CheckpointManager(directory, read_only=True).steps() if directory.exists() else []


def _killer(out: Path, marker: str, step: int, victim: int, delay: float, times: list[float]):
    """What spawn runs while the ranks live: waits until ``marker`` says ``step``, waits
    ``delay`` more, SIGKILLs rank ``victim`` and times the other from then to its exit."""

    def during(children: list[Any]) -> None:
        path = out / marker
        deadline = time.monotonic() + 60
        while not (path.exists() and path.read_text() == str(step)):
            if time.monotonic() > deadline or any(c.exitcode is not None for c in children):
                return  # spawn names the rank that ended too early
            time.sleep(0.002)
        time.sleep(delay)
        os.kill(children[victim].pid, signal.SIGKILL)
        killed = time.monotonic()
        children[1 - victim].join(TIMEOUT_SECONDS + 30)
        times.append(time.monotonic() - killed)

    return during


def _kill(out: Path, scenario: str, victim: int, during: Callable[[list[Any]], None]) -> Any:
    """Runs ``scenario`` with ``during`` killing ``victim``; the survivor's result."""
    results = spawn(
        scenario,
        2,
        out,
        killed=(victim,),
        statuses={1 - victim: 3},
        module="live_workers",
        during=during,
        timeout=TIMEOUT_SECONDS + 60,
    )
    return results[1 - victim]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The uninterrupted run, the killed ones (for each: what the survivor said, how long
    it took to exit, the committed steps before and after), and the resumed run."""
    out = tmp_path_factory.mktemp("liveness")
    rng = random.Random(SEED)
    directory = out / "resumed"
    full = spawn("full", 2, out, module="live_workers")
    kills = []
    plans = [
        (f"inside-{v}-{s}", v, s, f"inside-{v}-{s}.marker", rng.uniform(0, 0.5)) for v, s in INSIDE
    ]
    for n in (1, 2, 3):
        plans.append((f"random-{n}", rng.randrange(2), None, "", rng.uniform(0, 0.15)))
    for scenario, victim, step, marker, delay in plans:
        before = _steps(directory)
        if step is None:  # a random kill once the next save began: inside it or after it
            step = max(before, default=0) + 10
            marker = f"{scenario}-{victim}.marker"
            if step > 30:  # a kill after the last save could miss a rank that has ended
                break
        times: list[float] = []
        during = _killer(out, marker, step, victim, delay, times)
        survivor = _kill(out, scenario, victim, during)
        print(f"{scenario}: rank {victim} killed, rank {1 - victim} exited {times} s later")
        kills.append(
            {
                "scenario": scenario,
                "victim": victim,
                "step": step,
                "seconds": times[0] if times else None,
                "survivor": survivor,
                "before": before,
                "after": _steps(directory),
            }
        )
    newest = max(_steps(directory))
    resumed = spawn("resume", 2, out, module="live_workers")
    return {"full": full, "kills": kills, "resumed": resumed, "newest": newest}


def test_peer_of_a_rank_killed_inside_a_save_exits_within_seconds(runs):
    """Rank 1 killed inside the save (the writer waits for its report), then rank 0 (the
    writer: rank 1 waits for the commit): the other exits within seconds with a
    DistributedCheckpointError naming the dead rank, not at timeout_seconds (60)."""
    inside = [kill for kill in runs["kills"] if kill["scenario"].startswith("inside-")]
    assert [(kill["victim"], kill["step"]) for kill in inside] == list(INSIDE)
    for kill in inside:
        victim, error = kill["victim"], kill["survivor"]["error"]
        assert kill["seconds"] is not None, kill
        assert kill["seconds"] < BOUND_SECONDS, (SEED, kill)
        assert error.startswith("DistributedCheckpointError: "), kill
        assert f"save of step {kill['step']} failed: rank(s) [{victim}] died" in error, kill
        assert "nothing was committed" in error, kill
        assert kill["survivor"]["ranks"] == [victim], kill


def test_nothing_is_committed_for_the_save_a_death_interrupted(runs):
    """The save a kill interrupted is committed on no rank; the checkpoints before it
    stay, and those the run committed before the kill are there."""
    for kill in runs["kills"]:
        before, after, step = kill["before"], kill["after"], kill["step"]
        done = [*before, *range(max(before, default=0) + 10, step, 10)]
        if kill["scenario"].startswith("inside-"):
            assert after == done, kill
        else:  # the kill fell inside the save of ``step`` or after its commit
            assert after in (done, [*done, step]), kill


def test_random_kills_are_noticed_within_seconds(runs):
    """A random rank killed at a random moment once a save began (inside it, or in the
    updates after it): the other exits within seconds with an error."""
    randoms = [kill for kill in runs["kills"] if kill["scenario"].startswith("random-")]
    assert randoms, runs["kills"]
    for kill in randoms:
        assert "error" in kill["survivor"], (SEED, kill)
        assert kill["seconds"] is not None, (SEED, kill)
        assert kill["seconds"] < BOUND_SECONDS, (SEED, kill)


def test_restarted_pair_resumes_from_the_newest_committed_step_bit_for_bit(runs):
    """The pair restarted after the kills resumes from the newest committed step and ends
    as the uninterrupted run did: every rank's parameters, optimizer state, generators
    and per-rank sum, bit for bit."""
    for rank in range(2):
        resumed = dict(runs["resumed"][rank])
        assert resumed.pop("restored") == runs["newest"], SEED
        full = dict(runs["full"][rank])
        full.pop("restored")
        assert resumed == full, (rank, SEED)


def test_store_host_stops_waiting_for_a_rank_that_died_after_the_commit(tmp_path):
    """Rank 1 dies once it read the commit, before it tells rank 0 (which hosts the Store
    under tcp:// and env://) it is done with the save's keys: rank 0's save returns, the
    checkpoint committed, once the group lost rank 1, not after waiting for it to the end
    of its 10 s."""
    results = spawn("release", 2, tmp_path, killed=(1,), module="live_workers")
    print(f"release: rank 0's save took {results[0]['seconds']:.1f} s")
    assert results[0]["steps"] == [1]
    assert results[0]["lost"] == [[1]]


def test_a_rank_busy_for_longer_than_a_dead_ones_silence_is_not_lost(tmp_path):
    """Rank 0 waits inside the save for rank 1, which computes for SLOW_SECONDS (8 s, its
    interpreter busy all along) before it calls save: its heartbeat goes on, the group
    loses nobody, and the save commits on both."""
    results = spawn("slow", 2, tmp_path, module="live_workers")
    print(f"slow: rank 0's save took {results[0]['seconds']:.1f} s")
    assert results[0]["seconds"] >= SLOW_SECONDS - 1  # rank 0 did wait for rank 1
    for result in results:
        assert result["steps"] == [1]
        assert result["lost"] == []
