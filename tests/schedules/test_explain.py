"""Tests for globalstep.schedules._explain and the `globalstep schedule` command."""

from __future__ import annotations

import json

import pytest

from globalstep import ConfigError
from globalstep._cli import main
from globalstep.schedules import Constant, CosineDecay, ExponentialDecay, Linear, warmup
from globalstep.schedules._base import MEMO_BLOCK
from globalstep.schedules._explain import explain, terminal_plot


def test_explain_cosine():
    """A cosine over 1000 steps changes at step 1, halves at 500, ends at 0."""
    e = explain(CosineDecay(1.0, 1000), total_steps=1001)
    assert (e.value_at_zero, e.first_change, e.half_step, e.final_value) == (1.0, 1, 500, 0.0)


def test_explain_never_changes():
    """A staircase decay longer than the run never changes and never halves."""
    e = explain(ExponentialDecay(0.1, 100_000, 0.96, staircase=True), total_steps=24_000)
    assert (e.first_change, e.half_step, e.final_value) == (None, None, 0.1)
    assert "never within 24,000 steps" in e.lines()[2]


def test_explain_warmup_states_its_peak():
    """A warm-up from 0 to a constant peaks at the warm-up's end and never halves after."""
    e = explain(warmup(Constant(1.0), 10), total_steps=20)
    assert (e.first_change, e.peak_step, e.peak_value, e.half_step) == (1, 10, 1.0, None)
    assert e.lines()[3:5] == [
        "peak           1 at step 10",
        "falls to half  never within 20 steps (half the peak)",
    ]


def test_explain_warmup_then_decay_halves_after_the_peak():
    """A warm-up then a cosine decay falls to half its peak midway through the decay."""
    e = explain(warmup(CosineDecay(1.0, 100), 10), total_steps=111)
    assert (e.peak_step, e.half_step) == (10, 60)


def test_explain_non_positive_schedule_has_no_half():
    """A schedule that is never positive has no half step, and says why."""
    e = explain(Linear(-1.0, 0.0, 10), total_steps=20)
    assert e.half_step is None
    assert e.lines()[-2] == "falls to half  does not apply (no value is positive)"


def test_explain_rising_from_a_positive_start_never_halves():
    """A line rising from 0.1 to 1 never falls to half within the run, and says so."""
    e = explain(Linear(0.1, 1.0, 10), total_steps=20)
    assert (e.first_change, e.half_step) == (1, None)
    assert e.lines()[-2] == "falls to half  never within 20 steps (half the peak)"


def test_explain_scans_past_one_chunk():
    """A change after the first chunk of a million steps is found."""
    e = explain(ExponentialDecay(1.0, 1_500_000, 0.5, staircase=True), total_steps=2_000_000)
    assert (e.first_change, e.half_step) == (1_500_000, 1_500_000)


def test_explain_states_the_formula():
    """The explanation's formula has the parameters filled in."""
    assert (
        "floor(max(s - 0, 0) / 10)"
        in explain(ExponentialDecay(1.0, 10, 0.5, staircase=True), 20).formula
    )


def test_explain_bad_total():
    """total_steps must be an int >= 1."""
    with pytest.raises(ConfigError, match="`total_steps` must be an int >= 1; got total_steps=0"):
        explain(Constant(1.0), 0)


def test_terminal_plot_shape():
    """The terminal plot has height rows plus two axis rows."""
    text = terminal_plot(CosineDecay(1.0, 100), 101, width=40, height=8)
    assert len(text.splitlines()) == 10
    assert text.count("•") == 40


def test_schedule_cli_table(capsys):
    """`schedule NAME --at` prints the value at each step."""
    argv = ["schedule", "linear", "--initial", "0", "--end-value", "1", "--steps", "4"]
    assert main([*argv, "--at", "0,2,4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines[1:4]] == [["0", "0"], ["2", "0.5"], ["4", "1"]]


def test_schedule_cli_explain(capsys):
    """`schedule --explain` states step 0, first change, half and final value."""
    argv = ["schedule", "exponential_decay", "--initial", "1", "--decay-steps", "10"]
    assert main([*argv, "--rate", "0.5", "--staircase", "--total-steps", "100", "--explain"]) == 0
    out = capsys.readouterr().out
    formula = (
        "formula        exponential_decay(initial=1.0, decay_steps=10, rate=0.5, staircase=True"
    )
    assert formula in out
    assert "v(s) = 1.0 * 0.5 ** floor(max(s - 0, 0) / 10)" in out
    for text in ("step 0         1", "first change   step 10", "falls to half  step 10"):
        assert text in out
    assert "final value    0.00195312 (step 99)" in out


def test_schedule_cli_table_steps_are_tenths_of_the_run(capsys):
    """Without --at the table shows each tenth of the run and its last step."""
    assert main(["schedule", "constant", "--value", "1", "--total-steps", "5000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = [line.split()[0] for line in lines[1:12]]
    assert shown == [f"{s:,}" for s in (0, 500, 1000, 1500, 2000, 2500, 3000, 3500, 4000, 4500)] + [
        "4,999"
    ]


def test_schedule_cli_prints_a_terminal_plot(capsys):
    """Without --plot a terminal plot is printed."""
    assert main(["schedule", "cosine_decay", "--initial", "1", "--decay-steps", "50"]) == 0
    assert "•" in capsys.readouterr().out


def test_schedule_cli_png(tmp_path, capsys):
    """--plot writes a PNG file."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "lr.png"
    assert (
        main(
            [
                "schedule",
                "cosine_decay",
                "--initial",
                "1",
                "--decay-steps",
                "50",
                "--plot",
                str(out),
            ]
        )
        == 0
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_schedule_cli_config(tmp_path, capsys):
    """--config reads a schedule's JSON config, composites included."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps(warmup(Linear(1.0, 0.0, 10), 5).to_config()))
    assert main(["schedule", "--config", str(path), "--at", "0,5,15"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines[1:4]] == ["0", "1", "0"]


def test_schedule_cli_one_cycle_takes_total_steps(capsys):
    """--total-steps also sets a one-cycle schedule's total_steps."""
    assert main(["schedule", "one_cycle", "--peak", "1", "--total-steps", "100", "--at", "30"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == ["30", "1"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["schedule"], "`name` must name a schedule"),
        (["schedule", "nope"], "`schedule` must be one of"),
        (["schedule", "constant", "--value", "1", "--at", "x"], "`at` must be comma-separated"),
        (["schedule", "constant", "--value", "1", "--at", "-1"], "`at` must be comma-separated"),
        (["schedule", "--config", "/no/such.json"], "`config` must be a readable JSON file"),
        (["schedule", "constant", "--config", "x.json"], "`config` must be given alone"),
        (["schedule", "exponential_decay", "--staircase", "maybe"], "`staircase` must be true"),
        (["schedule", "constant", "--value", "nan"], "`value` must be a finite number"),
        (
            ["schedule", "constant", "--value", "1", "--total-steps", "0"],
            "`--total-steps` must be at least 1 step",
        ),
        (
            ["schedule", "cosine_decay", "--initial", "1", "--decay-steps", "3ep"],
            "`schedule` has a length this command cannot convert to steps (Converting 3ep to "
            "steps needs `steps_per_epoch`",
        ),
        (
            ["schedule", "constant", "--value", "1", "--total-steps", "2ep"],
            "`--total-steps` cannot be converted to steps",
        ),
    ],
    ids=[
        "no name",
        "unknown",
        "bad at",
        "negative at",
        "no file",
        "both",
        "bool",
        "nan",
        "total",
        "epochs",
        "total in epochs",
    ],
)
def test_schedule_cli_errors(capsys, argv, message):
    """Each bad invocation exits 1 with an error naming the parameter."""
    assert main(argv) == 1
    assert message in capsys.readouterr().err


def test_params_without_name(capsys):
    """Parameters without a schedule name are refused."""
    assert (
        main(
            ["plan", "--dataset-size", "1", "--batch-size", "1", "--epochs", "1", "--initial", "1"]
        )
        == 1
    )
    assert "`schedule` must be named" in capsys.readouterr().err


def test_schedule_help_lists_parameters(capsys):
    """`schedule --help` lists each schedule with its parameters."""
    assert main(["schedule", "--help"]) == 0
    out = capsys.readouterr().out
    assert "exponential_decay: --initial --decay-steps --rate [--staircase" in out
    assert "lengths are steps, or durations ('3ep') where the run is known" in out


def test_schedule_cli_lists_are_comma_separated(capsys):
    """`--boundaries` and `--levels` take comma-separated lists."""
    argv = ["schedule", "piecewise_constant", "--boundaries", "10,20", "--levels", "1,0.5,0.1"]
    assert main([*argv, "--at", "0,15,25"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines[1:4]] == [["0", "1"], ["15", "0.5"], ["25", "0.1"]]


def test_schedule_cli_none_leaves_an_optional_parameter_unset(capsys):
    """`--end-value none` is the default None: the decay has no floor."""
    argv = ["schedule", "exponential_decay", "--initial", "1", "--decay-steps", "10"]
    assert main([*argv, "--rate", "0.5", "--end-value", "none", "--at", "20"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == ["20", "0.25"]


def test_schedule_cli_non_number_names_the_parameter(capsys):
    """A float parameter given a word is refused, naming it and the text received."""
    assert main(["schedule", "constant", "--value", "abc"]) == 1
    assert "`value` must be a finite number; got value='abc'" in capsys.readouterr().err


@pytest.mark.parametrize("schedule", [Constant(1.0), CosineDecay(1.0, 100)])
def test_explain_stops_scanning_where_the_schedule_ends(schedule, monkeypatch):
    """A run of 10**15 steps is explained from the steps before the schedule's end."""
    calls = []
    real = type(schedule).values
    final = schedule(10**15 - 1)  # before counting: a scalar call fills a memo block

    def counted(self, steps):
        calls.append(len(steps))
        if len(calls) > 2:
            raise AssertionError("scanned past the schedule's end")
        return real(self, steps)

    monkeypatch.setattr(type(schedule), "values", counted)
    e = explain(schedule, total_steps=10**15)
    assert e.final_value == final
    assert sum(calls) <= 101 + MEMO_BLOCK  # the scan, and the memo block of schedule(0)


def test_schedule_cli_png_that_cannot_be_written(tmp_path, capsys):
    """--plot into a missing directory exits 1 naming the option, with no traceback."""
    pytest.importorskip("matplotlib")
    target = str(tmp_path / "missing" / "lr.png")
    assert main(["schedule", "constant", "--value", "1", "--plot", target]) == 1
    err = capsys.readouterr().err
    assert f"`--plot` must be a file that can be written; got --plot={target!r}" in err


def _values(capsys, args):
    assert main(["schedule", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = lines[1 : lines.index("")]
    return {int(row.split()[0].replace(",", "")): float(row.split()[1]) for row in table}


def test_warmup_from_options(capsys):
    """`schedule warmup --steps 10 --then NAME ...` builds a warm-up in front of the part."""
    values = _values(
        capsys,
        ["warmup", "--at", "0,5,10,20", "--steps", "10", "--then", "constant", "--value", "2"],
    )
    assert values == {0: 0.0, 5: 1.0, 10: 2.0, 20: 2.0}


def test_join_from_options(capsys):
    """`schedule join` takes one --then part per interval, each seeing its own step."""
    args = ["join", "--at", "0,9,10,15", "--boundaries", "10"]
    args += ["--then", "constant", "--value", "1", "--then", "linear", "--initial", "1"]
    args += ["--end-value", "0", "--steps", "10"]
    assert _values(capsys, args) == {0: 1.0, 9: 1.0, 10: 1.0, 15: 0.5}


def test_scale_and_clip_from_options(capsys):
    """`scale` and `clip` wrap the part given after --then."""
    scaled = _values(
        capsys, ["scale", "--at", "0", "--factor", "3", "--then", "constant", "--value=2"]
    )
    clipped = _values(
        capsys, ["clip", "--at", "0", "--high", "0.5", "--then", "constant", "--value", "2"]
    )
    assert (scaled, clipped) == ({0: 6.0}, {0: 0.5})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["warmup", "--steps", "10"], "warmup wraps one schedule"),
        (
            ["scale", "--factor", "2", "--then", "constant", "--value", "1", "--then", "constant"],
            "scale wraps one schedule",
        ),
        (["cosine_decay", "--initial", "1", "--decay-steps", "9", "--then", "constant"], "is for"),
        (
            ["join", "--boundaries", "5", "--then", "constant", "--value", "1"],
            "join needs one --then part per interval: 2 for 1 boundaries",
        ),
        (
            ["warmup", "--steps", "5", "--then", "constant", "--value", "1", "--explain"],
            "The command's own options (--at, --explain, --plot, ...) go before the first --then",
        ),
        (["warmup", "--steps", "5", "--then", "--value", "1"], "followed by a schedule name"),
    ],
)
def test_composite_option_errors(capsys, args, message):
    """Each misuse of --then is one error line that says what to change."""
    assert main(["schedule", *args]) == 1
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_schedule_lengths_in_epochs_with_steps_per_epoch(capsys):
    """With --steps-per-epoch, lengths and --total-steps may be given in epochs."""
    args = ["cosine_decay", "--initial", "1", "--decay-steps", "2ep", "--steps-per-epoch", "5"]
    values = _values(capsys, [*args, "--total-steps", "3ep", "--at", "0,5,10,14"])
    assert values[0] == 1.0
    assert values[5] == pytest.approx(0.5)
    assert values[10] == values[14] == 0.0


def test_piecewise_default_range_shows_the_last_level(capsys):
    """Without --total-steps a piecewise schedule is shown a quarter past its last boundary."""
    assert main(["schedule", "piecewise_constant", "--boundaries", "100", "--levels", "1,0.5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].split() == ["0", "125"]


def test_plot_title_names_the_parameters(tmp_path, monkeypatch):
    """A schedule's PNG is titled with its name and parameters, dtype noise left out."""
    pytest.importorskip("matplotlib")
    import matplotlib.figure

    from globalstep.schedules._explain import write_plot

    titles = []
    real = matplotlib.figure.Figure.savefig

    def savefig(figure, *args, **kwargs):
        titles.append(figure.axes[0].get_title())
        return real(figure, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    write_plot(CosineDecay(0.1, 1000), 1001, tmp_path / "lr.png")
    assert titles == ["cosine_decay(initial=0.1, decay_steps=1000, alpha=0.0, exponent=1.0)"]


def test_plot_log_y_refuses_non_positive_values(tmp_path, capsys):
    """--log-y on a schedule that reaches 0 is one error line naming the option."""
    pytest.importorskip("matplotlib")
    args = ["schedule", "cosine_decay", "--initial", "1", "--decay-steps", "10"]
    assert main([*args, "--plot", str(tmp_path / "x.png"), "--log-y"]) == 1
    assert "`--log-y` needs values > 0; this schedule reaches" in capsys.readouterr().err


def test_terminal_plot_labels_the_true_peak():
    """The top label is the schedule's peak even when no sampled column falls on it."""
    from globalstep.schedules import OneCycle

    lines = terminal_plot(OneCycle(0.1, 1000), 1000).splitlines()
    assert lines[0].split()[0] == "0.1"
