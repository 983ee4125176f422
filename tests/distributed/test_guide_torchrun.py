"""The several-processes guide's script, run as its guide says: torchrun with 2 ranks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "several-processes.md"


@pytest.mark.slow
def test_the_guides_script_runs_under_torchrun_on_two_ranks(tmp_path):
    """torchrun --nproc-per-node=2 train.py: rank 0 alone speaks, logs and saves 100, 200."""
    [script] = re.findall(
        r"```python\n# requires: torch\n(# train\.py.*?)```", GUIDE.read_text(), re.S
    )
    (tmp_path / "train.py").write_text(script)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    done = subprocess.run(
        [*command, "--nproc-per-node=2", "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    messages = [line for line in done.stdout.splitlines() if line.startswith("globalstep:")]
    assert messages == [
        "globalstep: new run in run",
        f"globalstep: finished at step 200; checkpoint saved in {tmp_path}/run/checkpoints",
    ]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step-*")) == [
        "step-000000000100",
        "step-000000000200",
    ]
    [log] = (tmp_path / "run" / "logs").glob("*.jsonl")
    points = [json.loads(line) for line in log.read_text().splitlines()]
    # The run's own curve (the goodput/* series of its ledger stand beside it).
    steps = [p["step"] for p in points if not str(p.get("tag")).startswith("goodput/")]
    assert [s for s in steps if s is not None] == list(range(1, 201))
    # Each rank's own batch generator is in the checkpoint, beside rank 0's replicated state.
    state = json.loads(
        (tmp_path / "run" / "checkpoints" / "step-000000000200" / "state.json").read_text()
    )
    assert state["per_rank"]["world_size"] == 2
    assert [sorted(entry["tree"]) for entry in state["per_rank"]["ranks"]] == [
        ["state/batches"],
        ["state/batches"],
    ]
