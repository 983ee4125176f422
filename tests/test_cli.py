"""Tests for globalstep.cli and globalstep.demo."""

import subprocess
import sys

import pytest

from globalstep import ConfigError
from globalstep.cli import main
from globalstep.demo import run_demo


def test_version(capsys):
    """--version prints the version."""
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("globalstep 0.")


def test_no_command_prints_help(capsys):
    """No sub-command prints the help and exits 2."""
    assert main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_help_exits_zero(capsys):
    """--help exits 0."""
    assert main(["--help"]) == 0
    assert "COMMAND" in capsys.readouterr().out


def test_unknown_command_is_usage_error(capsys):
    """An unknown sub-command exits 2."""
    assert main(["frobnicate"]) == 2


def test_demo_prints_ten_lines_and_final_step(capsys):
    """`globalstep demo` logs every 100 steps and ends at step 1000."""
    assert main(["demo"]) == 0
    lines = capsys.readouterr().out.splitlines()
    progress = [line for line in lines if line.startswith("step ")]
    assert [int(line.split()[1]) for line in progress] == list(range(100, 1001, 100))
    assert lines[-1] == "final global step: 1000"


def test_demo_really_trains():
    """The demo's loss falls at every logged step, by more than 10x overall."""
    result = run_demo(log=lambda line: None)
    assert result.final_step == 1000
    assert all(b < a for a, b in zip(result.losses, result.losses[1:], strict=False))
    assert result.losses[-1] < result.losses[0] / 10


def test_demo_bad_argument_is_an_error(capsys):
    """A bad demo argument exits 1 with a message naming it."""
    assert main(["demo", "--steps", "0"]) == 1
    assert "`steps` must be an int >= 1" in capsys.readouterr().err


def test_demo_bad_learning_rate():
    """A non-positive learning rate is refused."""
    with pytest.raises(ConfigError, match="learning_rate"):
        run_demo(learning_rate=0.0)


def test_console_script_entry_point():
    """`python -m globalstep --version` runs the command line."""
    out = subprocess.run(
        [sys.executable, "-m", "globalstep", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert out.stdout.startswith("globalstep ")
