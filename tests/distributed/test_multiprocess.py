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


def test_four_workers_share_the_indices_exactly_once(counter):
    """Four workers taking 1,000 indices each get exactly 0..3999, each once."""
    taken = [index for worker in counter for index in worker["indices"]]
    assert len(taken) == 4000
    assert sorted(taken) == list(range(4000))


def test_each_worker_sees_its_indices_increase(counter):
    """Indices reach each worker in increasing order."""
    for worker in counter:
        assert worker["indices"] == sorted(worker["indices"])
