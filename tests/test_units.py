"""Tests for globalstep._units."""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from globalstep import Clock, ConfigError, ConversionError, Duration, DurationError, Unit


@pytest.mark.parametrize(
    ("text", "value", "unit"),
    [
        ("500st", 500, Unit.STEPS),
        ("500ba", 500, Unit.STEPS),
        ("500", 500, Unit.STEPS),
        (500, 500, Unit.STEPS),
        ("3ep", 3, Unit.EPOCHS),
        ("0.5ep", Fraction(1, 2), Unit.EPOCHS),
        ("1e6sp", 1_000_000, Unit.SAMPLES),
        ("2e9tok", 2_000_000_000, Unit.TOKENS),
        ("90s", 90, Unit.SECONDS),
        ("30min", 1800, Unit.SECONDS),
        ("2h", 7200, Unit.SECONDS),
        ("1.5h", 5400, Unit.SECONDS),
        (" 7 st ", 7, Unit.STEPS),
    ],
)
def test_parse(text, value, unit):
    """Every unit of the grammar parses to its exact value."""
    d = Duration.parse(text)
    assert (d.value, d.unit) == (value, unit)


@pytest.mark.parametrize("text", ["", "st", "5 steps", "-3ep", "1e", "abc", "5x", 2.5, None, True])
def test_malformed_shows_grammar(text):
    """A malformed duration raises DurationError that shows the accepted grammar."""
    with pytest.raises(DurationError, match="NUMBER UNIT") as info:
        Duration.parse(text, "save_every")
    assert info.value.parameter == "save_every"


@pytest.mark.parametrize("text", ["1.5st", "2.5sp", "0.1tok"])
def test_whole_units_refuse_fractions(text):
    """Steps, samples and tokens must be whole numbers."""
    with pytest.raises(ConfigError, match="whole number"):
        Duration.parse(text)


def test_negative_int_rejected():
    """A negative int of steps is refused."""
    with pytest.raises(ConfigError, match="must be >= 0"):
        Duration.parse(-5)


def test_direct_construction_validated():
    """Duration() itself checks its fields."""
    with pytest.raises(ConfigError, match="`value`"):
        Duration(Fraction(-1), Unit.STEPS)
    with pytest.raises(ConfigError, match="`unit`"):
        Duration(Fraction(1), "st")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="whole number"):
        Duration(Fraction(1, 2), Unit.SAMPLES)


def test_to_steps_conversions():
    """Epochs, samples and tokens convert with what the clock knows; fractions round up."""
    clock = Clock(steps_per_epoch=12, batch_size=100, tokens_per_step=4096)
    assert Duration.parse("3ep").to_steps_for(clock) == 36
    assert Duration.parse("0.5ep").to_steps_for(clock) == 6
    assert Duration.parse("1e4sp").to_steps_for(clock) == 100
    assert Duration.parse("150sp").to_steps_for(clock) == 2
    assert Duration.parse("8192tok").to_steps_for(clock.progress()) == 2


@pytest.mark.parametrize(
    ("text", "missing"),
    [("3ep", "steps_per_epoch"), ("1e6sp", "batch_size"), ("5tok", "tokens_per_step")],
)
def test_conversion_names_missing_piece(text, missing):
    """Converting without the needed count raises ConversionError naming it."""
    with pytest.raises(ConversionError, match=missing) as info:
        Duration.parse(text).to_steps()
    assert info.value.missing == missing


def test_wall_time_has_no_steps():
    """Wall time cannot be converted to steps."""
    with pytest.raises(ConversionError, match="wall time"):
        Duration.parse("30min").to_steps(steps_per_epoch=10)


def test_count_in_each_unit():
    """count() gives how much of its unit a snapshot has covered, exactly."""
    clock = Clock(steps_per_epoch=4, batch_size=8, tokens_per_step=100)
    clock.tick(6)
    p = clock.progress()
    counts = [Duration.parse(t).count(p) for t in ("1st", "1ep", "0.5ep", "1sp", "1tok")]
    assert counts == [6, 1, Fraction(3, 2), 48, 600]


def test_count_needs_counted_samples():
    """Counting samples on a clock that counts none is an error, not a silent zero."""
    clock = Clock()
    clock.tick()
    with pytest.raises(ConversionError, match="batch_size"):
        Duration.parse("100sp").count(clock.progress())
    with pytest.raises(ConversionError, match="tokens_per_step"):
        Duration.parse("100tok").count(clock.progress())


def test_fractional_epoch_count_needs_steps_per_epoch():
    """A fractional epoch count needs steps_per_epoch."""
    clock = Clock()
    with pytest.raises(ConversionError, match="steps_per_epoch"):
        Duration.parse("0.5ep").count(clock.progress())


@given(st.integers(min_value=0, max_value=10**15), st.sampled_from(["st", "ba", "sp", "tok"]))
def test_whole_round_trip(n, suffix):
    """str() of a parsed duration parses back to the same duration."""
    d = Duration.parse(f"{n}{suffix}")
    assert Duration.parse(str(d)) == d
    assert d.value == n


@given(st.fractions(min_value=0, max_value=10**6).map(lambda f: f.limit_denominator(1000)))
def test_epoch_to_steps_never_undershoots(value):
    """Converting epochs to steps rounds up: the steps cover at least the duration."""
    d = Duration(value, Unit.EPOCHS)
    steps = d.to_steps(steps_per_epoch=7)
    assert steps >= value * 7 > steps - 1
