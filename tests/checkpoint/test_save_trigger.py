"""Tests for globalstep.checkpoint._save_trigger: the one owner of "is a save due?"."""

import pytest

from globalstep import Clock, ConfigError, every
from globalstep.checkpoint import SaveTrigger


def test_a_whole_step_interval_has_a_grid_and_fires_on_it():
    """save_every=100 fires at 100, 200, ... and names the next step worth asking."""
    clock, trigger = Clock(), SaveTrigger(100)
    assert trigger.grid == (100, 100)
    fired = []
    for _ in range(300):
        clock.tick()
        if trigger.due(clock):
            fired.append(clock.step)
    assert fired == [100, 200, 300]
    assert [trigger.next_due(s) for s in (0, 99, 100, 101, 250)] == [100, 100, 200, 200, 300]


def test_other_durations_and_triggers_are_asked_at_every_step():
    """A duration that is not whole steps, or a Trigger passed in, has no grid."""
    given = every(10)
    assert SaveTrigger(given).trigger is given
    assert SaveTrigger(given).grid is None
    assert SaveTrigger("1ep").grid is None
    assert SaveTrigger("1ep").next_due(41) == 42
    assert SaveTrigger.of(None) is None


def test_resume_restores_the_state_a_checkpoint_stored():
    """A resumed trigger fires where an uninterrupted one would, not again at once."""
    clock, first = Clock(), SaveTrigger(100)
    for _ in range(150):
        clock.tick()
        first.due(clock)
    resumed = SaveTrigger(100)
    assert resumed.resume(first.state_dict())
    assert not resumed.due(clock)
    clock.tick(50)
    assert resumed.due(clock)


def test_resume_of_another_trigger_state_skips_past_the_clock_where_given():
    """Another save_every's state is not loaded: with a clock, fire only at boundaries ahead."""
    clock = Clock()
    clock.tick(150)
    other = SaveTrigger("1ep").state_dict()
    fresh = SaveTrigger(100)
    assert not fresh.resume(other)
    assert fresh.due(clock)  # no clock given: a fresh trigger fires at the boundary passed
    skipped = SaveTrigger(100)
    assert not skipped.resume(None, clock)
    assert not skipped.due(clock)


def test_a_bad_save_every_is_named():
    """An invalid save_every raises a ConfigError naming it."""
    with pytest.raises(ConfigError, match=r"`duration` must be >= 0; got duration=-5"):
        SaveTrigger(-5)
