"""Tests for globalstep.checkpoint._command: `globalstep ckpt ...`."""

import re

import numpy as np
import pytest

from globalstep import Clock, KeepBest
from globalstep._cli import main
from globalstep.checkpoint import CheckpointManager


@pytest.fixture
def run(tmp_path):
    """A directory with checkpoints at steps 10..50, saved with keep_best and clocks."""
    clock = Clock(steps_per_epoch=20, batch_size=4)
    with CheckpointManager(tmp_path, max_to_keep=2, keep_best=KeepBest("loss")) as manager:
        for loss in (0.1, 0.9, 0.8, 0.7, 0.6):
            clock.tick(10)
            state = {"clock": clock, "model": {"w": np.ones((3, 2), np.float32)}, "lr": 0.5}
            manager.save(clock, state, metrics={"loss": loss})
    return tmp_path


def test_ls_shows_table_with_reasons(run, capsys):
    """ls prints step, epoch, size, metrics and why each checkpoint is kept."""
    assert main(["ckpt", "ls", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "STEP",
        "EPOCH",
        "TIME",
        "(UTC)",
        "SIZE",
        "METRICS",
        "KEPT",
        "BECAUSE",
    ]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == ["10", "40", "50"]
    assert rows["10"].split()[1] == "0"
    assert "loss=0.1" in rows["10"]
    assert rows["10"].endswith("best 1 by loss (min)")
    assert rows["50"].split()[1] == "2"
    assert rows["50"].endswith("newest, latest 2")


def test_ls_empty_directory(tmp_path, capsys):
    """ls of an empty directory says so."""
    assert main(["ckpt", "ls", str(tmp_path)]) == 0
    assert "no committed checkpoint" in capsys.readouterr().out


def test_ls_marks_corrupt_checkpoints(run, capsys):
    """ls shows a checkpoint with damaged metadata as corrupt."""
    (run / "step-000000000040" / "state.json").write_text("{")
    assert main(["ckpt", "ls", str(run)]) == 0
    assert "CORRUPT" in capsys.readouterr().out


def test_show_prints_tree_and_clocks(run, capsys):
    """show prints the tree's shapes and dtypes, the clocks and the metrics."""
    assert main(["ckpt", "show", str(run), "--step", "40"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("step 40 ")
    assert "clock 'global_step': step 40, epoch 2, step in epoch 0, samples 160" in out
    assert "model/w: float32 (3, 2)" in out
    assert "lr = 0.5" in out
    assert "metric loss = 0.7" in out


def test_show_missing_step_is_an_error(run, capsys):
    """show of a step that does not exist exits 1 naming the step."""
    assert main(["ckpt", "show", str(run), "--step", "41"]) == 1
    assert "no committed checkpoint for step 41" in capsys.readouterr().err


def test_verify_ok(run, capsys):
    """verify checks every checkpoint and exits 0 when all are sound."""
    assert main(["ckpt", "verify", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 checkpoints verified"


def test_verify_names_corruption_and_fails(run, capsys):
    """verify exits 1 and names the damaged file."""
    path = run / "step-000000000040" / "arrays.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert main(["ckpt", "verify", str(run)]) == 1
    out = capsys.readouterr().out
    assert "step 40: CORRUPT: " in out
    assert "step-000000000040/arrays.safetensors" in out
    assert "1 of 3 checkpoints corrupt" in out


def test_verify_empty_directory_fails(tmp_path, capsys):
    """verify of a directory without checkpoints exits 1."""
    assert main(["ckpt", "verify", str(tmp_path)]) == 1


def test_prune_dry_run_then_prune(run, capsys):
    """prune --dry-run lists what would go; prune deletes it (the best, step 10, stays)."""
    assert main(["ckpt", "prune", str(run), "--keep", "1", "--dry-run"]) == 0
    assert capsys.readouterr().out.strip() == "would delete steps [40]"
    assert main(["ckpt", "prune", str(run), "--keep", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == ["deleted steps [40]", "kept steps [10, 50]"]


def test_prune_refuses_keep_zero(run, capsys):
    """prune --keep 0 is refused, naming the option."""
    assert main(["ckpt", "prune", str(run), "--keep", "0"]) == 2
    assert "`--keep` must be >= 1" in capsys.readouterr().err


def test_prune_while_a_writer_holds_the_lock(run, capsys):
    """prune beside a live writer exits 1 with the lock's holder."""
    with CheckpointManager(run):
        assert main(["ckpt", "prune", str(run), "--keep", "1"]) == 1
    assert "locked by another writer" in capsys.readouterr().err


def test_ckpt_needs_an_action(capsys):
    """`globalstep ckpt` without an action is a usage error."""
    assert main(["ckpt"]) == 2


def test_show_prints_sequences_and_unknown_nodes(tmp_path, capsys):
    """show lists list and tuple items by index, and marks a node it cannot read."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"opt": [np.zeros(2, np.int64), ("adam", 0.9)]})
    assert main(["ckpt", "show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "  opt/0: int64 (2,)" in out
    assert "  opt/1/0 = 'adam'" in out
    assert "  opt/1/1 = 0.9" in out
    from globalstep.checkpoint._command import _tree_lines

    lines = []
    _tree_lines({"dict": {"x": 3}}, "", lines)
    assert lines == ["  x: ?"]


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (5, "5 B"),
        (2048, "2.0 KiB"),
        (3 << 20, "3.0 MiB"),
        (5 << 30, "5.0 GiB"),
        (3 << 40, "3072.0 GiB"),
    ],
)
def test_sizes_are_human_readable(size, text):
    """Sizes print in B, KiB, MiB or GiB; GiB is the largest unit."""
    from globalstep.checkpoint._command import _size

    assert _size(size) == text


def test_show_tolerates_fields_of_another_version(tmp_path, capsys):
    """show prints a sealed state.json whose metadata fields have unexpected types."""
    import json

    from ckpt_helpers import reseal

    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"w": np.zeros(2)})
    checkpoint = tmp_path / "step-000000000001"
    doc = json.loads((checkpoint / "state.json").read_bytes())
    doc.update(created_unix="then", clocks=[3, {"clock": "c", "elapsed_seconds": None}])
    doc.update(metrics=[1])
    reseal(checkpoint, state=json.dumps(doc).encode())
    assert main(["ckpt", "show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("step 1  saved ?\nclock 'c': step None")
    assert "? s" in out
    assert "  w: float64 (2,)" in out


def test_prune_keeps_the_writers_best(tmp_path, capsys):
    """prune --keep 1 keeps the best checkpoint by the writer's keep_best metric too."""
    best = KeepBest("loss", k=1)
    with CheckpointManager(tmp_path, max_to_keep=10, keep_best=best) as manager:
        for step, loss in [(10, 0.9), (20, 0.1), (30, 0.5), (40, 0.7)]:
            manager.save(step, {"v": step}, metrics={"loss": loss})
    assert main(["ckpt", "prune", str(tmp_path), "--keep", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == ["deleted steps [10, 30]", "kept steps [20, 40]"]


@pytest.fixture
def places(tmp_path):
    """A file, a missing path, a directory of other files and an empty directory."""
    (tmp_path / "README.md").write_text("# hi")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("")
    (tmp_path / "empty").mkdir()
    return tmp_path


@pytest.mark.parametrize("action", ["ls", "show", "verify", "prune"])
@pytest.mark.parametrize(
    ("where", "status", "message"),
    [
        ("README.md", 2, "DIRECTORY .*README.md is not a directory; give the checkpoint directory"),
        ("missing/x", 2, "DIRECTORY .*missing/x does not exist; give the run's checkpoint"),
        ("src", 1, "DIRECTORY .*src is not a checkpoint directory: it holds no step-\\* "),
    ],
)
def test_bad_directories_give_one_line(places, capsys, action, where, status, message):
    """Each ckpt action turns a bad DIRECTORY into one line and exit status 2 or 1."""
    extra = ["--keep", "1"] if action == "prune" else []
    assert main(["ckpt", action, str(places / where), *extra]) == status
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert re.match(f"globalstep ckpt {action}: error: {message}", lines[0])


@pytest.mark.parametrize("action", ["ls", "show", "verify", "prune"])
def test_commands_never_create_a_missing_directory(places, action):
    """No ckpt action, prune included, creates a directory that does not exist."""
    extra = ["--keep", "1"] if action == "prune" else []
    main(["ckpt", action, str(places / "missing" / "x"), *extra])
    assert not (places / "missing").exists()


@pytest.mark.parametrize("action", ["ls", "show", "verify"])
def test_read_only_commands_create_no_file(run, action):
    """ls, show and verify leave the directory's entries as they were."""
    before = sorted(p.name for p in run.rglob("*"))
    main(["ckpt", action, str(run)])
    assert sorted(p.name for p in run.rglob("*")) == before


def test_unreadable_directory_is_one_line(places, capsys, monkeypatch):
    """A directory that cannot be listed gives one line and exit status 1."""
    import globalstep.checkpoint._command as command

    def denied(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(command.os, "listdir", denied)
    assert main(["ckpt", "ls", str(places / "empty")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cannot be read (Permission denied); give a directory you may read" in err


def test_missing_fsspec_directory_is_a_usage_error(capsys):
    """A memory:// URL with nothing there is reported as missing."""
    assert main(["ckpt", "ls", "memory://globalstep-tests/nothing-here"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_empty_directory_is_not_a_failure_for_ls(places, capsys):
    """ls of an empty directory says it has no checkpoint, exit 0."""
    assert main(["ckpt", "ls", str(places / "empty")]) == 0
    assert capsys.readouterr().out.strip().startswith("no committed checkpoint in ")


# ------------------------------------- verify decodes as restore does (issue 33, frictions)


def _resealed(tmp_path, edit):
    """Two checkpoints of a clock and an array; step 20's state.json edited by ``edit``
    and resealed (its checksums rewritten, so that only decoding can tell)."""
    import json

    from ckpt_helpers import reseal

    clock = Clock()
    with CheckpointManager(tmp_path) as manager:
        for _ in range(2):
            clock.tick(10)
            manager.save(clock, {"clock": clock, "w": np.ones(3), "n": 3})
    checkpoint = tmp_path / "step-000000000020"
    doc = json.loads((checkpoint / "state.json").read_bytes())
    edit(doc)
    reseal(checkpoint, state=json.dumps(doc).encode())


def _clock_state(doc):
    return doc["tree"]["dict"]["clock"]["stateful"]["dict"]


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (
            lambda doc: _clock_state(doc).update(step={"value": "garbage"}),
            "the clock state at clock: `state['step']` must be an int; got state['step']='garbage'",
        ),
        (lambda doc: _clock_state(doc).update(epoch={"value": [1, 2]}), "bad value at clock/epoch"),
        (
            lambda doc: doc["clocks"][0].update(step=[20]),
            "clocks[0]: `data['step']` must be an int; got data['step']=[20]",
        ),
    ],
    ids=["garbage clock state", "a list where a number was", "a list in a saved Progress"],
)
def test_verify_refuses_what_restore_refuses(tmp_path, capsys, edit, named):
    """A state.json resealed with a value a restore cannot decode fails `ckpt verify`
    (exit 1), which names the checkpoint and the value; the other checkpoint is ok."""
    _resealed(tmp_path, edit)
    assert main(["ckpt", "verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "step 10: ok" in out
    assert "step 20: CORRUPT: checkpoint step-000000000020" in out
    assert named in out
    assert out.rstrip().endswith("1 of 2 checkpoints corrupt")


def test_restore_refuses_the_resealed_garbage_clock_state(tmp_path):
    """The garbage clock state verify refuses, a restore into the run's clock refuses too."""
    from globalstep import CorruptCheckpointError

    _resealed(tmp_path, lambda doc: _clock_state(doc).update(step={"value": "garbage"}))
    with CheckpointManager(tmp_path, read_only=True) as manager:
        template = {"clock": Clock(), "w": np.zeros(3), "n": 0}
        with pytest.raises(CorruptCheckpointError, match="must be an int; got state"):
            manager.restore(template)


def test_a_renamed_copy_is_named_by_ls_verify_and_restore(tmp_path, capsys):
    """A copy of step-20 renamed step-45: ls --all, verify and restore name it as the
    checkpoint of step 20."""
    import shutil

    from globalstep import CorruptCheckpointError

    with CheckpointManager(tmp_path) as manager:
        for step in (10, 20):
            manager.save(step, {"w": np.full(2, float(step))})
    shutil.copytree(tmp_path / "step-000000000020", tmp_path / "step-000000000045")
    said = "its state.json is of step 20, not 45 (a copy or a rename of another checkpoint?)"
    assert main(["ckpt", "ls", str(tmp_path), "--all"]) == 0
    assert said in capsys.readouterr().out
    assert main(["ckpt", "verify", str(tmp_path)]) == 1
    assert f"step 45: CORRUPT: checkpoint step-000000000045 of {tmp_path} is damaged" in (
        capsys.readouterr().out
    )
    with (
        CheckpointManager(tmp_path, read_only=True) as manager,
        pytest.raises(CorruptCheckpointError, match=re.escape(said)),
    ):
        manager.restore({"w": np.zeros(2)})
