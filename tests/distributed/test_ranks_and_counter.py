"""Tests for globalstep.distributed._agreement in one process (the multi-process ones are in
test_multiprocess.py)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from globalstep import CheckpointManager, Clock, ConfigError  # noqa: E402
from globalstep.distributed import (  # noqa: E402
    SharedStepCounter,
    StepAgreement,
    assert_steps_agree,
    broadcast_int,
    gather_floats,
    is_writer,
    rank,
    reduce_metrics,
    world_size,
)


@pytest.fixture
def group_of_one():
    """A gloo process group of one rank, destroyed after the test."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_without_a_group_the_environment_names_the_rank(monkeypatch):
    """Before init_process_group, RANK and WORLD_SIZE (set by torchrun) are read."""
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert (rank(), world_size(), is_writer(), is_writer(3)) == (3, 4, False, True)


def test_a_malformed_rank_variable_is_an_error(monkeypatch):
    """A RANK that is not an int >= 0 raises, naming the variable."""
    monkeypatch.setenv("RANK", "first")
    with pytest.raises(ConfigError, match=r"`RANK` must be an int >= 0.*got RANK='first'"):
        rank()


def test_a_zero_world_size_variable_is_an_error(monkeypatch):
    """WORLD_SIZE=0 raises, naming the variable."""
    monkeypatch.setenv("WORLD_SIZE", "0")
    with pytest.raises(ConfigError, match=r"`WORLD_SIZE` must be an int >= 1; got WORLD_SIZE=0"):
        world_size()


def test_a_writer_rank_outside_the_world_is_an_error(group_of_one):
    """is_writer(1) in a group of one raises, naming the world size."""
    with pytest.raises(ConfigError, match=r"`writer_rank` must be a rank below the world size, 1"):
        is_writer(1)


def test_a_group_of_one_agrees_with_itself(group_of_one):
    """assert_steps_agree in a group of one returns the clock's step."""
    clock = Clock()
    clock.tick(12)
    assert assert_steps_agree(clock) == 12


def test_a_bad_clock_is_an_error():
    """assert_steps_agree refuses what is neither a Clock nor an int step."""
    with pytest.raises(ConfigError, match=r"`clock` must be a globalstep Clock or an int step"):
        assert_steps_agree(-1)


def test_step_agreement_checks_every_nth_call(group_of_one):
    """StepAgreement(every=3) checks on calls 3 and 6 only."""
    check, clock = StepAgreement(every=3), Clock()
    assert [check(clock) for _ in range(6)] == [False, False, True, False, False, True]


def test_step_agreement_refuses_zero():
    """StepAgreement(every=0) raises, naming the parameter."""
    with pytest.raises(ConfigError, match=r"`every` must be an int >= 1.*got every=0"):
        StepAgreement(every=0)


def test_reducing_in_a_group_of_one_keeps_the_values(group_of_one):
    """The mean over one rank of numbers, NumPy scalars and tensors is each value."""
    metrics = {"loss": torch.tensor(0.5), "accuracy": np.float32(0.25), "count": 3}
    assert reduce_metrics(metrics) == {"loss": 0.5, "accuracy": 0.25, "count": 3.0}


def test_an_unknown_reduce_op_is_an_error():
    """reduce_metrics(op="median") raises, listing the known ops."""
    with pytest.raises(ConfigError, match=r"`op` must be one of 'max', 'mean', 'min', 'sum'"):
        reduce_metrics({"loss": 1.0}, op="median")


def test_a_metric_that_is_not_a_number_is_an_error():
    """A string value raises, naming its tag."""
    with pytest.raises(ConfigError, match=r"`metrics\['loss'\]` must be a number"):
        reduce_metrics({"loss": "low"})


def test_metrics_must_be_a_mapping():
    """A list of values raises."""
    with pytest.raises(ConfigError, match=r"`metrics` must be a mapping"):
        reduce_metrics([1.0])  # type: ignore[arg-type]


def test_the_counter_starts_at_start():
    """SharedStepCounter(start=10) hands out 10, 11, ..."""
    counter = SharedStepCounter(dist.HashStore(), "steps", start=10)
    assert [counter.next(), counter.next()] == [10, 11]


def test_a_second_counter_on_the_key_keeps_the_count():
    """A worker that joins later continues the count instead of resetting it."""
    store = dist.HashStore()
    first = SharedStepCounter(store, "steps")
    first.next()
    assert SharedStepCounter(store, "steps", start=0).next() == 1


def test_the_counter_survives_a_checkpoint(tmp_path):
    """The counter's value is saved in a checkpoint and restored into a new store."""
    counter = SharedStepCounter(dist.HashStore(), "steps")
    for _ in range(5):
        counter.next()
    clock = Clock()
    with CheckpointManager(tmp_path) as manager:
        manager.save(clock, {"counter": counter})
    restored = SharedStepCounter(dist.HashStore(), "steps")
    with CheckpointManager(tmp_path, read_only=True) as manager:
        manager.restore({"counter": restored})
    assert restored.next() == 5


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"key": ""}, r"`key` must be a non-empty string"),
        ({"key": "k", "start": -1}, r"`start` must be an int >= 0; got start=-1"),
    ],
)
def test_a_bad_counter_parameter_is_an_error(kwargs, match):
    """An empty key or a negative start raises, naming the parameter."""
    with pytest.raises(ConfigError, match=match):
        SharedStepCounter(dist.HashStore(), **kwargs)


def test_a_counter_needs_a_store():
    """A dict in place of a Store raises."""
    with pytest.raises(
        ConfigError, match=r"`store` must be a key-value store \(a torch.distributed Store"
    ):
        SharedStepCounter({}, "steps")


def test_a_bad_counter_state_is_an_error():
    """load_state_dict refuses a state that is not {'next': int >= 0}."""
    counter = SharedStepCounter(dist.HashStore(), "steps")
    with pytest.raises(ConfigError, match=r"`state` must be \{'next': int >= 0\}"):
        counter.load_state_dict({"next": -2})


def test_gather_floats_gives_every_ranks_values(group_of_one):
    """In a group of one, the one rank's numbers (ints, NumPy and tensor scalars, NaN)."""
    gathered = gather_floats([1, np.float32(2.5), torch.tensor(-3.0), float("inf")])
    assert gathered == [[1.0, 2.5, -3.0, float("inf")]]
    [[nan]] = gather_floats([float("nan")])
    assert nan != nan


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ("12", r"`values` must be a sequence of numbers; got values='12'"),
        (3.0, r"`values` must be a sequence of numbers; got values=3.0"),
        ([1.0, "x"], r"`values\[1\]` must be a number \(int or float\); got values\[1\]='x'"),
        ([True], r"`values\[0\]` must be a number \(int or float\); got values\[0\]=True"),
    ],
)
def test_gather_floats_refuses_what_is_not_numbers(values, match):
    """A string, a lone number, or an element that is not a number raise, naming it."""
    with pytest.raises(ConfigError, match=match):
        gather_floats(values)


def test_broadcast_int_gives_the_source_ranks_value(group_of_one):
    """In a group of one, rank 0's value, the whole int64 range included."""
    assert broadcast_int(2**63 - 1) == 2**63 - 1
    assert broadcast_int(-1, src=0) == -1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"value": 2**63},
            r"`value` must be an int in the int64 range; got value=9223372036854775808",
        ),
        ({"value": True}, r"`value` must be an int in the int64 range; got value=True"),
        ({"value": 1, "src": 1}, r"`src` must be a rank, an int in \[0, 1\); got src=1"),
        ({"value": 1, "src": -1}, r"`src` must be a rank, an int in \[0, 1\); got src=-1"),
    ],
)
def test_broadcast_int_refuses_bad_arguments(kwargs, match):
    """A value outside int64 or a source that is not a rank raise, naming the parameter."""
    with pytest.raises(ConfigError, match=match):
        broadcast_int(**kwargs)
