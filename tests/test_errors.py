"""Tests for globalstep._errors."""

import inspect

import pytest

import globalstep._errors as errors
from globalstep import (
    CheckpointError,
    CheckpointNotFoundError,
    ConfigError,
    GlobalStepError,
    LockError,
    MissingDependencyError,
    NonFiniteError,
)


def test_every_error_derives_from_root_and_a_builtin():
    """Each exception is a GlobalStepError and also a built-in exception other than Exception."""
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, GlobalStepError)
        if cls is not GlobalStepError:
            builtins = [b for b in inspect.getmro(cls) if b.__module__ == "builtins"]
            assert any(b not in (Exception, BaseException, object) for b in builtins), name


def test_every_error_is_drawn_in_the_docstring():
    """The module docstring's tree names every exception."""
    for name in errors.__all__:
        assert name in errors.__doc__


def test_config_error_names_parameter_rule_and_value():
    """ConfigError's message and attributes carry the parameter, the rule and the value."""
    err = ConfigError("decay_steps", "must be > 0", 0, hint="Use a positive count.")
    assert str(err) == "`decay_steps` must be > 0; got decay_steps=0. Use a positive count."
    assert (err.parameter, err.rule, err.value) == ("decay_steps", "must be > 0", 0)
    assert isinstance(err, ValueError)


def test_checkpoint_errors_carry_path_and_match_builtins():
    """Checkpoint errors keep their path and are OSError / FileNotFoundError."""
    err = CheckpointNotFoundError("no checkpoint in /x", path="/x")
    assert isinstance(err, FileNotFoundError)
    assert err.path == "/x"
    assert str(err) == "no checkpoint in /x"
    lock = LockError("held", path="/x", holder={"pid": 1})
    assert isinstance(lock, CheckpointError)
    assert lock.holder == {"pid": 1}


def test_missing_dependency_names_the_extra():
    """MissingDependencyError is an ImportError whose message says what to pip install."""
    err = MissingDependencyError("torch", "torch", "globalstep.integrations.torch")
    assert isinstance(err, ImportError)
    assert "pip install 'globalstep[torch]'" in str(err)
    assert err.extra == "torch"


def test_non_finite_error_carries_step_tag_value():
    """NonFiniteError carries the step, the tag and the value."""
    err = NonFiniteError("loss", float("nan"), 12)
    assert (err.tag, err.step) == ("loss", 12)
    assert isinstance(err, ArithmeticError)
    with pytest.raises(NonFiniteError, match="at step 12"):
        raise err


def test_restore_mismatch_carries_its_report():
    """RestoreMismatchError is a ValueError that carries the report of what differs."""
    report = {"missing": ["model/w"]}
    err = errors.RestoreMismatchError("the checkpoint does not fit", report)
    assert isinstance(err, ValueError)
    assert err.report is report
    with pytest.raises(errors.RestoreMismatchError, match="does not fit"):
        raise err
