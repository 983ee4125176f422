"""The README's TensorFlow 2 quick start runs as written, then resumes from its checkpoints."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("keras")

README = Path(__file__).resolve().parents[2] / "README.md"
REPORT = """
from globalstep.summary._reader import read_run
print(json.dumps({"step": clock.step, "saved": globalstep.CheckpointManager("tf-ckpts").steps(),
                  "logged": [p.step for p in read_run("tf-logs").scalars["loss"]]}))
"""


def _block() -> str:
    (block,) = [
        b
        for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
        if "ResumableTFDataset" in b
    ]
    return block


def _run(directory: Path, code: str) -> dict[str, object]:
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    paths = env.get("PYTHONPATH", "").split(os.pathsep)  # absolute: the run is in `directory`
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in paths if p)
    done = subprocess.run(
        [sys.executable, "-c", "import json\n" + code],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_tf_quick_start_trains_saves_and_resumes(tmp_path):
    """Cut to 5 epochs (40 updates) it saves 20 and 40; run whole, it resumes to 80, and
    the loss curve holds each of the 80 steps once."""
    block = _block()
    assert "range(data.epoch, 10)" in block
    half = _run(tmp_path, block.replace("range(data.epoch, 10)", "range(data.epoch, 5)") + REPORT)
    assert half == {"step": 40, "saved": [20, 40], "logged": list(range(1, 41))}
    whole = _run(tmp_path, block + REPORT)
    assert whole == {"step": 80, "saved": [40, 60, 80], "logged": list(range(1, 81))}
