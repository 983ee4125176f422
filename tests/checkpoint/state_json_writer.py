"""Writes checkpoints of every kind that writes a state.json, with the time pinned: the
calls whose state.json ``tests/data/state-json-c08446f/`` holds as c08446f wrote them.

Run as ``python tests/checkpoint/state_json_writer.py OUT`` to write them with the code on
the path (that is how the golden files were made, on c08446f).
"""

from __future__ import annotations

import io
import pathlib
import sys
import time
from typing import Any
from unittest import mock

import numpy as np

from globalstep import Clock
from globalstep.checkpoint import CheckpointManager, PerRank

NOW = 1_764_000_000.123456


def _clock(**kw: Any) -> Clock:
    return Clock(time_fn=lambda: 0.0, **kw)


def _tree(clock: Clock, k: int) -> dict[str, Any]:
    return {
        "w": np.arange(3.0) * k,
        "ints": np.arange(4, dtype=np.int32).reshape(2, 2),
        "clock": clock,
        "nested": {"list": [1, 2.5, 0.1, 1e-7, 1e300, -0.0, "x", None, True], "name": "é"},
        "inf": float("inf"),
        "mine": PerRank({"seen": np.arange(2)}),
    }


def _numpy(root: pathlib.Path) -> None:
    """A manager's saves: metrics, a clock, a policy, a trigger; a rollback's timeline."""
    clock = _clock(steps_per_epoch=4, batch_size=8)
    with CheckpointManager(root / "numpy", max_to_keep=5, save_every=2) as manager:
        for step in range(1, 5):
            clock.tick()
            manager.save(clock, _tree(clock, step), metrics={"loss": 1 / step, "acc": 0.5})
        clock.tick(2)
        manager.maybe_save(clock, _tree(clock, 6))
    resumed = _clock(steps_per_epoch=4, batch_size=8)
    with CheckpointManager(root / "numpy", max_to_keep=5) as manager:
        manager.restore(_tree(resumed, 0), step=2)
        resumed.tick()
        manager.save(resumed, _tree(resumed, 7))


def _run(root: pathlib.Path) -> None:
    """A Run directory: its config, its skipped updates, its schedules' clock."""
    from globalstep.run import Run
    from globalstep.schedules import CosineDecay

    run = Run(
        root / "run",
        save_every=2,
        clock=_clock(steps_per_epoch=3, batch_size=4),
        schedules={"lr": CosineDecay(0.1, decay_steps=10)},
        config={"model": "linear", "width": 3, "rate": 0.25},
        progress=False,
        stream=io.StringIO(),
        handle_signals=False,
        writer_options={"formats": ("jsonl",)},
    )
    weights = np.zeros(3)
    with run:
        run.restore({"weights": weights})
        for step in range(5):
            weights += 1.0
            run.update(applied=step != 2, loss=1.0 / (step + 1))


def _tf(root: pathlib.Path) -> None:
    """A compat.tf checkpoint (no step of its own: its save counter)."""
    from globalstep.compat._tf_checkpoint import Checkpoint

    checkpoint = Checkpoint(w=np.arange(2.0), clock=_clock())
    checkpoint.save(str(root / "tf" / "ckpt"))
    checkpoint.write(str(root / "tf" / "written"))


def write_checkpoints(root: pathlib.Path) -> None:
    """Writes the checkpoints whose state.json the golden files hold, at a pinned time."""
    with mock.patch.object(time, "time", return_value=NOW):
        _numpy(root)
        _run(root)
        _tf(root)


if __name__ == "__main__":
    write_checkpoints(pathlib.Path(sys.argv[1]))
