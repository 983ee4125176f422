"""Tests for globalstep.cli and globalstep.demo."""

import io
import itertools
import subprocess
import sys

import numpy as np
import pytest

from globalstep.cli import main
from globalstep.demo import run_demo
from globalstep.summary.reader import read_run


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


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """One full demo run: (its result, its printed lines, its directory)."""
    directory = tmp_path_factory.mktemp("demo-full")
    out = io.StringIO()
    result = run_demo(directory, stream=out)
    return result, out.getvalue().splitlines(), directory


def test_demo_prints_ten_lines_and_final_step(tmp_path, capsys):
    """`globalstep demo` prints a progress line every 100 steps and ends at step 1000."""
    assert main(["demo", "--dir", str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    progress = [line for line in lines if line.startswith("step ")]
    assert [int(line.split()[1].split("/")[0]) for line in progress] == list(range(100, 1001, 100))
    assert all("loss " in line and "lr " in line for line in progress)
    assert "final global step: 1000" in lines


def test_demo_really_trains(uninterrupted):
    """Mean loss falls in every window of 100 updates, by more than 10x overall."""
    result = uninterrupted[0]
    assert result.final_step == 1000
    assert sorted(result.losses) == list(range(1, 1001))
    windows = [range(w + 1, w + 101) for w in range(0, 1000, 100)]
    means = [np.mean([result.losses[s] for s in window]) for window in windows]
    assert all(b < a for a, b in itertools.pairwise(means))
    assert means[-1] < means[0] / 10


def test_demo_learning_rate_follows_the_schedule(uninterrupted):
    """The logged rate of update k is ExponentialDecay(0.01, 100, 0.96) at step k."""
    run = read_run(uninterrupted[2] / "logs")
    rates = {p.step: p.value for p in run.scalars["lr"]}
    assert rates[1] == 0.01
    assert rates[101] == pytest.approx(0.01 * 0.96)
    assert rates[1000] == pytest.approx(0.01 * 0.96 ** (999 / 100))


def test_demo_resume_matches_uninterrupted_run(uninterrupted, tmp_path):
    """Stopped at 500 and run again, the demo resumes from the step-400 checkpoint and
    computes the same losses as a run that never stopped."""
    full = uninterrupted[0]
    first = run_demo(tmp_path, stop_at=500, stream=io.StringIO())
    assert first.final_step == 500
    out = io.StringIO()
    second = run_demo(tmp_path, stream=out)
    assert second.resumed_from == 400
    assert "resumed from step 400" in out.getvalue()
    assert sorted(second.losses) == list(range(401, 1001))
    assert all(second.losses[s] == full.losses[s] for s in second.losses)
    printed = [line for line in out.getvalue().splitlines() if line.startswith("step ")]
    assert [int(line.split()[1].split("/")[0]) for line in printed] == list(range(500, 1001, 100))


def test_demo_logs_each_step_once_after_restart(uninterrupted, tmp_path):
    """After a stop at 500 and a resume from 400, the logs hold steps 1..1000 once each,
    with the values of a run that never stopped."""
    run_demo(tmp_path, stop_at=500, stream=io.StringIO())
    run_demo(tmp_path, stream=io.StringIO())
    losses = read_run(tmp_path / "logs").scalars["loss"]
    assert [p.step for p in losses] == list(range(1, 1001))
    full = uninterrupted[0].losses
    assert [p.value for p in losses] == [full[s] for s in range(1, 1001)]


def test_demo_event_files_read_by_tensorboard(uninterrupted):
    """TensorBoard's own reader finds every step's loss in the demo's event files."""
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    acc = event_accumulator.EventAccumulator(
        str(uninterrupted[2] / "logs"), size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    assert [e.step for e in acc.Scalars("loss")] == list(range(1, 1001))


def test_demo_rerun_of_a_complete_run(uninterrupted):
    """Running a complete demo again restores step 1000 and trains nothing more."""
    out = io.StringIO()
    again = run_demo(uninterrupted[2], stream=out)
    assert (again.resumed_from, again.final_step, again.losses) == (1000, 1000, {})
    assert "the run is complete" in out.getvalue()


def test_demo_checkpoints_keep_three_newest(uninterrupted):
    """The demo's checkpoints are the 3 newest, ending with the final step."""
    names = sorted(p.name for p in (uninterrupted[2] / "checkpoints").iterdir() if p.is_dir())
    assert names == ["step-000000000600", "step-000000000800", "step-000000001000"]


@pytest.mark.parametrize(
    ("argv", "parameter"),
    [
        (["--steps", "0"], "steps"),
        (["--log-every", "0"], "log_every"),
        (["--save-every", "-1"], "save_every"),
        (["--stop-at", "0"], "stop_at"),
        (["--lr", "0"], "learning_rate"),
        (["--lr", "nan"], "learning_rate"),
    ],
)
def test_demo_bad_argument_is_an_error(tmp_path, capsys, argv, parameter):
    """A bad demo argument exits 1 with a message naming it."""
    assert main(["demo", "--dir", str(tmp_path), *argv]) == 1
    assert f"`{parameter}` must be" in capsys.readouterr().err


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
    assert process.returncode == 1
    assert b"Traceback" not in err
