"""Tests for globalstep.summary._finite: the non-finite guard."""

import math

import pytest

from globalstep import NonFiniteError
from globalstep.summary import check_finite


@pytest.mark.parametrize("value", [0.0, -1e308, 1e-320, 3])
def test_finite_values_pass(value):
    """A finite value returns True and calls no handler."""
    assert check_finite("loss", value, 1, on_nonfinite=pytest.fail) is True


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_raises_with_step_tag_and_value(value):
    """NaN and infinities raise NonFiniteError carrying the step, the tag and the value."""
    with pytest.raises(NonFiniteError, match=r"`grad_norm` is .* at step 9") as info:
        check_finite("grad_norm", value, 9)
    assert (info.value.tag, info.value.step) == ("grad_norm", 9)
    assert info.value.value is value


def test_handler_replaces_the_raise():
    """With a handler, the error goes to it and check_finite returns False."""
    seen = []
    assert check_finite("loss", math.nan, None, on_nonfinite=seen.append) is False
    assert isinstance(seen[0], NonFiniteError)
    assert seen[0].step is None


def test_non_finite_error_is_an_arithmetic_error():
    """Callers that catch ArithmeticError catch the guard's error."""
    with pytest.raises(ArithmeticError):
        check_finite("loss", math.inf, 0)
