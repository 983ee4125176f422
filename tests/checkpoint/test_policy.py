"""Tests for globalstep.checkpoint._directory.policy."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from globalstep import ConfigError
from globalstep.checkpoint import (
    CheckpointInfo,
    KeepAny,
    KeepBest,
    KeepEveryNHours,
    KeepEveryNSteps,
    KeepLatest,
    policy_from_config,
)
from globalstep.checkpoint._directory.policy import retained, unkept_steps


def infos(steps, *, hours_apart=0.0, losses=None):
    """Checkpoint infos at the given steps, optionally with a loss each."""
    return [
        CheckpointInfo(step, i * hours_apart * 3600, {} if losses is None else {"loss": losses[i]})
        for i, step in enumerate(steps)
    ]


def test_latest_keeps_n_newest():
    """KeepLatest keeps the n newest checkpoints."""
    assert sorted(retained(KeepLatest(2), infos([1, 2, 3, 4]))) == [3, 4]


def test_every_n_steps_keeps_multiples():
    """KeepEveryNSteps keeps steps that are multiples of n, plus the newest."""
    assert sorted(retained(KeepEveryNSteps(100), infos([50, 100, 150, 200, 250]))) == [
        100,
        200,
        250,
    ]


def test_every_n_hours_keeps_one_per_window():
    """KeepEveryNHours keeps the first checkpoint of each window of n hours."""
    kept = retained(KeepEveryNHours(1.0), infos(range(10), hours_apart=0.4))
    assert sorted(kept) == [0, 3, 6, 9]


def test_best_min_keeps_lowest():
    """KeepBest with mode min keeps the k lowest values."""
    kept = KeepBest("loss", k=2).keep(infos([1, 2, 3, 4], losses=[5.0, 1.0, 3.0, 2.0]))
    assert sorted(kept) == [2, 4]


def test_best_max_keeps_highest():
    """KeepBest with mode max keeps the k highest values."""
    kept = KeepBest("acc", k=1, mode="max").keep(
        [CheckpointInfo(1, 0, {"acc": 0.9}), CheckpointInfo(2, 0, {"acc": 0.5})]
    )
    assert list(kept) == [1]


def test_best_ignores_nan_and_missing():
    """A NaN or missing metric is never among the best."""
    kept = KeepBest("loss", k=2).keep(
        [
            CheckpointInfo(1, 0, {"loss": float("nan")}),
            CheckpointInfo(2, 0, {}),
            CheckpointInfo(3, 0, {"loss": 9.0}),
        ]
    )
    assert list(kept) == [3]


def test_best_k_never_evicts_the_newest():
    """With best-k alone, the newest checkpoint is kept even when it is the worst."""
    kept = retained(KeepBest("loss", k=1), infos([1, 2, 3], losses=[1.0, 2.0, 9.0]))
    assert sorted(kept) == [1, 3]
    assert kept[3] == "newest"


def test_latest_never_evicts_the_best():
    """Latest-N combined with best-k keeps the best even when it is old."""
    policy = KeepAny((KeepLatest(2), KeepBest("loss", k=1)))
    kept = retained(policy, infos([1, 2, 3, 4, 5], losses=[0.1, 5.0, 4.0, 3.0, 2.0]))
    assert sorted(kept) == [1, 4, 5]
    assert kept[1] == "best 1 by loss (min)"


def test_combination_of_all_policies():
    """Latest, every-n-steps, every-n-hours and best combine as a union."""
    policy = KeepAny(
        (KeepLatest(1), KeepEveryNSteps(4), KeepEveryNHours(10.0), KeepBest("loss", k=1))
    )
    steps = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    losses = [9.0, 8.0, 0.5, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0]
    kept = retained(policy, infos(steps, hours_apart=1.0, losses=losses))
    # 1: first of the 10-hour window; 3: best; 4, 8: multiples; 9: newest.
    assert sorted(kept) == [1, 3, 4, 8, 9]


def test_empty_keep_any_keeps_all():
    """KeepAny with no policy keeps every checkpoint."""
    assert sorted(retained(KeepAny(()), infos([1, 2, 3]))) == [1, 2, 3]


def test_nothing_to_retain():
    """No checkpoints, nothing kept."""
    assert retained(KeepLatest(3), []) == {}


@pytest.mark.parametrize(
    "policy",
    [
        KeepLatest(3),
        KeepEveryNSteps(10),
        KeepEveryNHours(0.5),
        KeepBest("acc", 2, "max"),
        KeepAny((KeepLatest(1), KeepBest("loss"))),
    ],
)
def test_config_round_trip(policy):
    """Every policy round-trips through to_config and policy_from_config."""
    assert policy_from_config(policy.to_config()) == policy


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: KeepLatest(0), "`max_to_keep` must be an int >= 1; got max_to_keep=0"),
        (lambda: KeepEveryNSteps(True), "`keep_every_n_steps` must be an int >= 1"),
        (lambda: KeepEveryNHours(0), "`keep_every_n_hours` must be a finite number > 0"),
        (lambda: KeepEveryNHours(float("inf")), "`keep_every_n_hours` must be a finite"),
        (lambda: KeepBest(""), "`metric` must be a non-empty string"),
        (lambda: KeepBest("loss", k=0), "`k` must be an int >= 1"),
        (lambda: KeepBest("loss", mode="lowest"), "`mode` must be 'min' or 'max'"),
        (lambda: KeepAny((3,)), "`policies` must all be KeepPolicy objects"),
        (lambda: policy_from_config([]), "`config` must be a mapping"),
        (lambda: policy_from_config({"policy": "oldest"}), r"`config\['policy'\]` must name"),
        (lambda: policy_from_config({"policy": "latest"}), "`config` must hold the policy's"),
    ],
)
def test_invalid_policies_are_refused(make, match):
    """Each invalid parameter raises a ConfigError naming it."""
    with pytest.raises(ConfigError, match=match):
        make()


def test_checkpoint_saved_last_is_kept_below_the_newest():
    """The checkpoint saved last is kept even when a higher step exists (a resumed run)."""
    later = [CheckpointInfo(4, 10.0, {}), CheckpointInfo(2, 99.0, {}), CheckpointInfo(1, 0.0, {})]
    kept = retained(KeepLatest(1), later)
    assert kept == {4: "newest, latest 1", 2: "saved last"}


@given(
    steps=st.lists(st.integers(0, 500), unique=True, max_size=40).map(sorted),
    latest=st.integers(1, 5),
    every=st.lists(st.integers(1, 50), max_size=2),
)
def test_unkept_steps_agrees_with_retained(steps, latest, every):
    """The step-only fast path deletes exactly what retained() does not keep."""
    policy = KeepAny((KeepLatest(latest), *(KeepEveryNSteps(n) for n in every)))
    infos = [CheckpointInfo(s, 0.0, {}) for s in steps]
    kept = retained(policy, infos)
    assert unkept_steps(policy, steps) == [s for s in steps if s not in kept]


def test_unkept_steps_declines_policies_that_read_metadata():
    """Policies reading metrics or times are left to retained(); keeping all deletes none."""
    assert unkept_steps(KeepAny((KeepLatest(1), KeepBest("loss"))), [1, 2]) is None
    assert unkept_steps(KeepAny(()), [1, 2]) == []
