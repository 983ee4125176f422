"""README.md runs as written.

Every ```python block runs, in order, in one fresh working directory, each in a fresh
interpreter from a file of its own, as a user who copies it would run it: the quick starts
(five lines, checkpoints, Run, PyTorch, JAX, Keras) are complete programs. A block whose
first line is ``# fragment: ...`` is a piece of a larger program; it runs with the stand-ins
STAND_INS states for it (code run before and after it, values put in, an environment), and
a new fragment without an entry there fails the test. A block whose imports are not
installed is skipped, the rest still run. Each ```sh command runs through the command line
and prints the ``# `` lines below it; COMMANDS are the commands the prose names, run in
the same directory after the blocks. A block that fails fails the test, naming its line
and its first line.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from globalstep._cli import main
from globalstep._demo import fast_tier_path

README = Path(__file__).resolve().parents[1] / "README.md"
FRAGMENT = "# fragment:"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, its text, the README line of its first line and
    the heading of the section it is in."""

    kind: str
    body: str
    line: int
    section: str

    @property
    def first(self) -> str:
        return self.body.splitlines()[0] if self.body else ""

    @property
    def fragment(self) -> bool:
        return self.first.startswith(FRAGMENT)

    @property
    def key(self) -> str:
        """The first line of code (after a fragment's marker): what STAND_INS is keyed by."""
        lines = self.body.splitlines()
        return lines[1] if self.fragment else lines[0]

    @property
    def name(self) -> str:
        return f"README.md line {self.line} ({self.section}): `{self.first}`"


def readme_blocks(text: str | None = None) -> list[Block]:
    """Every fenced block of README.md (or of ``text``), in order."""
    text = README.read_text() if text is None else text
    blocks, section, fence, body, start = [], "", None, [], 0
    for number, line in enumerate(text.splitlines(), 1):
        if fence is None and line.startswith("```") and len(line) > 3:
            fence, body, start = line[3:].strip(), [], number + 1
        elif fence is not None and line == "```":
            blocks.append(Block(fence, "".join(f"{b}\n" for b in body), start, section))
            fence = None
        elif fence is not None:
            body.append(line)
        elif line.startswith("#"):
            section = line.lstrip("#").strip()
    return blocks


@dataclass(frozen=True)
class StandIn:
    """What a fragment runs with, and why.

    Attributes:
        why: what the stand-ins stand for, said once.
        sections: the sections whose (one) Python block runs first, in the same
            interpreter: the code the fragment says it continues.
        before: code run after those blocks, before the fragment.
        replace: (text in the fragment, what it becomes); ``{name}`` in the second is
            filled from the test's context (a server's address).
        after: code run after the fragment.
        env: environment variables for the interpreter (``{name}`` filled likewise).
        requires: modules it needs beyond its imports (an extra's).
        fixture: a pytest fixture the context comes from (``s3_server``).
        check: called with the directory and what it printed: that it did its work.
    """

    why: str
    sections: tuple[str, ...] = ()
    before: str = ""
    replace: tuple[tuple[str, str], ...] = ()
    after: str = ""
    env: dict[str, str] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    fixture: str | None = None
    check: Callable[[Path, str], None] | None = None


def _read_only(directory: Path) -> list[int]:
    import globalstep

    with globalstep.CheckpointManager(directory, read_only=True) as reader:
        return reader.steps()


def _saved(path: str, steps: list[int]) -> Callable[[Path, str], None]:
    """A check: the checkpoints under ``path`` are ``steps`` (the newest ones kept)."""

    def check(directory: Path, printed: str) -> None:
        assert _read_only(directory / path) == steps, path

    return check


def _check_five_lines(directory: Path, printed: str) -> None:
    lines = printed.splitlines()
    assert [line.split(":")[0] for line in lines] == ["step 100", "step 200"], printed
    assert float(lines[-1].split()[-1]) < 0.02  # it trains: the noise's 0.01 and a little


def _check_evaluator(directory: Path, printed: str) -> None:
    seen = json.loads(printed.splitlines()[-1])
    assert [step for step, _ in seen] == [50]  # the newest checkpoint of the run followed
    # The Checkpoints quick start's weights at step 50: 1 - w shrinks by 0.8 each update.
    assert np.allclose(seen[0][1], 1 - 0.8**50, rtol=0, atol=1e-12)


def _same(got: str, expected: str) -> None:
    assert got == expected


def _check_writer(directory: Path, printed: str) -> None:
    import globalstep
    from globalstep.summary import read_run

    points = read_run(directory / "logs").scalars
    steps = list(range(241, 265))  # 24 updates after the five lines' 240
    assert {tag: [p.step for p in points[tag]] for tag in points} == {"loss": steps, "lr": steps}
    rate = globalstep.ExponentialDecay(0.1, decay_steps=1000, rate=0.96)
    assert [p.value for p in points["lr"]] == [rate(s - 1) for s in steps]  # the update's own


STAND_INS = {
    'reader = globalstep.CheckpointManager("ckpts", read_only=True)': StandIn(
        why="an evaluator beside the Checkpoints quick start's run, which has finished: it "
        "stops at once instead of waiting 600 s for another checkpoint; evaluate records",
        before="import json\nimport globalstep\nseen = []\n"
        "def evaluate(w, step):\n    seen.append([step, w.tolist()])\n",
        replace=(("timeout_seconds=600", "timeout_seconds=0"),),
        after="print(json.dumps(seen))\n",
        check=_check_evaluator,
    ),
    'options = {"endpoint_url": "http://127.0.0.1:9000"}   # any s3fs option; or '
    "AWS_ENDPOINT_URL": StandIn(
        why="a local S3 server (moto) for MinIO, a fresh prefix of its bucket for "
        "s3://bucket/run-1; one checkpoint and one point written through them",
        before="import numpy as np\nimport globalstep\n",
        replace=(
            ('{"endpoint_url": "http://127.0.0.1:9000"}', "{s3_options}"),
            ("s3://bucket/run-1", "{s3_prefix}"),
        ),
        after='manager.save(1, {"w": np.ones(2)})\nwriter.scalar("loss", 0.5, 1)\n'
        "writer.close()\nprint(manager.steps())\nmanager.close()\n",
        fixture="s3_server",
        check=lambda directory, printed: _same(printed.splitlines()[-1], "[1]"),
    ),
    'writer = globalstep.SummaryWriter("logs", clock=clock)    # TensorBoard event files + '
    "JSONL": StandIn(
        why="the five lines' clock, schedule, batches and train_step, after their loop",
        sections=("Five lines in your own loop",),
        after="writer.close()\n",
        requires=("tensorboard", "google_crc32c"),
        check=_check_writer,
    ),
    "from torch.distributed.fsdp import fully_shard": StandIn(
        why="one rank, as `torchrun --nproc-per-node 1` sets it up, after the PyTorch quick "
        "start (its model and clock); the checkpoint of the step reached saved, the group "
        "closed",
        sections=("PyTorch",),
        after="manager.save(clock, state, force=True)\nmanager.close()\n"
        "torch.distributed.destroy_process_group()\n",
        env={
            "RANK": "0",
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "{free_port}",
        },
        check=_saved("sharded-ckpts", [30]),
    ),
}

# The commands of ```sh blocks that cannot run here, and why.
NOT_HERE = {
    "make demo": "creates .venv and installs from the package index; `globalstep demo` runs "
    "below (COMMANDS)",
    "make test": "creates .venv and runs the whole suite, this test among it",
}

# The commands the prose names, as they run here (DIR filled with what the blocks above
# wrote, prune kept from deleting); each must appear in README.md as written on the left.
COMMANDS = [
    ("globalstep demo --stop-at 500", "globalstep demo --stop-at 500"),
    ("globalstep demo", "globalstep demo"),
    (
        "globalstep schedule cosine_decay --initial 0.1 --decay-steps 1000 --explain",
        "globalstep schedule cosine_decay --initial 0.1 --decay-steps 1000 --explain",
    ),
    (
        "--plot lr.png",
        "globalstep schedule cosine_decay --initial 0.1 --decay-steps 1000 --plot lr.png",
    ),
    ("globalstep ckpt ls|show|verify|prune DIR", "globalstep ckpt ls ckpts"),
    ("globalstep ckpt ls|show|verify|prune DIR", "globalstep ckpt show ckpts"),
    ("globalstep ckpt ls|show|verify|prune DIR", "globalstep ckpt verify ckpts"),
    ("globalstep ckpt ls|show|verify|prune DIR", "globalstep ckpt prune ckpts --keep 2 --dry-run"),
    ("`ls --all`", "globalstep ckpt ls --all ckpts"),
    ("globalstep logs DIR --csv", "globalstep logs runs/exp1/logs --csv"),
    ("`--csv points.csv`", "globalstep logs runs/exp1/logs --csv points.csv"),
    (
        "globalstep logs DIR --tag loss --plot loss.png",
        "globalstep logs runs/exp1/logs --tag loss --plot loss.png",
    ),
]


def _requirements(code: str) -> list[str]:
    """The top-level modules ``code`` imports."""
    names = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    return names


def _free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def program(block: Block, blocks: list[Block], context: dict[str, str]) -> tuple[str, dict]:
    """The code a block runs as, and its environment: the block itself, or a fragment
    with its stand-ins."""
    if not block.fragment:
        return block.body, {}
    stand_in = STAND_INS.get(block.key)
    assert stand_in is not None, (
        f"{block.name} is a fragment without stand-ins: add an entry to STAND_INS for "
        f"{block.key!r} saying what runs with it"
    )
    code = block.body
    for old, new in stand_in.replace:
        assert old in code, f"{block.name}: STAND_INS replaces {old!r}, which it lacks"
        code = code.replace(old, new.format(**context))
    earlier = []
    for section in stand_in.sections:
        (found,) = [b for b in blocks if b.kind == "python" and b.section == section][:1]
        earlier.append(found.body)
    env = {name: value.format(**context) for name, value in stand_in.env.items()}
    return "\n".join([*earlier, stand_in.before, code, stand_in.after]), env


def run_python_block(
    block: Block, blocks: list[Block], directory: Path, context: dict[str, str]
) -> str:
    """Runs one block in a fresh interpreter in ``directory``; returns what it printed.
    Fails naming the block where it exits with an error or warns from globalstep."""
    code, env = program(block, blocks, context)
    source = directory.parent / "programs" / f"readme_line_{block.line}.py"
    source.parent.mkdir(exist_ok=True)
    source.write_text(code)
    done = subprocess.run(
        [sys.executable, str(source)],
        cwd=directory,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        with_what = f" with its stand-ins ({STAND_INS[block.key].why})" if block.fragment else ""
        pytest.fail(
            f"{block.name} failed{with_what} (exit {done.returncode}):\n{done.stderr[-4000:]}",
            pytrace=False,
        )
    warned = [
        line for line in done.stderr.splitlines() if "Warning" in line and "globalstep" in line
    ]
    if warned:
        pytest.fail(f"{block.name} warned:\n" + "\n".join(warned), pytrace=False)
    return done.stdout


def missing(block: Block) -> list[str]:
    """What the block needs that is not installed."""
    needed = _requirements(block.body)
    if block.fragment and block.key in STAND_INS:
        stand_in = STAND_INS[block.key]
        needed += list(stand_in.requires)
        for section in stand_in.sections:
            needed += [
                name
                for b in readme_blocks()
                if b.kind == "python" and b.section == section
                for name in _requirements(b.body)
            ]
    return sorted({name for name in needed if importlib.util.find_spec(name) is None})


def shell_commands(block: Block) -> list[tuple[str, list[str]]]:
    """(command, the ``# `` lines shown below it) for each command of an sh block."""
    commands: list[tuple[str, list[str]]] = []
    for line in block.body.replace("\\\n", " ").splitlines():
        line = line.removeprefix("$ ")
        if line.startswith("# "):
            commands[-1][1].append(line[2:])
        elif line.strip():
            commands.append((line.split("  #")[0].strip(), []))
    return commands


@contextlib.contextmanager
def inside(directory: Path):
    """The working directory for a while (``contextlib.chdir`` is Python 3.11's)."""
    previous = os.getcwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(previous)


def run_command(command: str) -> tuple[int, list[str]]:
    """Runs a ``globalstep`` command line through the CLI; (status, lines printed)."""
    argv = shlex.split(command)
    assert argv[0] == "globalstep", command
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            status = main(argv[1:])
        except SystemExit as stop:  # argparse's usage errors
            status = stop.code if isinstance(stop.code, int) else 2
    return status, [line.rstrip() for line in out.getvalue().splitlines()]


# What each quick start left behind, by its section: a check that it did its work.
def _printed(*lines: str) -> Callable[[Path, str], None]:
    """A check that the block printed ``lines`` (the ``# `` lines under its code)."""

    def check(directory: Path, printed: str) -> None:
        assert printed.splitlines()[-len(lines) :] == list(lines), printed

    return check


CHECKS = {
    "Five lines in your own loop": _check_five_lines,
    "Experiment trackers: MLflow and W&B": _printed("[28, 29, 30]", "0.1 FINISHED"),
    "Checkpoints": _saved("ckpts", [30, 40, 50]),
    "Run: the parts wired for a loop that survives crashes": _saved(
        "runs/exp1/checkpoints", [600, 700, 800, 900, 1000]
    ),
    "TensorFlow 2": _saved("tf-ckpts", [40, 60, 80]),
    "PyTorch": _saved("torch-ckpts", [20, 30]),
    "JAX and optax": _saved("jax-ckpts", [25, 50, 75, 100]),
    "Keras 3": _saved("keras-ckpts", [10, 20, 30, 40]),
}

QUICK_STARTS = (
    "Five lines in your own loop",
    "Checkpoints",
    "Run: the parts wired for a loop that survives crashes",
    "TensorFlow 2",
    "PyTorch",
    "JAX and optax",
    "Keras 3",
)


def run_readme(directory: Path, request: pytest.FixtureRequest) -> list[str]:
    """Runs every Python block, then every command, in ``directory``; returns what was
    skipped (a block whose imports are missing), each with why. Fails naming every block
    that failed (or did not do its work), the blocks after a failed one run all the same."""
    blocks = readme_blocks()
    context = {"free_port": _free_port()}
    skipped, failed = [], []
    for block in blocks:
        if block.kind != "python":
            continue
        absent = missing(block)
        stand_in = STAND_INS.get(block.key) if block.fragment else None
        if stand_in is not None and stand_in.fixture is not None and not absent:
            try:
                server = request.getfixturevalue(stand_in.fixture)
            except pytest.skip.Exception as why:
                absent.append(str(why))
            else:
                context["s3_options"] = repr(server.options)
                context["s3_prefix"] = server.new_url("readme")
        if absent:
            skipped.append(f"{block.name} needs {', '.join(absent)}")
            continue
        try:
            printed = run_python_block(block, blocks, directory, context)
            check = stand_in.check if stand_in is not None else CHECKS.get(block.section)
            if check is not None:
                check(directory, printed)
        except (pytest.fail.Exception, AssertionError) as error:  # the next blocks still run
            failed.append(str(error) if block.name in str(error) else f"{block.name}: {error!r}")
    if failed:
        pytest.fail("\n\n".join(failed), pytrace=False)
    with inside(directory):
        for block in blocks:
            if block.kind not in ("sh", "console"):
                continue
            for command, shown in shell_commands(block):
                if command in NOT_HERE:
                    continue
                assert command.startswith("globalstep "), (
                    f"{block.name}: `{command}` does not run here: make it a globalstep "
                    "command or add it to NOT_HERE saying why"
                )
                status, lines = run_command(command)
                assert status == 0, f"{block.name}: `{command}` exited {status}: {lines}"
                for line in shown:
                    assert line in lines, f"{block.name}: `{command}` did not print {line!r}"
        text = " ".join(README.read_text().split())  # as read, whatever the line breaks
        for written, command in COMMANDS:
            assert written in text, f"README.md no longer names {written!r}: update COMMANDS"
            status, lines = run_command(command)
            assert status == 0, f"`{command}` (README: {written!r}) exited {status}: {lines}"
    return skipped


@pytest.mark.slow
def test_every_readme_block_runs_as_written(tmp_path, request):
    """Every Python block runs in order in one fresh directory, each in a fresh interpreter
    (fragments with their stated stand-ins), and does its work; then every command."""
    directory = tmp_path / "readme"
    directory.mkdir()
    try:
        skipped = run_readme(directory, request)
    finally:  # the demo's fast tier, on /dev/shm
        shutil.rmtree(fast_tier_path(directory / "globalstep-demo"), ignore_errors=True)
    assert (directory / "points.csv").read_text().startswith("run,tag,step,wall_time,value")
    assert (directory / "loss.png").stat().st_size > 0
    if skipped:
        pytest.skip("every other block ran; skipped: " + "; ".join(skipped))


def test_quick_starts_are_complete_and_fragments_have_stand_ins():
    """Each quick start is one complete block (not a fragment); every fragment has its
    stand-ins, each stand-in a fragment, every sh command runs here or says why not."""
    blocks = readme_blocks()
    python = [b for b in blocks if b.kind == "python"]
    for section in QUICK_STARTS:
        block = next(b for b in python if b.section == section)
        assert not block.fragment, f"{block.name} is a quick start: it must be complete"
    for block in python:
        if block.fragment:
            program(block, blocks, {"free_port": "1", "s3_options": "{}", "s3_prefix": "s3://x"})
    assert sorted(STAND_INS) == sorted(b.key for b in python if b.fragment)
    commands = [c for b in blocks if b.kind in ("sh", "console") for c, _ in shell_commands(b)]
    assert all(c in NOT_HERE or c.startswith("globalstep ") for c in commands), commands


def test_a_failing_block_fails_the_test_naming_its_first_line(tmp_path):
    """A block that raises fails the run, naming its line, its first line and the error."""
    text = "# Title\n\n## Broken\n\n```python\nx = 1\nprint(loss)\n```\n"
    (block,) = readme_blocks(text)
    (tmp_path / "run").mkdir()
    with pytest.raises(pytest.fail.Exception, match=r"(?s)line 6 \(Broken\): `x = 1`.*NameError"):
        run_python_block(block, [block], tmp_path / "run", {})


def test_a_fragment_without_stand_ins_is_refused():
    """A fragment STAND_INS does not know fails, saying what to add."""
    (block,) = readme_blocks("## S\n\n```python\n# fragment: x\nprint(y)\n```\n")
    with pytest.raises(AssertionError, match="add an entry to STAND_INS for 'print\\(y\\)'"):
        program(block, [block], {})


TORCH_REPORT = """
import json
print(json.dumps({"step": clock.step, "total": total, "saved": manager.steps(),
                  "data": sampler.state_dict(), "weight": model.weight.tolist()}))
"""


@pytest.mark.slow
def test_torch_quick_start_stops_at_total_and_saves_the_last_step(tmp_path):
    """Run as written, the PyTorch quick start stops at `total` mid-epoch (13 batches an
    epoch: 30 = 13 + 13 + 4) and saves step 30 beside the every-20 save; run again, it
    restores step 30 and trains nothing more."""
    pytest.importorskip("torch")
    (block,) = [b for b in readme_blocks() if b.kind == "python" and b.section == "PyTorch"]
    report = Block("python", block.body + TORCH_REPORT, block.line, "PyTorch")
    (tmp_path / "run").mkdir()
    first = json.loads(run_python_block(report, [], tmp_path / "run", {}).splitlines()[-1])
    assert first["step"] == first["total"] == 30
    assert first["saved"] == [20, 30]
    assert first["data"] == {"seed": 1, "epoch": 2, "position": 4 * 8}
    state = json.loads((tmp_path / "run/torch-ckpts/step-000000000030/state.json").read_text())
    assert [clock["step"] for clock in state["clocks"]] == [30]
    again = json.loads(run_python_block(report, [], tmp_path / "run", {}).splitlines()[-1])
    assert again == first


# -- the compat table: "you had | you write" ------------------------------------------------
# What each row's "..." stands for, by the name called just before it; a new row whose call
# elides arguments needs its entry here (the test says so).
ELIDED = {
    "exponential_decay": "decay_steps=10, decay_rate=0.5",
    "CosineDecay": "0.1, 100",
    "warmup_cosine_decay_schedule": "0.0, 1.0, 10, 100",
}
STEPS = 130


def compat_rows() -> list[tuple[str, str]]:
    """The table's rows, each (you had, you write), the code without its backticks."""
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|$", README.read_text(), re.M)
    assert rows, "README.md has no compat table"
    return rows


def filled(code: str) -> str:
    """``code`` with its ``...`` replaced by the arguments ELIDED gives for the call."""
    if "..." not in code:
        return code
    name = re.search(r"(\w+)\([^()]*\.\.\.", code)
    assert name, f"no call before '...' in {code!r}"
    assert name.group(1) in ELIDED, f"add to ELIDED the arguments '...' stands for in {code!r}"
    return code.replace("...", ELIDED[name.group(1)])


def series(make: object, advance: object, read: object) -> list[float]:
    """The value at steps 0..STEPS-1, advancing the step with ``advance`` between reads."""
    out = []
    for _ in range(STEPS):
        out.append(float(read()))  # type: ignore[operator]
        advance()  # type: ignore[operator]
    return out


def ours(code: str) -> list[float]:
    """Runs a "you write" cell verbatim (``...`` filled) after `import globalstep`."""
    import globalstep

    clock = globalstep.Clock()
    made = eval(filled(code), {"globalstep": globalstep, "lr": 0.1, "clock": clock})
    if isinstance(made, globalstep.compat.tf.DecayedLearningRate):
        return series(made, clock.tick, made)
    step = [0]

    def advance() -> None:
        step[0] += 1

    return series(made, advance, lambda: made(step[0]))


def peer(code: str) -> list[float]:
    """Runs a "you had" cell (``...`` filled) with the peer imported, stepping it as its
    users do: TF's global-step variable, a call with the step, a torch scheduler's step()."""
    top = code.split(".")[0]
    import importlib

    module = pytest.importorskip({"tf": "tensorflow"}.get(top, top))
    namespace: dict[str, object] = {top: module, "lr": 0.1}
    if top == "tf":
        namespace["global_step"] = variable = module.Variable(0, dtype=module.int64)
        made = eval(filled(code), namespace)
        return series(made, lambda: variable.assign_add(1), lambda: made().numpy())
    if top == "torch":
        importlib.import_module("torch.optim.lr_scheduler")
        param = module.nn.Parameter(module.zeros(1))
        namespace["opt"] = opt = module.optim.SGD([param], lr=0.1)
        made = eval(filled(code), namespace)

        def advance() -> None:
            opt.step()
            made.step()

        return series(made, advance, lambda: opt.param_groups[0]["lr"])
    if top == "optax":
        import os

        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    made = eval(filled(code), namespace)
    step = [0]

    def advance() -> None:
        step[0] += 1

    return series(made, advance, lambda: made(step[0]))


@pytest.mark.parametrize(("had", "write"), compat_rows(), ids=[r[1] for r in compat_rows()])
def test_compat_table_row_runs_and_matches_the_peer(had, write):
    """A row's "you write" cell runs verbatim and gives the peer's values at every step."""
    mine = ours(write)
    assert len(set(mine)) > 1  # the schedule moves over the steps compared
    if had.startswith("torch."):
        # PyTorch multiplies the rate step after step (lr *= gamma) in float64; the closed
        # form agrees to the last bit or two (StepLR at step 120: 1.0000000000000003e-05
        # against PyTorch's 1.0000000000000004e-05).
        assert mine == pytest.approx(peer(had), rel=1e-13, abs=0)
    else:
        assert mine == peer(had)


def test_jax_quick_start_runs_and_resumes(tmp_path, monkeypatch):
    """The JAX snippet trains to step 100; run again, it restores step 100 and stops."""
    pytest.importorskip("jax")
    pytest.importorskip("optax")
    monkeypatch.chdir(tmp_path)
    (block,) = [b for b in python_blocks() if "integrations.jax import" in b]
    first: dict[str, object] = {}
    exec(block, first)
    assert first["clock"].step == 100  # type: ignore[attr-defined]
    again: dict[str, object] = {}
    exec(block, again)
    assert again["clock"].step == 100  # type: ignore[attr-defined]
    assert (again["params"]["w"] == first["params"]["w"]).all()  # type: ignore[index]
