"""W&B offline, a Run SIGKILLed at 3 random updates and resumed: each step once in W&B.

The history is read back from the transaction logs wandb itself wrote (``run-<id>.wandb``,
one per attempt that opened the W&B run), with the framing reader of
``globalstep.summary._wandb``; it must equal an uninterrupted run's, step for step and bit
for bit, with one W&B run id across every attempt.
"""

from __future__ import annotations

import json
import os
import pathlib
import queue
import random
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("wandb")

from globalstep.summary import read_run
from globalstep.summary._wandb import (
    STEP_METRIC,
    history_rows,
    read_records,
    wandb_files,
)

LOOP = str(pathlib.Path(__file__).with_name("wandb_loop.py"))
TOTAL_STEPS = 60
SLEEP_SECONDS = 0.02
SAVE_EVERY = 10  # as in wandb_loop.py
TAGS = ("loss", "lr", "globalstep/checkpoint")


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_MODE="offline", WANDB_SILENT="true")
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    return env


def _start(directory, sleep_seconds=SLEEP_SECONDS):
    """Starts the loop; a thread queues its output lines (None at its end)."""
    process = subprocess.Popen(
        [sys.executable, LOOP, str(directory), str(TOTAL_STEPS), str(sleep_seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(),
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump():
        with process.stdout:
            for line in process.stdout:
                lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return process, lines


def _run_to_end(directory):
    process, lines = _start(directory)
    output = []
    while (line := lines.get(timeout=300)) is not None:
        output.append(line)
    said = "\n".join(line for line in output if not line.startswith("step "))
    assert process.wait(timeout=120) == 0, said
    assert "TrackerWarning" not in said, said


def _wait_for(lines, wanted, output):
    while (line := lines.get(timeout=300)) is not None:
        output.append(line)
        if line == wanted or (wanted == "ready" and line.startswith("ready ")):
            return line
    raise AssertionError(f"the loop ended before {wanted!r}:\n" + "\n".join(output))


def _opened(directory, before, lines, output):
    """Waits until this attempt's sender has opened the W&B run (a transaction log more
    than ``before``; the training thread never waits for it), then returns the last step
    the loop printed."""
    deadline = time.monotonic() + 120
    while len(list(pathlib.Path(directory, "logs").glob("wandb/*/*.wandb"))) <= before:
        assert time.monotonic() < deadline, "the attempt never opened its W&B run"
        time.sleep(0.05)
    while True:
        try:
            line = lines.get_nowait()
        except queue.Empty:
            break
        assert line is not None, "the loop ended before its kill:\n" + "\n".join(output)
        output.append(line)
    steps = [int(line.split()[1]) for line in output if line.startswith(("step ", "ready "))]
    return max(steps)


def _kill_and_resume(directory, seed):
    """SIGKILLs the loop at 3 random updates (each after an update it printed, once the
    attempt has opened the W&B run; one of them the update right after a commit, while
    the sender sends), then runs it to the end; returns the steps killed at. The killed
    attempts step slowly (0.15 s), so that W&B opens before their end."""
    rng = random.Random(seed)
    killed = []
    for attempt in range(3):
        before = len(list(pathlib.Path(directory, "logs").glob("wandb/*/*.wandb")))
        process, lines = _start(directory, sleep_seconds=0.15)
        output = []
        resumed = int(_wait_for(lines, "ready", output).split()[1])
        at = rng.randint(resumed + 3, resumed + (TOTAL_STEPS - resumed) // 2)
        at = max(at, _opened(directory, before, lines, output) + 2)
        if attempt == 1:
            at = (at // SAVE_EVERY + 1) * SAVE_EVERY + 1
        _wait_for(lines, f"step {at}", output)
        process.kill()
        process.wait(timeout=60)
        killed.append(at)
    assert not pathlib.Path(directory, "weights").exists(), "a run ended before its kill"
    _run_to_end(directory)
    return killed


def _wandb_history(logs):
    """{tag: [(global step, value), ...]} across every transaction log under ``logs``,
    oldest first, and the W&B run ids those files name."""
    names = {path.stem.removeprefix("run-") for path in pathlib.Path(logs).glob("wandb/*/*.wandb")}
    files = [path for name in sorted(names) for path in wandb_files(str(logs), name)]
    history: dict[str, list[tuple[int, float]]] = {tag: [] for tag in TAGS}
    run_ids = set()
    for number, path in enumerate(files):
        log = read_records(str(path))
        # The last attempt ended cleanly, but W&B's service may still be writing the end
        # of its file as that process exits: read until its exit record (bounded).
        deadline = time.monotonic() + 60
        while (
            number == len(files) - 1
            and time.monotonic() < deadline
            and not (log.records and log.records[-1].WhichOneof("record_type") == "exit")
        ):
            time.sleep(0.05)
            log = read_records(str(path))
        assert not log.damaged, path
        run_ids.update(r.run.run_id for r in log.records if r.WhichOneof("record_type") == "run")
        for row in history_rows(log.records):
            for tag in TAGS:
                if tag in row:
                    history[tag].append((row[STEP_METRIC], row[tag]))
    return history, run_ids, files


def _recorded_run_ids(logs):
    """The W&B run ids the tracker record names (one line per attempt that opened it)."""
    lines = pathlib.Path(logs, "wandb.tracker.jsonl").read_text().splitlines()
    return {
        entry["run"]
        for entry in map(json.loads, filter(None, lines))
        if isinstance(entry, dict) and "run" in entry
    }


@pytest.mark.slow
def test_sigkilled_run_shows_each_step_once_in_one_wandb_run(tmp_path):
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    uninterrupted = threading.Thread(target=_run_to_end, args=(reference,))
    uninterrupted.start()
    killed = _kill_and_resume(crashed, seed=28)
    uninterrupted.join()
    print(f"killed at updates {killed}")

    assert (crashed / "weights").read_bytes() == (reference / "weights").read_bytes()
    expected, reference_ids, _ = _wandb_history(reference / "logs")
    got, run_ids, files = _wandb_history(crashed / "logs")
    steps = list(range(1, TOTAL_STEPS + 1))
    jsonl = read_run(reference / "logs").scalars
    for tag in ("loss", "lr"):
        assert [step for step, _ in expected[tag]] == steps
        assert expected[tag] == [(p.step, p.value) for p in jsonl[tag]]
        assert got[tag] == expected[tag], tag  # each step once, the surviving values
    assert got["globalstep/checkpoint"] == expected["globalstep/checkpoint"]
    assert len(reference_ids) == 1
    assert len(run_ids) == 1  # one W&B run across the 4 attempts
    assert run_ids == _recorded_run_ids(crashed / "logs")
    assert len(files) >= 2  # the attempts that opened the run before their kill, and the last
