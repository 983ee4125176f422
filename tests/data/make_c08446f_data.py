"""Writes tests/data/main-c08446f/ (run once, on the release before the one-door refactor).

Issue 34 moved every module behind its package's door; nothing on disk may change. This
script was run at c08446f (the release before it):

    PYTHONPATH=src python tests/data/make_c08446f_data.py tests/data/main-c08446f

and its output committed. ``tests/test_c08446f_files.py`` restores each directory on the
current code, and runs this same script on the current code to compare every file it
writes with the committed one, byte for byte. What would differ from run to run (the
wall clock, the clocks' elapsed time, the host name, the process id, random ids) is
pinned here, the same way on both sides, so that the comparison is strict. Two files are
compared after one normalisation each (``tests/test_c08446f_files.py`` says which): the
catalogue's index ``.summaries.jsonl`` holds each file's identity (inode, size, mtime),
and a tracker record's ``sent`` marks land among its points, in one batch or several,
as its sender thread runs.

It writes:

- ``ranks/``: a distributed checkpoint of 2 gloo ranks (two processes on 127.0.0.1) with
  per-rank leaves: a ``PerRank`` array, a NumPy generator and a ``random.Random`` each;
- ``run/``: a Run directory (checkpoints, event files, ``metrics.jsonl``, the run's config)
  whose writer has a tracker format, so its record ``mlflow.tracker.jsonl`` is there too;
- ``logs/``: a standalone writer's event files and JSONL;
- ``expected.json``: the values saved.
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import random
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

import numpy as np

WALL = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC


def pin() -> None:
    """The wall clock, the host, the pid and the random ids, the same on every run."""

    def fake_time() -> float:
        return WALL  # one moment: how often a version reads the clock changes no byte

    time.time = fake_time
    time.time_ns = lambda: int(fake_time() * 1e9)
    socket.gethostname = lambda: "host"
    os.getpid = lambda: 4242
    ids = itertools.count()
    uuid.uuid4 = lambda: uuid.UUID(int=next(ids))


class Client:
    """A tracker client that keeps what it is sent (no server: the record is the file)."""

    name = "mlflow"

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, float, float]] = []

    def open(self, run_id: str | None, *, logdir: str, key: str) -> str:
        return run_id or "run-1"

    def send(self, points: list[tuple[str, int, float, float]]) -> None:
        self.sent.extend(points)

    def set_params(self, params: dict[str, object]) -> None:
        pass

    def close(self) -> None:
        pass


def rank_tree(rank: int, step: int) -> dict[str, Any]:
    from globalstep.checkpoint import PerRank

    return {
        "w": np.arange(6, dtype=np.float32).reshape(2, 3) * step,
        "mine": PerRank(np.full(3, 10 * rank + step, dtype=np.int64)),
        "np_rng": np.random.default_rng(100 + rank),
        "py_rng": random.Random(200 + rank),
    }


def rank_values(tree: dict[str, Any]) -> dict[str, Any]:
    """What a rank holds after its restore: its own leaves, drawn from once."""
    return {
        "w": tree["w"].tolist(),
        "mine": np.asarray(
            tree["mine"].value if hasattr(tree["mine"], "value") else tree["mine"]
        ).tolist(),
        "np_rng": tree["np_rng"].integers(0, 2**31, size=3).tolist(),
        "py_rng": [tree["py_rng"].randrange(2**31) for _ in range(3)],
    }


def write_rank(rank: int, port: int, root: pathlib.Path) -> None:
    pin()
    import torch.distributed as dist

    import globalstep

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        clock = globalstep.Clock(time_fn=lambda: 0.0)
        # ledger=False: issue 35's ledger.jsonl (times) is not among the files c08446f wrote.
        ranks = root / "ranks"
        with globalstep.CheckpointManager(ranks, distributed=True, ledger=False) as manager:
            for step in (5, 10):
                clock.tick(step - clock.step)
                tree = rank_tree(rank, step)
                for _ in range(step):  # each generator moved on by its rank's updates
                    tree["np_rng"].random()
                    tree["py_rng"].random()
                manager.save(clock, {"clock": clock, "model": tree})
        after = rank_tree(rank, 10)
        for _ in range(10):
            after["np_rng"].random()
            after["py_rng"].random()
        (root / f"ranks-{rank}.json").write_text(json.dumps(rank_values(after)))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_ranks(root: pathlib.Path) -> dict[str, Any]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--rank", str(rank), str(port), str(root)], env=env
        )
        for rank in (0, 1)
    ]
    for child in children:
        if child.wait(timeout=300) != 0:
            raise SystemExit(f"rank exited with {child.returncode}")
    expected = {str(rank): json.loads((root / f"ranks-{rank}.json").read_text()) for rank in (0, 1)}
    for rank in (0, 1):
        (root / f"ranks-{rank}.json").unlink()
    return expected


def write_run(root: pathlib.Path) -> dict[str, Any]:
    import globalstep
    from globalstep.summary import Tracker

    client = Client()
    weights = np.zeros(3)
    with globalstep.Run(
        root / "run",
        total_steps=20,
        clock=globalstep.Clock(time_fn=lambda: 0.0),
        save_every=10,
        schedules={"lr": globalstep.CosineDecay(0.1, decay_steps=20)},
        config={"batch_size": 20},
        writer_options={
            "formats": ("tensorboard", "jsonl", Tracker("mlflow", client=lambda: client))
        },
        progress=False,
        # Issue 35's ledger (ledger.jsonl, and goodput/* series of timings in the logs) is
        # off: the files this test holds to byte for byte are the formats c08446f wrote.
        checkpoint_options={"ledger": False},
    ) as run:
        run.restore({"weights": weights})
        while not run.done:
            lr = run.value("lr")
            weights -= lr * (weights - 1.0)
            run.update(loss=float(np.sum((weights - 1.0) ** 2)), lr=lr)
    return {"step": 20, "weights": weights.tolist(), "sent": len(client.sent)}


def write_logs(root: pathlib.Path) -> dict[str, Any]:
    from globalstep.summary import SummaryWriter

    with SummaryWriter(root / "logs", formats=("tensorboard", "jsonl")) as writer:
        for step in range(1, 6):
            writer.scalar("loss", 1.0 / step, step=step)
            writer.scalars({"a": step, "b": -step}, step=step)
        writer.histogram("h", np.linspace(-1, 1, 11), step=5)
        writer.text("note", "done", step=5)
    return {"loss": {str(s): 1.0 / s for s in range(1, 6)}}


def write(root: pathlib.Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    expected = {"ranks": write_ranks(root)}
    pin()
    expected["run"] = write_run(root)
    expected["logs"] = write_logs(root)
    (root / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--rank":
        write_rank(int(sys.argv[2]), int(sys.argv[3]), pathlib.Path(sys.argv[4]))
    else:
        write(pathlib.Path(sys.argv[1]))
