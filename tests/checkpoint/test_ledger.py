"""The ledger: every attempt and save of a run, what each cost, and the goodput (issue 35)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from globalstep import CheckpointManager, checkpoint
from globalstep._cli import main
from globalstep.summary import read_run

LEDGER_FILE = "ledger.jsonl"


def read_ledger(path):
    """The ledger read back (looked up at the call: each test fails alone without it)."""
    return checkpoint.read_ledger(path)


LOOP = pathlib.Path(__file__).parents[1] / "ledger_loop.py"


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


def _loop(directory: pathlib.Path, kill_at: int | None) -> int:
    """Runs tests/ledger_loop.py to 20 updates (killed after ``kill_at``); its status."""
    args = [sys.executable, str(LOOP), str(directory), "20"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(args + ([str(kill_at)] if kill_at else []), env=env, timeout=300)
    return done.returncode


def _size_on_disk(path: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.mark.slow
def test_a_run_killed_twice_has_each_attempt_and_save_in_the_ledger(tmp_path):
    """Killed after updates 7 and 13 (saves every 5), then run to the end: the ledger has
    three attempts, resumed from 5 and 10 with 2 and 3 steps redone, one record per save
    with the checkpoint's size on disk, and the same figures in the run's logs."""
    assert _loop(tmp_path, 7) == -9
    assert _loop(tmp_path, 13) == -9
    assert _loop(tmp_path, None) == 0
    status, out, err = _cli("ckpt", "ledger", str(tmp_path), "--json")
    assert (status, err) == (0, "")
    ledger = json.loads(out)
    attempts = ledger["attempts"]
    assert [a["resumed_from"] for a in attempts] == [None, 5, 10]
    assert [a["tier"] for a in attempts] == [None, "durable", "durable"]
    assert [a["steps_redone"] for a in attempts] == [None, 2, 3]
    assert [a["clean"] for a in attempts] == [False, False, True]
    assert all(a["restore_seconds"] > 0 for a in attempts[1:])
    assert all(a["redone_seconds"] >= 0 for a in attempts[1:])
    saves = ledger["saves"]
    assert [(s["step"], s["tier"], s["attempt"]) for s in saves] == [
        (5, "durable", 1),
        (10, "durable", 2),
        (15, "durable", 3),
        (20, "durable", 3),
    ]
    for save in saves:
        step_dir = tmp_path / "checkpoints" / f"step-{save['step']:012d}"
        assert save["bytes"] == _size_on_disk(step_dir)
        assert save["stall_seconds"] > 0
        assert save["background_seconds"] == 0
    assert 0 < ledger["goodput"]["share"] < 1
    # The same figures in the logs; the loss curve holds each step once, as before.
    scalars = read_run(tmp_path / "logs").scalars
    assert [p.step for p in scalars["loss"]] == list(range(1, 21))
    steps_redone = [(p.step, p.value) for p in scalars["goodput/steps_redone"]]
    assert steps_redone == [(10, 2.0), (15, 3.0)]
    assert [p.value for p in scalars["goodput/restore_seconds"]] == [
        attempts[1]["restore_seconds"],
        attempts[2]["restore_seconds"],
    ]
    # A save's figures go with the next save (before it commits) or the close: those of
    # the saves at 5 and 10 were lost with their attempts; the close has 15's and 20's.
    (stalls,) = scalars["goodput/save_stall_seconds"]
    assert stalls.step == 20
    assert stalls.value == pytest.approx(saves[2]["stall_seconds"] + saves[3]["stall_seconds"])
    assert [p.step for p in scalars["goodput/share"]] == [20]
    # The table prints each attempt and save, and the goodput line.
    status, table, _ = _cli("ckpt", "ledger", str(tmp_path))
    lines = table.splitlines()
    assert status == 0
    assert lines[0].split()[:3] == ["ATTEMPT", "STARTED", "(UTC)"]
    assert [line.split()[0] for line in lines[1:4]] == ["1", "2", "3"]
    assert "crashed" in lines[1]
    assert "crashed" in lines[2]
    assert "clean" in lines[3]
    assert [line.split()[0] for line in lines[6:10]] == ["5", "10", "15", "20"]
    assert lines[-1].startswith("goodput: ")
    assert "3 attempts" in lines[-1]
    # A torn last line (a crash mid-write) is skipped, and said so.
    with open(tmp_path / LEDGER_FILE, "ab") as file:
        file.write(b'{"kind": "save", "time": 17')
    status, out, err = _cli("ckpt", "ledger", str(tmp_path), "--json")
    assert status == 0
    assert "skipped the torn last line" in err
    assert "(27 bytes" in err
    assert json.loads(out)["attempts"] == attempts


def test_a_torn_last_line_is_cut_off_by_the_next_writer(tmp_path):
    """A crash's half record goes when the next process opens the ledger (and says so)."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"w": np.zeros(3)})
    with open(tmp_path / LEDGER_FILE, "ab") as file:
        file.write(b'{"kind": "sa')
    assert read_ledger(tmp_path / LEDGER_FILE).torn_last_line == 12
    with CheckpointManager(tmp_path) as manager:
        manager.save(2, {"w": np.zeros(3)})
    summary = read_ledger(tmp_path / LEDGER_FILE)
    assert summary.torn_last_line == 0
    assert [s["step"] for s in summary.saves] == [1, 2]
    assert summary.attempts[1]["dropped_torn_bytes"] == 12


def test_a_directory_without_a_ledger_is_an_error(tmp_path):
    """No ledger: exit status 1 and what to give; no directory at all: a usage error (2)."""
    (tmp_path / "run").mkdir()
    status, out, err = _cli("ckpt", "ledger", str(tmp_path / "run"))
    assert (status, out) == (1, "")
    assert err == (
        f"globalstep ckpt ledger: error: DIRECTORY {tmp_path / 'run'} holds no ledger.jsonl; "
        "give a Run's directory (or the checkpoint directory of a CheckpointManager used "
        "without a Run), written by a writer with a ledger (read-only managers and object "
        "stores keep none)\n"
    )
    status, _, err = _cli("ckpt", "ledger", str(tmp_path / "none"))
    assert status == 2
    assert "does not exist" in err


def test_a_corrupt_line_in_the_middle_is_named_by_its_number(tmp_path):
    """A damaged line that is not the last fails the command, naming the line."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"w": np.zeros(3)})
    path = tmp_path / LEDGER_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = b"#" + lines[1]
    path.write_bytes(b"".join(lines))
    status, out, err = _cli("ckpt", "ledger", str(tmp_path))
    assert (status, out) == (1, "")
    assert err.startswith(f"globalstep ckpt ledger: error: {path} line 2 is not a ledger record")


def test_read_only_managers_and_ledger_false_keep_none(tmp_path):
    """A reader and a writer with ledger=False write no ledger."""
    with CheckpointManager(tmp_path, ledger=False) as manager:
        manager.save(1, {"w": np.zeros(3)})
        assert manager.ledger is None
    with CheckpointManager(tmp_path, read_only=True) as reader:
        reader.restore()
    assert not (tmp_path / LEDGER_FILE).exists()


def test_a_remote_ledger_path_is_refused(tmp_path):
    """The ledger is appended and fsynced: an fsspec URL is refused, naming the parameter."""
    with pytest.raises(ValueError, match="`ledger` must be True, False or a local file path"):
        CheckpointManager(tmp_path, ledger="memory://ledger.jsonl")


def test_an_async_save_records_the_stall_and_the_background_apart(tmp_path):
    """An async save's record has the training thread's stall and the save thread's time."""
    with CheckpointManager(tmp_path, async_save=True) as manager:
        manager.save(1, {"w": np.zeros(1 << 18)})
    (save,) = read_ledger(tmp_path / LEDGER_FILE).saves
    assert save["background_seconds"] > 0
    assert save["stall_seconds"] > 0
    assert save["bytes"] == _size_on_disk(tmp_path / "step-000000000001")
    expected = save["bytes"] / (save["stall_seconds"] + save["background_seconds"]) / 1e9
    assert save["gbps"] == pytest.approx(expected, rel=1e-3)


def test_the_raw_floor_is_measured_once_beside_the_checkpoints(tmp_path):
    """The first save starts one floor measurement of its size, on its storage; no file of
    it is left; a later process of the same run measures none again."""
    for step in (1, 2):
        with CheckpointManager(tmp_path) as manager:
            manager.save(step, {"w": np.zeros(1 << 16)})
    summary = read_ledger(tmp_path / LEDGER_FILE)
    (floor,) = summary.floors
    assert floor["tier"] == "durable"
    assert floor["directory"] == str(tmp_path)
    assert floor["bytes"] == summary.saves[0]["bytes"]
    assert floor["gbps"] > 0
    assert [s["floor_gbps"] for s in summary.saves] == [floor["gbps"]] * 2
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".floor-")]


def test_skip_corrupt_records_what_it_fell_back_from(tmp_path):
    """restore(skip_corrupt=True) past a damaged newest checkpoint records that step."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"w": np.zeros(3)})
        manager.save(2, {"w": np.ones(3)})
    arrays = tmp_path / "step-000000000002" / "arrays.safetensors"
    data = bytearray(arrays.read_bytes())
    data[-1] ^= 0xFF
    arrays.write_bytes(bytes(data))
    with CheckpointManager(tmp_path) as manager:
        manager.restore(skip_corrupt=True)
    resumed = read_ledger(tmp_path / LEDGER_FILE).attempts[1]
    assert (resumed["resumed_from"], resumed["fell_back_from"]) == (1, "durable step 2")


def _write(path: pathlib.Path, *records: dict) -> None:
    path.write_text("".join(json.dumps({"v": 1, **r}) + "\n" for r in records))


def test_goodput_is_wall_time_less_restores_redone_steps_and_stalls(tmp_path):
    """The goodput of a known ledger: 2 attempts, the first killed 3 s after its kept save."""
    path = tmp_path / LEDGER_FILE
    _write(
        path,
        {"kind": "attempt", "time": 100.0},
        {"kind": "save", "time": 110.0, "step": 5, "tier": "durable", "bytes": 10,
         "stall_seconds": 1.0, "background_seconds": 0.0, "waited_for_memory_seconds": 0.5},
        {"kind": "save", "time": 112.0, "step": 6, "tier": "durable", "bytes": 10,
         "stall_seconds": 0.5, "background_seconds": 0.0},
        {"kind": "attempt", "time": 120.0},
        {"kind": "restore", "time": 121.0, "step": 5, "tier": "durable", "seconds": 0.25,
         "fell_back_from": "fast"},
        {"kind": "resume", "time": 121.5, "step": 5, "logged_to": 7, "steps_redone": 2,
         "last_logged_time": 113.0},
        {"kind": "audit", "time": 125.0, "audit": "2 steps compared, identical"},
        {"kind": "end", "time": 140.0, "error": None},
    )  # fmt: skip
    summary = read_ledger(path)
    first, second = summary.attempts
    # The crashed attempt ends at its last logged point (113 s), after its last record.
    assert (first["wall_seconds"], first["ended"], first["clean"]) == (13.0, None, False)
    assert (second["wall_seconds"], second["clean"], second["fell_back_from"]) == (20, True, "fast")
    # Redone: from the kept save (110 s, no background) to the last logged point (113 s);
    # the save at 6, past the step resumed from, was lost: its stall is in the redone time.
    assert second["redone_seconds"] == 3.0
    assert second["audit"] == "2 steps compared, identical"
    assert [s["lost"] for s in summary.saves] == [False, True]
    assert summary.saves[0]["waited_for_memory_seconds"] == 0.5
    assert summary.goodput == {
        "share": round((33.0 - 0.25 - 3.0 - 1.0) / 33.0, 6),
        "wall_seconds": 33.0,
        "kept_seconds": 28.75,
        "restore_seconds": 0.25,
        "redone_seconds": 3.0,
        "stall_seconds": 1.0,
        "gap_seconds": 7.0,
    }
    assert summary.goodput_line() == (
        "goodput: 87.1% of 33.00 s went into steps kept (2 attempts; lost: restores 0.250 s, "
        "redone steps 3.000 s, save stalls 1.000 s)"
    )


def test_a_record_that_fails_never_fails_the_save(tmp_path, monkeypatch):
    """A save whose record cannot be made (its size unreadable) is committed, with a warning."""
    from globalstep.checkpoint import _manager

    def unreadable(storage, name):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(_manager, "checkpoint_bytes", unreadable)
    with CheckpointManager(tmp_path) as manager:
        with pytest.warns(checkpoint.CheckpointWarning, match="could not record this save"):
            manager.save(1, {"w": np.zeros(3)})
        assert manager.steps() == [1]
    assert read_ledger(tmp_path / LEDGER_FILE).saves == []


def test_a_run_resumed_complete_logs_no_goodput_point_that_would_void_its_last_step(tmp_path):
    """Reopened when complete, with its writer open (as a Run opens it to send a tracker's
    unsent points), a Run logs nothing at its last step: a point there would mark a
    restart voiding the points the complete run logged at it."""
    from globalstep import Run

    def train(open_writer: bool) -> None:
        with Run(
            tmp_path, total_steps=4, save_every=2, progress=False, stream=io.StringIO()
        ) as run:
            weights = run.restore({"w": np.zeros(2)})["w"]
            if open_writer:
                _ = run.writer
            while not run.done:
                weights += 1.0
                run.update(loss=float(run.step))

    train(open_writer=False)
    train(open_writer=True)
    log = read_run(tmp_path / "logs")
    assert log.restarts == []
    assert [(p.step, p.value) for p in log.scalars["loss"]] == [
        (1, 0.0),
        (2, 1.0),
        (3, 2.0),
        (4, 3.0),
    ]
    assert [p.step for p in log.scalars["goodput/share"]] == [4]  # the first attempt's
    assert [a["resumed_from"] for a in read_ledger(tmp_path / LEDGER_FILE).attempts] == [None, 4]


@pytest.mark.parametrize("fast_every", [None, 5])
def test_goodput_series_log_one_point_per_tag_and_step(tmp_path, fast_every):
    """The goodput/* series never log a tag twice at one step (W&B refuses the second
    point, TensorBoard would draw two): not at the last step of a run without
    total_steps, where the save before logs its figures and the close that save's, nor
    where both tiers save at one step."""
    from globalstep import FastTier, Run

    fast = None if fast_every is None else FastTier(tmp_path / "fast", save_every=fast_every)
    with Run(
        tmp_path / "run",
        save_every=10,
        fast_tier=fast,
        progress=False,
        handle_signals=False,
        stream=io.StringIO(),
        writer_options={"formats": ("jsonl",)},
    ) as run:
        weights = np.zeros(2)
        run.restore({"w": weights})
        for _ in range(20):  # no total_steps: the save at 20 is not the run's last known
            weights += 1.0
            run.update(loss=1.0)
    [log] = (tmp_path / "run" / "logs").glob("*.jsonl")
    points = [json.loads(line) for line in log.read_text().splitlines()]
    goodput = [(p["tag"], p["step"]) for p in points if str(p.get("tag")).startswith("goodput/")]
    assert len(goodput) == len(set(goodput)), goodput
    assert ("goodput/share", 20) in goodput
    assert ("goodput/save_stall_seconds", 20) in goodput  # the save at 10's figures
    saves = read_ledger(tmp_path / "run" / "ledger.jsonl").saves
    assert len(saves) == (2 if fast_every is None else 6)  # every save stays in the ledger
