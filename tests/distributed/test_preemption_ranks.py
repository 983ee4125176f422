"""Preemption agreed by all ranks: 4 gloo ranks under a Run, signalled from outside.

SIGTERM to one rank of 4 at a random moment (a cloud's signal to one VM), and SIGUSR1 to
all 4 (SLURM's ``--signal``): every rank stops at one common step, the checkpoint there is
the only one committed, every process exits with 128 + the signal's number, and the stop
comes within the stated bound: ``2 * stop_every`` updates after the step at which the
first signal arrived (see :mod:`globalstep.distributed`).
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from spawn import spawn

from globalstep import CheckpointManager

pytestmark = pytest.mark.slow

RANKS = 4


def _signal_when_ready(out: Path, ranks: list[int], signum: int, seed: int):
    """The ``during`` of spawn: once every rank made 5 updates, waits a random moment and
    sends ``signum`` to each of ``ranks`` (in a random order)."""
    chance = random.Random(seed)

    def during(children):
        deadline = time.monotonic() + 40
        while not all((out / f"ready-{r}").exists() for r in range(len(children))):
            assert time.monotonic() < deadline, "the ranks did not start"
            assert all(child.is_alive() for child in children), "a rank ended early"
            time.sleep(0.02)
        time.sleep(chance.uniform(0.0, 0.3))
        for r in chance.sample(ranks, len(ranks)):
            os.kill(children[r].pid, signum)

    return during


def _stopped(tmp_path, scenario, ranks, signum):
    seed = random.randrange(1 << 30)
    during = _signal_when_ready(tmp_path, ranks, signum, seed)
    status = 128 + signum
    statuses = dict.fromkeys(range(RANKS), status)
    seen = spawn(
        scenario,
        RANKS,
        tmp_path,
        module="preempt_workers",
        statuses=statuses,
        during=during,
    )
    return seen, f"seed {seed}: {seen}"


def _check_one_common_stop(tmp_path, seen, where, status):
    """Every rank stopped at one step, with the status; that step's checkpoint is the only
    one; the weights agree."""
    steps = {rank["stopped"] for rank in seen}
    assert len(steps) == 1, where
    (stop,) = steps
    assert [rank["status"] for rank in seen] == [status] * RANKS, where
    with CheckpointManager(tmp_path / "run" / "checkpoints", read_only=True) as manager:
        assert manager.steps() == [stop], where
        assert manager.incomplete() == {}, where
    assert all(rank["weights"] == seen[0]["weights"] for rank in seen), where
    return stop


def test_a_plain_loop_agrees_at_the_poll_the_bound_names(tmp_path):
    """Preemption without a Run, on 2 ranks, every=2 and delay=2: rank 1's request after
    poll 6 names the first look after it (poll 8) plus 2 * 2 looks ahead: both ranks stop
    at poll 12 (6 + every * (delay + 1): the bound)."""
    seen = spawn("plain", 2, tmp_path, module="preempt_workers")
    expected = [0] * 11 + [signal.SIGUSR1] * 5
    assert [rank["answers"] for rank in seen] == [expected, expected]
    assert [rank["distributed"] for rank in seen] == [True, True]
    # SIGUSR1 on rank 0, SIGTERM on rank 1 before any poll: both stop at poll 2, on the
    # signal of the request the Store took first (the same on both).
    first = seen[0]["stops"]
    assert first in ([int(signal.SIGUSR1)], [int(signal.SIGTERM)])
    assert [rank["mixed"] for rank in seen] == [[0, first[0], first[0]]] * 2
    assert [rank["stops"] for rank in seen] == [first] * 2


def test_sigterm_to_one_rank_stops_all_at_one_step(tmp_path):
    """SIGTERM to one random rank of 4: all four save one checkpoint at one step within
    2 updates of the signal, and exit with 143."""
    target = random.randrange(RANKS)
    seen, where = _stopped(tmp_path, "every1", [target], signal.SIGTERM)
    stop = _check_one_common_stop(tmp_path, seen, where, 143)
    for rank, record in enumerate(seen):
        if rank != target:
            assert record["received"] == [], where
    ((signum, at, _),) = seen[target]["received"]
    assert signum == signal.SIGTERM, where
    assert at < stop <= at + 2, where
    print(f"SIGTERM at step {at} on rank {target}; every rank stopped at {stop}")


def test_sigusr1_to_all_ranks_stops_all_at_one_step(tmp_path):
    """SIGUSR1 to all 4 ranks, with ``Ranks(stop_every=3)``: one checkpoint at one step,
    the one a signalled rank asked for (the first request the Store took): the first look
    after its poll, then one more look, so within 2 * 3 updates of that rank's signal; every
    rank exits with 138.

    The ranks run up to one update apart (DDP's all-reduce holds them together), so the
    request that wins may come from a rank one update ahead of the first to be signalled:
    the bound holds from the winner's signal, not from the smallest step any rank saw."""
    seen, where = _stopped(tmp_path, "every3", list(range(RANKS)), signal.SIGUSR1)
    stop = _check_one_common_stop(tmp_path, seen, where, 138)
    arrivals, asked = [], set()
    for record in seen:
        ((signum, at, polls),) = record["received"]
        assert signum == signal.SIGUSR1, where
        assert polls in (at - 1, at), where  # a fresh Run polls once per update
        arrivals.append(at)
        asked.add((polls // 3 + 1) * 3 + 3)  # its next look, then one more
    assert stop in asked, where
    assert min(arrivals) < stop <= max(arrivals) + 6, where
    print(f"SIGUSR1 at steps {arrivals}; every rank stopped at {stop}")
