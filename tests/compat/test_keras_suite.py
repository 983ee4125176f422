"""Keras' own schedule test file, from the installed wheel, against compat and against Keras.

``keras/src/optimizers/schedules/learning_rate_schedule_test.py`` runs twice in
subprocesses: as shipped, and with keras_suite_plugin.py swapping Keras' schedule classes
for globalstep.compat.keras's. Both counts are printed. No test is skipped: the file's
steps are ints, floats, ``np.float64`` rates and ``backend.Variable`` steps; a variable
step is a backend tensor, which compat evaluates with Keras' own ops (as an optimizer
calls it), so those assertions check the delegation, and the int and float ones
compat's own NumPy arithmetic.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

keras = pytest.importorskip("keras")

SUITE = Path(keras.__file__).parent / "src/optimizers/schedules/learning_rate_schedule_test.py"
HERE = Path(__file__).parent


def _run(tmp_path: Path, *plugin: str) -> tuple[dict[str, int], str]:
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\n")
    env = {
        **os.environ,
        "KERAS_BACKEND": "tensorflow",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(SUITE),
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            str(ini),
            "--rootdir",
            str(tmp_path),
            "-rs",
            *plugin,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", done.stdout)}
    return counts, done.stdout


@pytest.mark.slow
def test_keras_schedule_tests_pass_against_compat(tmp_path, capsys):
    """The installed Keras schedule tests pass against compat as they do against Keras."""
    assert SUITE.is_file()
    theirs, their_out = _run(tmp_path)
    ours, our_out = _run(tmp_path, "-p", "keras_suite_plugin")
    with capsys.disabled():
        print(
            f"\nKeras' {SUITE.name}: against Keras {theirs}; against globalstep.compat.keras {ours}"
        )
    assert theirs.get("passed", 0) > 20, their_out[-3000:]
    assert ours == theirs, our_out[-3000:]
    assert not ours.get("failed")
    assert not ours.get("skipped")
    built = int(re.search(r"globalstep.compat.keras schedules built: (\d+)", our_out).group(1))
    assert built > 20
