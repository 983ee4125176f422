"""Tests for `globalstep logs` (globalstep.summary._logs), driven through globalstep._cli.main."""

import csv
import io

import pytest

from globalstep import Clock, ConfigError, SummaryWriter
from globalstep._cli import main
from globalstep.summary import Point
from globalstep.summary._logs import terminal_plot


def _write_run(logdir, formats=("jsonl",)):
    """Writes loss 1/step and lr 0.1 for steps 1..20."""
    clock = Clock()
    with SummaryWriter(logdir, clock=clock, formats=formats) as writer:
        for _ in range(20):
            clock.tick()
            writer.scalars({"loss": 1.0 / clock.step, "lr": 0.1})


def test_table_per_run(tmp_path, capsys):
    """The table lists each run's tags with points, first/last step, last value, min, max."""
    _write_run(tmp_path / "a")
    _write_run(tmp_path / "b", formats=("tensorboard",))
    assert main(["logs", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "run a (jsonl)" in out
    assert "run b (tensorboard)" in out
    loss_rows = [line.split() for line in out.splitlines() if line.startswith("loss")]
    assert loss_rows[0] == ["loss", "20", "1", "20", "0.05", "0.05", "1"]
    assert loss_rows[1] == ["loss", "20", "1", "20", "0.05", "0.05", "1"]


def test_csv_to_stdout(tmp_path, capsys):
    """--csv - prints run, tag, step, wall time and value for each point."""
    _write_run(tmp_path)
    assert main(["logs", str(tmp_path), "--tag", "lr", "--csv", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [int(r["step"]) for r in rows] == list(range(1, 21))
    assert {r["tag"] for r in rows} == {"lr"}
    assert float(rows[0]["value"]) == 0.1


def test_bare_csv_prints_to_stdout(tmp_path, capsys):
    """`globalstep logs DIR --csv`, as README.md writes it, prints every point as CSV."""
    _write_run(tmp_path)
    assert main(["logs", str(tmp_path), "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert sorted({(r["tag"], int(r["step"])) for r in rows}) == [
        (tag, step) for tag in ("loss", "lr") for step in range(1, 21)
    ]


def test_csv_to_file(tmp_path):
    """--csv PATH writes every scalar tag to the file."""
    _write_run(tmp_path / "run")
    target = tmp_path / "out.csv"
    assert main(["logs", str(tmp_path / "run"), "--csv", str(target)]) == 0
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert len(rows) == 40


def _crash_at_150_resume_from_110(logdir):
    """Attempt 1 writes loss = step for 0..150; a resume from 110 writes -step for 111..200."""
    clock = Clock()
    with SummaryWriter(logdir, clock=clock) as writer:
        for step in range(151):
            writer.scalar("loss", float(step), step=step)
    resumed = Clock()
    resumed.load_state_dict({**clock.state_dict(), "step": 110, "step_in_epoch": 110})
    with SummaryWriter(logdir, clock=resumed) as writer:
        for step in range(111, 201):
            writer.scalar("loss", -float(step), step=step)


@pytest.mark.parametrize("source", ["jsonl", "tensorboard"])
def test_restarted_run_shows_each_step_once(tmp_path, capsys, source):
    """After a crash at 150 and a resume from 110, logs shows 0..200 once, attempt 2 after 110."""
    if source == "tensorboard":
        pytest.importorskip("tensorboard")
    _crash_at_150_resume_from_110(tmp_path)
    if source == "tensorboard":
        (tmp_path / "metrics.jsonl").unlink()
    assert main(["logs", str(tmp_path), "--csv", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [int(r["step"]) for r in rows] == list(range(201))
    expected = [float(s) if s <= 110 else -float(s) for s in range(201)]
    assert [float(r["value"]) for r in rows] == expected
    assert main(["logs", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"run . ({source})" in out
    (row,) = [line.split() for line in out.splitlines() if line.startswith("loss")]
    assert row == ["loss", "201", "0", "200", "-200", "-200", "110"]


def test_terminal_plot(tmp_path, capsys):
    """--tag without --plot draws the series in the terminal, max and min labelled."""
    _write_run(tmp_path)
    assert main(["logs", str(tmp_path), "--tag", "loss"]) == 0
    out = capsys.readouterr().out
    assert "*" in out
    assert "1 |*" in out
    assert "1 .. 20" in out


def test_terminal_plot_of_no_finite_point():
    """A series with no finite point says so instead of drawing."""
    assert terminal_plot([Point(0, 0.0, float("nan"))]) == "(no finite points)"


@pytest.mark.parametrize(("width", "height"), [(1, 12), (64, 1)])
def test_terminal_plot_too_small(width, height):
    """A plot narrower or lower than 2 characters is refused, naming both sizes."""
    with pytest.raises(ConfigError, match="`width, height` must both be >= 2"):
        terminal_plot([Point(0, 0.0, 1.0)], width=width, height=height)


def test_png_plot(tmp_path):
    """--tag loss --plot out.png writes a PNG file."""
    pytest.importorskip("matplotlib")
    _write_run(tmp_path / "run")
    target = tmp_path / "loss.png"
    assert main(["logs", str(tmp_path / "run"), "--tag", "loss", "--plot", str(target)]) == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("option", ["--csv", "--plot"])
def test_output_file_that_cannot_be_written(tmp_path, capsys, option):
    """A CSV or PNG path in a missing directory exits 1 naming the option, no traceback."""
    if option == "--plot":
        pytest.importorskip("matplotlib")
    _write_run(tmp_path / "run")
    target = str(tmp_path / "missing" / "out")
    assert main(["logs", str(tmp_path / "run"), "--tag", "loss", option, target]) == 1
    err = capsys.readouterr().err
    assert f"`{option}` must be a file that can be written; got {option}={target!r}" in err
    assert "No such file or directory" in err
    if option == "--plot":
        import matplotlib.pyplot as plt

        assert plt.get_fignums() == []  # the figure was closed


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tag", "nope"], "`--tag` must name a logged scalar"),
        (["--plot", "x.png"], "`--plot` needs --tag"),
    ],
)
def test_bad_options(tmp_path, capsys, argv, message):
    """An unknown tag or --plot without --tag exits 1 with the rule."""
    _write_run(tmp_path)
    assert main(["logs", str(tmp_path), *argv]) == 1
    assert message in capsys.readouterr().err


def test_missing_directory(tmp_path, capsys):
    """A directory that does not exist exits 1, naming it."""
    assert main(["logs", str(tmp_path / "absent")]) == 1
    assert "must be an existing directory" in capsys.readouterr().err


def test_directory_without_runs(tmp_path, capsys):
    """A directory with no log files exits 1 and says what it looked for."""
    assert main(["logs", str(tmp_path)]) == 1
    assert "metrics.jsonl or *tfevents*" in capsys.readouterr().err


def test_table_lists_histograms_texts_and_skipped_lines(tmp_path, capsys):
    """Below the table come the histogram and text tags with their counts, and skipped lines."""
    with SummaryWriter(tmp_path, formats=("jsonl",)) as writer:
        writer.histogram("weights", [1.0, 2.0], step=0)
        writer.histogram("weights", [1.0, 3.0], step=1)
        writer.text("notes", "hello", step=1)
    with open(tmp_path / "metrics.jsonl", "a") as file:
        file.write("{broken\n")
    assert main(["logs", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "(no scalars)" in out
    assert "histograms: weights (2)" in out
    assert "texts: notes (1)" in out
    assert "skipped 1 unreadable line(s)" in out


def _figure_texts(monkeypatch):
    """Captures the title, axis labels and legend of the figure `logs --plot` saves."""
    import matplotlib.figure

    seen = {}
    real = matplotlib.figure.Figure.savefig

    def savefig(figure, *args, **kwargs):
        axes = figure.axes[0]
        legend = axes.get_legend()
        seen.update(
            title=axes.get_title(),
            xlabel=axes.get_xlabel(),
            ylabel=axes.get_ylabel(),
            yscale=axes.get_yscale(),
            legend=[t.get_text() for t in legend.get_texts()] if legend else [],
            lines=len(axes.get_lines()),
        )
        return real(figure, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return seen


def test_png_plot_has_a_title_and_labelled_axes(tmp_path, monkeypatch):
    """One run's plot is titled with the tag and the run's directory name, no legend of '.'."""
    pytest.importorskip("matplotlib")
    _write_run(tmp_path / "baseline")
    seen = _figure_texts(monkeypatch)
    target = str(tmp_path / "loss.png")
    assert main(["logs", str(tmp_path / "baseline"), "--tag", "loss", "--plot", target]) == 0
    assert seen["title"] == "loss: baseline"
    assert seen["xlabel"] == "step (optimizer updates applied)"
    assert (seen["ylabel"], seen["legend"]) == ("loss", [])


def test_png_plot_compares_runs_on_one_figure(tmp_path, monkeypatch):
    """Two log directories are drawn on one figure with a legend naming each, log-scale."""
    pytest.importorskip("matplotlib")
    _write_run(tmp_path / "a")
    _write_run(tmp_path / "b")
    seen = _figure_texts(monkeypatch)
    target = str(tmp_path / "loss.png")
    argv = ["logs", str(tmp_path / "a"), str(tmp_path / "b"), "--tag", "loss"]
    assert main([*argv, "--plot", target, "--log-y"]) == 0
    assert seen["title"] == "loss: a vs b"
    assert seen["legend"] == ["a", "b"]
    assert (seen["lines"], seen["yscale"], seen["ylabel"]) == (2, "log", "loss (log scale)")


def test_table_for_several_directories_names_each(tmp_path, capsys):
    """With two directories each run's table is headed by its directory's name."""
    _write_run(tmp_path / "a")
    _write_run(tmp_path / "b")
    assert main(["logs", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    heads = [line for line in capsys.readouterr().out.splitlines() if line.startswith("run ")]
    assert heads == ["run a (jsonl)", "run b (jsonl)"]


def test_png_plot_of_a_runs_logs_directory_is_named_by_the_run(tmp_path, monkeypatch):
    """A Run's <run>/logs directory is titled with the run's name, not 'logs'."""
    pytest.importorskip("matplotlib")
    _write_run(tmp_path / "exp1" / "logs")
    seen = _figure_texts(monkeypatch)
    target = str(tmp_path / "loss.png")
    assert main(["logs", str(tmp_path / "exp1" / "logs"), "--tag", "loss", "--plot", target]) == 0
    assert seen["title"] == "loss: exp1"
