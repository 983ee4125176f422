"""Several processes in a gloo group on 127.0.0.1: steps agree, drift is named, the shared
counter hands out each index once.

Each fixture starts its processes once (a child imports torch, which takes seconds) and
the tests read what the ranks saw.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from spawn import spawn

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """Three ranks: DDP training, reduced metrics, then one rank skipping a tick."""
    return spawn("group", 3, tmp_path_factory.mktemp("group"))


@pytest.fixture(scope="module")
def counter(tmp_path_factory):
    """Four workers taking 1,000 indices each from one SharedStepCounter."""
    return spawn("counter", 4, tmp_path_factory.mktemp("counter"))


def test_steps_agree_under_ddp(group):
    """Three DDP ranks ticking once per update agree at every check and at the end."""
    assert [r["ddp_step"] for r in group] == [30, 30, 30]
    assert [r["ddp_checks"] for r in group] == [3, 3, 3]


def test_ddp_ranks_hold_the_same_weights(group):
    """DDP really synchronised the ranks (their data differ; their weights do not)."""
    assert group[1]["weights"] == group[0]["weights"] == group[2]["weights"]


def test_a_rank_that_skips_a_tick_is_caught_and_named(group):
    """Rank 1 missing one tick is caught on every rank at the next check, naming it."""
    for seen in group:
        skip = seen["skip"]
        assert skip["at"] == 10
        assert skip["ranks"] == [1]
        assert skip["steps"] == [40, 39, 40]
        assert "rank 1 is at step 39" in skip["message"]
        assert "ranks 0, 2 are at step 40" in skip["message"]


@pytest.mark.parametrize(
    ("op", "loss", "count"),
    [("mean", 2.0, 10.0), ("sum", 6.0, 30.0), ("max", 3.0, 20.0), ("min", 1.0, 0.0)],
)
def test_metrics_are_reduced_across_ranks(group, op, loss, count):
    """reduce_metrics gives every rank the reduction of all ranks' values."""
    for seen in group:
        assert seen["reduced"][op] == {"loss": loss, "count": count}


def test_ranks_with_other_tags_raise_on_every_rank(group):
    """Reducing different tags on different ranks raises on each rank, naming its tags."""
    assert "['accuracy']" in group[0]["tags_error"]
    for seen in group:
        assert "must have the same tags on every rank" in seen["tags_error"]


@pytest.fixture(scope="module")
def counter_kill(tmp_path_factory):
    """Three workers on one counter; worker 0 is SIGKILLed after taking 100 indices."""
    return spawn("counter-kill", 3, tmp_path_factory.mktemp("counter-kill"), killed=(0,))


def test_a_killed_worker_loses_only_its_own_indices(counter_kill):
    """The killed worker's 100 indices and the survivors' 2,000 are 0..2099, each once."""
    dead = counter_kill[0]["indices"]
    alive = [index for worker in counter_kill[1:] for index in worker["indices"]]
    assert len(dead) == 100
    assert len(alive) == 2000
    assert sorted(dead + alive) == list(range(2100))


def test_four_workers_share_the_indices_exactly_once(counter):
    """Four workers taking 1,000 indices each get exactly 0..3999, each once."""
    taken = [index for worker in counter for index in worker["indices"]]
    assert len(taken) == 4000
    assert sorted(taken) == list(range(4000))


def test_each_worker_sees_its_indices_increase(counter):
    """Indices reach each worker in increasing order."""
    for worker in counter:
        assert worker["indices"] == sorted(worker["indices"])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Two ranks each making a Run in one directory, scalars reduced, checks every 5."""
    out = tmp_path_factory.mktemp("run")
    return out / "run", spawn("run", 2, out)


def test_only_the_writer_rank_shows_progress_and_messages(run):
    """Rank 0 prints the run's messages and progress lines; rank 1 prints nothing."""
    _, ranks = run
    assert "globalstep: new run in" in ranks[0]["output"]
    assert "step 12/12" in ranks[0]["output"]
    assert ranks[1]["output"] == ""


def test_the_writer_logs_the_mean_over_ranks(run):
    """The JSONL log holds each step once, with the mean of both ranks' losses."""
    import json

    directory, _ = run
    [log] = (directory / "logs").glob("*.jsonl")
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    losses = {row["step"]: row["value"] for row in rows if row.get("tag") == "loss"}
    # rank r logs (r + 1) * step_before_update at step_before_update + 1: the mean is 1.5x.
    assert losses == {step: 1.5 * (step - 1) for step in range(1, 13)}


def test_only_the_writer_rank_saves_checkpoints(run):
    """Both ranks share one checkpoint directory without a lock error; steps 6 and 12 exist."""
    from globalstep import CheckpointManager

    directory, _ = run
    with CheckpointManager(directory / "checkpoints", read_only=True) as manager:
        assert manager.steps() == [6, 12]


def test_a_run_in_a_process_group_saves_on_every_rank(run):
    """In a process group the Run's manager is distributed on both ranks (every rank takes
    part in each save; the writer commits)."""
    _, ranks = run
    assert [r["every_rank_saves"] for r in ranks] == [True, True]


def test_a_run_on_several_ranks_checks_its_steps(run):
    """The Run's step agreement check was called on every update of both ranks."""
    _, ranks = run
    assert [r["checks"] for r in ranks] == [12, 12]


def test_a_run_catches_a_rank_that_skipped_an_update(run):
    """With the default Ranks(), rank 1 skipping update 3 raises at update 100, naming it."""
    _, ranks = run
    for seen in ranks:
        assert seen["skip"]["at"] == 100
        assert seen["skip"]["ranks"] == [1]
        assert "rank 1 is at step 99" in seen["skip"]["message"]
