"""The several-processes guide's JAX program, run as its guide says: ``sh launch.sh``,
two processes of ``jax.distributed`` on 127.0.0.1, then started again (it resumes).

tests/test_docs.py runs the guide's Python blocks in its own process, where the JAX
script only defines its functions (``jax.distributed.initialize`` there would make every
later test's process group JAX's); this test runs the script and the launcher themselves.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

from jax_spawn import environment, free_port

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "several-processes.md"


def _launch(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "launch.sh"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=240,
        env=environment(PORT=str(free_port())),
    )


@pytest.mark.slow
def test_the_guides_jax_program_runs_on_two_processes_and_resumes(tmp_path: Path) -> None:
    text = GUIDE.read_text()
    [script] = re.findall(r"```python\n# requires: jax, optax\n(# train_jax\.py.*?)```", text, re.S)
    [launcher] = re.findall(r"```sh\n(# launch\.sh.*?)```", text, re.S)
    (tmp_path / "train_jax.py").write_text(script)
    (tmp_path / "launch.sh").write_text(launcher.replace("python ", '"$PYTHON" '))
    done = _launch(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    messages = [line for line in done.stdout.splitlines() if line.startswith("globalstep:")]
    assert messages == [
        "globalstep: new run in run",
        f"globalstep: finished at step 200; checkpoint saved in {tmp_path}/run/checkpoints",
    ]
    checkpoints = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("step-*")) == [
        "step-000000000100",
        "step-000000000200",
    ]
    [log] = (tmp_path / "run" / "logs").glob("*.jsonl")
    points = [json.loads(line) for line in log.read_text().splitlines()]
    # The run's own curve (the goodput/* series of its ledger stand beside it).
    steps = [p["step"] for p in points if not str(p.get("tag")).startswith("goodput/")]
    assert [s for s in steps if s is not None] == list(range(1, 201))
    state = json.loads((checkpoints / "step-000000000200" / "state.json").read_text())
    assert state["per_rank"]["world_size"] == 2
    assert [sorted(entry["tree"]) for entry in state["per_rank"]["ranks"]] == [
        ["state/batches", "state/key"],
        ["state/batches", "state/key"],
    ]
    again = _launch(tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    resumed = [line for line in again.stdout.splitlines() if line.startswith("globalstep:")]
    assert resumed[0].startswith("globalstep: resumed from step 200 ("), resumed
    assert resumed[1] == (
        "globalstep: the run is complete (step 200 of 200); pass a larger total_steps to go on"
    ), resumed
