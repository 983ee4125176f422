"""The fast tier: saved often beside the durable directory, restored first, one run only.

A Run-based torch loop (tests/fast_tier_loop.py) with ``save_every=50`` and a fast tier on
/dev/shm every 5 updates is SIGKILLed right after updates 37 and 83 and resumed from the
fast tier (35, then 80), ending bit for bit as an uninterrupted run; with the fast tier
deleted between the kills it resumes from the durable directory (50) and says why.
"""

import io
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from globalstep import Clock, ConfigError, CorruptCheckpointError, FastTier, Run
from globalstep.checkpoint import CheckpointManager, CheckpointWarning
from globalstep.summary import read_run

LOOP = str(pathlib.Path(__file__).resolve().parents[1] / "fast_tier_loop.py")
TOTAL_STEPS = 100


@pytest.fixture
def shm():
    """A unique directory on /dev/shm (a temporary one where there is no /dev/shm),
    removed at the end."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    path = tempfile.mkdtemp(prefix="globalstep-test-fast-", dir=base)
    yield pathlib.Path(path)
    shutil.rmtree(path, ignore_errors=True)


def _loop(directory, fast, *kill_at):
    """Runs the loop (killing itself after update ``kill_at``, where given); returns its
    exit status and its ``ready`` line's fields (step, tier, why)."""
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, LOOP, str(directory), str(fast), str(TOTAL_STEPS), *map(str, kill_at)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    ready = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("ready")]
    assert len(ready) == 1, done.stdout + done.stderr
    step, tier, why = ready[0]
    return done.returncode, (int(step), tier, why), done.stderr


def _losses(directory):
    return [(p.step, p.value) for p in read_run(pathlib.Path(directory, "logs")).scalars["loss"]]


def _reference(tmp_path, shm):
    reference, fast = tmp_path / "reference", shm / "reference"
    status, ready, _ = _loop(reference, fast)
    assert (status, ready) == (0, (0, "-", "-"))
    expected = _losses(reference)
    assert [s for s, _ in expected] == list(range(1, TOTAL_STEPS + 1))
    return reference, expected


def _ledger_attempts(capsys, directory):
    """`globalstep ckpt ledger DIR --json`'s attempts, as (resumed_from, tier,
    steps_redone, fell_back_from, restore_seconds > 0)."""
    from globalstep._cli import main

    capsys.readouterr()
    assert main(["ckpt", "ledger", str(directory), "--json"]) == 0
    attempts = json.loads(capsys.readouterr().out)["attempts"]
    return [
        (
            a["resumed_from"],
            a["tier"],
            a["steps_redone"],
            a["fell_back_from"],
            a["restore_seconds"] is not None and a["restore_seconds"] > 0,
        )
        for a in attempts
    ]


def test_sigkilled_run_resumes_from_the_fast_tier_bit_exact(tmp_path, shm, capsys):
    """SIGKILLed after updates 37 and 83, the run resumes from the fast tier at 35 and 80
    (its record and `globalstep ckpt ledger --json` say so, with 2 and 3 steps redone)
    and ends with the uninterrupted run's parameters, momentum and logged losses, bit for
    bit."""
    reference, expected = _reference(tmp_path, shm)
    crashed, fast = tmp_path / "crashed", shm / "crashed"
    assert _loop(crashed, fast, 37)[:2] == (-9, (0, "-", "-"))
    status, ready, _ = _loop(crashed, fast, 83)
    assert (status, ready) == (-9, (35, "fast", "-"))
    status, ready, err = _loop(crashed, fast)
    assert (status, ready) == (0, (80, "fast", "-"))
    assert f"resumed from step 80 (fast tier {fast})" in err
    assert (crashed / "weights").read_bytes() == (reference / "weights").read_bytes()
    assert _losses(crashed) == expected
    with CheckpointManager(crashed / "checkpoints", read_only=True) as durable:
        assert durable.steps() == [50, 100]  # the durable directory's own retention
    assert _ledger_attempts(capsys, crashed) == [
        (None, None, None, None, False),
        (35, "fast", 2, None, True),
        (80, "fast", 3, None, True),
    ]


def test_deleted_fast_tier_falls_back_to_the_durable_directory(tmp_path, shm, capsys):
    """With the fast tier deleted after the kill at 83 (a new machine), the run resumes
    from the durable directory's step 50, says why ("missing", in its message and in the
    ledger), and still ends bit-exact."""
    reference, expected = _reference(tmp_path, shm)
    crashed, fast = tmp_path / "crashed", shm / "crashed"
    assert _loop(crashed, fast, 37)[0] == -9
    assert _loop(crashed, fast, 83)[:2] == (-9, (35, "fast", "-"))
    shutil.rmtree(fast)
    status, ready, err = _loop(crashed, fast)
    assert (status, ready) == (0, (50, "durable", "missing"))
    assert f"resumed from step 50 ({crashed / 'checkpoints'}; fast tier {fast}: missing)" in err
    assert (crashed / "weights").read_bytes() == (reference / "weights").read_bytes()
    assert _losses(crashed) == expected
    assert _ledger_attempts(capsys, crashed)[1:] == [
        (35, "fast", 2, None, True),
        (50, "durable", 33, "missing", True),
    ]


@pytest.mark.slow
def test_randomly_timed_sigkills_resume_bit_exact(tmp_path, shm):
    """Killed at 5 random moments (the loop sleeping nowhere: wherever the kill lands,
    inside a fast save or not), each resume from the newest of either tier, the end is
    the uninterrupted run's, bit for bit."""
    reference, expected = _reference(tmp_path, shm)
    crashed, fast = tmp_path / "crashed", shm / "crashed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    rng = random.Random(35)
    for _ in range(5):
        command = [sys.executable, LOOP, str(crashed), str(fast), str(TOTAL_STEPS)]
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().startswith("ready")
        time.sleep(rng.uniform(0.0, 0.05))
        process.kill()
        process.wait(timeout=60)
        process.stdout.close()
    (crashed / "weights").unlink(missing_ok=True)
    assert _loop(crashed, fast)[0] == 0
    assert (crashed / "weights").read_bytes() == (reference / "weights").read_bytes()
    assert _losses(crashed) == expected


def _save(manager, steps, fast_steps=()):
    for step in sorted({*steps, *fast_steps}):
        if step in fast_steps:
            manager.save(step, {"w": np.full(3, float(step))}, tier="fast")
        if step in steps:
            manager.save(step, {"w": np.full(3, float(step))})


def test_restore_takes_the_newest_of_either_tier(tmp_path, shm):
    """steps() lists both tiers; restore() takes the newest, from the tier that holds it,
    and records it; an explicit step of the durable directory is read there."""
    fast = FastTier(shm, save_every=5, max_to_keep=2)
    with CheckpointManager(tmp_path, fast_tier=fast) as manager:
        _save(manager, [50], [45, 55])
        assert manager.steps() == [45, 50, 55]
        assert manager.latest_step() == 55
        assert manager.restore()["w"][0] == 55.0
        assert (manager.last_restore.step, manager.last_restore.tier) == (55, "fast")
        assert manager.last_restore.fell_back_from is None
        assert manager.restore(step=50)["w"][0] == 50.0
        assert manager.last_restore.tier == "durable"
        assert manager.document(45).step == 45
        manager.verify(55)
        assert manager.open().step == 55


def test_the_fast_tier_keeps_its_own_newest(tmp_path, shm):
    """The fast tier keeps its max_to_keep newest; the durable retention is unchanged."""
    fast = FastTier(shm, save_every=5, max_to_keep=2)
    with CheckpointManager(tmp_path, max_to_keep=1, fast_tier=fast) as manager:
        _save(manager, [10, 20], [5, 10, 15, 20, 25])
    with CheckpointManager(tmp_path, read_only=True) as durable:
        assert durable.steps() == [20]
    with CheckpointManager(shm, read_only=True) as alone:
        assert alone.steps() == [20, 25]


def test_maybe_save_saves_each_tier_on_its_own_trigger(tmp_path, shm):
    """maybe_save saves to the durable directory every save_every and to the fast tier
    every its own save_every; a manager with only a fast tier may call it."""
    clock = Clock()
    fast = FastTier(shm, save_every=5, max_to_keep=10)
    with CheckpointManager(tmp_path, save_every=20, fast_tier=fast) as manager:
        saved = []
        for _ in range(40):
            clock.tick()
            if manager.maybe_save(clock, {"clock": clock}):
                saved.append(clock.step)
    assert saved == [5, 10, 15, 20, 25, 30, 35, 40]
    with CheckpointManager(tmp_path, read_only=True) as durable:
        assert durable.steps() == [20, 40]


def test_a_rewind_drops_both_tiers_newer_checkpoints(tmp_path, shm):
    """A restore of an older step, then a save: neither tier keeps a checkpoint of the
    abandoned timeline, even when the fast tier saves first."""
    fast = FastTier(shm, save_every=5, max_to_keep=5)
    with CheckpointManager(tmp_path, fast_tier=fast) as manager:
        _save(manager, [40, 50], [45, 55, 60])
        manager.restore(step=40)
        manager.save(45, {"w": np.zeros(3)}, tier="fast")
        assert manager.steps() == [40, 45]
        assert manager.restore()["w"][0] == 0.0
    with CheckpointManager(tmp_path, fast_tier=fast) as manager:
        _save(manager, [50], [55, 60])
        manager.restore(step=50)
        manager.save(52, {"w": np.ones(3)})  # the durable directory first this time
        assert manager.steps() == [40, 45, 50, 52]


def test_a_run_that_rolls_back_takes_the_fast_tier_with_it(tmp_path, shm):
    """A Run rollback restores the newest checkpoint of either tier at or before the bad
    step; the fast checkpoints after it are gone after the next save."""
    from globalstep.run import Rollback

    weights = np.zeros(2)
    policy = Rollback(tag="loss", spike_factor=10.0, median_of=5, skip_batches=0)
    fast = FastTier(shm, save_every=5, max_to_keep=10)
    with Run(tmp_path, save_every=50, fast_tier=fast, rollback=policy, progress=False) as run:
        run.restore({"w": weights})
        for _ in range(39):
            weights += 1.0
            run.update(loss=1.0)
        assert run.checkpoints.steps() == [5, 10, 15, 20, 25, 30, 35]
        assert not run.update(loss=1e6)  # bad at 39: back to 35
        assert run.step == 35
        assert weights[0] == 35.0
        assert run.checkpoints.last_restore.tier == "fast"


def test_a_fast_tier_of_another_run_is_refused(tmp_path, shm):
    """A fast tier that holds another run's id is refused, naming fast_tier, both ids and
    both directories."""
    fast = FastTier(shm, save_every=5)
    with CheckpointManager(tmp_path / "a", fast_tier=fast) as first:
        first.save(5, {"w": np.ones(1)}, tier="fast")
    ours = (tmp_path / "a" / "run.json").read_text()
    with pytest.raises(ConfigError, match=r"`fast_tier` must hold this run's checkpoints") as err:
        CheckpointManager(tmp_path / "b", fast_tier=fast)
    message = str(err.value)
    assert str(tmp_path / "a") in message
    assert str(tmp_path / "b") in message
    assert ours.split('"run_id": "')[1][:32] in message
    # The refused manager released its lock: the directory opens again without it.
    CheckpointManager(tmp_path / "b").close()


def test_a_checkpoint_directory_without_a_run_id_is_refused_as_a_fast_tier(tmp_path, shm):
    """A plain checkpoint directory (checkpoints, no run id) is not taken as a fast tier."""
    with CheckpointManager(shm) as plain:
        plain.save(5, {"w": np.ones(1)})
    with pytest.raises(ConfigError, match="its run id none"):
        CheckpointManager(tmp_path, fast_tier=FastTier(shm, save_every=5))


def _corrupt_newest_fast(tmp_path, shm):
    fast = FastTier(shm, save_every=5, max_to_keep=3)
    with CheckpointManager(tmp_path, fast_tier=fast) as manager:
        _save(manager, [50], [55, 60])
    arrays = shm / "step-000000000060" / "arrays.safetensors"
    data = bytearray(arrays.read_bytes())
    data[-1] ^= 0xFF
    arrays.write_bytes(bytes(data))
    return fast, arrays


def test_a_corrupt_fast_checkpoint_falls_back_with_a_warning(tmp_path, shm):
    """A fast checkpoint newer than the durable one but corrupt is set aside with a
    warning naming it; restore takes the next good one, and the record says why."""
    fast, _ = _corrupt_newest_fast(tmp_path, shm)
    with CheckpointManager(tmp_path, fast_tier=fast) as manager:
        with pytest.warns(CheckpointWarning, match=r"step 60 .*step-000000000060"):
            restored = manager.restore({"w": np.zeros(3)})
        assert restored["w"][0] == 55.0
        record = manager.last_restore
        assert (record.step, record.tier) == (55, "fast")
        assert record.fell_back_from.startswith("corrupt: ")
        assert "000060" in record.fell_back_from
        assert manager.steps() == [50, 55]
        manager.save(60, {"w": np.full(3, 6.0)}, tier="fast")  # the set-aside one replaced
        assert manager.restore()["w"][0] == 6.0


def test_a_run_resumes_past_a_corrupt_fast_checkpoint(tmp_path, shm):
    """A Run whose newest fast checkpoint is corrupt warns naming it, resumes from the next
    good one and says why."""
    fast = FastTier(shm, save_every=5)
    weights = np.zeros(3)
    run = Run(tmp_path, save_every=50, fast_tier=fast, progress=False, handle_signals=False)
    run.restore({"w": weights})
    for _ in range(63):
        weights += 1.0
        run.update(loss=1.0)
    run.checkpoints.close()  # as a killed process leaves it: no final checkpoint
    run.writer.close()  # (an open writer would sync before every later save of the process)
    arrays = shm / "step-000000000060" / "arrays.safetensors"
    data = bytearray(arrays.read_bytes())
    data[-1] ^= 0xFF
    arrays.write_bytes(bytes(data))
    out = io.StringIO()
    run = Run(tmp_path, save_every=50, fast_tier=fast, progress=False, stream=out)
    with pytest.warns(CheckpointWarning, match=r"step 60 .*step-000000000060"):
        run.restore({"w": weights})
    run.close()
    assert weights[0] == 55.0
    assert f"resumed from step 55 (fast tier {shm}; corrupt: {arrays.parent}" in out.getvalue()


def test_an_explicit_corrupt_fast_step_held_only_there_raises(tmp_path, shm):
    """restore(step=60) of a corrupt fast checkpoint the durable directory lacks raises
    CorruptCheckpointError after the warning."""
    fast, _ = _corrupt_newest_fast(tmp_path, shm)
    with (
        CheckpointManager(tmp_path, fast_tier=fast) as manager,
        pytest.warns(CheckpointWarning),
        pytest.raises(CorruptCheckpointError),
    ):
        manager.restore(step=60)


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"save_every": 0}, "save_every"),
        ({"save_every": "soon"}, "save_every"),
        ({"save_every": None}, "save_every"),
        ({"save_every": 5, "max_to_keep": 0}, "max_to_keep"),
        ({"save_every": 5, "max_to_keep": True}, "max_to_keep"),
        ({"save_every": 5, "max_to_keep": None}, "max_to_keep"),
        ({"save_every": 5, "max_to_keep": 1.5}, "max_to_keep"),
    ],
)
def test_bad_fast_tier_options_are_refused(shm, kwargs, parameter):
    """Each bad FastTier field raises ConfigError naming it."""
    with pytest.raises(ConfigError, match=f"`{parameter}`"):
        FastTier(shm, **kwargs)


@pytest.mark.parametrize("path", [3, None, "s3://bucket/fast", "memory://fast"])
def test_a_fast_tier_path_must_be_a_local_directory(path):
    """A path that is not a local directory (a number, a URL) is refused."""
    with pytest.raises(ConfigError, match="`path` must be a local directory"):
        FastTier(path, save_every=5)


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_a_fast_tier_at_inside_or_around_the_durable_directory_is_refused(tmp_path, where):
    """The fast tier must be apart from the durable directory."""
    durable = tmp_path / "run"
    path = {"same": durable, "inside": durable / "fast", "around": tmp_path}[where]
    with pytest.raises(ConfigError, match="`fast_tier` must be a directory apart"):
        CheckpointManager(durable, fast_tier=FastTier(path, save_every=5))
    CheckpointManager(durable).close()  # the lock was released


def test_fast_tier_must_be_a_fast_tier(tmp_path):
    """fast_tier of another type is refused."""
    with pytest.raises(ConfigError, match=r"`fast_tier` must be a globalstep\.FastTier"):
        CheckpointManager(tmp_path, fast_tier="/dev/shm/x")


def test_a_distributed_manager_refuses_a_fast_tier(tmp_path, shm):
    """distributed=True with a fast tier is refused, saying why."""
    with pytest.raises(ConfigError, match="not supported with distributed=True"):
        CheckpointManager(tmp_path, distributed=True, fast_tier=FastTier(shm, save_every=5))


def test_a_fast_save_without_a_fast_tier_is_refused(tmp_path):
    """save(tier="fast") without a fast tier, or another tier, is refused."""
    with CheckpointManager(tmp_path) as manager:
        for tier in ("fast", "nvme"):
            with pytest.raises(ConfigError, match="`tier` must be 'durable'"):
                manager.save(1, {"w": np.ones(1)}, tier=tier)


def test_run_takes_fast_tier_as_its_own_parameter(tmp_path, shm):
    """Run refuses fast_tier inside checkpoint_options (Run's own parameter)."""
    fast = FastTier(shm, save_every=5)
    with pytest.raises(ConfigError, match="`checkpoint_options` must not hold fast_tier"):
        Run(tmp_path, checkpoint_options={"fast_tier": fast})


def _ledger_saves(directory, *keys):
    from globalstep.checkpoint import read_ledger

    return [tuple(save[k] for k in keys) for save in read_ledger(directory / "ledger.jsonl").saves]


def test_the_ledger_records_every_save_of_both_tiers(tmp_path, shm):
    """The durable directory's ledger records each committed save of either tier once,
    with its tier, bytes (those of its directory in that tier) and the stall."""
    with CheckpointManager(tmp_path, fast_tier=FastTier(shm, save_every=5)) as manager:
        _save(manager, [10], [5, 10])
    heard = [
        (step, tier, nbytes > 0, stall >= 0, background)
        for step, tier, nbytes, stall, background in _ledger_saves(
            tmp_path, "step", "tier", "bytes", "stall_seconds", "background_seconds"
        )
    ]
    assert heard == [
        (5, "fast", True, True, 0.0),
        (10, "fast", True, True, 0.0),
        (10, "durable", True, True, 0.0),
    ]


def _ls(capsys, *args):
    from globalstep._cli import main

    assert main(["ckpt", "ls", *map(str, args)]) == 0
    out, err = capsys.readouterr()
    return [line.split()[:2] for line in out.splitlines()[1:]], err


def test_ckpt_ls_shows_both_tiers_marked(tmp_path, shm, capsys):
    """`globalstep ckpt ls DIR` lists the fast tier DIR records beside it, each row marked
    with its tier; `--fast PATH` names one; a fast tier gone or of another run is named
    on standard error and left out."""
    fast = FastTier(shm / "fast", save_every=5)
    with CheckpointManager(tmp_path / "run", fast_tier=fast) as manager:
        _save(manager, [50], [55, 60])
    rows, err = _ls(capsys, tmp_path / "run")
    assert rows == [["50", "durable"], ["55", "fast"], ["60", "fast"]]
    assert err == ""
    (shm / "fast").rename(shm / "moved")
    rows, err = _ls(capsys, tmp_path / "run")
    assert rows == [["50", "-"]]  # no TIER column: the EPOCH one
    assert f"fast tier {shm / 'fast'}: missing" in err
    rows, _ = _ls(capsys, tmp_path / "run", "--fast", shm / "moved")
    assert rows == [["50", "durable"], ["55", "fast"], ["60", "fast"]]
    with CheckpointManager(tmp_path / "other") as other:
        other.save(1, {"w": np.ones(1)})
    rows, err = _ls(capsys, tmp_path / "other", "--fast", shm / "moved")
    assert rows == [["1", "-"]]
    assert "not listed: `fast_tier` must hold this run's checkpoints" in err


def test_a_run_on_several_ranks_refuses_a_fast_tier(tmp_path, shm):
    """Run(ranks=...) with a fast tier is refused, saying why."""
    from globalstep.run import Ranks

    with pytest.raises(ConfigError, match="`fast_tier` is not supported on several ranks"):
        Run(tmp_path, ranks=Ranks(), fast_tier=FastTier(shm, save_every=5))


@pytest.mark.parametrize("where", ["durable", "fast"])
def test_a_damaged_run_record_is_an_error_naming_it(tmp_path, shm, where):
    """A run.json that is not a run record fails the open, naming the file."""
    from globalstep import CheckpointError

    fast = FastTier(shm, save_every=5)
    CheckpointManager(tmp_path, fast_tier=fast).close()
    record = (tmp_path if where == "durable" else shm) / "run.json"
    record.write_text("{not json")
    with pytest.raises(CheckpointError, match=f"{record}: not a run record"):
        CheckpointManager(tmp_path, fast_tier=fast)


def test_async_saves_of_both_tiers(tmp_path, shm):
    """With async_save both tiers save on their own threads; restore waits for both, and
    the ledger records the background time of each."""
    fast = FastTier(shm, save_every=5, max_to_keep=3)
    clock = Clock()
    with CheckpointManager(tmp_path, save_every=10, async_save=True, fast_tier=fast) as manager:
        for _ in range(20):
            clock.tick()
            manager.maybe_save(clock, {"clock": clock, "w": np.full(1000, float(clock.step))})
        manager.wait()  # both tiers' saves in flight
        assert manager.steps() == [10, 15, 20]
        assert manager.restore()["w"][0] == 20.0
    heard = [
        (step, tier, spent > 0)
        for step, tier, spent in _ledger_saves(tmp_path, "step", "tier", "background_seconds")
    ]
    fast_saves = [(step, "fast", True) for step in (5, 10, 15, 20)]
    assert sorted(heard) == sorted([*fast_saves, (10, "durable", True), (20, "durable", True)])


def test_skip_corrupt_reaches_past_a_corrupt_durable_newest(tmp_path, shm):
    """restore(skip_corrupt=True) past a corrupt durable newest restores the newest good
    checkpoint of either tier (the fast tier's 45, not the durable 40)."""
    fast = FastTier(shm, save_every=5)
    with CheckpointManager(tmp_path, fast_tier=fast) as manager:
        _save(manager, [40, 50], [45])
    arrays = tmp_path / "step-000000000050" / "arrays.safetensors"
    data = bytearray(arrays.read_bytes())
    data[-1] ^= 0xFF
    arrays.write_bytes(bytes(data))
    with CheckpointManager(tmp_path, fast_tier=fast) as manager:
        with pytest.raises(CorruptCheckpointError):
            manager.restore()
        assert manager.restore(skip_corrupt=True)["w"][0] == 45.0
        assert manager.last_restore.tier == "fast"
