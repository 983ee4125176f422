"""Rollback on 2 JAX processes decides on every process's loss, as on torch: process 1's
NaN (process 0's loss finite there) rolls both back to the same checkpoint at the same
update, both skip the same batches, and both end equal to a run that never drew them."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("jax")

from jax_spawn import finish, start

pytestmark = pytest.mark.slow  # two starts of 2 JAX processes

NAN_AT, SKIP, TOTAL = 23, 2, 40


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    out = tmp_path_factory.mktemp("jax-rollback")
    results = {}
    for scenario in ("nan", "reference"):
        children = start("jax_rollback.py", 2, [str(out), scenario], out / scenario)
        statuses = finish(children)
        logs = [(out / f"{scenario}-{r}.log").read_text(errors="replace") for r in range(2)]
        assert statuses == [0, 0], logs
        results[scenario] = [json.loads((out / f"{scenario}-{r}.json").read_text()) for r in (0, 1)]
    return results


def test_a_nan_on_one_process_rolls_both_back_to_the_same_step(seen):
    rolled = [r["rolled"] for r in seen["nan"]]
    for mine in rolled:
        assert len(mine) == 1, rolled
        assert mine[0]["step"] == NAN_AT, rolled
        assert mine[0]["restored"] == 20, rolled
        assert mine[0]["data_position"] == NAN_AT + 1 + SKIP, rolled
    assert rolled[1][0]["own_loss"] == "nan"
    assert rolled[0][0]["own_loss"] != "nan"  # process 0 alone would not have rolled back


def test_both_skip_the_same_batches_and_end_as_a_run_that_never_drew_them(seen):
    drawn = [*range(NAN_AT + 1), *range(NAN_AT + 1 + SKIP, TOTAL + NAN_AT + 1 + SKIP - 20)]
    assert [r["drawn"] for r in seen["nan"]] == [drawn, drawn]
    assert [r["step"] for r in seen["nan"]] == [TOTAL, TOTAL]
    nan, reference = seen["nan"], seen["reference"]
    assert nan[0]["params"] == nan[1]["params"]
    assert [r["params"] for r in nan] == [r["params"] for r in reference]
