"""Tests for globalstep._cli (the demo has tests/test_demo.py)."""

import shutil
import subprocess
import sys

import pytest

from globalstep._cli import main
from globalstep._demo import fast_tier_path


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


def test_unknown_command_suggests_the_closest(capsys):
    """A misspelt sub-command gets a "did you mean"."""
    assert main(["shedule"]) == 2
    assert "did you mean schedule?" in capsys.readouterr().err


def test_subcommand_option_typo_suggests_and_shows_its_usage(capsys):
    """A misspelt option is reported by its sub-command, with its usage and a suggestion."""
    args = ["plan", "--dataset-size", "1200", "--batch-size", "100", "--epochs", "3"]
    assert main([*args, "--evry", "5ep"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: globalstep plan")
    assert "unrecognized arguments: --evry 5ep (did you mean --every?)" in err


def test_nested_subcommand_typo_suggests(capsys):
    """A misspelt `ckpt` action gets a suggestion."""
    assert main(["ckpt", "lss", "x"]) == 2
    assert "did you mean ls?" in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], ["demo"], ["schedule"], ["plan"], ["ckpt"], ["logs"]])
def test_help_is_plain_text(capsys, command):
    """No help text shows reStructuredText markup."""
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "``" not in out
    assert ":func:" not in out
    assert ":class:" not in out


def test_console_script_entry_point():
    """`python -m globalstep --version` runs the command line."""
    out = subprocess.run(
        [sys.executable, "-m", "globalstep", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert out.stdout.startswith("globalstep ")


def test_closed_pipe_stops_quietly(tmp_path):
    """A reader that closes the pipe early (`| head -1`) ends the command without a traceback."""
    process = subprocess.Popen(
        [sys.executable, "-m", "globalstep", "demo", "--dir", str(tmp_path), "--log-every", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    process.stdout.readline()
    process.stdout.close()
    _, err = process.communicate()
    shutil.rmtree(fast_tier_path(tmp_path), ignore_errors=True)  # the demo's, on /dev/shm
    assert process.returncode == 1
    assert b"Traceback" not in err
