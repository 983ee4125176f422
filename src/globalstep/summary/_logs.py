"""``globalstep logs DIR``: summarise, export and plot step-keyed scalars.

For each run under DIR (JSONL or TensorBoard event files, restarts applied, see
:mod:`globalstep.summary._reader`) it prints a table of tags with their number of points,
first and last step, last value, minimum and maximum. ``--tag loss`` draws that series in
the terminal, ``--tag loss --plot out.png`` draws it to a PNG (the ``plot`` extra), and
``--csv out.csv`` exports the points (``--csv`` alone, or ``--csv -``, prints them).
``--send`` sends to MLflow or W&B what the tracker records under DIR hold unsent (an
outage outlasted the writer's ``close_seconds``), and says what it sent; it exits with 1
where some could not be sent (they stay in the record for the next try).

Example:
    >>> import tempfile
    >>> from globalstep import SummaryWriter
    >>> with tempfile.TemporaryDirectory() as logdir:
    ...     with SummaryWriter(logdir, formats=("jsonl",)) as writer:
    ...         for step in range(1, 4):
    ...             writer.scalar("loss", 1.0 / step, step=step)
    ...     status = run_logs(logdir)
    run . (jsonl)
    tag   points  first step  last step  last value       min  max
    loss       3           1          3    0.333333  0.333333    1
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TextIO

from globalstep._errors import ConfigError
from globalstep.summary._reader import Point, RunLog, read_logs

__all__ = ["add_parser", "run_logs", "send_records", "summary_table", "terminal_plot"]

_HEADER = ("tag", "points", "first step", "last step", "last value", "min", "max")


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def summary_table(run: RunLog) -> str:
    """Returns the run's table: one row per scalar tag, columns aligned."""
    rows = [_HEADER]
    for tag in sorted(run.scalars):
        points = run.scalars[tag]
        finite = [p.value for p in points if math.isfinite(p.value)] or [math.nan]
        rows.append(
            (
                tag,
                str(len(points)),
                str(points[0].step),
                str(points[-1].step),
                _fmt(points[-1].value),
                _fmt(min(finite)),
                _fmt(max(finite)),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def terminal_plot(points: Sequence[Point], *, width: int = 64, height: int = 12) -> str:
    """Draws a series as text: value against step, finite points only.

    Example:
        >>> from globalstep.summary._reader import Point
        >>> print(terminal_plot([Point(s, 0.0, float(s)) for s in range(3)], width=3, height=3))
                 2 |  *
                   | *
                 0 |*
                   +---
                    0 .. 2
    """
    if width < 2 or height < 2:
        raise ConfigError("width, height", "must both be >= 2", (width, height))
    finite = [p for p in points if math.isfinite(p.value)]
    if not finite:
        return "(no finite points)"
    steps = [p.step for p in finite]
    values = [p.value for p in finite]
    lo_step, hi_step, lo, hi = min(steps), max(steps), min(values), max(values)
    grid = [[" "] * width for _ in range(height)]
    for step, value in zip(steps, values, strict=True):
        col = (
            0 if hi_step == lo_step else round((step - lo_step) / (hi_step - lo_step) * (width - 1))
        )
        row = 0 if hi == lo else round((value - lo) / (hi - lo) * (height - 1))
        grid[height - 1 - row][col] = "*"
    labels = {0: _fmt(hi), height - 1: _fmt(lo)}
    lines = [f"{labels.get(i, ''):>10} |{''.join(r).rstrip()}" for i, r in enumerate(grid)]
    lines.append(" " * 11 + "+" + "-" * width)
    lines.append(" " * 12 + f"{lo_step} .. {hi_step}")
    return "\n".join(lines)


def _write_csv(runs: list[RunLog], tag: str | None, out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["run", "tag", "step", "wall_time", "value"])
    for run in runs:
        for name in sorted(run.scalars):
            if tag is None or name == tag:
                for p in run.scalars[name]:
                    writer.writerow([run.name, name, p.step, repr(p.wall_time), repr(p.value)])


def _write_csv_file(runs: list[RunLog], tag: str | None, path: str) -> None:
    with open(path, "w", newline="", encoding="utf-8") as file:
        _write_csv(runs, tag, file)


def _write_file(
    option: str, path: str, write: Callable[[], None], out: Callable[[str], Any]
) -> None:
    """Runs ``write`` (which writes the file at ``path``) and says so; an OSError is
    refused as a ConfigError naming ``option``."""
    try:
        write()
    except OSError as err:
        raise ConfigError(
            option, "must be a file that can be written", path, hint=str(err)
        ) from err
    out(f"wrote {path}")


def _label(run: RunLog, logdir: str, several: bool) -> str:
    """A run's name for a legend: the directory's own name for a run at the top."""
    path = os.path.normpath(os.path.abspath(logdir))
    base = os.path.basename(path) or logdir
    if base == "logs":  # a Run's <run>/logs: the run's own name says more
        base = os.path.basename(os.path.dirname(path)) or base
    if run.name == ".":
        return base
    return f"{base}/{run.name}" if several else run.name


def _plot_png(runs: list[tuple[str, RunLog]], tag: str, path: str, *, log_y: bool = False) -> None:
    from globalstep._optional import require

    require("matplotlib", "plot", "globalstep logs --plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 4.5))
    try:
        drawn = []
        for label, run in runs:
            if tag in run.scalars:
                points = [p for p in run.scalars[tag] if math.isfinite(p.value)]
                axes.plot([p.step for p in points], [p.value for p in points], label=label)
                drawn.append(label)
        axes.set_xlabel("step (optimizer updates applied)")
        axes.set_ylabel(f"{tag} (log scale)" if log_y else tag)
        if log_y:
            axes.set_yscale("log")
        title = f"{tag}: {' vs '.join(drawn)}" if len(drawn) <= 3 else f"{tag}: {len(drawn)} runs"
        axes.set_title(title)
        if len(drawn) > 1:
            axes.legend()
        axes.grid(True, alpha=0.3)
        figure.tight_layout()
        figure.savefig(path)
    finally:
        plt.close(figure)  # also when the file cannot be written


def _records(directory: str) -> list[str]:
    """The tracker records under ``directory``, at any depth, sorted."""
    from globalstep.summary._tracker import RECORD_SUFFIX

    found = []
    for root, _, files in os.walk(directory):
        found += [os.path.join(root, f) for f in files if f.endswith(RECORD_SUFFIX)]
    return sorted(found)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr)


def send_records(
    logdirs: Sequence[str],
    *,
    seconds: float = 30.0,
    out: Callable[[str], Any] = print,
    err: Callable[[str], Any] = _stderr,
) -> int:
    """Does ``globalstep logs DIR --send``' work and returns its exit status: 0 where
    every final point of every record was sent, 1 otherwise.

    Args:
        logdirs: the directories searched, at any depth, for tracker records.
        seconds: the longest time one record's points are tried for.

    Raises:
        ConfigError: a directory holds no tracker record, or ``seconds`` is not > 0.
        MissingDependencyError: a record's tool is not installed.
    """
    from globalstep.summary._record import unsent_points
    from globalstep.summary._tracker import RECORD_SUFFIX, TRACKERS, Tracker, send_unsent, title

    if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds > 0):
        raise ConfigError("--send-seconds", "must be a finite number > 0", seconds)
    records = []
    for directory in logdirs:
        found = _records(str(directory))
        if not found:
            names = ", ".join(name + RECORD_SUFFIX for name in TRACKERS)
            raise ConfigError(
                "DIR",
                f"must hold a tracker record ({names}) at some depth for --send: no writer "
                "with the mlflow or wandb format logged there",
                directory,
            )
        records += found
    status = 0
    for path in records:
        name = os.path.basename(path)[: -len(RECORD_SUFFIX)]
        waiting = unsent_points(path)
        if not waiting:
            out(f"{path}: nothing to send (every point is in {title(name)} already)")
            continue
        if name not in TRACKERS:  # a client of the user's own: only its code can build it
            status = 1
            err(
                f"globalstep logs: error: {path}: {waiting} points were not sent to "
                f"{name!r}, a tracker of your own: open a writer with Tracker({name!r}, "
                "client=...) on that directory to send them (--send knows MLflow's and "
                "W&B's clients only)"
            )
            continue
        sent = send_unsent(os.path.dirname(path), Tracker(name, close_seconds=seconds))
        if not sent.unsent:
            out(f"{path}: sent {sent.sent} points to {title(name)} (run {sent.run_id})")
            continue
        status = 1
        error = sent.last_error
        last = f" (last error: {error!r})" if error is not None else " (no answer yet)"
        err(
            f"globalstep logs: error: {path}: {sent.unsent} of {waiting} points could not "
            f"be sent to {title(name)} within --send-seconds={seconds:g}{last}; they stay "
            "in the record: run this again once the server is reachable"
        )
    return status


def run_logs(
    logdir: str | Sequence[str],
    *,
    tag: str | None = None,
    plot: str | None = None,
    csv_path: str | None = None,
    log_y: bool = False,
    out: Callable[[str], Any] = print,
) -> int:
    """Does ``globalstep logs``' work and returns its exit status.

    Args:
        logdir: one log directory, or several whose runs are compared (one figure with
            ``plot``).

    Raises:
        ConfigError: a directory is missing or holds no run, ``tag`` is logged by no run,
            ``plot`` is given without ``tag``, or the CSV or PNG file cannot be written.
    """
    if plot is not None and tag is None:
        raise ConfigError("--plot", "needs --tag to say which series to draw", plot)
    logdirs = [logdir] if isinstance(logdir, str | os.PathLike) else list(logdir)
    labelled: list[tuple[str, RunLog]] = []
    for directory in logdirs:
        found = read_logs(directory)
        if not found:
            raise ConfigError(
                "DIR",
                "must hold a run (metrics.jsonl or *tfevents* files) at some depth",
                directory,
            )
        labelled += [(_label(run, directory, len(logdirs) > 1), run) for run in found]
    runs = [run for _, run in labelled]
    if tag is not None and not any(tag in run.scalars for run in runs):
        known = sorted({t for run in runs for t in run.scalars})
        raise ConfigError("--tag", f"must name a logged scalar, one of {known}", tag)
    if csv_path is not None:
        if csv_path == "-":
            buffer = io.StringIO()
            _write_csv(runs, tag, buffer)
            out(buffer.getvalue().rstrip("\n"))
        else:
            _write_file("--csv", csv_path, partial(_write_csv_file, runs, tag, csv_path), out)
        return 0
    if plot is not None and tag is not None:
        _write_file("--plot", plot, partial(_plot_png, labelled, tag, plot, log_y=log_y), out)
        return 0
    for label, run in labelled:
        out(f"run {run.name if len(logdirs) == 1 else label} ({run.source})")
        if tag is None:
            out(summary_table(run) if run.scalars else "(no scalars)")
            for kind, series in (("histograms", run.histograms), ("texts", run.texts)):
                if series:
                    listed = ", ".join(f"{t} ({len(series[t])})" for t in sorted(series))
                    out(f"{kind}: {listed}")
            if run.skipped_lines:
                out(f"skipped {run.skipped_lines} unreadable line(s) in metrics.jsonl")
        elif tag in run.scalars:
            out(f"{tag}:")
            out(terminal_plot(run.scalars[tag]))
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.send:
        return send_records(args.dir, seconds=args.send_seconds)
    return run_logs(args.dir, tag=args.tag, plot=args.plot, csv_path=args.csv, log_y=args.log_y)


def add_parser(subparsers: Any) -> None:
    """Registers ``globalstep logs``."""
    parser = subparsers.add_parser(
        "logs",
        help="summarise, export and plot step-keyed scalars",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument(
        "dir", metavar="DIR", nargs="+", help="log directories (runs at any depth): compared"
    )
    parser.add_argument("--tag", help="one scalar series: plotted in the terminal")
    parser.add_argument(
        "--plot", metavar="PNG", help="with --tag: draw it, every run on one figure, to a PNG"
    )
    parser.add_argument("--log-y", action="store_true", help="with --plot: a log-scale axis")
    parser.add_argument(
        "--csv",
        metavar="PATH",
        nargs="?",
        const="-",
        help="export the points as CSV to PATH; to standard output without one (or '-')",
    )
    parser.add_argument(
        "--send",
        action="store_true",
        help="send to MLflow or W&B what the tracker records under DIR hold unsent",
    )
    parser.add_argument(
        "--send-seconds",
        metavar="S",
        type=float,
        default=30.0,
        help="with --send: the longest time one record's points are tried for (30)",
    )
    parser.set_defaults(func=_run)
