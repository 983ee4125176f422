"""What the release before the one-door refactor (c08446f) wrote is what today's code
writes, byte for byte, and what today's code restores (issue 34: files on disk unchanged).

``tests/data/main-c08446f/`` was written by ``tests/data/make_c08446f_data.py`` at c08446f
(a 2-rank distributed checkpoint with per-rank leaves, a Run directory with a tracker's
record, a standalone writer's event files and JSONL). The byte test runs the same script
on today's code and compares every file; the restore tests read the committed files.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

DATA = pathlib.Path(__file__).parent / "data" / "main-c08446f"
MAKE = pathlib.Path(__file__).parent / "data" / "make_c08446f_data.py"
EXPECTED = json.loads((DATA / "expected.json").read_text())
SRC = pathlib.Path(__file__).resolve().parents[1] / "src"

pytestmark = pytest.mark.slow  # two gloo processes, a Run and a writer, in subprocesses


def run_script(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *sys.path])}
    subprocess.run([sys.executable, *args], check=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def today(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The same calls, made by today's code."""
    pytest.importorskip("torch")
    pytest.importorskip("tensorboard")
    out = tmp_path_factory.mktemp("today") / "data"
    run_script(str(MAKE), str(out))
    return out


def files(root: pathlib.Path) -> dict[str, bytes]:
    """Every file below ``root`` but the lock files (empty, held while a writer is open)."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != ".lock"
    }


def _covered(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The entries the ``sent`` marks cover, as merged spans: the same points sent in one
    batch or two (the sender thread's timing) read the same."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def normalised(name: str, data: bytes) -> Any:
    """The two files compared after one normalisation each: the catalogue's index holds
    each file's identity (inode, size, mtime: ``ids``), which no two runs share; a tracker
    record's ``sent`` marks land among its points, one batch or several, as its sender
    thread runs (its other lines are compared in order, and the points the marks cover)."""
    if name.endswith(".summaries.jsonl"):
        rows = [json.loads(line) for line in data.splitlines()]
        return [{key: value for key, value in row.items() if key != "ids"} for row in rows]
    if name.endswith(".tracker.jsonl"):
        lines = data.splitlines()
        sent = sorted(
            tuple(span)
            for line in lines
            if line.startswith(b'{"sent"')
            for span in json.loads(line)["sent"]
        )
        kept = [line for line in lines if not line.startswith(b'{"sent"')]
        return kept, _covered(sent)
    return data


def test_today_writes_the_files_c08446f_wrote(today: pathlib.Path) -> None:
    before, now = files(DATA), files(today)
    assert sorted(now) == sorted(before)
    different = [
        name for name in before if normalised(name, now[name]) != normalised(name, before[name])
    ]
    assert different == []


def test_the_byte_comparison_is_strict(today: pathlib.Path) -> None:
    """A change of one byte in a state.json or an event file is seen (the check can fail)."""
    name = "run/checkpoints/step-000000000020/state.json"
    changed = files(today)[name].replace(b'"step":20', b'"step": 20', 1)
    assert normalised(name, changed) != normalised(name, files(DATA)[name])
    events = next(n for n in files(DATA) if n.startswith("logs/events.out"))
    assert normalised(events, files(DATA)[events][:-1] + b"\0") != files(DATA)[events]


def rank_restore(rank: int, port: int, directory: str, out: str) -> None:
    """One rank of the 2-rank restore (run as this file's ``--rank``)."""
    sys.path.insert(0, str(MAKE.parent))
    import make_c08446f_data as make
    import torch.distributed as dist

    import globalstep

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        clock = globalstep.Clock()
        tree = make.rank_tree(rank, 0)
        with globalstep.CheckpointManager(directory, distributed=True) as manager:
            manager.restore({"clock": clock, "model": tree})
        values = make.rank_values(tree)
        pathlib.Path(out).write_text(json.dumps({"step": clock.step, **values}))
    finally:
        dist.destroy_process_group()


def test_the_distributed_checkpoint_restores_each_rank_its_own_leaves(tmp_path: pathlib.Path):
    pytest.importorskip("torch")
    sys.path.insert(0, str(MAKE.parent))
    import make_c08446f_data as make

    directory = tmp_path / "ranks"
    shutil.copytree(DATA / "ranks", directory)
    port = make.free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *sys.path])}
    children = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--rank",
                str(r),
                str(port),
                str(directory),
                str(tmp_path / f"{r}.json"),
            ],
            env=env,
        )
        for r in (0, 1)
    ]
    assert [child.wait(timeout=300) for child in children] == [0, 0]
    for rank in (0, 1):
        got = json.loads((tmp_path / f"{rank}.json").read_text())
        assert got.pop("step") == 10
        assert got == EXPECTED["ranks"][str(rank)], f"rank {rank}"
    assert EXPECTED["ranks"]["0"] != EXPECTED["ranks"]["1"]  # each rank really has its own


def test_the_run_directory_resumes_complete(tmp_path: pathlib.Path) -> None:
    import globalstep
    from globalstep.summary import read_run

    directory = tmp_path / "run"
    shutil.copytree(DATA / "run", directory)
    weights = np.zeros(3)
    with globalstep.Run(
        directory,
        total_steps=20,
        save_every=10,
        schedules={"lr": globalstep.CosineDecay(0.1, decay_steps=20)},
        config={"batch_size": 20},
        writer_options={"formats": ("tensorboard", "jsonl")},
        progress=False,
    ) as run:
        run.restore({"weights": weights})
        assert run.done
        assert run.clock.step == 20
    assert weights.tolist() == EXPECTED["run"]["weights"]
    curves = read_run(directory / "logs")
    assert [p.step for p in curves.scalars["loss"]] == list(range(1, 21))


def test_the_tracker_record_reads_as_all_sent(tmp_path: pathlib.Path) -> None:
    from globalstep.summary import has_unsent

    logdir = tmp_path / "logs"
    shutil.copytree(DATA / "run" / "logs", logdir)
    assert not has_unsent(str(logdir), ("mlflow",))
    record = logdir / "mlflow.tracker.jsonl"
    lines = record.read_text().splitlines()
    record.write_text("".join(f"{line}\n" for line in lines if '"sent"' not in line))
    assert has_unsent(str(logdir), ("mlflow",))  # the same record, its sent mark taken off


def test_the_standalone_logs_read_back() -> None:
    """The JSONL through today's reader, the event file through TensorBoard's own."""
    from globalstep.summary import read_run

    expected = {int(step): value for step, value in EXPECTED["logs"]["loss"].items()}
    points = read_run(DATA / "logs").scalars["loss"]
    assert {p.step: p.value for p in points} == expected
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    ).EventAccumulator(str(DATA / "logs"))
    accumulator.Reload()
    events = {e.step: e.value for e in accumulator.Scalars("loss")}
    assert events == pytest.approx(expected)


if __name__ == "__main__":
    rank_restore(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
