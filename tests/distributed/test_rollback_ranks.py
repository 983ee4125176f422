"""Run's rollback on 2 gloo ranks: the decision on every rank's loss together.

A NaN in rank 1's batch only (rank 0's loss finite at that update) rolls both ranks back at
the same update to the same step; both skip the same batches and end with the parameters,
momentum and each rank's own random streams (per-rank leaves, perrank's C1) of a run that
never drew the bad batches, bit for bit, on both ranks; the writer logs one rollback. A
spike of the mean rolls both back; a spike of one rank's value alone does not. The errors
(the tag on some ranks only, a value that is not a number, no checkpoint, too many
rollbacks) are raised on every rank. The ranks' side is rollback_workers.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from rollback_workers import NAN_AT, SKIP, TOTAL
from spawn import spawn

from globalstep.summary import read_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Two ranks through every part of the scenario; returns each rank's result and the
    output directory."""
    out = tmp_path_factory.mktemp("rollback")
    return spawn("rollback", 2, out, module="rollback_workers"), out


def test_a_nan_on_one_rank_rolls_every_rank_back_to_the_same_step(ranks):
    """Rank 1's NaN at data position 23 (rank 0's loss finite there): both ranks roll back
    once, at the same update, to step 20, and move the data on past 23 + 2."""
    results, _ = ranks
    rolled = [r["nan"]["rolled"] for r in results]
    expected = {
        "step": NAN_AT,
        "position": NAN_AT,
        "restored": 20,
        "data_position": NAN_AT + 1 + SKIP,
    }
    for mine in rolled:
        assert len(mine) == 1
        assert {k: v for k, v in mine[0].items() if k != "own_loss"} == expected
    assert rolled[1][0]["own_loss"] == "nan"
    assert rolled[0][0]["own_loss"] != "nan"  # rank 0 alone would not have rolled back
    assert float(rolled[0][0]["own_loss"]) < 100.0


def test_every_rank_skips_the_same_batches(ranks):
    """Both ranks drew positions 0..23, then 26..45: the bad batch and the 2 after it skipped."""
    results, _ = ranks
    drawn = [*range(NAN_AT + 1), *range(NAN_AT + 1 + SKIP, TOTAL + NAN_AT + 1 + SKIP - 20)]
    assert [r["nan"]["drawn"] for r in results] == [drawn, drawn]
    assert [r["nan"]["step"] for r in results] == [TOTAL, TOTAL]


def test_the_ranks_end_equal_to_a_run_that_never_drew_the_bad_batches(ranks):
    """Parameters and momentum are the same bytes on both ranks and equal the reference
    run's (no NaN, the data position moved from 20 to 26 by hand), rank by rank; so are
    each rank's own random streams (dropout's, the input noise's), restored to that rank's
    state at step 20 by the rollback, which differ between the ranks."""
    results, _ = ranks
    zero, one = (r["nan"] for r in results)
    assert zero["params"] == one["params"]
    assert zero["momentum"] == one["momentum"]
    assert zero["rng"][0] != one["rng"][0]
    assert zero["rng"][1] != one["rng"][1]
    for result in results:
        for key in ("params", "momentum", "rng"):
            assert result["nan"][key] == result["reference"][key], key
        assert result["reference"]["rolled"] == []


def test_the_writer_logs_one_rollback_and_each_step_once(ranks):
    """The logs hold one rollback (from step 23, at step 20), each step's loss once, equal to
    the reference run's curve; the writer printed the rollback, rank 1 printed nothing."""
    results, out = ranks
    log = read_run(out / "nan" / "logs")
    [rollback] = log.scalars["run/rollback_from_step"]
    assert (rollback.step, rollback.value) == (20, float(NAN_AT))
    [text] = log.texts["run/rollback"]
    assert "not finite on rank 1" in text.value
    assert "restored step 20, skipped 2 batches" in text.value
    reference = read_run(out / "reference" / "logs")
    assert [p.step for p in log.scalars["loss"]] == list(range(1, TOTAL + 1))
    assert [p.value for p in log.scalars["loss"]] == [p.value for p in reference.scalars["loss"]]
    assert (
        "rolled back: `loss` was nan at step 23 (not finite on rank 1)"
        in (results[0]["nan"]["output"])
    )
    assert results[1]["nan"]["output"] == ""


def test_a_spike_of_the_mean_rolls_back_every_rank_and_one_of_a_rank_alone_does_not(ranks):
    """Rank 1's 100 (mean 50.5 > 5 x 1) rolls both back to step 10; its 8 (mean 4.5) does not."""
    results, _ = ranks
    expected = [True] * 12 + [False] + [True] * 4
    for result in results:
        assert result["spike"] == {"answers": expected, "after_spike": 10, "end": 14}


def test_the_decision_follows_the_ranks_reduce(ranks):
    """With Ranks(reduce="max") rank 1's 8 is a spike of the maximum: both roll back to 10."""
    results, _ = ranks
    expected = [True] * 12 + [False] + [True] * 3 + [False]
    for result in results:
        assert result["spike-max"] == {"answers": expected, "after_spike": 10, "end": 10}


def test_the_tag_on_some_ranks_only_raises_on_every_rank(ranks):
    """`loss` given on rank 0 only: a ConfigError on both ranks naming rank 0 of 2."""
    results, _ = ranks
    for result in results:
        assert result["one-rank"].startswith(
            "ConfigError: `loss` must be passed to Run.update on every rank or on none"
        )
        assert "passed on rank 0 of 2 at step 0" in result["one-rank"]


def test_a_value_that_is_not_a_number_raises_on_every_rank(ranks):
    """Rank 1's "x": rank 1 raises its own error, rank 0 one naming rank 1."""
    results, _ = ranks
    zero, one = (r["invalid"] for r in results)
    assert one == ("ConfigError: `loss` must be a number for the rollback policy; got loss='x'.")
    assert zero == (
        "ConfigError: `loss` must be a number for the rollback policy on every rank; "
        "got loss='not a number on rank 1 at step 0'."
    )


def test_a_nan_before_any_checkpoint_raises_on_every_rank(ranks):
    """Rank 1's NaN with no checkpoint: DivergenceError on both ranks."""
    results, _ = ranks
    for result in results:
        assert result["no-checkpoint"].startswith(
            "DivergenceError: `loss` was nan at step 0 (not finite on rank 1) and there is "
            "no checkpoint at or before it"
        )


def test_too_many_rollbacks_raise_on_every_rank(ranks):
    """Rank 1's second NaN past max_rollbacks=1: DivergenceError on both, naming the steps."""
    results, _ = ranks
    for result in results:
        assert result["give-up"].startswith(
            "DivergenceError: `loss` was bad at steps [2, 3] (nan at step 3: not finite on "
            "rank 1), more than max_rollbacks=1"
        )


def test_where_the_writer_alone_saves_every_rank_restores_its_step(ranks):
    """checkpoint_options={"distributed": False}: rank 1's NaN at step 12 rolls both ranks
    back to the writer's step 10, rank 1 restoring the writer's counter (10) as rank 0 does."""
    results, _ = ranks
    for result in results:
        assert result["writer-saves"] == {
            "answers": [True] * 12 + [False],
            "step": 10,
            "counter": [10.0],
            "data_position": 1,  # no batch drawn; skip_batches=1 moved it on
        }
