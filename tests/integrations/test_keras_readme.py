"""The README's Keras quick start runs as written, then resumes from its checkpoints."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("keras")

README = Path(__file__).resolve().parents[2] / "README.md"
REPORT = """
import json
print(json.dumps({"step": clock.step, "saved": manager.steps(),
                  "iterations": int(model.optimizer.iterations.numpy())}))
"""


def _block() -> str:
    (block,) = [
        b
        for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
        if "GlobalStepCallback" in b
    ]
    return block


def _run(directory: Path, code: str) -> dict[str, object]:
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=directory, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_keras_quick_start_trains_saves_each_epoch_and_resumes(tmp_path):
    """Cut to 2 epochs of 10 updates, the block saves 10 and 20; run whole, it resumes to 40."""
    block = _block()
    assert "epochs=4" in block
    half = _run(tmp_path, block.replace("epochs=4", "epochs=2") + REPORT)
    assert half == {"step": 20, "saved": [10, 20], "iterations": 20}
    whole = _run(tmp_path, block + REPORT)
    assert whole == {"step": 40, "saved": [10, 20, 30, 40], "iterations": 40}
    assert (tmp_path / "keras-logs").is_dir()
