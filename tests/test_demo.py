"""Tests for globalstep._demo: the demo run end to end, stopped, resumed and rolled back."""

import contextlib
import io
import itertools
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from globalstep import ConfigError
from globalstep._cli import main
from globalstep._demo import fast_tier_path, run_demo
from globalstep.schedules import CosineDecay, warmup
from globalstep.summary import read_run


@pytest.fixture(autouse=True, scope="module")
def _no_fast_tier_left():
    """The fast tiers the demos made (on /dev/shm) are removed after this module."""
    base = fast_tier_path("x").parent
    before = set(base.glob("globalstep-demo-*"))
    yield
    for path in set(base.glob("globalstep-demo-*")) - before:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """One full demo run: (its result, its printed lines, its directory)."""
    directory = tmp_path_factory.mktemp("demo-full")
    out = io.StringIO()
    result = run_demo(directory, stream=out)
    return result, out.getvalue().splitlines(), directory


def _event_steps(logdir, tag="loss"):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    acc = event_accumulator.EventAccumulator(
        str(logdir), size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_demo_prints_progress_rollback_and_where_things_are(tmp_path, capsys):
    """`globalstep demo` prints ten progress lines, the rollback, and where to look."""
    assert main(["demo", "--dir", str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    progress = [line for line in lines if line.startswith("step ")]
    assert [int(line.split()[1].split("/")[0]) for line in progress] == list(range(100, 1001, 100))
    assert all("steps/s" in line and "loss " in line and "lr " in line for line in progress)
    assert any(line.startswith("globalstep: rolled back: `loss` was") for line in lines)
    assert f"TensorBoard: tensorboard --logdir {tmp_path / 'run'}/logs" in lines


def test_demo_really_trains(uninterrupted):
    """Mean loss over the first 100 updates is over 3x the mean over the last 100."""
    losses = uninterrupted[0].losses
    first = np.mean([losses[s] for s in range(1, 101)])
    last = np.mean([losses[s] for s in range(901, 1001)])
    assert last < first / 3


def test_demo_learning_rate_warms_up_then_decays(uninterrupted):
    """The logged rate of update k is the warm-up-then-cosine schedule's value at step k-1."""
    schedule = warmup(CosineDecay(0.05, 950), 50)
    rates = {p.step: p.value for p in read_run(uninterrupted[2] / "logs").scalars["lr"]}
    assert [rates[s] for s in (1, 26, 51, 1000)] == [schedule(s - 1) for s in (1, 26, 51, 1000)]
    assert rates[51] == 0.05


def test_demo_rolls_back_the_corrupt_batch(uninterrupted):
    """The corrupt batch at position 650 is rolled back once, to the fast tier's step 650;
    the data position moves past it."""
    result = uninterrupted[0]
    assert result.rollbacks == [650]
    assert result.data_position == 1000 + 1 + 5  # 1 batch redone after the rollback
    assert max(result.losses.values()) < 1.0


@pytest.mark.parametrize(("stop_at", "resumed"), [(557, 550), (720, 700)])
def test_demo_resume_matches_uninterrupted_run(uninterrupted, tmp_path, stop_at, resumed):
    """Stopped before or after the rollback and run again, the demo resumes from the newest
    checkpoint (the fast tier's, every 25 steps) and computes the same losses, bit for
    bit, as a run that never stopped."""
    full = uninterrupted[0]
    first = run_demo(tmp_path, stop_at=stop_at, stream=io.StringIO())
    assert first.final_step == stop_at
    out = io.StringIO()
    second = run_demo(tmp_path, stream=out)
    assert second.resumed_from == resumed
    assert f"resumed from step {resumed} (fast tier {fast_tier_path(tmp_path)})" in out.getvalue()
    assert sorted(second.losses) == list(range(resumed + 1, 1001))
    assert all(second.losses[s] == full.losses[s] for s in second.losses)
    assert second.data_position == full.data_position


def test_demo_logs_each_step_once_after_restart_and_rollback(uninterrupted, tmp_path):
    """After a stop, a resume and a rollback, the JSONL logs and TensorBoard's reader hold
    steps 1..1000 once each, with the uninterrupted run's values."""
    run_demo(tmp_path, stop_at=550, stream=io.StringIO())
    run_demo(tmp_path, stream=io.StringIO())
    full = uninterrupted[0].losses
    losses = read_run(tmp_path / "logs").scalars["loss"]
    assert [(p.step, p.value) for p in losses] == [(s, full[s]) for s in range(1, 1001)]
    events = _event_steps(tmp_path / "logs")
    assert [step for step, _ in events] == list(range(1, 1001))
    assert [value for _, value in events] == [np.float32(full[s]) for s in range(1, 1001)]


def test_demo_rerun_of_a_complete_run(uninterrupted):
    """Running a complete demo again restores step 1000 and trains nothing more."""
    out = io.StringIO()
    again = run_demo(uninterrupted[2], stream=out)
    assert (again.resumed_from, again.final_step, again.losses) == (1000, 1000, {})
    assert "the run is complete" in out.getvalue()


def test_demo_checkpoints_keep_three_newest(uninterrupted):
    """The demo's checkpoints are the 3 newest, ending with the final step."""
    names = sorted(p.name for p in (uninterrupted[2] / "checkpoints").iterdir() if p.is_dir())
    assert [n for n in names if n.startswith("step-")] == [
        "step-000000000800",
        "step-000000000900",
        "step-000000001000",
    ]


def test_demo_save_every_takes_a_duration(tmp_path):
    """--save-every 2ep saves every 40 steps (20 updates per epoch)."""
    run_demo(tmp_path, steps=120, save_every="2ep", keep=10, bad_batch=None, stream=io.StringIO())
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name[:5] == "step-")
    assert [int(n[5:]) for n in names] == [40, 80, 120]


def test_demo_refuses_another_configuration(uninterrupted, capsys):
    """Running the demo again with another seed and rate is refused, naming the changes."""
    argv = ["demo", "--dir", str(uninterrupted[2]), "--seed", "5", "--lr", "0.5"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "config.seed: 0 (checkpoint) -> 5 (now)" in err
    assert "start the run in a new directory" in err


def test_demo_dir_that_is_a_file(tmp_path, capsys):
    """--dir naming a file is one error line naming the option."""
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["demo", "--dir", str(target)]) == 1
    err = capsys.readouterr().err
    assert "`--dir` must be a directory" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "parameter"),
    [
        (["--steps", "0"], "steps"),
        (["--log-every", "0"], "log_every"),
        (["--save-every", "-1"], "save_every"),
        (["--save-every", "3 furlongs"], "save_every"),
        (["--stop-at", "0"], "stop_at"),
        (["--lr", "0"], "learning_rate"),
        (["--lr", "nan"], "learning_rate"),
        (["--warmup-steps", "1000"], "warmup_steps"),
        (["--keep", "0"], "keep"),
        (["--pace", "-1"], "pace"),
    ],
)
def test_demo_bad_argument_is_an_error(tmp_path, capsys, argv, parameter):
    """A bad demo argument exits 1 with a message naming it."""
    assert main(["demo", "--dir", str(tmp_path / "run"), *argv]) == 1
    assert f"`{parameter}` must" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_interrupted_by_sigint_resumes(uninterrupted, tmp_path):
    """SIGINT mid-run saves the step reached and exits 130; run again, the demo resumes
    there and TensorBoard's reader sees one clean curve with the uninterrupted values."""
    directory = str(tmp_path / "run")
    command = [sys.executable, "-m", "globalstep", "demo", "--dir", directory]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        [*command, "--pace", "0.005", "--log-every", "10"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("step 300/"):
                process.send_signal(signal.SIGINT)
                break
        rest = process.stdout.read()
        assert process.wait(timeout=60) == 130
    saved = [line for line in rest.splitlines() if "after SIGINT" in line]
    assert len(saved) == 1
    step = int(saved[0].split("saved step ")[1].split()[0])
    assert 300 <= step < 1000
    names = sorted(p for p in os.listdir(f"{directory}/checkpoints") if p.startswith("step-"))
    assert names[-1] == f"step-{step:012d}"
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0
    assert f"globalstep: resumed from step {step} " in again.stdout
    full = uninterrupted[0].losses
    events = _event_steps(f"{directory}/logs")
    assert [s for s, _ in events] == list(range(1, 1001))
    assert [v for _, v in events] == [np.float32(full[s]) for s in range(1, 1001)]
    assert all(a < b for a, b in itertools.pairwise(s for s, _ in events))


def test_demo_numpy_and_torch_models_agree(uninterrupted):
    """The NumPy model follows the torch one: same rollback, losses within 1e-12 relative."""
    pytest.importorskip("torch")
    full = uninterrupted[0]
    numpy_run = run_demo_in_temp(framework="numpy")
    assert numpy_run.rollbacks == full.rollbacks == [650]
    assert sorted(numpy_run.losses) == sorted(full.losses)
    gap = max(abs(numpy_run.losses[s] - full.losses[s]) / full.losses[s] for s in full.losses)
    assert 0 <= gap < 1e-12


def run_demo_in_temp(**kwargs):
    """A whole demo run in a temporary directory, quietly."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        return run_demo(directory, stream=io.StringIO(), **kwargs)


def test_demo_auto_trains_torch_where_installed(tmp_path):
    """`--framework auto` names PyTorch in its first line and saves torch's optimizer state."""
    pytest.importorskip("torch")
    out = io.StringIO()
    run_demo(tmp_path, steps=100, bad_batch=None, stream=out)
    assert out.getvalue().startswith("globalstep demo: PyTorch ")
    state = (tmp_path / "checkpoints" / "step-000000000100" / "state.json").read_text()
    assert "momentum_buffer" in state


def test_demo_puts_torch_threads_back(tmp_path):
    """The torch demo runs on one thread and leaves torch's thread count as it found it."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    run_demo(tmp_path, steps=60, bad_batch=None, stream=io.StringIO(), framework="torch")
    assert torch.get_num_threads() == before


def test_demo_refuses_to_resume_with_another_framework(tmp_path, capsys):
    """A run started with NumPy is not resumed by torch: the config names the change."""
    pytest.importorskip("torch")
    run_demo(tmp_path, steps=60, bad_batch=None, stream=io.StringIO(), framework="numpy")
    assert main(["demo", "--dir", str(tmp_path), "--steps", "60", "--framework", "torch"]) == 1
    assert "config.framework: 'numpy' (checkpoint) -> 'torch' (now)" in capsys.readouterr().err


def test_demo_framework_errors(tmp_path, monkeypatch, capsys):
    """An unknown framework is refused; torch asked for without torch names the extra."""
    with pytest.raises(ConfigError, match="`framework` must be one of auto, torch, numpy"):
        run_demo(tmp_path, framework="tensorflow")
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["demo", "--dir", str(tmp_path / "run"), "--framework", "torch"]) == 1
    err = capsys.readouterr().err
    assert "globalstep[torch]" in err
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists()


def _closing(directory):
    """The demo's closing lines for a run in ``directory``, as it prints them."""
    return [
        f"checkpoints: {directory}/checkpoints   (globalstep ckpt ls {directory}/checkpoints)",
        f"logs:        {directory}/logs   "
        f"(JSONL and event files: globalstep logs {directory}/logs)",
        f"TensorBoard: tensorboard --logdir {directory}/logs",
    ]


def test_demo_names_tensorboard_where_it_wrote_event_files(tmp_path, capsys):
    """With the tensorboard extra, the demo writes event files and JSONL and ends naming
    `globalstep logs` and `tensorboard --logdir` for them."""
    pytest.importorskip("tensorboard")
    directory = str(tmp_path / "run")
    argv = ["demo", "--dir", directory, "--steps", "60", "--bad-batch", "-1"]
    assert main([*argv, "--framework", "numpy"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-5:-2] == _closing(directory)
    # Its last lines: the ledger, and its goodput line (one attempt, one run).
    assert (
        lines[-2] == f"ledger:      {directory}/ledger.jsonl   (globalstep ckpt ledger {directory})"
    )
    assert lines[-1].startswith("goodput: ")
    assert "went into steps kept (1 attempt;" in lines[-1]
    names = os.listdir(f"{directory}/logs")
    assert "metrics.jsonl" in names
    assert any("tfevents" in name for name in names)


def test_demo_without_tensorboard_names_only_what_it_wrote(tmp_path):
    """`pip install globalstep` (no tensorboard) then `globalstep demo`: JSONL only, and its
    closing lines name `globalstep logs` for it, never `tensorboard --logdir`; the viewer
    it names reads the run."""
    directory = str(tmp_path / "run")
    code = (
        "import sys; sys.modules['tensorboard'] = None  # as if not installed\n"
        "from globalstep._cli import main\n"
        f"sys.exit(main(['demo', '--dir', {directory!r}, '--steps', '60', '--bad-batch', '-1',"
        " '--framework', 'numpy']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert os.listdir(f"{directory}/logs") == ["metrics.jsonl"]
    assert "tensorboard --logdir" not in done.stdout
    assert done.stdout.splitlines()[-5:-2] == [
        _closing(directory)[0],
        f"logs:        {directory}/logs   (JSONL: globalstep logs {directory}/logs)",
        "TensorBoard: no event files written (pip install 'globalstep[tensorboard]' to write them)",
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["logs", f"{directory}/logs"]) == 0
    assert [
        line.split()[:2] for line in out.getvalue().splitlines() if line.startswith("loss")
    ] == [["loss", "60"]]
