"""optax's own schedule tests, from the installed wheel, run against compat.optax and optax.

The files optax ships (``optax/schedules/_schedule_test.py`` and ``_join_test.py``) run
unmodified in a subprocess twice: once with :mod:`tests.compat.optax_peer_redirect` swapping
optax's schedule modules for ``globalstep.compat.optax``, once against optax itself. Both
counts are printed; compat must pass every test optax passes. Tests skipped: those listed in
``optax_peer_redirect.SKIPS`` (none) and those the files skip themselves (8 optimizers that
take no schedule), whose reasons are printed. Each run takes about a minute (the optimizer
sweep jit-compiles ~40 optimizers), so the test is under the slow mark.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

optax = pytest.importorskip("optax")
pytest.importorskip("sklearn")  # optax's alias_test, which _schedule_test imports, needs it
pytest.importorskip("absl")

FILES = [
    str(Path(optax.__file__).parent / "schedules" / name)
    for name in ("_schedule_test.py", "_join_test.py")
]
ROOT = Path(__file__).resolve().parents[2]


def start(redirect: bool, select: str | None) -> subprocess.Popen[str]:
    """Starts pytest on optax's files, redirected to compat or not."""
    args = [sys.executable, "-m", "pytest", *FILES, "-q", "-rs", "-p", "no:cacheprovider"]
    args += ["-c", os.devnull, "--rootdir", str(Path(FILES[0]).parent), "-W", "ignore"]
    if select:
        args += ["-k", select]
    if redirect:
        args += ["-p", "tests.compat.optax_peer_redirect"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH", "")])])
    return subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def counts(output: str) -> dict[str, int]:
    """The outcome counts of pytest's summary line."""
    summary = next(line for line in reversed(output.splitlines()) if " in " in line)
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", summary)}


def compare(capsys, select: str | None) -> None:
    """Runs both, prints both counts and the skip reasons, and checks compat passed all
    that optax passed."""
    ours_proc, theirs_proc = start(True, select), start(False, select)
    ours, theirs = ours_proc.communicate()[0], theirs_proc.communicate()[0]
    ours_counts, theirs_counts = counts(ours), counts(theirs)
    skipped = sorted(set(re.findall(r"^SKIPPED .*$", ours, re.MULTILINE)))
    with capsys.disabled():
        print(
            f"\noptax's schedule tests ({select or 'all'}): against globalstep.compat.optax "
            f"{ours_counts}; against optax {theirs_counts}"
        )
        for line in skipped:
            print(f"  {line}")
    assert "redirected to globalstep.compat.optax" in ours
    assert ours_counts.get("failed", 0) == 0, ours
    assert ours_counts.get("error", 0) == 0, ours
    assert ours_counts == theirs_counts, (ours_counts, theirs_counts)


@pytest.mark.slow
def test_optax_schedule_tests_pass_against_compat(capsys):
    """optax's shipped schedule and join tests, the optimizer sweep included, pass against
    compat.optax as against optax."""
    compare(capsys, None)
