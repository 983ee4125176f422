"""Tests for globalstep._guards."""

import warnings

import pytest

from globalstep import ConfigError
from globalstep._guards import FrozenStepWarning, StaleStepDetector


def test_warns_once_naming_the_clock():
    """Many reads at one step warn once, naming the clock and the fix."""
    detector = StaleStepDetector("lr schedule", threshold=10)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(50):
            detector.observe(7, "critic")
    assert len(record) == 1
    assert record[0].category is FrozenStepWarning
    assert "clock 'critic'" in str(record[0].message)
    assert "clock.tick()" in str(record[0].message)


def test_advancing_step_never_warns():
    """A step that advances between reads never warns, even with repeats below the threshold."""
    detector = StaleStepDetector("writer", threshold=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(100):
            detector.observe(step)
            detector.observe(step)


@pytest.mark.parametrize("threshold", [1, 0, 2.5, True])
def test_bad_threshold(threshold):
    """A threshold below 2 or not an int is refused."""
    with pytest.raises(ConfigError, match="`threshold`"):
        StaleStepDetector("x", threshold=threshold)


def test_warning_words_for_a_writer():
    """`used` and `effect` replace the schedule's words in the warning."""
    detector = StaleStepDetector("w", threshold=2, used="written to", effect="points pile up")
    with pytest.warns(FrozenStepWarning, match="w was written to 2 times at step 3") as record:
        _observe_many(detector, 3, 2)
    assert "so points pile up." in str(record[0].message)


def _observe_many(detector, step, count):
    """Observes step count times."""
    for _ in range(count):
        detector.observe(step)
