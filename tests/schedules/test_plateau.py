"""Tests for globalstep.schedules._plateau."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from globalstep import ConfigError, StepError
from globalstep.schedules import ReduceOnPlateau


def test_reduces_after_patience():
    """The value drops once more than `patience` updates bring no improvement."""
    lr = ReduceOnPlateau(1.0, patience=2, factor=0.5)
    assert [lr.update(m) for m in (3.0, 3.0, 3.0, 3.0)] == [1.0, 1.0, 1.0, 0.5]


def test_improvement_resets_patience():
    """An improvement resets the count of bad updates."""
    lr = ReduceOnPlateau(1.0, patience=1, factor=0.5)
    assert [lr.update(m) for m in (3.0, 3.0, 2.0, 2.0, 1.0)] == [1.0] * 5


def test_max_mode_and_cooldown():
    """In max mode a falling metric reduces, and the cooldown delays the next reduction."""
    lr = ReduceOnPlateau(1.0, mode="max", patience=0, factor=0.5, cooldown=2)
    assert [lr.update(m) for m in (1.0, 0.0, 0.0, 0.0, 0.0)] == [1.0, 0.5, 0.5, 0.5, 0.25]


def test_min_value_is_a_floor():
    """The value never goes below min_value."""
    lr = ReduceOnPlateau(1.0, patience=0, factor=0.1, min_value=0.05)
    for _ in range(5):
        lr.update(1.0)
    assert lr.value == 0.05


def test_nan_metric_counts_as_no_improvement():
    """A NaN metric counts as a bad update."""
    lr = ReduceOnPlateau(1.0, patience=0, factor=0.5)
    lr.update(1.0)
    assert lr.update(float("nan")) == 0.5


def test_call_and_values_give_the_current_value():
    """__call__ and values() return the value now at any step."""
    lr = ReduceOnPlateau(0.3)
    assert (lr(5), lr.values([1, 2]).tolist()) == (0.3, [0.3, 0.3])


@settings(deadline=None)
@given(metrics=st.lists(st.floats(-10, 10), max_size=40), cut=st.integers(0, 40))
def test_state_round_trip_resumes_exactly(metrics, cut):
    """A run resumed from state_dict() (through JSON) continues as the uninterrupted run."""
    whole = ReduceOnPlateau(1.0, patience=2, factor=0.5, cooldown=1)
    expected = [whole.update(m) for m in metrics]
    first = ReduceOnPlateau(1.0, patience=2, factor=0.5, cooldown=1)
    got = [first.update(m) for m in metrics[:cut]]
    second = ReduceOnPlateau(1.0, patience=2, factor=0.5, cooldown=1)
    second.load_state_dict(json.loads(json.dumps(first.state_dict(), allow_nan=False)))
    got += [second.update(m) for m in metrics[cut:]]
    assert got == expected


def test_matches_torch_reduce_lr_on_plateau():
    """The values equal torch.optim.lr_scheduler.ReduceLROnPlateau's on one metric series."""
    torch = pytest.importorskip("torch")
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    ref = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=2, factor=0.5, cooldown=1)
    ours = ReduceOnPlateau(1.0, patience=2, factor=0.5, cooldown=1)
    metrics = [5, 4, 4, 4, 4, 3.9999, 4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2]
    for m in metrics:
        ref.step(m)
        assert ours.update(m) == opt.param_groups[0]["lr"]


INVALID = [
    ("factor one", {"factor": 1.0}, "factor", "1.0"),
    ("negative patience", {"patience": -1}, "patience", "-1"),
    ("float cooldown", {"cooldown": 1.5}, "cooldown", "1.5"),
    ("bad mode", {"mode": "up"}, "mode", "'up'"),
    ("bad threshold mode", {"threshold_mode": "pct"}, "threshold_mode", "'pct'"),
    ("negative min", {"min_value": -1.0}, "min_value", "-1.0"),
    ("NaN threshold", {"threshold": float("nan")}, "threshold", "nan"),
]


@pytest.mark.parametrize(
    ("kwargs", "parameter", "value"),
    [c[1:] for c in INVALID],
    ids=[c[0] for c in INVALID],
)
def test_invalid_parameter(kwargs, parameter, value):
    """An invalid parameter raises ConfigError naming it and the value received."""
    with pytest.raises(ConfigError, match=rf"`{parameter}` .*; got {parameter}={value}"):
        ReduceOnPlateau(1.0, **kwargs)


def test_non_numeric_metric():
    """A metric that is not a number is refused."""
    with pytest.raises(ConfigError, match="`metric` must be a real number; got metric='x'"):
        ReduceOnPlateau(1.0).update("x")


def test_negative_step():
    """A negative step is refused."""
    with pytest.raises(StepError, match="step=-1"):
        ReduceOnPlateau(1.0)(-1)


def test_bad_state_keys():
    """A state with missing keys is refused."""
    with pytest.raises(ConfigError, match="`state` must be a mapping with keys"):
        ReduceOnPlateau(1.0).load_state_dict({"value": 1.0})


def test_bad_state_count():
    """A state with a negative count is refused, naming the key."""
    state = ReduceOnPlateau(1.0).state_dict() | {"updates": -1}
    with pytest.raises(ConfigError, match=r"`state\['updates'\]` must be an int >= 0"):
        ReduceOnPlateau(1.0).load_state_dict(state)


def test_bad_state_best():
    """A state whose best is NaN is refused."""
    state = ReduceOnPlateau(1.0).state_dict() | {"best": float("nan")}
    with pytest.raises(ConfigError, match=r"`state\['best'\]` must be a finite number"):
        ReduceOnPlateau(1.0).load_state_dict(state)


def test_abs_threshold_needs_an_absolute_improvement():
    """With threshold_mode='abs' an improvement smaller than threshold counts as none."""
    lr = ReduceOnPlateau(1.0, patience=0, factor=0.5, threshold=0.1, threshold_mode="abs")
    assert lr.update(1.0) == 1.0
    assert lr.update(0.95) == 0.5  # better by 0.05 < 0.1: no improvement
    assert lr.update(0.8) == 0.5  # better than 1.0 by 0.2


def test_repr_shows_the_value_now():
    """repr() shows the parameters and the value reached."""
    lr = ReduceOnPlateau(1.0, patience=0, factor=0.5)
    lr.update(1.0)
    lr.update(2.0)
    assert repr(lr) == "ReduceOnPlateau(1.0, mode='min', factor=0.5, patience=0, value=0.5)"
