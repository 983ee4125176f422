"""Tests that README.md's examples run as written."""

import contextlib
import io
import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_five_line_loop_runs_and_logs_every_100_steps():
    """The README's loop runs with a stand-in train_step and prints at steps 100 and 200."""
    out = io.StringIO()
    namespace = {"batches": range(250), "train_step": lambda batch, rate: 0.5}
    with contextlib.redirect_stdout(out):
        exec(python_blocks()[0], namespace)
    assert out.getvalue().splitlines() == ["step 100: loss 0.5", "step 200: loss 0.5"]


def test_checkpoint_and_writer_snippets_run(tmp_path, monkeypatch):
    """The checkpoint and summary snippets run, the elided middle replaced by one tick."""
    monkeypatch.chdir(tmp_path)
    import globalstep

    namespace = {"globalstep": globalstep, "clock": globalstep.Clock(steps_per_epoch=1)}
    namespace |= {"weights": np.ones(3), "loss": 0.25}
    checkpoint, summary = python_blocks()[1], python_blocks()[3]
    exec(checkpoint.replace("...\n", "clock.tick()\n"), namespace)
    assert namespace["manager"].steps() == [1]
    namespace["lr"] = globalstep.ExponentialDecay(0.1, decay_steps=10, rate=0.5)
    exec(summary, namespace)
    namespace["writer"].close()
    namespace["manager"].close()
    assert (tmp_path / "logs").is_dir()


def test_evaluator_snippet_follows_the_run(tmp_path, monkeypatch):
    """The evaluator snippet yields each checkpoint of a finished run once, then stops."""
    monkeypatch.chdir(tmp_path)
    import globalstep

    with globalstep.CheckpointManager("ckpts", max_to_keep=None) as manager:
        for step in (10, 20):
            manager.save(step, {"model": {"w": np.full(2, float(step))}})
    seen = []
    code = python_blocks()[2].replace("timeout_seconds=600", "after=0, timeout_seconds=0")
    exec(code, {"globalstep": globalstep, "evaluate": lambda w, step: seen.append((w[0], step))})
    assert seen == [(10.0, 10), (20.0, 20)]
