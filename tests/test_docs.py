"""The guides in docs/ run as written: every Python block, every command and its output.

Each guide is one test. Its ```python blocks run in order in one namespace, in a fresh
working directory; a block whose first line is ``# requires: NAME`` is skipped with the
rest of the guide when NAME cannot be imported; one with a ``# file: NAME`` line among its
first two is a program the guide runs as a file: it is written to NAME, not run. A
```text block right after a Python block, on a line "Output:", is what that block
prints. In ```console blocks each ``$ globalstep`` line is run through the command line
and must print the lines below it (standard output, then standard error), exactly.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from globalstep._cli import main

DOCS = Path(__file__).resolve().parents[1] / "docs"
# Guides run in a fresh interpreter of their own: the trackers keep state for the whole
# process (W&B's service and settings, MLflow's store and environment), and a tracker's
# guide takes ~15-20 s (MLflow builds its SQLite store), hence slow.
OWN_PROCESS = {"watch-your-run-in-mlflow-or-wandb"}
_BLOCK = re.compile(r"```(python|console|text)\n(.*?)```", re.S)


def _blocks(text: str) -> list[tuple[str, str, bool]]:
    """(kind, body, is an Output: block) for each fenced block, in order."""
    found = []
    for match in _BLOCK.finditer(text):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
        found.append((match[1], match[2], before.strip() == "Output:"))
    return found


def _commands(body: str) -> list[tuple[list[str], list[str]]]:
    runs: list[tuple[list[str], list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            command = shlex.split(line[2:].replace("\\\n", " "))
            assert command[0] == "globalstep", f"only globalstep commands run here: {line}"
            runs.append((command[1:], []))
        else:
            runs[-1][1].append(line)
    return runs


def _run_command(argv: list[str]) -> tuple[int, list[str]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    text = out.getvalue() + err.getvalue()
    return status, [line.rstrip() for line in text.splitlines()]


@pytest.mark.parametrize(
    "guide",
    [
        pytest.param(path, marks=[pytest.mark.slow] if path.stem in OWN_PROCESS else [])
        for path in sorted(DOCS.glob("*.md"))
    ],
    ids=lambda p: p.stem,
)
def test_guide_runs_as_written(guide, tmp_path, monkeypatch):
    """Every block of the guide runs and prints what the guide shows."""
    monkeypatch.chdir(tmp_path)
    if guide.stem in OWN_PROCESS:
        _run_guide_in_own_process(guide, tmp_path)
    else:
        run_guide(guide)


def _run_guide_in_own_process(guide: Path, directory: Path) -> None:
    """Runs ``run_guide(guide)`` in a fresh interpreter (warnings as errors, as here)."""
    for kind, body, _ in _blocks(guide.read_text()):
        first = body.splitlines()[0] if kind == "python" and body else ""
        for name in (
            first.removeprefix("# requires: ").split(",") if "# requires: " in first else []
        ):
            if importlib.util.find_spec(name.strip()) is None:
                pytest.skip(f"{guide.name} needs {name.strip()}")
    code = (
        "import sys; from pathlib import Path; "
        f"sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"from test_docs import run_guide; run_guide(Path({str(guide)!r}))"
    )
    # MLflow 3.17's SQLite store uses a loader strategy SQLAlchemy 2.1 deprecates.
    ignore = "ignore:The ``noload`` loader strategy is deprecated:DeprecationWarning"
    result = subprocess.run(
        [sys.executable, "-W", "error", "-W", ignore, "-c", code],
        cwd=directory,
        # Without the tools' variables of this process: WANDB_SERVICE would point the
        # guide's W&B at this process's W&B service (a test's, perhaps torn down since).
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))},
            "PYTHONPATH": os.pathsep.join(sys.path),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]


@pytest.mark.parametrize(
    "text",
    [
        "```python\nprint(1)\n```\n\nOutput:\n```text\n2\n```\n",
        "```console\n$ globalstep --version\nglobalstep 0.0\n```\n",
    ],
    ids=["python output", "command output"],
)
def test_a_wrong_output_fails(tmp_path, text):
    """A guide whose shown output differs from what runs is caught."""
    guide = tmp_path / "wrong.md"
    guide.write_text(text)
    with pytest.raises(AssertionError):
        run_guide(guide)


def run_guide(guide: Path) -> None:
    """Runs one guide's blocks, asserting each output shown."""
    namespace: dict[str, object] = {"__name__": f"docs_{guide.stem}"}
    printed = ""
    for kind, body, is_output in _blocks(guide.read_text()):
        if kind == "python":
            first = body.splitlines()[0] if body else ""
            if first.startswith("# requires: "):
                for name in first.removeprefix("# requires: ").split(","):
                    if importlib.util.find_spec(name.strip()) is None:
                        pytest.skip(f"{guide.name} needs {name.strip()}")
            saved = [line for line in body.splitlines()[:2] if line.startswith("# file: ")]
            if saved:  # a program the guide runs as a file, as its reader saves it
                Path(saved[0].removeprefix("# file: ")).write_text(body)
                continue
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                # As a reader runs it: without this module's `from __future__ import annotations`.
                exec(compile(body, f"{guide.name}", "exec", dont_inherit=True), namespace)
            printed = buffer.getvalue()
        elif kind == "text" and is_output:
            assert printed.rstrip("\n").splitlines() == body.rstrip("\n").splitlines()
        elif kind == "console":
            for argv, expected in _commands(body):
                status, lines = _run_command(argv)
                assert status in (0, 1), (argv, status)
                assert lines == [line.rstrip() for line in expected], argv
